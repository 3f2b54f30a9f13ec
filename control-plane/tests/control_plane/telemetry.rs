//! What sidecars report (spec 4.2): telemetry batches validated per item,
//! coverage gaps, new schemas, and execution outcomes.

use reqwest::Method;
use serde_json::{Value, json};

use super::support::{Backend, TestServer, assert_envelope, both_backends, send};

fn item(id: uuid::Uuid, action: &str, rule: Option<uuid::Uuid>, decision: &str) -> Value {
    let mut v = json!({
        "decision_id": id, "agent_id": "bot", "target_app": "github", "action": action,
        "decision": decision, "reason": "local", "evaluated_at": "2026-11-22T10:00:00Z",
        "evaluation_mode": "local", "latency_ms": 0.02, "context": {"email": "ana@example.com"}
    });
    if let Some(r) = rule {
        v["rule_id"] = json!(r);
        v["rule_code"] = json!("R-0001");
    }
    v
}

/// Creates the agent `bot`; returns its key.
async fn agent_key(srv: &TestServer, admin: &str, mode: Option<&str>) -> String {
    let mut body = json!({"agent_id": "bot", "name": "bot"});
    if let Some(mode) = mode {
        body["mode"] = json!(mode);
    }
    let (_, a) = send(srv, Method::POST, "/allow/agents", admin, Some(body)).await;
    a["api_key"].as_str().unwrap().to_owned()
}

