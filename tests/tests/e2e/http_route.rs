//! The sidecar in front of an HTTP tool API: permit, deny (the upstream
//! never sees the call), mask (the upstream sees masked arguments), bodies
//! it cannot judge, telemetry reaching the audit log, and a mode flipped
//! live through the control plane.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use warden_tests::{ControlPlane, Sidecar, ToolApi, eventually};

const DENY_DELETES: &str = "package deny_deletes\ndecision := \"deny\" if startswith(input.action, \"delete_\")\nreason := \"customers are never deleted by agents\"";
/// Customer responses reach the agent with their `path` redacted.
const REDACT_PATHS: &str = "package customers\ndecision := \"redact\" if input.resource_type == \"customer\"\nredactions := [{\"field\": \"path\", \"mode\": \"full\"}]";
const MASK_CARDS: &str = "package mask_cards\ndecision := \"mask\" if input.action == \"create_charge\"\nredactions := [{\"field\": \"card\", \"mode\": \"partial\", \"keepLast\": 4}]";

fn config(cp: &ControlPlane, upstream: &str) -> String {
    format!(
        "
agent_id: billing-bot
control_plane:
  url: {}
  bundle_interval_secs: 1
admin:
  listen: 127.0.0.1:0
telemetry:
  flush_ms: 100
routes:
  - name: billing
    kind: http
    listen: 127.0.0.1:0
    upstream: {upstream}
    actions:
      - match: POST /v1/charges
        action: create_charge
      - match: GET /v1/customers/{{id}}
        action: get_customer
      - match: DELETE /v1/customers/{{id}}
        action: delete_customer
    retrievals:
      - match: GET /v1/customers/{{id}}
        resource_type: customer
",
        cp.base
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn governs_an_http_tool_api() {
    let cp = ControlPlane::start();
    let (agent_row, key) = cp.agent("billing-bot", "enforce").await;
    cp.rule("no deletes", DENY_DELETES).await;
    cp.rule("mask cards", MASK_CARDS).await;
    let (s, r) = cp
        .call(
            Method::POST,
            "/recall/rules",
            Some(json!({"name": "customer paths", "rego_source": REDACT_PATHS})),
        )
        .await;
    assert_eq!(s, 201, "{r}");
    let api = ToolApi::start().await;
    let sidecar = Sidecar::start(&config(&cp, &api.base), &key, 1);
    let ready = sidecar.ready().await;
    assert!(ready["bundle_version"].is_string(), "{ready}");
    let route = sidecar.route("billing");
    let http = reqwest::Client::new();

    // Permit: forwarded unchanged; the response, a retrieval, is redacted.
    let resp = http
        .get(format!("{route}/v1/customers/42?expand=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let read: Value = resp.json().await.unwrap();
    assert_eq!(read, json!({"ok": true, "path": "[REDACTED]"}), "{read}");
    let calls = api.calls();
    assert_eq!(
        (
            calls[0].method.as_str(),
            calls[0].path.as_str(),
            calls[0].query.as_deref()
        ),
        ("GET", "/v1/customers/42", Some("expand=true"))
    );

    // Deny: answered by the sidecar in the error envelope; never upstream.
    let resp = http
        .delete(format!("{route}/v1/customers/42"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "policy_denied", "{body}");
    assert_eq!(
        body["reason"], "customers are never deleted by agents",
        "{body}"
    );
    assert_eq!(body["rule_code"], "R-0001", "{body}");
    assert_eq!(
        api.calls().len(),
        1,
        "the denied call never reached the upstream"
    );

    // Mask: the upstream sees the masked argument.
    let resp = http
        .post(format!("{route}/v1/charges"))
        .json(&json!({"card": "4242424242424242", "amount": 500}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let sent: Value = serde_json::from_str(&api.calls()[1].body).unwrap();
    assert_eq!(sent["amount"], 500);
    let card = sent["card"].as_str().unwrap();
    assert!(
        card.ends_with("4242") && !card.contains("42424242"),
        "{card}"
    );

    // A gzip body is judged decompressed: masked, and sent on as identity.
    let gz = {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(br#"{"card": "5555555555554444", "amount": 7}"#)
            .unwrap();
        enc.finish().unwrap()
    };
    let resp = http
        .post(format!("{route}/v1/charges"))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(gz)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let sent: Value = serde_json::from_str(&api.calls()[2].body).unwrap();
    let card = sent["card"].as_str().unwrap();
    assert!(
        card.ends_with("4444") && !card.contains("55555555"),
        "{card}"
    );

    // A body the sidecar cannot judge is not forwarded while enforcing.
    let resp = http
        .post(format!("{route}/v1/charges"))
        .header("content-type", "text/plain")
        .body("card=4242424242424242")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    assert_eq!(
        api.calls().len(),
        3,
        "unjudged bodies never reach the upstream"
    );

    // Telemetry: the local decisions reach the control plane's audit log.
    let logged = eventually(Duration::from_secs(10), async || {
        let (_, log) = cp
            .call(
                Method::GET,
                "/v1/allow/audit-log?agent_id=billing-bot&limit=50",
                None,
            )
            .await;
        log["total"].as_u64() == Some(5)
    })
    .await;
    assert!(
        logged,
        "five decisions reported; sidecar log:\n{}",
        sidecar.process.logs()
    );
    let (_, log) = cp
        .call(
            Method::GET,
            "/v1/allow/audit-log?agent_id=billing-bot&decision=deny&limit=50",
            None,
        )
        .await;
    let denied: Vec<&str> = log["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["action"].as_str().unwrap())
        .collect();
    assert!(denied.contains(&"delete_customer"), "{log}");
    let text = serde_json::to_string(&log).unwrap();
    assert!(
        !text.contains("4242424242424242") && !text.contains("5555555555554444"),
        "no card number leaves unmasked: {text}"
    );

    // Monitor, flipped live through the API: the delete now passes.
    let (s, _) = cp
        .call(
            Method::PUT,
            &format!("/allow/agents/{agent_row}"),
            Some(json!({"mode": "monitor"})),
        )
        .await;
    assert_eq!(s, 200);
    let passes = eventually(Duration::from_secs(5), async || {
        http.delete(format!("{route}/v1/customers/7"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert!(passes, "monitor mode observes instead of blocking");
    assert!(api.calls().iter().any(|c| c.method == "DELETE"));

    // The sidecar's logs never carry the payloads it judged, nor its key.
    let logs = sidecar.process.logs();
    assert!(
        !logs.contains("4242424242424242") && !logs.contains(&key),
        "{logs}"
    );
}
