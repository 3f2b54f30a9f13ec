//! The MCP adapter: JSON-RPC over Streamable HTTP, in both protocol
//! generations (see `README.md` beside this file for the decisions).
//!
//! Phases, as for every adapter: classify the JSON-RPC message (tools/call,
//! resources/read, prompts/get, tools/list, or passed through) → build
//! input (the tool name and its arguments) → decide → apply (forward,
//! rewrite the arguments, answer a JSON-RPC error, hold for approval) →
//! filter response (the result as a retrieval: allowed, redacted or
//! withheld; `tools/list` without the tools denied outright) → report.

use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use warden_engine::Verdict;
use warden_engine::client::{MaskOutcome, mask_or_block};
use warden_engine::model::{
    ActionInput, Decision, Facet, HitlFallback, RetrievalInput, RetrievalOperation,
};

use crate::config::Unmatched;
use crate::governor::Governor;
use crate::metrics::Metrics;
use crate::service::{Body, BoxError, MAX_RESULT_BYTES, RouteService, collect_limited, full};
use crate::telemetry::Report;

/// The JSON-RPC error code of a call or result blocked by policy.
pub const POLICY_DENIED: i64 = -32050;
/// The MCP code for a routing header that disagrees with the body.
pub const HEADER_MISMATCH: i64 = -32020;

/// Methods that carry no tool call or content: protocol plumbing, passed.
const PLUMBING: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "resources/list",
    "resources/templates/list",
    "prompts/list",
    "completion/complete",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
    "subscriptions/listen",
];

/// What the response of a governed request is checked for.
#[derive(Debug, Clone)]
enum Filter {
    /// The result is content the agent is about to read.
    Retrieval {
        operation: RetrievalOperation,
        resource_type: &'static str,
        metadata: Value,
    },
    /// Hide the tools the bundle denies outright.
    ToolsList,
}

/// A JSON-RPC error answer for request `id`.
fn rpc_error(id: &Value, code: i64, message: String, data: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message, "data": data}})
}

