//! The three bundles over HTTP (spec 2.12, 4.1-4.3): content, versions that
//! follow every relevant change, ETag/304, auto-provisioning, the terminal
//! bundle, and that the engine accepts what the server sends.

use reqwest::Method;
use serde_json::{Value, json};

use super::support::{Backend, TestServer, assert_envelope, both_backends, json, send};

/// Pulls `path` with `If-None-Match: etag` when given: (status, etag, body).
async fn pull(srv: &TestServer, path: &str, key: &str, etag: Option<&str>) -> (u16, String, Value) {
    let mut req = srv.request(Method::GET, path, Some(key));
    if let Some(e) = etag {
        req = req.header("if-none-match", e);
    }
    let r = req.send().await.unwrap();
    assert_eq!(
        r.headers()
            .get("cache-control")
            .and_then(|v| v.to_str().ok()),
        Some("private, max-age=60")
    );
    let etag = r.headers()["etag"].to_str().unwrap().to_owned();
    let (s, body) = json(r).await;
    (s, etag, body)
}

const ACTION_RULE: &str =
    "package r\ndecision := \"deny\" if startswith(input.action, \"delete_\")";
const RETRIEVAL_RULE: &str = "package r\ndecision := \"deny\" if input.resource_type == \"secret\"";

async fn unified_bundle_versions_and_etags(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;
    let path = "/rules/bundle?agent_id=sidecar-1";

    let (s, b) = send(&srv, Method::GET, "/rules/bundle", &admin, None).await;
    assert_envelope(s, &b, 400, "invalid_request");
    assert_eq!(b["error"], "Invalid query parameters");

    let (s, etag0, b0) = pull(&srv, path, &admin, None).await;
    assert_eq!(s, 200, "{b0}");
    assert_eq!(etag0, format!("\"{}\"", b0["version"].as_str().unwrap()));
    assert_eq!(
        (
            b0["dialect_version"].as_u64(),
            b0["min_dialect"].as_u64(),
            b0["agent_mode"].as_str()
        ),
        (Some(1), Some(1), Some("monitor"))
    );
    // The engine accepts it as a sidecar would (integrity and dialect checks).
    let parsed = warden_engine::bundle::parse(serde_json::to_vec(&b0).unwrap().as_slice())
        .expect("a valid bundle");
    assert_eq!(parsed.agent_id, "sidecar-1");
    // Pulling auto-provisioned the agent in monitor mode.
    let (_, agents) = send(&srv, Method::GET, "/allow/agents", &admin, None).await;
    assert_eq!(
        (agents["total"].as_u64(), agents["data"][0]["mode"].as_str()),
        (Some(1), Some("monitor"))
    );

    let (s, etag, _) = pull(&srv, path, &admin, Some(&etag0)).await;
    assert_eq!((s, etag.as_str()), (304, etag0.as_str()));

    // Every relevant change moves the version.
    let (_, rule) = send(
        &srv,
        Method::POST,
        "/allow/rules",
        &admin,
        Some(json!({"name": "no deletes", "rego_source": ACTION_RULE})),
    )
    .await;
    let (s, etag1, b1) = pull(&srv, path, &admin, Some(&etag0)).await;
    assert_eq!(s, 200);
    assert_ne!(etag1, etag0);
    assert_eq!(b1["rules"][0]["applies_to"], json!(["action"]));
    assert_eq!(b1["rules"][0]["rego_source"], ACTION_RULE);

    send(
        &srv,
        Method::PUT,
        "/allow/settings",
        &admin,
        Some(json!({"hitl_timeout_seconds": 45})),
    )
    .await;
    let (_, etag2, b2) = pull(&srv, path, &admin, Some(&etag1)).await;
    assert_ne!(etag2, etag1);
    assert_eq!(b2["no_coverage"]["hitl_timeout_seconds"], 45);

    let agent_row = agents["data"][0]["id"].as_str().unwrap();
    send(
        &srv,
        Method::PUT,
        &format!("/allow/agents/{agent_row}"),
        &admin,
        Some(json!({"mode": "enforce", "categories": ["pii"]})),
    )
    .await;
    let (_, etag3, b3) = pull(&srv, path, &admin, Some(&etag2)).await;
    assert_ne!(etag3, etag2);
    assert_eq!(
        (
            b3["agent_mode"].as_str(),
            b3["agent_attributes"]["categories"].clone()
        ),
        (Some("enforce"), json!(["pii"]))
    );

    // A disabled rule leaves the bundle.
    send(
        &srv,
        Method::PUT,
        &format!("/rules/{}", rule["id"].as_str().unwrap()),
        &admin,
        Some(json!({"enabled": false})),
    )
    .await;
    let (_, etag4, b4) = pull(&srv, path, &admin, Some(&etag3)).await;
    assert_ne!(etag4, etag3);
    assert_eq!(b4["rules"], json!([]));
    srv.stop().await;
}

