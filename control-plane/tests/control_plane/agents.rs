//! `/allow/agents…` over HTTP (spec 2.2, 3.2, 4.2).

use reqwest::Method;
use serde_json::json;

use super::support::{Backend, TestServer, assert_envelope, both_backends, send};

async fn agent_lifecycle(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;

    let (s, a) = send(&srv, Method::POST, "/allow/agents", &admin, Some(json!({"agent_id": "billing-bot", "name": "Billing bot", "categories": ["finance"], "trust_tier": "tier2"}))).await;
    assert_eq!(s, 201, "{a}");
    let key = a["api_key"].as_str().unwrap().to_owned();
    assert!(key.starts_with("allow_") && key.len() == 6 + 64, "{key}");
    assert_eq!(
        (a["mode"].as_str(), a["mode_inherited"].as_bool()),
        (Some("monitor"), Some(true)),
        "inherits the default"
    );
    let id = a["id"].as_str().unwrap().to_owned();

    // Reads never show key material.
    let (s, one) = send(
        &srv,
        Method::GET,
        &format!("/allow/agents/{id}"),
        &admin,
        None,
    )
    .await;
    assert_eq!(s, 200);
    assert!(one.get("api_key").is_none() && !one.to_string().contains(&key[10..]));
    assert_eq!(one["categories"], json!(["finance"]));

    // The agent key is a harness key bound to its agent.
    let (s, b) = send(&srv, Method::GET, "/allow/agents", &key, None).await;
    assert_envelope(s, &b, 403, "harness_key_not_permitted");
    let (s, r) = send(
        &srv,
        Method::POST,
        "/allow/agents/register",
        &key,
        Some(json!({"agent_id": "billing-bot", "os": "linux"})),
    )
    .await;
    assert_eq!(
        (s, r),
        (200, json!({"ok": true, "agent_id": "billing-bot"}))
    );
    let (s, b) = send(
        &srv,
        Method::POST,
        "/allow/agents/register",
        &key,
        Some(json!({"agent_id": "someone-else"})),
    )
    .await;
    assert_envelope(s, &b, 403, "agent_key_mismatch");
    let (_, one) = send(
        &srv,
        Method::GET,
        &format!("/allow/agents/{id}"),
        &admin,
        None,
    )
    .await;
    assert_eq!(
        (one["agent_os"].as_str(), one["agent_ip"].as_str()),
        (Some("linux"), Some("127.0.0.1")),
        "source address recorded"
    );

    // Duplicates, validation, updates.
    let (s, b) = send(
        &srv,
        Method::POST,
        "/allow/agents",
        &admin,
        Some(json!({"agent_id": "billing-bot", "name": "again"})),
    )
    .await;
    assert_envelope(s, &b, 409, "conflict");
    for bad in [
        json!({"name": "no id"}),
        json!({"agent_id": "x"}),
        json!({"agent_id": "x", "name": "x", "mode": "sometimes"}),
        json!({"agent_id": "x", "name": "x", "api_key": "short"}),
        json!({"agent_id": "x", "name": "x", "trust_tier": "gold"}),
    ] {
        let (s, b) = send(
            &srv,
            Method::POST,
            "/allow/agents",
            &admin,
            Some(bad.clone()),
        )
        .await;
        assert_envelope(s, &b, 400, "invalid_request");
    }
    let (s, up) = send(
        &srv,
        Method::PUT,
        &format!("/allow/agents/{id}"),
        &admin,
        Some(json!({"mode": "enforce", "business_function": "finance_accounting"})),
    )
    .await;
    assert_eq!(s, 200, "{up}");
    assert_eq!(
        (
            up["mode"].as_str(),
            up["mode_inherited"].as_bool(),
            up["business_function"].as_str()
        ),
        (Some("enforce"), Some(false), Some("finance_accounting"))
    );
    let (s, b) = send(
        &srv,
        Method::PUT,
        &format!("/allow/agents/{id}"),
        &admin,
        Some(json!({})),
    )
    .await;
    assert_eq!((s, b["error"].as_str()), (400, Some("No fields to update")));
    let (s, b) = send(
        &srv,
        Method::PUT,
        &format!("/allow/agents/{id}"),
        &admin,
        Some(json!({"agent_id": "renamed"})),
    )
    .await;
    assert_envelope(s, &b, 400, "invalid_request");
    let (s, n) = send(
        &srv,
        Method::POST,
        &format!("/allow/agents/{id}/regenerate-naming"),
        &admin,
        None,
    )
    .await;
    assert_eq!((s, n["status"].as_str()), (200, Some("skipped")));

    // Mode inheritance: null goes back to the organization default, which moves with it.
    let (_, up) = send(
        &srv,
        Method::PUT,
        &format!("/allow/agents/{id}"),
        &admin,
        Some(json!({"mode": null})),
    )
    .await;
    assert_eq!(
        (up["mode"].as_str(), up["mode_inherited"].as_bool()),
        (Some("monitor"), Some(true))
    );
    send(
        &srv,
        Method::PUT,
        "/allow/settings",
        &admin,
        Some(json!({"default_agent_mode": "enforce"})),
    )
    .await;
    let (_, one) = send(
        &srv,
        Method::GET,
        &format!("/allow/agents/{id}"),
        &admin,
        None,
    )
    .await;
    assert_eq!(one["mode"], "enforce");

    // Shutdown: gone from reads, key not revoked, re-created on the same row.
    let (s, d) = send(
        &srv,
        Method::DELETE,
        &format!("/allow/agents/{id}"),
        &admin,
        None,
    )
    .await;
    assert_eq!((s, d), (200, json!({"deleted": true})));
    let (s, b) = send(
        &srv,
        Method::GET,
        &format!("/allow/agents/{id}"),
        &admin,
        None,
    )
    .await;
    assert_envelope(s, &b, 404, "not_found");
    let (_, list) = send(&srv, Method::GET, "/allow/agents", &admin, None).await;
    assert_eq!(list["total"], 0);
    let (s, _) = send(
        &srv,
        Method::POST,
        "/allow/agents/register",
        &key,
        Some(json!({"agent_id": "billing-bot"})),
    )
    .await;
    assert_eq!(
        s, 200,
        "the key still works; registration does not revive the agent"
    );
    let (_, list) = send(&srv, Method::GET, "/allow/agents", &admin, None).await;
    assert_eq!(list["total"], 0);
    let (s, again) = send(&srv, Method::POST, "/allow/agents", &admin, Some(json!({"agent_id": "billing-bot", "name": "Billing bot v2", "api_key": "my-custom-agent-key-0001"}))).await;
    assert_eq!(s, 201, "{again}");
    assert_eq!(again["id"].as_str(), Some(id.as_str()));
    assert_eq!(again["api_key"], "my-custom-agent-key-0001");
    let (s, _) = send(
        &srv,
        Method::POST,
        "/allow/agents/register",
        "my-custom-agent-key-0001",
        Some(json!({"agent_id": "billing-bot"})),
    )
    .await;
    assert_eq!(s, 200, "custom keys authenticate");
    let (s, b) = send(&srv, Method::GET, "/allow/agents/nope", &admin, None).await;
    assert_eq!((s, b["error"].as_str()), (400, Some("Invalid agent ID")));
    srv.stop().await;
}