fn policy_error(id: &Value, verdict: &Verdict, decision_id: Option<uuid::Uuid>) -> Value {
    rpc_error(
        id,
        POLICY_DENIED,
        format!("blocked by policy: {}", verdict.reason),
        json!({
            "code": "policy_denied",
            "reason": verdict.reason,
            "rule_code": verdict.rule_code,
            "decision_id": decision_id,
        }),
    )
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let mut resp = Response::new(full(body.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Decides a result (or a tool list) the upstream sent for `filter`,
/// rewriting `msg` in place; true if it changed.
fn filter_message(
    filter: &Filter,
    msg: &mut Value,
    governor: &Governor,
    agent_id: &str,
    route: &'static str,
    metrics: &Metrics,
) -> bool {
    if msg.get("result").is_none() {
        return false;
    }
    match filter {
        Filter::ToolsList => {
            let Some(tools) = msg["result"]["tools"].as_array_mut() else {
                return false;
            };
            let before = tools.len();
            tools.retain(|tool| {
                let Some(name) = tool.get("name").and_then(Value::as_str) else {
                    return true;
                };
                let v = governor.decide_action(&ActionInput {
                    agent_id: agent_id.to_owned(),
                    target_app: route.to_owned(),
                    action: name.to_owned(),
                    context: json!({}),
                });
                !(v.decision == Decision::Deny && v.enforced)
            });
            tools.len() != before
        }
        Filter::Retrieval {
            operation,
            resource_type,
            metadata,
        } => {
            let verdict = governor.decide_retrieval(&RetrievalInput {
                agent_id: agent_id.to_owned(),
                operation: *operation,
                resource_type: (*resource_type).to_owned(),
                resource_metadata: metadata.clone(),
                query: None,
                surface: Some("mcp".to_owned()),
                trust_tier: None,
            });
            metrics.decision(route, verdict.decision.as_str(), verdict.enforced);
            apply_retrieval(&verdict, msg)
        }
    }
}

/// Applies a retrieval verdict to a JSON-RPC result message.
fn apply_retrieval(verdict: &Verdict, msg: &mut Value) -> bool {
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    let mask = |msg: &mut Value| -> bool {
        match mask_or_block(verdict, &mut msg["result"]) {
            MaskOutcome::Masked(_) => true,
            MaskOutcome::Blocked(why) => {
                let mut v = verdict.clone();
                v.reason = format!("the result could not be redacted ({why}); withheld");
                *msg = policy_error(&id, &v, None);
                true
            }
        }
    };
    match verdict.decision {
        Decision::Deny => {
            *msg = policy_error(&id, verdict, None);
            true
        }
        Decision::Redact => mask(msg),
        Decision::Escalate => {
            tracing::info!(rule_code = ?verdict.rule_code, "retrieval escalated; passed as the rule's fallback says");
            if verdict.hitl_fallback == Some(HitlFallback::Mask) {
                mask(msg)
            } else {
                false
            }
        }
        _ => false,
    }
}

/// A tools/call request's name and arguments, or why it cannot be judged.
fn tool_call(msg: &Value) -> Result<(String, Value), String> {
    let params = msg.get("params").unwrap_or(&Value::Null);
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| "a tools/call without a tool name".to_owned())?;
    let args = match params.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(Value::Object(o)) => Value::Object(o.clone()),
        Some(_) => return Err("tools/call arguments that are not an object".to_owned()),
    };
    Ok((name.to_owned(), args))
}

/// `mcp-method` / `mcp-name` headers that disagree with the body: a call
/// routed as one thing and executed as another is a bypass attempt.
fn header_mismatch(headers: &hyper::HeaderMap, method: &str, name: Option<&str>) -> Option<String> {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    if let Some(h) = header("mcp-method")
        && h != method
    {
        return Some(format!("mcp-method `{h}` but the body calls `{method}`"));
    }
    if let (Some(h), Some(n)) = (header("mcp-name"), name)
        && h != n
    {
        return Some(format!("mcp-name `{h}` but the body names `{n}`"));
    }
    None
}

impl RouteService {
    pub(crate) async fn govern_mcp(&self, req: Request<Incoming>) -> Response<Body> {
        let started = Instant::now();
        let (mut parts, body) = req.into_parts();
        // The agent reads what the sidecar judged: ask for plain bodies.
        parts.headers.remove(header::ACCEPT_ENCODING);
        if parts.method != Method::POST {
            // GET (the server's stream), DELETE (session end): passed.
            let body = body.map_err(|e| Box::new(e) as BoxError).boxed();
            return self.forward(parts, body, None).await.0;
        }
        let bytes = match Limited::new(body, self.max_body_bytes).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                let why = format!(
                    "an MCP message over {} bytes or unreadable",
                    self.max_body_bytes
                );
                return self
                    .unjudgeable(&Value::Null, &why, parts, Bytes::new())
                    .await;
            }
        };
        let bytes =
            match crate::body::decode(&mut parts.headers, bytes.clone(), self.max_body_bytes) {
                Ok(decoded) => decoded,
                Err(why) => return self.unjudgeable(&Value::Null, &why, parts, bytes).await,
            };
        let msg: Value = match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(_) => {
                return self
                    .unjudgeable(
                        &Value::Null,
                        "an MCP message that is not JSON",
                        parts,
                        bytes,
                    )
                    .await;
            }
        };
        if msg.is_array() {
            // Batches (dropped from MCP in 2025-06-18) follow the route's default.
            return self
                .ungoverned(&Value::Null, "a JSON-RPC batch", parts, bytes)
                .await;
        }
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let method = msg
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let name = msg
            .get("params")
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str);
        if let Some(why) = header_mismatch(&parts.headers, &method, name) {
            tracing::warn!(route = %self.route.name, %why, "refused: routing headers disagree with the body");
            return json_response(
                StatusCode::BAD_REQUEST,
                &rpc_error(
                    &id,
                    HEADER_MISMATCH,
                    format!("header mismatch: {why}"),
                    Value::Null,
                ),
            );
        }
        let server = self.route.name.clone();
        let filter = match method.as_str() {
            "tools/call" => return self.tool_call(parts, bytes, msg, started).await,
            "resources/read" => Some(Filter::Retrieval {
                operation: RetrievalOperation::Retrieve,
                resource_type: "resource",
                metadata: json!({"server": server, "uri": msg["params"]["uri"]}),
            }),
            "prompts/get" => Some(Filter::Retrieval {
                operation: RetrievalOperation::PromptRender,
                resource_type: "prompt",
                metadata: json!({"server": server, "prompt": msg["params"]["name"], "arguments": msg["params"]["arguments"]}),
            }),
            "tools/list" => Some(Filter::ToolsList),
            m if m.starts_with("notifications/") || msg.get("method").is_none() => None,
            m if PLUMBING.contains(&m) => None,
            m => {
                return self
                    .ungoverned(&id, &format!("the method `{m}`"), parts, bytes)
                    .await;
            }
        };
        let (resp, _) = self.forward(parts, full(bytes), None).await;
        match filter {
            Some(f) => self.filter_response(resp, id, f).await,
            None => resp,
        }
    }

    /// A tools/call: decided as an action; its result as a retrieval.
    async fn tool_call(
        &self,
        parts: hyper::http::request::Parts,
        bytes: Bytes,
        mut msg: Value,
        started: Instant,
    ) -> Response<Body> {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let size_hint = bytes.len();
        let (name, args) = match tool_call(&msg) {
            Ok(call) => call,
            Err(why) => return self.unjudgeable(&id, &why, parts, bytes).await,
        };
        let input = ActionInput {
            agent_id: self.agent_id.clone(),
            target_app: self.route.name.clone(),
            action: name.clone(),
            context: args,
        };
        let verdict = self.governor.decide_action(&input);
        let decided_in = started.elapsed();
        self.metrics.added(decided_in);
        self.metrics.decision(
            self.route_label,
            verdict.decision.as_str(),
            verdict.enforced,
        );
        let decision_id = uuid::Uuid::now_v7();
        let filter = Filter::Retrieval {
            operation: RetrievalOperation::ToolCall,
            resource_type: "tool_result",
            metadata: json!({"server": self.route.name, "tool": name}),
        };
        let report = |execution| {
            if verdict.evaluated {
                self.telemetry.push(Report {
                    item: self.item(
                        decision_id,
                        &input,
                        &verdict,
                        decided_in,
                        self.report_context(&verdict, input.context.clone(), size_hint),
                    ),
                    execution,
                });
            }
        };
        let masked = |verdict: &Verdict, msg: &mut Value| -> Result<(), Verdict> {
            match mask_or_block(verdict, &mut msg["params"]["arguments"]) {
                MaskOutcome::Masked(_) => Ok(()),
                MaskOutcome::Blocked(why) => {
                    let mut v = verdict.clone();
                    v.decision = Decision::Deny;
                    v.reason = format!("masking failed ({why}); blocked");
                    Err(v)
                }
            }
        };
        let (outgoing, server_id) = match verdict.decision {
            Decision::Deny => {
                report(None);
                return json_response(
                    StatusCode::OK,
                    &policy_error(&id, &verdict, Some(decision_id)),
                );
            }
            Decision::Mask => match masked(&verdict, &mut msg) {
                Ok(()) => (Bytes::from(msg.to_string()), None),
                Err(v) => {
                    report(None);
                    return json_response(
                        StatusCode::OK,
                        &policy_error(&id, &v, Some(decision_id)),
                    );
                }
            },
            Decision::ApprovalRequired => {
                let (server_id, approved) = self.ask_approval(&input).await;
                if approved {
                    (bytes, server_id)
                } else if verdict.hitl_fallback == Some(HitlFallback::Mask) {
                    match masked(&verdict, &mut msg) {
                        Ok(()) => (Bytes::from(msg.to_string()), server_id),
                        Err(v) => {
                            return json_response(
                                StatusCode::OK,
                                &policy_error(&id, &v, server_id),
                            );
                        }
                    }
                } else {
                    let mut v = verdict.clone();
                    v.reason = format!("not approved: {}", verdict.reason);
                    return json_response(StatusCode::OK, &policy_error(&id, &v, server_id));
                }
            }
            _ => (bytes, None),
        };
        let (resp, execution) = match server_id {
            // The control plane stored the held decision itself.
            Some(sid) => {
                let (resp, execution) = self.forward(parts, full(outgoing), Some(sid)).await;
                self.report_execution(execution);
                (resp, None)
            }
            None => self.forward(parts, full(outgoing), Some(decision_id)).await,
        };
        if server_id.is_none() {
            report(execution);
        }
        self.filter_response(resp, id, filter).await
    }

    /// Judges the upstream's answer to request `id`: a JSON body at once, an
    /// SSE body event by event as it streams.
    async fn filter_response(
        &self,
        resp: Response<Body>,
        id: Value,
        filter: Filter,
    ) -> Response<Body> {
        let content_type = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let (governor, metrics) = (self.governor.clone(), self.metrics.clone());
        let (agent_id, route) = (self.agent_id.clone(), self.route_label);
        if content_type.starts_with("text/event-stream") {
            let (parts, body) = resp.into_parts();
            let body = crate::sse::rewrite_stream(body, move |msg: &mut Value| {
                msg.get("id") == Some(&id)
                    && filter_message(&filter, msg, &governor, &agent_id, route, &metrics)
            });
            return Response::from_parts(parts, body);
        }
        if !content_type.starts_with("application/json") {
            return resp;
        }
        let (mut parts, body) = resp.into_parts();
        let raw = collect_limited(body, MAX_RESULT_BYTES).await;
        let mut msg = raw
            .as_ref()
            .and_then(|b| serde_json::from_slice::<Value>(b).ok());
        let changed = msg
            .as_mut()
            .is_some_and(|m| filter_message(&filter, m, &governor, &agent_id, route, &metrics));
        let out = match (msg, raw) {
            (Some(m), _) if changed => Bytes::from(m.to_string()),
            // Unchanged: the upstream's own bytes, not a re-serialization.
            (Some(_), Some(raw)) => raw,
            (_, raw) => {
                // A result the sidecar cannot read is not passed as if judged:
                // denied when enforcing, passed as it came when observing.
                let v = self
                    .governor
                    .decide_unjudgeable(Facet::Retrieval, "an unreadable MCP result");
                self.metrics
                    .decision(self.route_label, v.decision.as_str(), v.enforced);
                match (v.decision, raw) {
                    (Decision::Deny, _) => Bytes::from(policy_error(&id, &v, None).to_string()),
                    (_, Some(raw)) => raw,
                    // Over the judged limit: there is nothing whole to pass.
                    (_, None) => Bytes::from(
                        rpc_error(
                            &id,
                            POLICY_DENIED,
                            "the upstream's result is over the judged limit".into(),
                            Value::Null,
                        )
                        .to_string(),
                    ),
                }
            }
        };
        parts.headers.remove(header::CONTENT_LENGTH);
        Response::from_parts(parts, full(out))
    }

    /// A message the sidecar cannot read: denied when enforcing.
    async fn unjudgeable(
        &self,
        id: &Value,
        why: &str,
        parts: hyper::http::request::Parts,
        bytes: Bytes,
    ) -> Response<Body> {
        let v = self.governor.decide_unjudgeable(Facet::Action, why);
        self.metrics
            .decision(self.route_label, v.decision.as_str(), v.enforced);
        if v.decision == Decision::Deny {
            return json_response(StatusCode::OK, &policy_error(id, &v, None));
        }
        self.forward(parts, full(bytes), None).await.0
    }

    /// A message no rule family covers: the route's `unmatched` decides.
    async fn ungoverned(
        &self,
        id: &Value,
        what: &str,
        parts: hyper::http::request::Parts,
        bytes: Bytes,
    ) -> Response<Body> {
        match self.route.unmatched {
            Unmatched::Deny => json_response(
                StatusCode::OK,
                &rpc_error(
                    id,
                    POLICY_DENIED,
                    format!("{what} is not allowed through {}", self.route.name),
                    json!({"code": "route_not_governed"}),
                ),
            ),
            Unmatched::Forward | Unmatched::Govern => {
                self.forward(parts, full(bytes), None).await.0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_calls_need_a_name_and_object_arguments() {
        let ok = json!({"method": "tools/call", "params": {"name": "x", "arguments": {"a": 1}}});
        assert_eq!(tool_call(&ok).unwrap(), ("x".to_owned(), json!({"a": 1})));
        let bare = json!({"method": "tools/call", "params": {"name": "x"}});
        assert_eq!(tool_call(&bare).unwrap().1, json!({}));
        assert!(tool_call(&json!({"method": "tools/call", "params": {}})).is_err());
        let list = json!({"method": "tools/call", "params": {"name": "x", "arguments": [1]}});
        assert!(tool_call(&list).is_err());
    }

    #[test]
    fn routing_headers_must_match_the_body() {
        let mut h = hyper::HeaderMap::new();
        assert_eq!(header_mismatch(&h, "tools/call", Some("a")), None);
        h.insert("mcp-name", HeaderValue::from_static("get_customer"));
        assert_eq!(
            header_mismatch(&h, "tools/call", Some("get_customer")),
            None
        );
        assert!(header_mismatch(&h, "tools/call", Some("delete_customer")).is_some());
        h.insert("mcp-method", HeaderValue::from_static("tools/list"));
        assert!(header_mismatch(&h, "tools/call", Some("get_customer")).is_some());
    }
}
