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
