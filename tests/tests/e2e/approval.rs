//! An approval held by the sidecar: the call waits while a human decides
//! through the approvals API; approved → forwarded, rejected or timed out →
//! the rule's fallback (deny), and the upstream never sees it.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use warden_tests::{ControlPlane, Sidecar, ToolApi, eventually};

const WIRES_NEED_APPROVAL: &str =
    "package wires\ndecision := \"approval_required\" if input.action == \"wire_money\"";

fn config(cp: &ControlPlane, upstream: &str) -> String {
    format!(
        "
agent_id: payments-bot
control_plane:
  url: {}
admin:
  listen: 127.0.0.1:0
routes:
  - name: bank
    kind: http
    listen: 127.0.0.1:0
    upstream: {upstream}
    actions:
      - match: POST /wires
        action: wire_money
",
        cp.base
    )
}

struct Setup {
    cp: ControlPlane,
    api: ToolApi,
    sidecar: Sidecar,
}

async fn setup(hitl_timeout_seconds: u32) -> Setup {
    let cp = ControlPlane::start();
    let (s, body) = cp
        .call(
            Method::PUT,
            "/allow/settings",
            Some(json!({"hitl_timeout_seconds": hitl_timeout_seconds})),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let (_, key) = cp.agent("payments-bot", "enforce").await;
    cp.rule("wires need approval", WIRES_NEED_APPROVAL).await;
    let api = ToolApi::start().await;
    let sidecar = Sidecar::start(&config(&cp, &api.base), &key, 1);
    sidecar.ready().await;
    Setup { cp, api, sidecar }
}

/// Sends a wire through the sidecar in the background.
fn wire(route: &str, amount: u32) -> tokio::task::JoinHandle<(u16, Value)> {
    let url = format!("{route}/wires");
    tokio::spawn(async move {
        let resp = reqwest::Client::new()
            .post(url)
            .json(&json!({"amount": amount}))
            .send()
            .await
            .expect("the sidecar answers");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    })
}

/// The pending queue item, once the sidecar's evaluation opened it.
async fn pending_item(cp: &ControlPlane) -> String {
    let mut id = None;
    let found = eventually(Duration::from_secs(10), async || {
        let (_, q) = cp.call(Method::GET, "/allow/hitl/queue", None).await;
        id = q["data"][0]["id"].as_str().map(str::to_owned);
        id.is_some()
    })
    .await;
    assert!(found, "an approval item appears");
    id.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approved_calls_go_through_and_rejected_ones_do_not() {
    let Setup { cp, api, sidecar } = setup(60).await;
    let route = sidecar.route("bank").to_owned();

    let call = wire(&route, 900);
    let item = pending_item(&cp).await;
    assert!(api.calls().is_empty(), "held, not forwarded, while pending");
    let (s, body) = cp
        .call(
            Method::POST,
            &format!("/allow/hitl/queue/{item}"),
            Some(json!({"decision": "approved"})),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let (status, _) = call.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(api.calls().len(), 1, "forwarded once approved");

    let call = wire(&route, 5_000);
    let item = pending_item(&cp).await;
    cp.call(
        Method::POST,
        &format!("/allow/hitl/queue/{item}"),
        Some(json!({"decision": "rejected"})),
    )
    .await;
    let (status, body) = call.await.unwrap();
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["code"], "policy_denied");
    assert!(
        body["decision_id"].is_string(),
        "the server's decision: {body}"
    );
    assert_eq!(
        api.calls().len(),
        1,
        "a rejected call never reaches the upstream"
    );
}

/// Nobody answers: the window (30 s, the shortest the settings allow)
/// lapses, the item becomes `timeout`, and the fallback denies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_approvals_time_out_closed() {
    let Setup { cp, api, sidecar } = setup(30).await;
    let call = wire(sidecar.route("bank"), 900);
    let item = pending_item(&cp).await;
    let (status, body) = tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("answered within the window and a poll")
        .unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(api.calls().is_empty());
    let (_, q) = cp
        .call(Method::GET, "/allow/hitl/queue?status=timeout", None)
        .await;
    assert_eq!(q["data"][0]["id"].as_str(), Some(item.as_str()), "{q}");
}
