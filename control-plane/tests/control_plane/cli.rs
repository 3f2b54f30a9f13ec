//! The command line is a contract: `keys create` prints the key and nothing
//! else on stdout; the other subcommands work on the same database.

use std::process::Command;

use super::support::{Backend, TestDb};

pub(super) fn cli(db: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_warden-control-plane"))
        .args(args)
        .env("WARDEN_DATABASE_URL", db)
        .env_remove("WARDEN_LISTEN")
        .output()
        .expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn keys_commands() {
    let db = TestDb::new(Backend::Sqlite).await;
    let (ok, out, err) = cli(
        &db.url,
        &[
            "keys",
            "create",
            "--org",
            "acme",
            "--name",
            "boot",
            "--audience",
            "management",
        ],
    );
    assert!(ok, "{err}");
    let key = out.trim_end_matches('\n');
    assert!(
        key.starts_with("svc_prod_") && key.len() == 73 && !key.contains('\n'),
        "stdout is the key alone: {out:?}"
    );

    let (ok, out, _) = cli(
        &db.url,
        &[
            "keys",
            "create",
            "--org",
            "acme",
            "--name",
            "h",
            "--audience",
            "harness",
            "--environment",
            "test",
            "--expires",
            "never",
        ],
    );
    assert!(ok);
    assert!(out.starts_with("svc_test_"));

    let (ok, list, _) = cli(&db.url, &["keys", "list", "--org", "acme"]);
    assert!(ok);
    assert_eq!(list.lines().count(), 3, "{list}");
    assert!(!list.contains(&key[16..]), "list shows no secret");
    let id = list
        .lines()
        .find(|l| l.ends_with("boot"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();

    let (ok, rotated, err) = cli(&db.url, &["keys", "rotate", &id, "--grace", "immediate"]);
    assert!(ok, "{err}");
    assert!(rotated.trim().starts_with("svc_prod_") && rotated.trim() != key);
    let (ok, _, _) = cli(&db.url, &["keys", "revoke", &id]);
    assert!(ok);

    // Bad input: a clear message and a non-zero exit.
    let (ok, _, err) = cli(
        &db.url,
        &[
            "keys",
            "create",
            "--org",
            "acme",
            "--name",
            "x",
            "--audience",
            "robot",
        ],
    );
    assert!(!ok && err.contains("--audience"), "{err}");
    let (ok, _, err) = cli(
        &db.url,
        &[
            "keys",
            "create",
            "--org",
            "acme",
            "--name",
            "x",
            "--audience",
            "management",
            "--permissions",
            "nope",
        ],
    );
    assert!(!ok && err.contains("nope"), "{err}");
    let (ok, _, err) = cli(&db.url, &["keys", "list", "--org", "missing"]);
    assert!(!ok && err.contains("missing"), "{err}");
}

/// `serve --listen 127.0.0.1:0` logs `listening on ADDR` with the bound
/// address, serves there, and never logs the keys it sees.
#[tokio::test]
async fn serve_on_port_zero_and_keep_keys_out_of_logs() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let db = TestDb::new(Backend::Sqlite).await;
    let (ok, key, _) = cli(
        &db.url,
        &[
            "keys",
            "create",
            "--org",
            "acme",
            "--name",
            "admin",
            "--audience",
            "management",
        ],
    );
    assert!(ok);
    let key = key.trim().to_owned();
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden-control-plane"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("WARDEN_DATABASE_URL", &db.url)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("serve starts");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // Readiness is the log line, with a deadline; never a fixed sleep.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut logs = Vec::new();
    let addr = loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("a `listening on` line in time");
        logs.push(line.clone());
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split('"').next().unwrap().to_owned();
        }
    };
    assert!(!addr.ends_with(":0"), "the bound port, not 0: {addr}");
    let client = reqwest::Client::new();
    assert_eq!(
        client
            .get(format!("http://{addr}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let r = client
        .get(format!("http://{addr}/api/keys"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let _ = client
        .get(format!("http://{addr}/api/keys"))
        .bearer_auth(format!("{key}x"))
        .send()
        .await
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    logs.extend(rx.try_iter());
    let all = logs.join("\n");
    assert!(
        all.contains("\"route\":\"/api/keys\""),
        "the access log names the route: {all}"
    );
    assert!(!all.contains(&key[9..]), "no key material in the logs");
}
