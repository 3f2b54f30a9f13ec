//! The scripted agent: an MCP client (session-based Streamable HTTP) and a
//! plain HTTP client, both pointed at the sidecar's routes exactly as an
//! agent would be configured. Nothing here knows about Warden.

use anyhow::Context;
use serde_json::{Value, json};

/// What the agent got back from one call.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// A JSON-RPC result, or an HTTP 2xx body.
    Ok(Value),
    /// A JSON-RPC error, or an HTTP error status with its body.
    Refused { status: u16, body: Value },
}

/// An MCP session with one server, through whatever URL it is given.
pub(crate) struct McpSession {
    http: reqwest::Client,
    url: String,
    session: Option<String>,
    next_id: u64,
}

impl McpSession {
    /// `initialize` followed by `notifications/initialized`.
    pub(crate) async fn open(http: reqwest::Client, url: String) -> anyhow::Result<McpSession> {
        let mut s = McpSession {
            http,
            url,
            session: None,
            next_id: 1,
        };
        let params = json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "quickstart-agent", "version": "1.0.0"}
        });
        match s.request("initialize", params).await? {
            Answer::Ok(_) => {}
            Answer::Refused { body, .. } => anyhow::bail!("initialize refused: {body}"),
        }
        s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(s)
    }

    /// `tools/call`.
    pub(crate) async fn call_tool(
        &mut self,
        name: &str,
        arguments: Value,
    ) -> anyhow::Result<Answer> {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    async fn request(&mut self, method: &str, params: Value) -> anyhow::Result<Answer> {
        let id = self.next_id;
        self.next_id += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let resp = self.send(body).await?;
        if let Some(error) = resp.get("error") {
            return Ok(Answer::Refused {
                status: 200,
                body: error.clone(),
            });
        }
        Ok(Answer::Ok(resp["result"].clone()))
    }

    async fn send(&mut self, body: Value) -> anyhow::Result<Value> {
        let mut req = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .json(&body);
        if let Some(session) = &self.session {
            req = req.header("mcp-session-id", session);
        }
        let resp = req.send().await.context("the MCP route answers")?;
        if let Some(session) = resp.headers().get("mcp-session-id") {
            self.session = session.to_str().ok().map(str::to_owned);
        }
        let status = resp.status();
        let text = resp.text().await?;
        if text.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).with_context(|| format!("MCP answer ({status}): {text}"))
    }
}

/// One HTTP call to a tool API.
pub(crate) async fn http_call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
) -> anyhow::Result<Answer> {
    let resp = http.request(method, url).send().await?;
    let status = resp.status().as_u16();
    let text = resp.text().await?;
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok(if status < 300 {
        Answer::Ok(body)
    } else {
        Answer::Refused { status, body }
    })
}
