//! Evaluation over HTTP (spec 4.1-4.3): decisions by the engine, modes,
//! persistence masked at rest, policy changes seen at once, and the unified
//! union.

use reqwest::Method;
use serde_json::{Value, json};
use warden_control_plane::store::OrgId;

use super::support::{Backend, TestServer, assert_envelope, both_backends, send};

async fn org_of(srv: &TestServer, name: &str) -> OrgId {
    srv.store.org_by_name(name).await.unwrap().unwrap().id
}

const DENY_DELETES: &str =
    "package r\ndecision := \"deny\" if startswith(input.action, \"delete_\")";
const MASK_CARDS: &str = "package r\ndecision := \"mask\" if input.action == \"charge\"\nredactions := [{\"field\": \"card\", \"mode\": \"partial\", \"keepLast\": 4}]";

async fn action_evaluation(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;
    let org = org_of(&srv, "acme").await;
    let eval = |body: Value| send(&srv, Method::POST, "/allow/evaluate", &admin, Some(body));

    // Unknown agent: provisioned in monitor mode; no rule: the no-coverage default.
    let (s, d) =
        eval(json!({"agent_id": "bot", "target_app": "github", "action": "get_repo"})).await;
    assert_eq!(s, 200, "{d}");
    assert_eq!(
        (
            d["decision"].as_str(),
            d["rule_code"].as_str(),
            d["agent_mode"].as_str()
        ),
        (Some("permit"), Some("D-READ-ALLOW"), Some("monitor"))
    );
    assert_eq!(
        (
            d["plane"].as_str(),
            d["operation"].as_str(),
            d["is_retrieval"].as_bool()
        ),
        (Some("action"), Some("read"), Some(false))
    );

    // A rule created now is seen by the next decision; monitor reports it.
    send(
        &srv,
        Method::POST,
        "/allow/rules",
        &admin,
        Some(json!({"name": "no deletes", "rego_source": DENY_DELETES})),
    )
    .await;
    let (_, d) =
        eval(json!({"agent_id": "bot", "target_app": "github", "action": "delete_repo"})).await;
    assert_eq!(
        (
            d["decision"].as_str(),
            d["would_decide"].as_str(),
            d["enforced"].as_bool()
        ),
        (Some("permit"), Some("deny"), Some(false))
    );
    assert_eq!(d["rule_code"], "R-0001");

    // Enforce: the rule denies.
    let (_, agents) = send(&srv, Method::GET, "/allow/agents", &admin, None).await;
    let row = agents["data"][0]["id"].as_str().unwrap().to_owned();
    send(
        &srv,
        Method::PUT,
        &format!("/allow/agents/{row}"),
        &admin,
        Some(json!({"mode": "enforce"})),
    )
    .await;
    let (_, d) =
        eval(json!({"agent_id": "bot", "target_app": "github", "action": "delete_repo"})).await;
    assert_eq!(
        (d["decision"].as_str(), d["enforced"].as_bool()),
        (Some("deny"), Some(true))
    );
    assert!(d.get("would_decide").is_none());

    // Mask: the directives come back, and the stored context is masked.
    send(
        &srv,
        Method::POST,
        "/allow/rules",
        &admin,
        Some(json!({"name": "cards", "rego_source": MASK_CARDS})),
    )
    .await;
    let (_, d) = eval(json!({"agent_id": "bot", "target_app": "stripe", "action": "charge", "context": {"card": "4242424242424242", "email": "ana@example.com", "amount": 5}})).await;
    assert_eq!(d["decision"], "mask");
    assert_eq!(d["arg_redaction_rules"][0]["field"], "card");
    let id = uuid::Uuid::parse_str(d["decision_id"].as_str().unwrap()).unwrap();
    let stored = srv
        .store
        .action_decision(org, id)
        .await
        .unwrap()
        .expect("stored");
    let ctx = stored.context.to_string();
    assert!(
        !ctx.contains("4242424242424242") && !ctx.contains("ana@example.com"),
        "masked at rest: {ctx}"
    );
    assert!(ctx.contains("4242\""), "partial keeps the last four: {ctx}");
    assert_eq!(stored.context["amount"], 5);
    assert!(!stored.floor_detectors.is_empty());
    assert_eq!(
        (stored.rule_code.as_deref(), stored.decision.as_str()),
        (Some("R-0002"), "mask")
    );

    // Validation, and agent keys act only for their agent.
    let (s, b) = eval(json!({"agent_id": "bot", "target_app": "", "context": []})).await;
    assert_envelope(s, &b, 400, "invalid_request");
    let fields: Vec<&Value> = b["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["path"][0])
        .collect();
    for f in ["target_app", "action", "context"] {
        assert!(fields.iter().any(|p| *p == f), "{f}: {b}");
    }
    let (_, a) = send(
        &srv,
        Method::POST,
        "/allow/agents",
        &admin,
        Some(json!({"agent_id": "own", "name": "own"})),
    )
    .await;
    let key = a["api_key"].as_str().unwrap();
    let (s, _) = send(
        &srv,
        Method::POST,
        "/allow/evaluate",
        key,
        Some(json!({"agent_id": "own", "target_app": "x", "action": "get"})),
    )
    .await;
    assert_eq!(s, 200);
    let (s, b) = send(
        &srv,
        Method::POST,
        "/allow/evaluate",
        key,
        Some(json!({"agent_id": "bot", "target_app": "x", "action": "get"})),
    )
    .await;
    assert_envelope(s, &b, 403, "agent_key_mismatch");
    srv.stop().await;
}

const REDACT_HR: &str = "package r\ndecision := \"redact\" if input.resource_type == \"hr_record\"\nredactions := [{\"field\": \"ssn\"}]";

async fn retrieval_evaluation(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;
    let eval = |body: Value| send(&srv, Method::POST, "/recall/evaluate", &admin, Some(body));
    send(
        &srv,
        Method::PUT,
        "/allow/settings",
        &admin,
        Some(json!({"default_agent_mode": "enforce"})),
    )
    .await;
    send(
        &srv,
        Method::POST,
        "/recall/rules",
        &admin,
        Some(json!({"name": "hr", "rego_source": REDACT_HR})),
    )
    .await;

    let (s, d) = eval(json!({"agent_id": "reader", "operation": "retrieve", "resource_type": "hr_record", "resource_metadata": {"ssn": "123-45-6789", "name": "Ana"}, "query": "mail bob@example.com"})).await;
    assert_eq!(s, 200, "{d}");
    assert_eq!(
        (d["decision"].as_str(), d["reason_code"].as_str()),
        (Some("redact"), Some("POLICY_DENY"))
    );
    assert_eq!(d["redaction_rules"][0]["field"], "ssn");
    let (_, d) =
        eval(json!({"agent_id": "reader", "operation": "tool_call", "resource_type": "wiki"}))
            .await;
    assert_eq!(
        (d["decision"].as_str(), d["reason_code"].as_str()),
        (Some("deny"), Some("DEFAULT_DENY")),
        "uncovered retrieval fails closed"
    );
    let (_, agents) = send(&srv, Method::GET, "/allow/agents", &admin, None).await;
    assert_eq!(agents["total"], 0, "retrieval does not provision agents");

    // Monitor mode: allow, with MONITOR_MODE and the reason kept after a prefix.
    send(
        &srv,
        Method::POST,
        "/allow/agents",
        &admin,
        Some(json!({"agent_id": "watcher", "name": "w", "mode": "monitor"})),
    )
    .await;
    let (_, d) =
        eval(json!({"agent_id": "watcher", "operation": "retrieve", "resource_type": "wiki"}))
            .await;
    assert_eq!(
        (d["decision"].as_str(), d["reason_code"].as_str()),
        (Some("allow"), Some("MONITOR_MODE"))
    );
    assert!(d["reason"].as_str().unwrap().starts_with("Monitor: "));

    for bad in [
        json!({"agent_id": "r"}),
        json!({"agent_id": "r", "operation": "browse"}),
        json!({"agent_id": "r", "operation": "retrieve", "query": "q".repeat(2001)}),
        json!({"agent_id": "r", "operation": "retrieve", "trust_tier": "t".repeat(51)}),
    ] {
        let (s, b) = eval(bad.clone()).await;
        assert_envelope(s, &b, 400, "invalid_request");
    }
    srv.stop().await;
}

async fn unified_evaluation(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;
    let eval = |body: Value| send(&srv, Method::POST, "/evaluate", &admin, Some(body));
    send(
        &srv,
        Method::PUT,
        "/allow/settings",
        &admin,
        Some(json!({"default_agent_mode": "enforce"})),
    )
    .await;
    send(
        &srv,
        Method::POST,
        "/rules",
        &admin,
        Some(json!({"operations": ["retrieval"], "name": "hr", "rego_source": REDACT_HR})),
    )
    .await;

    let (s, d) = eval(json!({"operations": ["action", "retrieval"], "agent_id": "a", "target_app": "hr", "action": "read_file", "resource_type": "hr_record"})).await;
    assert_eq!(s, 200, "{d}");
    assert_eq!(d["operations"], json!(["action", "retrieval"]));
    let results = d["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(
        (
            results[0]["decision"].as_str(),
            results[1]["decision"].as_str(),
            results[1]["plane_decision"].as_str()
        ),
        (Some("permit"), Some("redact"), Some("redact"))
    );
    assert_eq!(d["decision"], "redact", "the most restrictive facet wins");
    assert_eq!(d["decision_id"], results[1]["decision_id"]);

    // A retrieval alone: allow in the facet's words, permit in the union's.
    send(&srv, Method::POST, "/rules", &admin, Some(json!({"operations": ["retrieval"], "name": "wiki", "rego_source": "package r\ndecision := \"allow\" if input.resource_type == \"wiki\""}))).await;
    let (_, d) = eval(json!({"kind": "retrieval", "agent_id": "a", "resource_type": "wiki"})).await;
    assert_eq!(
        (
            d["decision"].as_str(),
            d["plane_decision"].as_str(),
            d["reason_code"].as_str()
        ),
        (Some("permit"), Some("allow"), Some("POLICY_ALLOW"))
    );
    assert!(d.get("results").is_none());

    // Delegation: denied unless a rule permits it.
    let (_, d) = eval(json!({"operations": ["delegation"], "agent_id": "a", "target_app": "crm", "action": "orchestrate.delegate", "context": {"child_agent_id": "b"}})).await;
    assert_eq!(
        (d["decision"].as_str(), d["rule_code"].as_str()),
        (Some("deny"), Some("D-DELEGATE-DENY"))
    );

    // Flattened validation details.
    let (s, b) = eval(json!({"operations": ["action", "retrieval"], "agent_id": "a"})).await;
    assert_envelope(s, &b, 400, "invalid_request");
    let fields = &b["details"][0]["fieldErrors"];
    for f in ["target_app", "action", "resource_type"] {
        assert!(fields[f].is_array(), "{f}: {b}");
    }
    let (s, b) = eval(json!({"operations": ["action"], "kind": "action", "agent_id": "a", "target_app": "x", "action": "y"})).await;
    assert_envelope(s, &b, 400, "invalid_request");
    assert!(
        b["details"][0]["formErrors"]
            .as_array()
            .is_some_and(|f| !f.is_empty()),
        "{b}"
    );
    srv.stop().await;
}

both_backends!(action_evaluation, retrieval_evaluation, unified_evaluation);
