//! The README's first command: `warden-quickstart` runs the whole tour on a
//! fresh data directory and exits 0 only if every call behaved as shown.

use std::process::Command;

use warden_tests::{TempDir, bin_dir};

#[test]
fn the_quickstart_tour_behaves_as_it_says() {
    let dir = TempDir::new();
    let out = Command::new(bin_dir().join("warden-quickstart"))
        .arg("--data-dir")
        .arg(&dir.0)
        .env_remove("WARDEN_LOG")
        .output()
        .expect("warden-quickstart runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // The table shows each outcome the README promises.
    for shown in [
        "Every call behaved as shown (6 calls)",
        "JSON-RPC error -32050",
        "nothing: the call never reached the tool",
        "a**@example.com",
        "integration key [REDACTED]",
        "approval_required → approved",
        "permit (monitor; would deny)",
        "/v1/allow/audit-log?agent_id=support-bot",
        "/openapi.json",
    ] {
        assert!(stdout.contains(shown), "missing {shown:?} in:\n{stdout}");
    }
    assert!(
        !stdout.contains("sk-live-"),
        "the customer's key never reaches the agent's output"
    );
    assert!(dir.0.join("warden.db").exists(), "SQLite in --data-dir");
}

/// A quickstart that cannot run says so and exits non-zero.
#[test]
fn the_quickstart_fails_loudly() {
    let dir = TempDir::new();
    let not_a_dir = dir.0.join("file");
    std::fs::write(&not_a_dir, "").unwrap();
    let out = Command::new(bin_dir().join("warden-quickstart"))
        .arg("--data-dir")
        .arg(&not_a_dir)
        .output()
        .expect("warden-quickstart runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("warden-quickstart:"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--keep-running` leaves the servers up after the tour: the printed
/// control plane answers with the printed key until the process is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_running_leaves_the_servers_up() {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(bin_dir().join("warden-quickstart"))
        .arg("--keep-running")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("warden-quickstart starts");
    let stdout = child.stdout.take().unwrap();
    let (base, key) = tokio::task::spawn_blocking(move || {
        let (mut base, mut key) = (None, None);
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.trim().strip_prefix("listening on ") {
                base = Some(url.to_owned());
            }
            if let Some(rest) = line.trim().strip_prefix("WARDEN_KEY=") {
                key = rest.split_whitespace().next().map(str::to_owned);
            }
            if key.is_some() {
                break;
            }
        }
        (
            base.expect("the control plane's URL"),
            key.expect("the key"),
        )
    })
    .await
    .unwrap();
    let resp = reqwest::Client::new()
        .get(format!("{base}/allow/agents"))
        .bearer_auth(&key)
        .send()
        .await
        .expect("still serving after the tour");
    assert_eq!(resp.status().as_u16(), 200);
    let agents: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(agents["data"][0]["agent_id"], "support-bot", "{agents}");
    let _ = child.kill();
    let _ = child.wait();
}
