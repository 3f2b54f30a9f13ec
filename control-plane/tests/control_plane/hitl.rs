//! Approvals over HTTP (spec 2.5, 2.8, 3.3, 4.2): the end-user gate opened
//! by `approval_required`, answered or lapsed, and coverage-gap items.

use chrono::{TimeDelta, Utc};
use reqwest::Method;
use serde_json::{Value, json};
use warden_control_plane::store::{ActionDecision, DecisionBatch, HitlItem, OrgId};
use warden_engine::model::{AgentMode, Decision};

use super::support::{Backend, TestServer, assert_envelope, both_backends, send};

const WIRE: &str = "package r\ndecision := \"approval_required\" if input.action == \"wire_money\"\nhitl_fallback := \"mask\"\nredactions := [{\"field\": \"account\"}]";

async fn setup(srv: &TestServer) -> (String, String) {
    let admin = srv.admin("acme").await;
    send(
        srv,
        Method::PUT,
        "/allow/settings",
        &admin,
        Some(json!({"hitl_timeout_seconds": 30, "default_agent_mode": "enforce"})),
    )
    .await;
    send(
        srv,
        Method::POST,
        "/allow/rules",
        &admin,
        Some(json!({"name": "wires", "rego_source": WIRE})),
    )
    .await;
    let (_, agent) = send(
        srv,
        Method::POST,
        "/allow/agents",
        &admin,
        Some(json!({"agent_id": "payer", "name": "payer"})),
    )
    .await;
    (admin, agent["api_key"].as_str().unwrap().to_owned())
}

async fn gate(srv: &TestServer, key: &str) -> Value {
    let (s, d) = send(srv, Method::POST, "/allow/evaluate", key, Some(json!({"agent_id": "payer", "target_app": "bank", "action": "wire_money", "context": {"amount": 10}}))).await;
    assert_eq!(s, 200, "{d}");
    d
}