async fn telemetry_batches(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;
    let key = agent_key(&srv, &admin, None).await;
    let (covered, uncovered, bad) = (
        uuid::Uuid::new_v4(),
        uuid::Uuid::new_v4(),
        uuid::Uuid::new_v4(),
    );
    let batch = json!({"decisions": [
        item(covered, "delete_repo", Some(uuid::Uuid::new_v4()), "deny"),
        item(uncovered, "get_repo", None, "permit"),
        item(bad, "x", None, "allow"),
    ]});

    let (s, r) = send(
        &srv,
        Method::POST,
        "/allow/telemetry",
        &key,
        Some(batch.clone()),
    )
    .await;
    assert_eq!(s, 202, "{r}");
    assert_eq!(
        (
            r["received"].as_u64(),
            r["uncovered"].as_u64(),
            r["new_schemas"].as_u64()
        ),
        (Some(2), Some(1), Some(2))
    );
    assert_eq!(r["rejected"][0]["index"], 2);
    assert_eq!(r["rejected"][0]["issues"][0]["path"], json!(["decision"]));

    // The reported decision is stored (masked) and readable.
    let (s, rec) = send(
        &srv,
        Method::GET,
        &format!("/v1/allow/decisions/{covered}"),
        &admin,
        None,
    )
    .await;
    assert_eq!(
        (s, rec["decision"].as_str(), rec["rule_code"].as_str()),
        (200, Some("deny"), Some("R-0001"))
    );
    assert!(
        !rec["context"].to_string().contains("ana@example.com"),
        "masked at rest"
    );
    // The uncovered one opened a coverage-gap item.
    let (_, queue) = send(&srv, Method::GET, "/allow/hitl/queue", &admin, None).await;
    assert_eq!(
        (
            queue["total"].as_u64(),
            queue["data"][0]["category"].as_str()
        ),
        (Some(1), Some("engineer"))
    );

    // Re-sent: nothing new.
    let (s, r) = send(&srv, Method::POST, "/allow/telemetry", &key, Some(batch)).await;
    assert_eq!((s, r["new_schemas"].as_u64()), (202, Some(0)));
    let (_, queue) = send(&srv, Method::GET, "/allow/hitl/queue", &admin, None).await;
    assert_eq!(
        queue["total"], 1,
        "gaps are deduplicated per agent, app and action"
    );

    // Invalid batches.
    let (s, b) = send(
        &srv,
        Method::POST,
        "/allow/telemetry",
        &key,
        Some(json!({"decisions": [item(bad, "x", None, "allow")]})),
    )
    .await;
    assert_envelope(s, &b, 400, "invalid_request");
    assert_eq!(b["details"][0]["index"], 0);
    for body in [
        json!({"decisions": []}),
        json!({}),
        json!({"decisions": vec![item(bad, "x", None, "permit"); 101]}),
    ] {
        let (s, b) = send(&srv, Method::POST, "/allow/telemetry", &key, Some(body)).await;
        assert_envelope(s, &b, 400, "invalid_request");
    }
    let mut big = item(uuid::Uuid::new_v4(), "big", None, "permit");
    big["context"] = json!({"blob": "x".repeat(33 * 1024)});
    let mut other = item(uuid::Uuid::new_v4(), "y", None, "permit");
    other["agent_id"] = json!("someone-else");
    let (s, r) = send(
        &srv,
        Method::POST,
        "/allow/telemetry",
        &key,
        Some(json!({"decisions": [big, other, item(uuid::Uuid::new_v4(), "ok", None, "permit")]})),
    )
    .await;
    assert_eq!((s, r["received"].as_u64()), (202, Some(1)));
    let paths: Vec<Value> = r["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["issues"][0]["path"].clone())
        .collect();
    assert_eq!(paths, [json!(["context"]), json!(["agent_id"])]);
    srv.stop().await;
}

/// A monitoring sidecar reports what the rule decided with `enforced:
/// false`: the record is a `permit` with the real outcome in `would_decide`,
/// like a server-side evaluation in monitor mode.
async fn monitor_observations(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;
    let key = agent_key(&srv, &admin, Some("monitor")).await;
    let (watched, enforced) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let mut observed = item(watched, "delete_repo", Some(uuid::Uuid::new_v4()), "deny");
    observed["enforced"] = json!(false);
    observed["agent_mode"] = json!("monitor");
    let mut real = item(enforced, "delete_repo", Some(uuid::Uuid::new_v4()), "deny");
    real["enforced"] = json!(true);
    real["agent_mode"] = json!("enforce");
    let (s, r) = send(
        &srv,
        Method::POST,
        "/allow/telemetry",
        &key,
        Some(json!({"decisions": [observed, real]})),
    )
    .await;
    assert_eq!(s, 202, "{r}");
    for (id, want) in [
        (watched, ("permit", json!("deny"), false)),
        (enforced, ("deny", Value::Null, true)),
    ] {
        let (_, rec) = send(
            &srv,
            Method::GET,
            &format!("/v1/allow/decisions/{id}"),
            &admin,
            None,
        )
        .await;
        assert_eq!(
            (
                rec["decision"].as_str().unwrap_or_default(),
                rec["would_decide"].clone(),
                rec["enforced"].as_bool().unwrap_or(true)
            ),
            want,
            "{rec}"
        );
    }
    srv.stop().await;
}

async fn execution_events(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;
    let (_, d) = send(
        &srv,
        Method::POST,
        "/allow/evaluate",
        &admin,
        Some(json!({"agent_id": "bot", "target_app": "github", "action": "get_repo"})),
    )
    .await;
    let id = d["decision_id"].as_str().unwrap().to_owned();
    let ev = |body: Value| {
        send(
            &srv,
            Method::POST,
            "/allow/execution-events",
            &admin,
            Some(body),
        )
    };
    let (s, r) = ev(json!({"decision_id": id, "result": "success", "details": "200 OK"})).await;
    assert_eq!((s, r), (200, json!({"updated": true})));
    let (s, b) = ev(json!({"decision_id": id, "result": "failure"})).await;
    assert_envelope(s, &b, 409, "conflict");
    let (s, b) = ev(json!({"decision_id": uuid::Uuid::new_v4(), "result": "success"})).await;
    assert_envelope(s, &b, 404, "not_found");
    let (s, b) = ev(json!({"decision_id": id, "result": "maybe"})).await;
    assert_envelope(s, &b, 400, "invalid_request");
    let (_, rec) = send(
        &srv,
        Method::GET,
        &format!("/v1/allow/decisions/{id}"),
        &admin,
        None,
    )
    .await;
    assert_eq!(
        (
            rec["execution_result"].as_str(),
            rec["execution_details"].as_str()
        ),
        (Some("success"), Some("200 OK"))
    );
    assert!(rec["execution_completed_at"].is_string());
    srv.stop().await;
}

both_backends!(telemetry_batches, monitor_observations, execution_events);