async fn shut_down_agents_get_the_terminal_bundle(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;
    send(
        &srv,
        Method::POST,
        "/allow/rules",
        &admin,
        Some(json!({"name": "r", "rego_source": ACTION_RULE})),
    )
    .await;
    let (_, a) = send(
        &srv,
        Method::POST,
        "/allow/agents",
        &admin,
        Some(json!({"agent_id": "bot", "name": "bot"})),
    )
    .await;
    let key = a["api_key"].as_str().unwrap().to_owned();

    // The agent's own key pulls its bundles; another agent's is refused.
    let (s, _, live) = pull(&srv, "/rules/bundle?agent_id=bot", &key, None).await;
    assert_eq!((s, live["rules"].as_array().map(Vec::len)), (200, Some(1)));
    let (s, b) = send(
        &srv,
        Method::GET,
        "/rules/bundle?agent_id=other",
        &key,
        None,
    )
    .await;
    assert_envelope(s, &b, 403, "agent_key_mismatch");

    send(
        &srv,
        Method::DELETE,
        &format!("/allow/agents/{}", a["id"].as_str().unwrap()),
        &admin,
        None,
    )
    .await;
    let (s, _, t) = pull(&srv, "/rules/bundle?agent_id=bot", &key, None).await;
    assert_eq!(s, 200);
    assert_eq!(
        (t["agent_mode"].as_str(), t["rules"].clone()),
        (Some("enforce"), json!([]))
    );
    assert_eq!(
        t["no_coverage"]["no_coverage_defaults"],
        json!({"read": "deny", "write": "deny", "delete": "deny", "admin": "deny"})
    );
    warden_engine::bundle::parse(serde_json::to_vec(&t).unwrap().as_slice())
        .expect("a valid terminal bundle");
    let (_, _, ta) = pull(&srv, "/allow/rules/bundle?agent_id=bot", &key, None).await;
    assert_eq!(
        (ta["agent_mode"].as_str(), ta["rules"].clone()),
        (Some("enforce"), json!([]))
    );
    // It is not re-provisioned by pulling: it stays shut down.
    let (_, list) = send(&srv, Method::GET, "/allow/agents", &admin, None).await;
    assert_eq!(list["total"], 0);
    srv.stop().await;
}

async fn facet_bundles(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;
    send(
        &srv,
        Method::POST,
        "/allow/rules",
        &admin,
        Some(
            json!({"name": "a", "rego_source": ACTION_RULE, "target_app": "github", "priority": 1}),
        ),
    )
    .await;
    send(
        &srv,
        Method::POST,
        "/recall/rules",
        &admin,
        Some(json!({"name": "r", "rego_source": RETRIEVAL_RULE, "surface": "chat", "priority": 3})),
    )
    .await;
    let (_, a) = send(&srv, Method::POST, "/allow/agents", &admin, Some(json!({"agent_id": "bot", "name": "bot", "mode": "monitor", "mode_by_operation": {"action": "enforce"}}))).await;
    let key = a["api_key"].as_str().unwrap();

    let (s, _, action) = pull(&srv, "/allow/rules/bundle?agent_id=bot", key, None).await;
    assert_eq!(s, 200, "{action}");
    assert_eq!(
        action["agent_mode"], "enforce",
        "the action facet's own mode"
    );
    assert_eq!(action["rules"].as_array().unwrap().len(), 1);
    assert_eq!(
        (
            action["rules"][0]["target_app"].as_str(),
            action["rules"][0]["resource_type"].as_str()
        ),
        (Some("github"), Some("action"))
    );
    assert!(action["no_coverage"]["no_coverage_defaults"].is_object());

    let (s, etag, retrieval) = pull(&srv, "/recall/rules/bundle", key, None).await;
    assert_eq!(s, 200);
    assert_eq!(retrieval["rules"].as_array().unwrap().len(), 1);
    assert_eq!(retrieval["rules"][0]["surface"], "chat");
    let (s, _, _) = pull(&srv, "/recall/rules/bundle", key, Some(&etag)).await;
    assert_eq!(s, 304);
    let (s, b) = send(&srv, Method::GET, "/allow/rules/bundle", key, None).await;
    assert_envelope(s, &b, 400, "invalid_request");
    srv.stop().await;
}

both_backends!(
    unified_bundle_versions_and_etags,
    shut_down_agents_get_the_terminal_bundle,
    facet_bundles
);
