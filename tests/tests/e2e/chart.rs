//! The Helm chart: linted and rendered with Helm's Go SDK and every manifest
//! validated against the Kubernetes schemas in strict mode, by
//! `charts/warden/tests/test_chart.py` in a venv with its pinned tools
//! (`warden_tests::CHART_TOOLS`).

use std::path::Path;
use std::process::Command;

use warden_tests::chart_python;

#[test]
fn the_chart_lints_renders_and_validates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(chart_python())
        .arg(root.join("charts/warden/tests/test_chart.py"))
        .current_dir(&root)
        .output()
        .expect("the chart tests run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(" 0 failed"), "{stdout}");
    // Every render case ran (a renamed or skipped one would pass silently).
    let passed = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert!(passed >= 12, "{stdout}");
}