async fn approve_and_reject(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let (admin, key) = setup(&srv).await;

    let d = gate(&srv, &key).await;
    assert_eq!(
        (d["decision"].as_str(), d["hitl_fallback"].as_str()),
        (Some("approval_required"), Some("mask"))
    );
    let id = d["decision_id"].as_str().unwrap().to_owned();
    // The sidecar polls the decision with its own key.
    let (s, rec) = send(
        &srv,
        Method::GET,
        &format!("/v1/allow/decisions/{id}"),
        &key,
        None,
    )
    .await;
    assert_eq!(s, 200, "{rec}");
    assert_eq!(
        (
            rec["hitl"]["status"].as_str(),
            rec["hitl"]["category"].as_str(),
            rec["hitl_result"].clone()
        ),
        (Some("pending"), Some("enduser"), Value::Null)
    );
    let expires =
        chrono::DateTime::parse_from_rfc3339(rec["hitl"]["expires_at"].as_str().unwrap()).unwrap();
    let window = expires.signed_duration_since(Utc::now()).num_seconds();
    assert!(
        (25..=31).contains(&window),
        "the organization's 30 s window: {window}"
    );

    let (_, queue) = send(&srv, Method::GET, "/allow/hitl/queue", &admin, None).await;
    assert_eq!(queue["total"], 1);
    let item = queue["data"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(queue["data"][0]["decision_id"].as_str(), Some(id.as_str()));

    let (s, b) = send(
        &srv,
        Method::POST,
        &format!("/allow/hitl/queue/{item}"),
        &admin,
        Some(json!({"dismiss": true})),
    )
    .await;
    assert_envelope(s, &b, 400, "invalid_request");
    let (s, done) = send(
        &srv,
        Method::POST,
        &format!("/allow/hitl/queue/{item}"),
        &admin,
        Some(json!({"decision": "approved", "responded_by": "ana@example.com"})),
    )
    .await;
    assert_eq!(
        (s, done["status"].as_str(), done["responded_by"].as_str()),
        (200, Some("approved"), Some("ana@example.com"))
    );
    let (s, b) = send(
        &srv,
        Method::POST,
        &format!("/allow/hitl/queue/{item}"),
        &admin,
        Some(json!({"decision": "rejected"})),
    )
    .await;
    assert_envelope(s, &b, 409, "conflict");
    assert_eq!(b["status"], "approved");
    let (_, rec) = send(
        &srv,
        Method::GET,
        &format!("/v1/allow/decisions/{id}"),
        &key,
        None,
    )
    .await;
    assert_eq!(
        (
            rec["hitl_result"].as_str(),
            rec["hitl"]["status"].as_str(),
            rec["hitl_responded_by"].as_str()
        ),
        (Some("approved"), Some("approved"), Some("ana@example.com"))
    );

    // Another gate, rejected.
    let d = gate(&srv, &key).await;
    let (_, queue) = send(&srv, Method::GET, "/allow/hitl/queue", &admin, None).await;
    let item = queue["data"][0]["id"].as_str().unwrap().to_owned();
    send(
        &srv,
        Method::POST,
        &format!("/allow/hitl/queue/{item}"),
        &admin,
        Some(json!({"decision": "rejected"})),
    )
    .await;
    let (_, rec) = send(
        &srv,
        Method::GET,
        &format!("/v1/allow/decisions/{}", d["decision_id"].as_str().unwrap()),
        &admin,
        None,
    )
    .await;
    assert_eq!(rec["hitl_result"], "rejected");
    let (_, done) = send(
        &srv,
        Method::GET,
        "/allow/hitl/queue?status=approved",
        &admin,
        None,
    )
    .await;
    assert_eq!(done["total"], 1);

    // Another agent's key cannot see this agent's decisions.
    let (_, other) = send(
        &srv,
        Method::POST,
        "/allow/agents",
        &admin,
        Some(json!({"agent_id": "other", "name": "o"})),
    )
    .await;
    let (s, b) = send(
        &srv,
        Method::GET,
        &format!("/v1/allow/decisions/{id}"),
        other["api_key"].as_str().unwrap(),
        None,
    )
    .await;
    assert_envelope(s, &b, 404, "not_found");
    let (s, b) = send(&srv, Method::GET, "/v1/allow/decisions/nope", &admin, None).await;
    assert_envelope(s, &b, 400, "invalid_request");
    srv.stop().await;
}

fn decision(org: OrgId, id: uuid::Uuid) -> ActionDecision {
    ActionDecision {
        id,
        org,
        agent_id: "payer".into(),
        target_app: "bank".into(),
        action: "wire_money".into(),
        context: json!({}),
        decision: Decision::ApprovalRequired,
        would_decide: None,
        reason: "needs a human".into(),
        reason_code: None,
        rule_id: None,
        rule_code: None,
        enforced: true,
        agent_mode: AgentMode::Enforce,
        floor_detectors: vec![],
        source: "server".into(),
        hitl_result: None,
        hitl_responded_at: None,
        hitl_responded_by: None,
        execution_result: None,
        execution_completed_at: None,
        execution_details: None,
        created_at: Utc::now() - TimeDelta::minutes(5),
    }
}

fn item(
    org: OrgId,
    decision_id: Option<uuid::Uuid>,
    category: &str,
    expires: Option<chrono::DateTime<Utc>>,
    dedupe: Option<&str>,
) -> HitlItem {
    HitlItem {
        id: uuid::Uuid::new_v4(),
        org,
        decision_id,
        agent_id: "payer".into(),
        target_app: "bank".into(),
        action: "wire_money".into(),
        context: json!({}),
        category: category.into(),
        status: "pending".into(),
        ai_recommended_rule: None,
        notified_via: vec![],
        resolution: None,
        dedupe_key: dedupe.map(str::to_owned),
        expires_at: expires,
        responded_at: None,
        responded_by: None,
        created_at: Utc::now() - TimeDelta::minutes(5),
    }
}

async fn lapsed_gates_time_out_and_gaps_take_their_own_answers(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let (admin, _) = setup(&srv).await;
    let org = srv.store.org_by_name("acme").await.unwrap().unwrap().id;

    // A gate whose window lapsed with nobody answering: timeout on the next read.
    let id = uuid::Uuid::new_v4();
    let gate = item(
        org,
        Some(id),
        "enduser",
        Some(Utc::now() - TimeDelta::minutes(3)),
        None,
    );
    srv.store
        .insert_decisions(std::sync::Arc::new(DecisionBatch {
            actions: vec![decision(org, id)],
            gates: vec![gate.clone()],
            retrievals: vec![],
        }))
        .await
        .unwrap();
    let (_, rec) = send(
        &srv,
        Method::GET,
        &format!("/v1/allow/decisions/{id}"),
        &admin,
        None,
    )
    .await;
    assert_eq!(
        (rec["hitl_result"].as_str(), rec["hitl"]["status"].as_str()),
        (Some("timeout"), Some("timeout"))
    );
    let (s, b) = send(
        &srv,
        Method::POST,
        &format!("/allow/hitl/queue/{}", gate.id),
        &admin,
        Some(json!({"decision": "approved"})),
    )
    .await;
    assert_envelope(s, &b, 409, "conflict");
    assert_eq!(b["status"], "timeout");

    // Coverage gaps: one per dedupe key; answered by dismissal or a rule link.
    let gap = item(org, None, "engineer", None, Some("payer/bank/wire_money"));
    assert!(srv.store.insert_hitl(&gap).await.unwrap());
    assert!(
        !srv.store
            .insert_hitl(&item(
                org,
                None,
                "engineer",
                None,
                Some("payer/bank/wire_money")
            ))
            .await
            .unwrap(),
        "deduplicated"
    );
    let path = format!("/allow/hitl/queue/{}", gap.id);
    let (s, b) = send(
        &srv,
        Method::POST,
        &path,
        &admin,
        Some(json!({"decision": "approved"})),
    )
    .await;
    assert_envelope(s, &b, 400, "invalid_request");
    let (s, b) = send(
        &srv,
        Method::POST,
        &path,
        &admin,
        Some(json!({"rule_id": uuid::Uuid::new_v4()})),
    )
    .await;
    assert_envelope(s, &b, 400, "invalid_request");
    let (_, rules) = send(&srv, Method::GET, "/rules", &admin, None).await;
    let rule_id = rules["data"][0]["id"].as_str().unwrap();
    let (s, linked) = send(
        &srv,
        Method::POST,
        &path,
        &admin,
        Some(json!({"rule_id": rule_id})),
    )
    .await;
    assert_eq!(
        (s, linked["status"].as_str(), linked["resolution"].as_str()),
        (200, Some("linked"), Some(rule_id))
    );
    let other_gap = item(org, None, "engineer", None, Some("payer/bank/other"));
    srv.store.insert_hitl(&other_gap).await.unwrap();
    let (s, dismissed) = send(
        &srv,
        Method::POST,
        &format!("/allow/hitl/queue/{}", other_gap.id),
        &admin,
        Some(json!({"dismiss": true, "note": "expected"})),
    )
    .await;
    assert_eq!((s, dismissed["status"].as_str()), (200, Some("dismissed")));
    let (s, b) = send(
        &srv,
        Method::GET,
        "/allow/hitl/queue?status=bogus",
        &admin,
        None,
    )
    .await;
    assert_envelope(s, &b, 400, "invalid_request");
    srv.stop().await;
}

async fn monitor_and_disabled_gates_open_nothing(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let (admin, key) = setup(&srv).await;
    let (_, agents) = send(&srv, Method::GET, "/allow/agents", &admin, None).await;
    let row = agents["data"][0]["id"].as_str().unwrap().to_owned();
    send(
        &srv,
        Method::PUT,
        &format!("/allow/agents/{row}"),
        &admin,
        Some(json!({"mode": "monitor"})),
    )
    .await;
    let d = gate(&srv, &key).await;
    assert_eq!(
        (d["decision"].as_str(), d["would_decide"].as_str()),
        (Some("permit"), Some("approval_required"))
    );
    send(
        &srv,
        Method::PUT,
        &format!("/allow/agents/{row}"),
        &admin,
        Some(json!({"mode": "enforce"})),
    )
    .await;
    send(
        &srv,
        Method::PUT,
        "/allow/settings",
        &admin,
        Some(json!({"enduser_hitl_enabled": false})),
    )
    .await;
    let d = gate(&srv, &key).await;
    assert_eq!(
        d["decision"], "mask",
        "approvals disabled: the rule's fallback applies at once"
    );
    let (_, queue) = send(&srv, Method::GET, "/allow/hitl/queue", &admin, None).await;
    assert_eq!(queue["total"], 0);
    srv.stop().await;
}

both_backends!(
    approve_and_reject,
    lapsed_gates_time_out_and_gaps_take_their_own_answers,
    monitor_and_disabled_gates_open_nothing,
    gates_are_announced_on_webhooks,
    local_escalations_join_the_queue
);

/// A webhook receiver of the test's own on 127.0.0.1 (the customer's
/// endpoint): refuses the first delivery, so the retry is exercised.
async fn webhook_receiver() -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    use std::sync::{Arc, Mutex};
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (s, a) = (seen.clone(), attempts.clone());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let (s, a) = (s.clone(), a.clone());
            async move {
                if a.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                }
                s.lock().unwrap().push(body);
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

async fn gates_are_announced_on_webhooks(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let (admin, key) = setup(&srv).await;
    let (url, seen) = webhook_receiver().await;
    send(
        &srv,
        Method::PUT,
        "/allow/settings",
        &admin,
        Some(json!({"notification_channels": [{"type": "webhook", "url": url}]})),
    )
    .await;
    let d = gate(&srv, &key).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let item = loop {
        let (_, queue) = send(&srv, Method::GET, "/allow/hitl/queue", &admin, None).await;
        if queue["data"][0]["notified_via"] == json!(["webhook"]) {
            break queue["data"][0].clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not announced: {queue}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let bodies = seen.lock().unwrap().clone();
    assert_eq!(bodies.len(), 1, "one delivery after one refused attempt");
    assert_eq!(bodies[0]["type"], "approval_required");
    assert_eq!(bodies[0]["item"]["decision_id"], d["decision_id"]);
    assert_eq!(bodies[0]["item"]["id"], item["id"]);
    srv.stop().await;
}

async fn local_escalations_join_the_queue(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let (admin, _) = setup(&srv).await;
    let body = json!({"agent_id": "payer", "resource_type": "hr_record", "operation": "retrieve",
        "resource_metadata": {"owner": "ana@example.com"}, "reason": "rule R-0002 escalated"});
    let (s, item) = send(
        &srv,
        Method::POST,
        "/allow/hitl/queue",
        &admin,
        Some(body.clone()),
    )
    .await;
    assert_eq!(s, 201, "{item}");
    assert_eq!(
        (item["category"].as_str(), item["status"].as_str()),
        (Some("escalation"), Some("pending"))
    );
    assert!(
        !item["context"].to_string().contains("ana@example.com"),
        "masked at rest"
    );
    // Its retrieval decision was written with it.
    let (_, log) = send(
        &srv,
        Method::GET,
        "/v1/recall/audit-log?decision=escalate",
        &admin,
        None,
    )
    .await;
    assert_eq!(log["total"], 1);
    assert_eq!(log["data"][0]["id"], item["decision_id"]);
    let (s, done) = send(
        &srv,
        Method::POST,
        &format!("/allow/hitl/queue/{}", item["id"].as_str().unwrap()),
        &admin,
        Some(json!({"decision": "rejected"})),
    )
    .await;
    assert_eq!((s, done["status"].as_str()), (200, Some("rejected")));
    let mut unknown = body.clone();
    unknown["agent_id"] = json!("nobody");
    let (s, b) = send(
        &srv,
        Method::POST,
        "/allow/hitl/queue",
        &admin,
        Some(unknown),
    )
    .await;
    assert_envelope(s, &b, 404, "not_found");
    let (s, b) = send(
        &srv,
        Method::POST,
        "/allow/hitl/queue",
        &admin,
        Some(json!({"agent_id": "payer", "operation": "browse"})),
    )
    .await;
    assert_envelope(s, &b, 400, "invalid_request");
    srv.stop().await;
}
