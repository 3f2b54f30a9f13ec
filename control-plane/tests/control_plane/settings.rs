//! `GET/PUT /allow/settings` (spec 2.9, 4.2).

use reqwest::Method;
use serde_json::{Value, json};

use super::support::{Backend, TestServer, assert_envelope, both_backends, json};

async fn settings_defaults_and_partial_updates(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;
    let put = |body: Value| {
        let req = srv
            .request(Method::PUT, "/allow/settings", Some(&admin))
            .json(&body);
        async move { json(req.send().await.unwrap()).await }
    };

    let (s, first) = json(srv.get("/allow/settings", &admin).await).await;
    assert_eq!(s, 201, "the defaults row is created on first access");
    assert_eq!(
        first["no_coverage_defaults"],
        json!({"read": "allow", "write": "allow", "delete": "ask", "admin": "deny"})
    );
    assert_eq!(
        (
            first["hitl_timeout_seconds"].as_u64(),
            first["default_agent_mode"].as_str()
        ),
        (Some(120), Some("monitor"))
    );
    assert_eq!(
        (
            first["enduser_hitl_enabled"].as_bool(),
            first["autopilot_enabled"].as_bool()
        ),
        (Some(true), Some(false))
    );
    let (s, again) = json(srv.get("/allow/settings", &admin).await).await;
    assert_eq!((s, again["id"].clone()), (200, first["id"].clone()));

    let (s, up) = put(json!({"hitl_timeout_seconds": 60, "default_agent_mode": "enforce"})).await;
    assert_eq!(s, 200, "{up}");
    assert_eq!(
        (
            up["hitl_timeout_seconds"].as_u64(),
            up["default_agent_mode"].as_str()
        ),
        (Some(60), Some("enforce"))
    );
    assert_eq!(
        up["no_coverage_defaults"], first["no_coverage_defaults"],
        "omitted fields are untouched"
    );
    let (s, up) = put(json!({"no_coverage_defaults": {"read": "allow", "write": "deny", "delete": "deny", "admin": "deny"}, "notification_channels": [{"type": "webhook", "url": "https://hooks.example/approvals"}]})).await;
    assert_eq!(s, 200);
    assert_eq!(up["no_coverage_defaults"]["write"], "deny");
    assert_eq!(
        up["notification_channels"][0]["url"],
        "https://hooks.example/approvals"
    );
    assert_eq!(up["hitl_timeout_seconds"], 60);

    for bad in [
        json!({"no_coverage_defaults": {"read": "allow", "write": "deny", "delete": "deny"}}),
        json!({"hitl_timeout_seconds": 29}),
        json!({"hitl_timeout_seconds": 121}),
        json!({"default_agent_mode": "sometimes"}),
        json!({"notification_channels": [{"type": "webhook", "url": "ftp://x"}]}),
        json!({"notification_channels": [{"type": "pager", "url": "https://x"}]}),
        json!({"unknown": true}),
    ] {
        let (s, b) = put(bad.clone()).await;
        assert_envelope(s, &b, 400, "invalid_request");
        assert!(b["details"].is_array(), "{bad}: {b}");
    }
    let (s, b) = put(json!({})).await;
    assert_envelope(s, &b, 400, "invalid_request");
    assert_eq!(b["error"], "No fields to update");
    let (_, now) = json(srv.get("/allow/settings", &admin).await).await;
    assert_eq!(
        now["hitl_timeout_seconds"], 60,
        "failed updates change nothing"
    );

    // Another organization has its own settings.
    let other = srv.admin("other").await;
    let (s, theirs) = json(srv.get("/allow/settings", &other).await).await;
    assert_eq!(
        (s, theirs["hitl_timeout_seconds"].as_u64()),
        (201, Some(120))
    );
    srv.stop().await;
}

both_backends!(settings_defaults_and_partial_updates);
