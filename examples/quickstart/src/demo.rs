//! The two tools the scripted agent uses: a small MCP server (`crm`) and a
//! small HTTP API (`billing`). Each records what it received, so the table
//! can show what reached the tool (masked where the sidecar masked it) and
//! that a blocked call never arrived.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// What a tool received: the tool (or `METHOD /path`) and its arguments.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub(crate) what: String,
    pub(crate) arguments: Value,
}

/// Everything both tools received, in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Inbox(Arc<Mutex<Vec<Received>>>);

impl Inbox {
    fn push(&self, what: String, arguments: Value) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Received { what, arguments });
    }

    pub(crate) fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// What arrived after the first `from` entries.
    pub(crate) fn since(&self, from: usize) -> Vec<Received> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())[from..].to_vec()
    }
}

/// The customer record the CRM returns, secrets included: the sidecar's
/// retrieval rule removes them before the agent reads the result.
pub(crate) const CUSTOMER_API_KEY: &str = "sk-live-4f9a8b7c6d5e4f3a";

fn tools() -> Value {
    let object = |props: Value| json!({"type": "object", "properties": props});
    json!([
        {"name": "search_docs", "description": "Search the help center",
         "inputSchema": object(json!({"query": {"type": "string"}}))},
        {"name": "lookup_customer", "description": "Read a customer record",
         "inputSchema": object(json!({"id": {"type": "string"}}))},
        {"name": "send_email", "description": "Email a customer",
         "inputSchema": object(json!({"to": {"type": "string"}, "body": {"type": "string"}}))},
        {"name": "drop_database", "description": "Drop a database",
         "inputSchema": object(json!({"name": {"type": "string"}}))},
    ])
}

fn call_tool(name: &str, args: &Value) -> Value {
    let text = |t: String| json!({"content": [{"type": "text", "text": t}], "isError": false});
    match name {
        "search_docs" => text("Refunds are processed within 5 business days.".to_owned()),
        "lookup_customer" => json!({
            "content": [{"type": "text", "text": format!(
                "Ana Lima, plan pro, integration key {CUSTOMER_API_KEY}")}],
            "structuredContent": {"name": "Ana Lima", "plan": "pro", "api_key": CUSTOMER_API_KEY},
            "isError": false
        }),
        "send_email" => text(format!("queued an email to {}", args["to"])),
        "drop_database" => text(format!("dropped database {}", args["name"])),
        other => {
            json!({"content": [{"type": "text", "text": format!("unknown tool {other}")}], "isError": true})
        }
    }
}

/// One JSON-RPC message of the session-based Streamable HTTP transport,
/// answered with a JSON body (servers may answer JSON instead of SSE).
async fn mcp(State(inbox): State<Inbox>, Json(msg): Json<Value>) -> Response {
    let Some(id) = msg.get("id").cloned() else {
        // A notification: accepted, no body.
        return StatusCode::ACCEPTED.into_response();
    };
    let method = msg["method"].as_str().unwrap_or_default();
    let params = &msg["params"];
    let result = match method {
        "initialize" => json!({
            "protocolVersion": params["protocolVersion"].as_str().unwrap_or("2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "demo-crm", "version": "1.0.0"}
        }),
        "tools/list" => json!({"tools": tools()}),
        "tools/call" => {
            let name = params["name"].as_str().unwrap_or_default();
            let args = params.get("arguments").cloned().unwrap_or(json!({}));
            inbox.push(name.to_owned(), args.clone());
            call_tool(name, &args)
        }
        _ => {
            let error = json!({"code": -32601, "message": format!("method not found: {method}")});
            return Json(json!({"jsonrpc": "2.0", "id": id, "error": error})).into_response();
        }
    };
    let mut headers = HeaderMap::new();
    if method == "initialize" {
        headers.insert("mcp-session-id", HeaderValue::from_static("demo-session-1"));
    }
    (
        headers,
        Json(json!({"jsonrpc": "2.0", "id": id, "result": result})),
    )
        .into_response()
}

async fn get_customer(State(inbox): State<Inbox>, Path(id): Path<String>) -> Json<Value> {
    inbox.push(format!("GET /v1/customers/{id}"), json!({}));
    Json(json!({"id": id, "name": "Ana Lima", "plan": "pro"}))
}

async fn delete_customer(State(inbox): State<Inbox>, Path(id): Path<String>) -> Json<Value> {
    inbox.push(format!("DELETE /v1/customers/{id}"), json!({}));
    Json(json!({"deleted": id}))
}

/// Starts both tools on loopback ports; returns (MCP address, HTTP address).
pub(crate) async fn start(inbox: Inbox) -> anyhow::Result<(SocketAddr, SocketAddr)> {
    let crm = axum::Router::new()
        .route("/mcp", post(mcp))
        .with_state(inbox.clone());
    let billing = axum::Router::new()
        .route(
            "/v1/customers/{id}",
            get(get_customer).delete(delete_customer),
        )
        .with_state(inbox);
    let crm_listener = TcpListener::bind("127.0.0.1:0").await?;
    let billing_listener = TcpListener::bind("127.0.0.1:0").await?;
    let addrs = (crm_listener.local_addr()?, billing_listener.local_addr()?);
    tokio::spawn(async move { axum::serve(crm_listener, crm).await });
    tokio::spawn(async move { axum::serve(billing_listener, billing).await });
    Ok(addrs)
}