async fn registration_provisions_in_monitor_mode(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;
    send(
        &srv,
        Method::PUT,
        "/allow/settings",
        &admin,
        Some(json!({"default_agent_mode": "enforce"})),
    )
    .await;
    for _ in 0..2 {
        let (s, r) = send(&srv, Method::POST, "/allow/agents/register", &admin, Some(json!({"agent_id": "new-agent", "hostname": "h1", "ip": "10.0.0.7", "kind": "cli_harness"}))).await;
        assert_eq!((s, r["ok"].as_bool()), (200, Some(true)), "{r}");
    }
    let (_, list) = send(&srv, Method::GET, "/allow/agents", &admin, None).await;
    assert_eq!(list["total"], 1, "idempotent");
    let agent = &list["data"][0];
    assert_eq!(
        (agent["mode"].as_str(), agent["mode_inherited"].as_bool()),
        (Some("monitor"), Some(false)),
        "auto-provisioned agents start in monitor"
    );
    assert_eq!(
        (agent["agent_hostname"].as_str(), agent["agent_ip"].as_str()),
        (Some("h1"), Some("10.0.0.7"))
    );
    let (s, b) = send(
        &srv,
        Method::POST,
        "/allow/agents/register",
        &admin,
        Some(json!({"agent_id": "x", "kind": "robot"})),
    )
    .await;
    assert_envelope(s, &b, 400, "invalid_request");
    // Another organization cannot see or touch it.
    let other = srv.admin("other").await;
    let (s, b) = send(
        &srv,
        Method::GET,
        &format!("/allow/agents/{}", agent["id"].as_str().unwrap()),
        &other,
        None,
    )
    .await;
    assert_envelope(s, &b, 404, "not_found");
    srv.stop().await;
}

/// Guards concurrent auto-provisioning: the first evaluations of an unknown
/// agent, sent at once, all succeed and make one agent. The requests that
/// lose the insert read the agent back from the database, not from the
/// cache, which may still hold "unknown" for it.
async fn concurrent_first_evaluations_provision_one_agent(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;
    for round in 0..4 {
        let agent_id = format!("burst-{round}");
        // A retrieval for the unknown agent first: the cache then holds
        // "unknown" for it, as it would in production.
        let (s, d) = send(
            &srv,
            Method::POST,
            "/recall/evaluate",
            &admin,
            Some(json!({"agent_id": agent_id, "operation": "retrieve"})),
        )
        .await;
        assert_eq!(s, 200, "{d}");
        let body = json!({"agent_id": agent_id, "target_app": "crm", "action": "read_contact"});
        let sends = (0..16).map(|_| {
            send(
                &srv,
                Method::POST,
                "/allow/evaluate",
                &admin,
                Some(body.clone()),
            )
        });
        for (s, d) in futures_util::future::join_all(sends).await {
            assert_eq!(s, 200, "{d}");
            assert_eq!(d["agent_mode"], "monitor", "{d}");
        }
    }
    let (_, list) = send(&srv, Method::GET, "/allow/agents", &admin, None).await;
    assert_eq!(list["total"], 4, "{list}");
    srv.stop().await;
}

both_backends!(
    agent_lifecycle,
    registration_provisions_in_monitor_mode,
    concurrent_first_evaluations_provision_one_agent
);
