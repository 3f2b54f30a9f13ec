//! The sidecar in front of a real MCP server, driven by the official MCP
//! Python SDK's client in both protocol generations: the session-based one
//! (`initialize`, `mcp-session-id`, SSE responses) and the stateless one
//! (`2026-07-28`, routing headers, JSON responses).

use reqwest::Method;
use serde_json::{Value, json};
use warden_tests::{ControlPlane, McpServer, Sidecar, mcp_client};

const DENY_DELETES: &str = "package deny_deletes\ndecision := \"deny\" if startswith(input.action, \"delete_\")\nreason := \"no deletes\"";
const MASK_RECIPIENTS: &str = "package mask_to\ndecision := \"mask\" if input.action == \"send_email\"\nredactions := [{\"field\": \"to\", \"mode\": \"full\"}]";
const REDACT_SECRETS: &str = "package redact_secrets\ndecision := \"redact\" if input.resource_metadata.server == \"crm\"\nredactions := [{\"pattern\": \"[0-9]{3}-[0-9]{2}-[0-9]{4}\", \"mode\": \"full\"}, {\"pattern\": \"sk-live-[a-z0-9]+\", \"mode\": \"full\"}, {\"pattern\": \"4111 1111 1111 1111\", \"mode\": \"full\"}]";

async fn setup(json_response: bool) -> (ControlPlane, McpServer, Sidecar) {
    let cp = ControlPlane::start();
    let (_, key) = cp.agent("crm-agent", "enforce").await;
    cp.rule("no deletes", DENY_DELETES).await;
    cp.rule("mask recipients", MASK_RECIPIENTS).await;
    let (s, r) = cp
        .call(
            Method::POST,
            "/recall/rules",
            Some(json!({"name": "redact secrets", "rego_source": REDACT_SECRETS})),
        )
        .await;
    assert_eq!(s, 201, "{r}");
    let server = McpServer::start(json_response);
    let config = format!(
        "
agent_id: crm-agent
control_plane:
  url: {}
admin:
  listen: 127.0.0.1:0
routes:
  - name: crm
    kind: mcp
    listen: 127.0.0.1:0
    upstream: {}
",
        cp.base, server.url
    );
    let sidecar = Sidecar::start(&config, &key, 1);
    sidecar.ready().await;
    (cp, server, sidecar)
}

fn text_of(result: &Value) -> String {
    result.to_string()
}

async fn governs_in(mode: &str, json_response: bool) {
    let (_cp, server, sidecar) = setup(json_response).await;
    let url = format!("{}/mcp", sidecar.route("crm"));
    let steps = json!([
        {"op": "list_tools"},
        {"op": "call", "name": "get_customer", "arguments": {"id": "7"}},
        {"op": "call", "name": "delete_customer", "arguments": {"id": "7"}},
        {"op": "call", "name": "send_email", "arguments": {"to": "ana@example.com", "body": "hi"}},
        {"op": "read", "uri": "crm://notes/1"},
        {"op": "prompt", "name": "follow_up", "arguments": {"name": "Ana"}},
    ]);
    let out = tokio::task::spawn_blocking({
        let (url, mode) = (url.clone(), mode.to_owned());
        move || mcp_client(&url, &mode, &steps)
    })
    .await
    .unwrap();
    assert_eq!(
        out.len(),
        6,
        "{out:?}\nsidecar log:\n{}",
        sidecar.process.logs()
    );

    // tools/list hides the tool the bundle denies outright.
    let tools: Vec<&str> = out[0]["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"get_customer") && !tools.contains(&"delete_customer"),
        "{tools:?}"
    );

    // Permitted, and its result redacted as a retrieval.
    assert_eq!(out[1]["ok"], true, "{}", out[1]);
    let result = text_of(&out[1]["result"]);
    assert!(
        result.contains("Ana") && !result.contains("123-45-6789"),
        "{result}"
    );

    // Denied: a JSON-RPC error, and the server never saw the call.
    assert_eq!(out[2]["ok"], false, "{}", out[2]);
    assert_eq!(out[2]["error"]["code"], -32050, "{}", out[2]);
    assert_eq!(out[2]["error"]["data"]["rule_code"], "R-0001", "{}", out[2]);

    // Masked: the server received the rewritten argument.
    assert_eq!(out[3]["ok"], true, "{}", out[3]);
    let received = server.received();
    let tools_called: Vec<&str> = received
        .iter()
        .map(|r| r["tool"].as_str().unwrap())
        .collect();
    assert_eq!(tools_called, ["get_customer", "send_email"], "{received:?}");
    let to = received[1]["arguments"]["to"].as_str().unwrap();
    assert!(
        !to.contains("ana@example.com"),
        "masked before forwarding: {to}"
    );

    // resources/read and prompts/get are retrievals too.
    let note = text_of(&out[4]["result"]);
    assert!(
        note.contains("call back") && !note.contains("sk-live-"),
        "{note}"
    );
    let prompt = text_of(&out[5]["result"]);
    assert!(
        prompt.contains("follow-up") && !prompt.contains("4111 1111"),
        "{prompt}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn governs_a_session_based_client_with_sse_responses() {
    governs_in("legacy", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn governs_a_stateless_2026_client() {
    governs_in("2026-07-28", true).await;
}

/// A stateless request whose `mcp-name` header names one tool while its
/// body calls another is refused before it reaches the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_routing_headers_that_disagree_with_the_body() {
    let (_cp, server, sidecar) = setup(true).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/mcp", sidecar.route("crm")))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "get_customer")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "send_email", "arguments": {"to": "x@example.com", "body": "b"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32020, "{body}");
    assert!(server.received().is_empty());
}
