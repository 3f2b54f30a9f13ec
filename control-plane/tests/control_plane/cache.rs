//! The store's read cache (keys, agents, settings, rules revision) never
//! outlives a change: not one made through this server, not one made by
//! another process on the same database, not one made through another
//! replica.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use warden_control_plane::auth::Scope;
use warden_control_plane::config::RawConfig;

use super::support::{Backend, TestServer, both_backends, management, send};

const DENY_CRM: &str = "package r\ndecision := \"deny\" if input.target_app == \"crm\"";

fn update_contact() -> Value {
    json!({"agent_id": "bot", "target_app": "crm", "action": "update_contact"})
}

/// `POST /allow/evaluate` of [`update_contact`] with `key`.
async fn evaluation(srv: &TestServer, key: &str) -> (u16, Value) {
    send(
        srv,
        Method::POST,
        "/allow/evaluate",
        key,
        Some(update_contact()),
    )
    .await
}

/// Polls `probe` until it returns true or `deadline` passes.
async fn within(deadline: Duration, mut probe: impl AsyncFnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if probe().await {
            return true;
        }
        if start.elapsed() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A key revoked by another process (the `keys` CLI on the same database)
/// stops working within the cache's bound (1 s), although the server has
/// just served it from its cache.
async fn revoked_elsewhere(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let spec = management("ops", &[], &[Scope::RulesEvaluate]);
    let (_, key, id) = srv.key("acme", spec).await;
    for _ in 0..3 {
        let (s, d) = evaluation(&srv, &key).await;
        assert_eq!(s, 200, "{d}");
    }
    let (url, id) = (srv.db.url.clone(), id.to_string());
    let (ok, _, err) =
        tokio::task::spawn_blocking(move || super::cli::cli(&url, &["keys", "revoke", &id]))
            .await
            .expect("cli runs");
    assert!(ok, "{err}");
    let rejected = within(Duration::from_secs(3), async || {
        evaluation(&srv, &key).await.0 == 401
    })
    .await;
    assert!(rejected, "a revoked key must stop working");
    srv.stop().await;
}

both_backends!(revoked_elsewhere);

/// Guards the cross-replica invalidation (`NOTIFY warden_change`): a rule
/// created and a key revoked through replica A change replica B's answers
/// well within the cache's 1 s bound, so B must have been told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_hear_each_others_writes_on_postgres() {
    let a = TestServer::start(Backend::Postgres).await;
    let b = a.replica(RawConfig::default()).await;
    let admin = a.admin("acme").await;
    let (s, d) = send(
        &a,
        Method::POST,
        "/allow/agents",
        &admin,
        Some(json!({"agent_id": "bot", "name": "bot", "mode": "enforce"})),
    )
    .await;
    assert_eq!(s, 201, "{d}");
    let spec = management("ops", &[], &[Scope::RulesEvaluate]);
    let (_, key, key_id) = a.key("acme", spec).await;
    let decision = async || {
        let (s, d) = evaluation(&b, &key).await;
        assert_eq!(s, 200, "{d}");
        d["decision"].as_str().unwrap_or_default().to_owned()
    };
    // B is ready, so its listener is connected: fill B's cache.
    for _ in 0..3 {
        assert_eq!(decision().await, "permit");
    }

    let rule = json!({"name": "no crm", "rego_source": DENY_CRM});
    let (s, d) = send(&a, Method::POST, "/allow/rules", &admin, Some(rule)).await;
    assert_eq!(s, 201, "{d}");
    let denied = within(Duration::from_millis(300), async || {
        decision().await == "deny"
    })
    .await;
    assert!(denied, "B still decides with the old rules");

    let (s, d) = send(
        &a,
        Method::DELETE,
        &format!("/api/keys/{key_id}"),
        &admin,
        None,
    )
    .await;
    assert!(s == 200 || s == 204, "{s} {d}");
    let rejected = within(Duration::from_millis(300), async || {
        evaluation(&b, &key).await.0 == 401
    })
    .await;
    assert!(rejected, "B still accepts a revoked key");
    b.stop().await;
    a.stop().await;
}
