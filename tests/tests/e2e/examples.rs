//! Every sidecar configuration under `examples/` passes the validation the
//! binary runs at start (`warden-proxy --check-config`).

use std::process::Command;

use warden_tests::bin_dir;

#[test]
fn example_sidecar_configs_are_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/sidecar");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("examples/sidecar exists") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let out = Command::new(bin_dir().join("warden-proxy"))
            .arg("--check-config")
            .arg(&path)
            .env("WARDEN_AGENT_KEY", "allow_example_key_0000000000")
            .output()
            .expect("warden-proxy runs");
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        checked += 1;
    }
    assert!(checked >= 2, "both example configs were found");
}

/// The check is not a rubber stamp: a broken file fails it.
#[test]
fn a_broken_config_fails_the_check() {
    let dir = warden_tests::TempDir::new();
    let path = dir.0.join("broken.yaml");
    std::fs::write(&path, "agent_id: x\nroutes: []\n").unwrap();
    let out = Command::new(bin_dir().join("warden-proxy"))
        .arg("--check-config")
        .arg(&path)
        .env("WARDEN_AGENT_KEY", "k")
        .output()
        .expect("warden-proxy runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("control_plane.url"));
}

/// Every rule pack under `examples/rules/` installs into a real control
/// plane through `POST /rules`: the compile step the server runs on create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_rule_packs_install() {
    let cp = warden_tests::ControlPlane::start();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/rules");
    let mut installed = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("examples/rules exists") {
        let pack = entry.expect("entry").path();
        if !pack.is_dir() {
            continue;
        }
        let read = |name: &str| {
            std::fs::read_to_string(pack.join(name))
                .unwrap_or_else(|e| panic!("{}/{name}: {e}", pack.display()))
        };
        assert!(
            pack.join("README.md").exists(),
            "{} has a README",
            pack.display()
        );
        let mut body: serde_json::Value = serde_json::from_str(&read("rule.json")).unwrap();
        body["rego_source"] = serde_json::json!(read("policy.rego"));
        let (status, rule) = cp.call(reqwest::Method::POST, "/rules", Some(body)).await;
        assert_eq!(status, 201, "{}: {rule}", pack.display());
        installed.push(rule["name"].as_str().unwrap_or_default().to_owned());
    }
    assert_eq!(installed.len(), 4, "{installed:?}");

    // The HR pack gates on the agent's assigned tier.
    for (agent, tier, want) in [
        ("hr-bot", "tier1", "allow"),
        ("intern-bot", "tier3", "deny"),
    ] {
        let (s, a) = cp
            .call(
                reqwest::Method::POST,
                "/allow/agents",
                Some(serde_json::json!({"agent_id": agent, "name": agent, "trust_tier": tier, "mode": "enforce"})),
            )
            .await;
        assert_eq!(s, 201, "{a}");
        let (s, d) = cp
            .call(
                reqwest::Method::POST,
                "/recall/evaluate",
                Some(serde_json::json!({
                    "agent_id": agent, "operation": "retrieve", "resource_type": "hr_document"
                })),
            )
            .await;
        assert_eq!(
            (s, d["decision"].as_str()),
            (200, Some(want)),
            "{agent}: {d}"
        );
    }

    // The same path refuses a broken policy.
    let broken = serde_json::json!({
        "name": "broken", "operations": ["action"],
        "rego_source": "package broken\ndecision := \"allow\" if true"
    });
    let (status, body) = cp.call(reqwest::Method::POST, "/rules", Some(broken)).await;
    assert_eq!(status, 400, "{body}");
}
