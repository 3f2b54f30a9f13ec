//! The audit-log reads (spec 4.2, 4.3): filters, masking, monitor
//! observations, isolation.

use reqwest::Method;
use serde_json::json;

use super::support::{Backend, TestServer, assert_envelope, both_backends, harness, send};

async fn action_and_retrieval_logs(backend: Backend) {
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
    send(&srv, Method::POST, "/allow/rules", &admin, Some(json!({"name": "no deletes", "rego_source": "package r\ndecision := \"deny\" if startswith(input.action, \"delete_\")"}))).await;
    let eval = |agent: &str, app: &str, action: &str| {
        let body = json!({"agent_id": agent, "target_app": app, "action": action, "context": {"note": "call 415-555-0100"}});
        send(&srv, Method::POST, "/allow/evaluate", &admin, Some(body))
    };
    eval("a1", "github", "delete_repo").await;
    eval("a1", "github", "get_repo").await;
    eval("a2", "jira", "delete_issue").await;
    // a1 and a2 were provisioned in monitor mode: their deletes are observations.
    let (_, log) = send(&srv, Method::GET, "/v1/allow/audit-log", &admin, None).await;
    assert_eq!(log["total"], 3);
    assert_eq!(log["data"][0]["action"], "delete_issue", "newest first");
    assert_eq!(
        (
            log["data"][0]["decision"].as_str(),
            log["data"][0]["would_decide"].as_str()
        ),
        (Some("permit"), Some("deny")),
        "monitor observations are included"
    );
    assert!(
        !log.to_string().contains("415-555-0100"),
        "payloads are masked"
    );

    for (query, total) in [
        ("agent_id=a1", 2),
        ("target_app=jira", 1),
        ("agent_id=a1&target_app=github&decision=permit", 2),
        ("decision=deny", 0),
        ("start_date=2999-01-01T00:00:00Z", 0),
        ("end_date=2999-01-01T00:00:00Z&limit=1", 3),
        ("hitl_result=approved", 0),
    ] {
        let (s, page) = send(
            &srv,
            Method::GET,
            &format!("/v1/allow/audit-log?{query}"),
            &admin,
            None,
        )
        .await;
        assert_eq!(
            (s, page["total"].as_u64()),
            (200, Some(total)),
            "{query}: {page}"
        );
    }
    for query in [
        "decision=allow",
        "hitl_result=maybe",
        "start_date=yesterday",
        "limit=0",
    ] {
        let (s, b) = send(
            &srv,
            Method::GET,
            &format!("/v1/allow/audit-log?{query}"),
            &admin,
            None,
        )
        .await;
        assert_envelope(s, &b, 400, "invalid_request");
        assert_eq!(b["error"], "Invalid query parameters", "{query}");
    }

    // Retrieval log: reason codes, masked metadata.
    send(&srv, Method::POST, "/recall/evaluate", &admin, Some(json!({"agent_id": "r1", "operation": "retrieve", "resource_type": "wiki", "query": "find ana@example.com"}))).await;
    let (_, log) = send(&srv, Method::GET, "/v1/recall/audit-log", &admin, None).await;
    assert_eq!(log["total"], 1);
    let item = &log["data"][0];
    assert_eq!(
        (item["reason_code"].as_str(), item["receipt_id"].clone()),
        (Some("DEFAULT_DENY"), json!(null))
    );
    assert!(
        !item["metadata"]["query"]
            .as_str()
            .unwrap()
            .contains("ana@example.com")
    );
    assert_eq!(item["metadata"]["decision_id"], item["id"]);
    let (_, none) = send(
        &srv,
        Method::GET,
        "/v1/recall/audit-log?reason_code=POLICY_ALLOW",
        &admin,
        None,
    )
    .await;
    assert_eq!(none["total"], 0);
    let (s, b) = send(
        &srv,
        Method::GET,
        "/v1/recall/audit-log?reason_code=MONITOR_MODE",
        &admin,
        None,
    )
    .await;
    assert_envelope(s, &b, 400, "invalid_request");

    // Harness keys cannot read; other organizations see nothing.
    let (_, h, _) = srv.key("acme", harness("sidecar")).await;
    let (s, b) = send(&srv, Method::GET, "/v1/allow/audit-log", &h, None).await;
    assert_envelope(s, &b, 403, "harness_key_not_permitted");
    let other = srv.admin("other").await;
    let (_, theirs) = send(&srv, Method::GET, "/v1/allow/audit-log", &other, None).await;
    assert_eq!(theirs["total"], 0);
    srv.stop().await;
}

both_backends!(action_and_retrieval_logs);
