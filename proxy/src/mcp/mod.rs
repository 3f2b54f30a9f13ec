//! The MCP adapter: JSON-RPC over Streamable HTTP, in both protocol
//! generations (see `README.md` beside this file for the decisions).
//!
//! Phases, as for every adapter: classify the JSON-RPC message (tools/call,
//! resources/read, prompts/get, tools/list, or passed through) → build
//! input (the tool name and its arguments) → decide → apply (forward,
//! rewrite the arguments, answer a JSON-RPC error, hold for approval) →
//! filter response (the result as a retrieval: allowed, redacted or
//! withheld; `tools/list` without the tools denied outright) → report.

use std::borrow::Cow;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use warden_engine::Verdict;
use warden_engine::client::{MaskOutcome, mask_or_block};
use warden_engine::model::{
    ActionInput, Decision, Facet, HitlFallback, RetrievalInput, RetrievalOperation,
};

use crate::config::Unmatched;
use crate::governor::Governor;
use crate::metrics::RouteDecisions;
use crate::service::{Body, BoxError, MAX_RESULT_BYTES, RouteService, collect_limited, full};

/// Why a message that is not a JSON-RPC object cannot be judged.
const NOT_JSON: &str = "an MCP message that is not a JSON-RPC object";

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
    /// The result is content the agent is about to read (the input is
    /// built once: an SSE response may carry several candidate events).
    Retrieval(RetrievalInput),
    /// Hide the tools the bundle denies outright on this server (the
    /// route's name, the tools' `target_app`).
    ToolsList(String),
}

/// What the adapter routes a JSON-RPC message on, borrowed from the body:
/// only the tool call's arguments (its `context`) become a `Value`, so a
/// call is not built into a tree, walked and dropped to read three fields.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
}

/// The members of `params` the governed methods read.
#[derive(Deserialize)]
struct Params<'a> {
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    uri: Option<&'a RawValue>,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
}

impl<'a> Params<'a> {
    /// `params` if it is an object (a derived struct would also accept an
    /// array, positionally); anything else has none of these members.
    fn of(params: Option<&'a RawValue>) -> Params<'a> {
        let none = Params {
            name: None,
            uri: None,
            arguments: None,
        };
        match params {
            Some(raw) if raw.get().starts_with('{') => {
                serde_json::from_str(raw.get()).unwrap_or(none)
            }
            _ => none,
        }
    }

    /// `name` when it is a string.
    fn name(&self) -> Option<Cow<'a, str>> {
        self.name
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
    }
}

/// A member as a value (`null` when absent).
fn value_of(raw: Option<&RawValue>) -> Value {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
        .unwrap_or(Value::Null)
}

/// The first byte of a JSON text that is not whitespace.
fn first_byte(bytes: &[u8]) -> Option<u8> {
    bytes.iter().copied().find(|b| !b.is_ascii_whitespace())
}

/// Whether a response body holds a result to judge: `Err` when it is not
/// JSON; `Ok(false)` when it is not an object or carries no `result` (an
/// error answer). Checked without building the message.
fn has_result(bytes: &[u8]) -> Result<bool, ()> {
    #[derive(Deserialize)]
    struct Probe {
        #[serde(default)]
        result: Option<IgnoredAny>,
    }
    if first_byte(bytes) == Some(b'{') {
        serde_json::from_slice::<Probe>(bytes)
            .map(|p| p.result.is_some())
            .map_err(drop)
    } else {
        serde_json::from_slice::<IgnoredAny>(bytes)
            .map(|_| false)
            .map_err(drop)
    }
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
    counts: &RouteDecisions,
) -> bool {
    if msg.get("result").is_none() {
        return false;
    }
    match filter {
        Filter::ToolsList(server) => {
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
                    target_app: server.clone(),
                    action: name.to_owned(),
                    context: json!({}),
                });
                !(v.decision == Decision::Deny && v.enforced)
            });
            tools.len() != before
        }
        Filter::Retrieval(input) => {
            let verdict = decide_result(governor, input, counts);
            apply_retrieval(&verdict, msg)
        }
    }
}

/// Judges a JSON response that carries a result: the upstream's own bytes
/// when the verdict lets them pass, the rewritten message otherwise.
fn judge_result(
    filter: &Filter,
    id: &Value,
    raw: Bytes,
    governor: &Governor,
    agent_id: &str,
    counts: &RouteDecisions,
) -> Bytes {
    let parse = || serde_json::from_slice::<Value>(&raw);
    match filter {
        Filter::Retrieval(input) => {
            let verdict = decide_result(governor, input, counts);
            if !rewrites(&verdict) {
                // The verdict did not read the content: nothing is built.
                return raw;
            }
            match parse() {
                Ok(mut msg) => {
                    apply_retrieval(&verdict, &mut msg);
                    Bytes::from(msg.to_string())
                }
                // Read once already, so never expected; withheld if it happens.
                Err(_) => Bytes::from(policy_error(id, &verdict, None).to_string()),
            }
        }
        Filter::ToolsList(_) => {
            let Ok(mut msg) = parse() else { return raw };
            if filter_message(filter, &mut msg, governor, agent_id, counts) {
                Bytes::from(msg.to_string())
            } else {
                raw
            }
        }
    }
}

