//! The command line is a contract: `keys create` prints the key and nothing
//! else on stdout; the other subcommands work on the same database.

use std::process::Command;

use super::support::{Backend, TestDb};

fn cli(db: &str, args: &[&str]) -> (bool, String, String) {
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