/// Decides a result: the verdict depends on where it came from (server,
/// tool or resource), never on its content, which only a rewrite reads.
fn decide_result(governor: &Governor, input: &RetrievalInput, counts: &RouteDecisions) -> Verdict {
    let verdict = governor.decide_retrieval(input);
    counts.count(verdict.decision, verdict.enforced);
    if verdict.decision == Decision::Escalate {
        tracing::info!(rule_code = ?verdict.rule_code, "retrieval escalated; passed as the rule's fallback says");
    }
    verdict
}

/// Whether applying a retrieval verdict changes the result.
fn rewrites(verdict: &Verdict) -> bool {
    match verdict.decision {
        Decision::Deny | Decision::Redact => true,
        Decision::Escalate => verdict.hitl_fallback == Some(HitlFallback::Mask),
        _ => false,
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
        Decision::Escalate if verdict.hitl_fallback == Some(HitlFallback::Mask) => mask(msg),
        _ => false,
    }
}

/// A tools/call request's name and arguments, or why it cannot be judged.
fn tool_call(params: &Params<'_>) -> Result<(String, Value), String> {
    let name = params
        .name()
        .ok_or_else(|| "a tools/call without a tool name".to_owned())?;
    let args = match params.arguments.map(|raw| serde_json::from_str(raw.get())) {
        None | Some(Ok(Value::Null)) => Value::Object(serde_json::Map::new()),
        Some(Ok(object @ Value::Object(_))) => object,
        Some(_) => return Err("tools/call arguments that are not an object".to_owned()),
    };
    Ok((name.into_owned(), args))
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
        if first_byte(&bytes) == Some(b'[') {
            // Batches (dropped from MCP in 2025-06-18) follow the route's default.
            return match serde_json::from_slice::<IgnoredAny>(&bytes) {
                Ok(_) => {
                    self.ungoverned(&Value::Null, "a JSON-RPC batch", parts, bytes)
                        .await
                }
                Err(_) => self.unjudgeable(&Value::Null, NOT_JSON, parts, bytes).await,
            };
        }
        let Ok(msg) = serde_json::from_slice::<Envelope<'_>>(&bytes) else {
            return self.unjudgeable(&Value::Null, NOT_JSON, parts, bytes).await;
        };
        let id = value_of(msg.id);
        let params = Params::of(msg.params);
        let name = params.name();
        let method = msg.method.as_deref();
        if let Some(why) =
            header_mismatch(&parts.headers, method.unwrap_or_default(), name.as_deref())
        {
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
        let retrieval = |operation, resource_type: &str, metadata| {
            Some(Filter::Retrieval(RetrievalInput {
                agent_id: self.agent_id.clone(),
                operation,
                resource_type: resource_type.to_owned(),
                resource_metadata: metadata,
                query: None,
                surface: Some("mcp".to_owned()),
                trust_tier: None,
            }))
        };
        let server = &self.route.name;
        let filter = match method {
            Some("tools/call") => {
                let call = tool_call(&params);
                drop(msg);
                return self.tool_call(parts, bytes, id, call, started).await;
            }
            Some("resources/read") => retrieval(
                RetrievalOperation::Retrieve,
                "resource",
                json!({"server": server, "uri": value_of(params.uri)}),
            ),
            Some("prompts/get") => retrieval(
                RetrievalOperation::PromptRender,
                "prompt",
                json!({"server": server, "prompt": value_of(params.name), "arguments": value_of(params.arguments)}),
            ),
            Some("tools/list") => Some(Filter::ToolsList(server.clone())),
            // Notifications, plumbing, and the client's answers to the server.
            None => None,
            Some(m) if m.starts_with("notifications/") || PLUMBING.contains(&m) => None,
            Some(m) => {
                let what = format!("the method `{m}`");
                drop(msg);
                return self.ungoverned(&id, &what, parts, bytes).await;
            }
        };
        drop(msg);
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
        id: Value,
        call: Result<(String, Value), String>,
        started: Instant,
    ) -> Response<Body> {
        let size_hint = bytes.len();
        let (name, args) = match call {
            Ok(call) => call,
            Err(why) => return self.unjudgeable(&id, &why, parts, bytes).await,
        };
        let filter = Filter::Retrieval(RetrievalInput {
            agent_id: self.agent_id.clone(),
            operation: RetrievalOperation::ToolCall,
            resource_type: "tool_result".to_owned(),
            resource_metadata: json!({"server": self.route.name, "tool": name}),
            query: None,
            surface: Some("mcp".to_owned()),
            trust_tier: None,
        });
        let input = ActionInput {
            agent_id: self.agent_id.clone(),
            target_app: self.route.name.clone(),
            action: name,
            context: args,
        };
        let verdict = self.governor.decide_action(&input);
        let decided_in = started.elapsed();
        self.metrics.added(decided_in);
        self.decisions.count(verdict.decision, verdict.enforced);
        let decision_id = uuid::Uuid::now_v7();
        // The call with its arguments masked, re-serialized (the only
        // path that builds the whole message).
        let masked = |verdict: &Verdict| -> Result<Bytes, Verdict> {
            let blocked = |why: &str| {
                let mut v = verdict.clone();
                v.decision = Decision::Deny;
                v.reason = format!("masking failed ({why}); blocked");
                v
            };
            let mut msg: Value =
                serde_json::from_slice(&bytes).map_err(|_| blocked("unreadable"))?;
            match mask_or_block(verdict, &mut msg["params"]["arguments"]) {
                MaskOutcome::Masked(_) => Ok(Bytes::from(msg.to_string())),
                MaskOutcome::Blocked(why) => Err(blocked(&why)),
            }
        };
        let (outgoing, server_id) = match verdict.decision {
            Decision::Deny => {
                self.report_decision(decision_id, input, &verdict, decided_in, size_hint, None);
                return json_response(
                    StatusCode::OK,
                    &policy_error(&id, &verdict, Some(decision_id)),
                );
            }
            Decision::Mask => match masked(&verdict) {
                Ok(outgoing) => (outgoing, None),
                Err(v) => {
                    self.report_decision(decision_id, input, &verdict, decided_in, size_hint, None);
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
                    match masked(&verdict) {
                        Ok(outgoing) => (outgoing, server_id),
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
            self.report_decision(
                decision_id,
                input,
                &verdict,
                decided_in,
                size_hint,
                execution,
            );
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
        let (governor, counts) = (self.governor.clone(), self.decisions.clone());
        let agent_id = self.agent_id.clone();
        if content_type.starts_with("text/event-stream") {
            let (parts, body) = resp.into_parts();
            let body = crate::sse::rewrite_stream(body, move |msg: &mut Value| {
                msg.get("id") == Some(&id)
                    && filter_message(&filter, msg, &governor, &agent_id, &counts)
            });
            return Response::from_parts(parts, body);
        }
        if !content_type.starts_with("application/json") {
            return resp;
        }
        let (mut parts, body) = resp.into_parts();
        let raw = collect_limited(body, MAX_RESULT_BYTES).await;
        let readable = raw.as_deref().map(has_result);
        let out = match (readable, raw) {
            // An error answer, or something that is not a response.
            (Some(Ok(false)), Some(raw)) => raw,
            (Some(Ok(true)), Some(raw)) => {
                judge_result(&filter, &id, raw, &governor, &agent_id, &counts)
            }
            (_, raw) => {
                // A result the sidecar cannot read is not passed as if judged:
                // denied when enforcing, passed as it came when observing.
                let v = self
                    .governor
                    .decide_unjudgeable(Facet::Retrieval, "an unreadable MCP result");
                self.decisions.count(v.decision, v.enforced);
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
        self.decisions.count(v.decision, v.enforced);
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

    fn call(params: &str) -> Result<(String, Value), String> {
        let raw: &RawValue = serde_json::from_str(params).unwrap();
        tool_call(&Params::of(Some(raw)))
    }

    #[test]
    fn tool_calls_need_a_name_and_object_arguments() {
        let ok = call(r#"{"name": "x", "arguments": {"a": 1}}"#);
        assert_eq!(ok.unwrap(), ("x".to_owned(), json!({"a": 1})));
        assert_eq!(call(r#"{"name": "x"}"#).unwrap().1, json!({}));
        assert_eq!(
            call(r#"{"name": "x", "arguments": null}"#).unwrap().1,
            json!({})
        );
        assert!(call("{}").is_err());
        assert!(call(r#"{"name": 7}"#).is_err());
        assert!(call(r#"{"name": "x", "arguments": [1]}"#).is_err());
        // Params that are not an object name nothing (a derived struct
        // would read an array positionally).
        assert!(call(r#"["x", null, {"a": 1}]"#).is_err());
    }

    #[test]
    fn the_envelope_refuses_repeated_members() {
        // A message whose method appears twice is read differently by
        // different parsers: it is not judged as either.
        let twice = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call"}"#;
        assert!(serde_json::from_slice::<Envelope<'_>>(twice).is_err());
        let escaped = br#"{"id":"a","method":"tools\/call","params":{"name":"x"}}"#;
        let msg = serde_json::from_slice::<Envelope<'_>>(escaped).unwrap();
        assert_eq!(msg.method.as_deref(), Some("tools/call"));
        assert_eq!(value_of(msg.id), json!("a"));
    }

    #[test]
    fn a_result_is_found_without_building_the_message() {
        assert_eq!(
            has_result(br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#),
            Ok(true)
        );
        assert_eq!(
            has_result(br#"{"jsonrpc":"2.0","id":1,"error":{"code":1}}"#),
            Ok(false)
        );
        assert_eq!(has_result(br#"{"id":1,"result":null}"#), Ok(false));
        assert_eq!(has_result(br#"[{"result":{}}]"#), Ok(false));
        assert_eq!(has_result(br#" {"result": {"#), Err(()));
        assert_eq!(has_result(b"not json"), Err(()));
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
