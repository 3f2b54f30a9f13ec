//! The HTTP route adapter: one governed HTTP tool API behind one listener.
//!
//! A request goes through the phases every adapter shares:
//! accept → classify (which configured action, if any) → build input
//! (the JSON body, the query and the path parameters become the action's
//! `context`) → decide (the engine, locally) → apply (forward, rewrite
//! masked arguments, block, or hold for approval) → filter response →
//! report (telemetry, then the upstream's outcome).
//!
//! A body the sidecar cannot judge (not JSON, compressed, over the size
//! limit) is never forwarded as if judged: the engine decides it as
//! unjudgeable, which denies when enforcing.

use std::collections::BTreeMap;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode, Uri};
use serde_json::{Map, Value, json};
use warden_engine::Verdict;
use warden_engine::client::{MaskOutcome, mask_or_block};
use warden_engine::model::{
    ActionInput, Decision, Facet, HitlFallback, RetrievalInput, RetrievalOperation,
};

use crate::config::Unmatched;
use crate::route::first_match;
use crate::service::{Body, BoxError, RouteService, envelope, full};

fn blocked(verdict: &Verdict, decision_id: Option<uuid::Uuid>) -> Response<Body> {
    envelope(
        StatusCode::FORBIDDEN,
        json!({
            "error": "blocked by policy",
            "code": "policy_denied",
            "reason": verdict.reason,
            "rule_code": verdict.rule_code,
            "decision_id": decision_id,
        }),
    )
}

/// Where a `context` key came from, so a masked context can be written back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Body,
    Query,
    Path,
}

/// A request's `context`, and what is needed to write a masked one back.
type Parsed = (Map<String, Value>, Judged);

/// Where each `context` key came from, to rebuild a masked request.
#[derive(Debug)]
struct Judged {
    /// The keys the query and the path added; every other key is the
    /// body's (so the usual request, all body, records nothing here).
    added: BTreeMap<String, Origin>,
    /// The body was a JSON object (else it was empty).
    json_body: bool,
}

impl Judged {
    fn origin(&self, key: &str) -> Origin {
        self.added.get(key).copied().unwrap_or(Origin::Body)
    }
}

fn query_pairs(uri: &Uri) -> Vec<(String, String)> {
    uri.query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

/// The body, the query and the path parameters as one `context`, or why it
/// cannot be judged.
fn context_of(
    uri: &Uri,
    body: &Bytes,
    params: &BTreeMap<String, String>,
) -> Result<Parsed, String> {
    let json_body = !body.iter().all(u8::is_ascii_whitespace);
    let mut context = if json_body {
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(fields)) => fields,
            Ok(_) => return Err("a JSON body that is not an object".to_owned()),
            Err(_) => return Err("a body that is not JSON".to_owned()),
        }
    } else {
        Map::new()
    };
    let mut added = BTreeMap::new();
    for (k, v) in query_pairs(uri) {
        if !context.contains_key(&k) {
            added.insert(k.clone(), Origin::Query);
            context.insert(k, Value::String(v));
        }
    }
    for (k, v) in params {
        if !context.contains_key(k) {
            added.insert(k.clone(), Origin::Path);
            context.insert(k.clone(), Value::String(v.clone()));
        }
    }
    Ok((context, Judged { added, json_body }))
}

/// Writes a masked context back into the body and the query.
fn rebuild(judged: &Judged, masked: &Value, uri: &Uri) -> (Bytes, Option<String>) {
    let fields = masked.as_object().cloned().unwrap_or_default();
    let pick = |origin: Origin| {
        fields
            .iter()
            .filter(move |(k, _)| judged.origin(k) == origin)
    };
    let body = if judged.json_body {
        let object: Map<String, Value> = pick(Origin::Body)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Bytes::from(Value::Object(object).to_string())
    } else {
        Bytes::new()
    };
    let query = uri.query().map(|_| {
        let mut out = form_urlencoded::Serializer::new(String::new());
        for (k, original) in query_pairs(uri) {
            // Repeated keys keep their original values unless masked.
            let value = match (judged.origin(&k), fields.get(&k)) {
                (Origin::Query, Some(Value::String(s))) => s.clone(),
                (Origin::Query, Some(v)) => v.to_string(),
                _ => original,
            };
            out.append_pair(&k, &value);
        }
        out.finish()
    });
    (body, query)
}

/// The verdict's outcome after masking: the body to forward, or a block.
enum Applied {
    Forward(Bytes, Option<String>),
    Block(Verdict),
}

impl RouteService {
    pub(crate) async fn govern_http(&self, req: Request<Incoming>) -> Response<Body> {
        let started = Instant::now();
        // Classify.
        let (mut parts, body) = req.into_parts();
        let method = parts.method.as_str().to_ascii_uppercase();
        let path = parts.uri.path().to_owned();
        let matched = first_match(&self.route.rules, &method, &path);
        // A response that is a retrieval is judged before the agent reads it:
        // ask the upstream for an uncompressed one.
        let retrieval = first_match(&self.route.retrievals, &method, &path);
        if retrieval.is_some() {
            parts.headers.remove(hyper::header::ACCEPT_ENCODING);
        }
        let (action, params) = match (matched, self.route.unmatched) {
            (Some(m), _) => (m.action, m.params),
            (None, Unmatched::Govern) => (
                format!("{} {path}", method.to_ascii_lowercase()),
                BTreeMap::new(),
            ),
            (None, Unmatched::Forward) => {
                let body = body.map_err(|e| Box::new(e) as BoxError).boxed();
                let resp = self.forward(parts, body, None).await.0;
                return self.judge_response(resp, retrieval, &method, &path).await;
            }
            (None, Unmatched::Deny) => {
                return envelope(
                    StatusCode::FORBIDDEN,
                    json!({
                        "error": format!("{method} {path} is not a configured action of {}", self.route.name),
                        "code": "route_not_governed",
                    }),
                );
            }
        };

        // Build input: the body is read whole, up to the limit.
        let bytes = match Limited::new(body, self.max_body_bytes).collect().await {
            Ok(b) => Ok(b.to_bytes()),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                Err(format!("a body over {} bytes", self.max_body_bytes))
            }
            Err(_) => {
                return envelope(
                    StatusCode::BAD_REQUEST,
                    json!({"error": "the request body could not be read", "code": "bad_request"}),
                );
            }
        };
        // Compressed bodies are judged (and forwarded) decompressed; one
        // that cannot be decoded is forwarded as it came, if at all.
        let decoded = bytes
            .clone()
            .and_then(|b| crate::body::decode(&mut parts.headers, b, self.max_body_bytes));
        let forwardable = decoded.clone().or(bytes).ok();
        let (context, judged) = match decoded
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|b| context_of(&parts.uri, b, &params))
        {
            Ok((context, judged)) => (Value::Object(context), Ok(judged)),
            Err(why) => (json!({}), Err(why)),
        };
        // What the context weighs as JSON, at most: reports omit large ones.
        let size_hint = forwardable.as_ref().map_or(0, Bytes::len)
            + parts.uri.query().map_or(0, str::len)
            + params.values().map(|v| v.len() + 8).sum::<usize>();

        // Decide.
        let input = ActionInput {
            agent_id: self.agent_id.clone(),
            target_app: self.route.name.clone(),
            action,
            context,
        };
        let verdict = match &judged {
            Ok(_) => self.governor.decide_action(&input),
            Err(why) => self.governor.decide_unjudgeable(Facet::Action, why),
        };
        let decided_in = started.elapsed();
        self.metrics.added(decided_in);
        self.decisions.count(verdict.decision, verdict.enforced);

        // Apply.
        let applied = match (verdict.decision, &judged, &forwardable) {
            (Decision::Deny, _, _) => Applied::Block(verdict.clone()),
            (Decision::Mask, Ok(j), _) => self.mask(&verdict, j, &input.context, &parts.uri),
            (Decision::ApprovalRequired, Ok(j), Some(b)) => {
                let resp = self.hold(parts, b.clone(), j, &input, &verdict).await;
                return self.judge_response(resp, retrieval, &method, &path).await;
            }
            // Judged and passed, or not judged yet passed (monitor, off).
            (_, _, Some(b)) => Applied::Forward(b.clone(), None),
            // Nothing whole to forward (over the limit).
            (_, _, None) => Applied::Block(verdict.clone()),
        };
        let decision_id = uuid::Uuid::now_v7();
        let (resp, execution) = match applied {
            Applied::Block(v) => (blocked(&v, Some(decision_id)), None),
            Applied::Forward(body, query) => {
                self.forward_rewritten(parts, body, query, Some(decision_id))
                    .await
            }
        };
        let resp = self.judge_response(resp, retrieval, &method, &path).await;

        // Report.
        self.report_decision(
            decision_id,
            input,
            &verdict,
            decided_in,
            size_hint,
            execution,
        );
        resp
    }

    /// Filter response: a successful response to a request a `retrievals`
    /// pattern matches is decided as a retrieval of its JSON body, passed,
    /// redacted, or withheld (`403`); one that is not readable JSON (or over
    /// 16 MiB) is unjudgeable. Other responses pass as they came.
    async fn judge_response(
        &self,
        resp: Response<Body>,
        retrieval: Option<crate::route::Matched>,
        method: &str,
        path: &str,
    ) -> Response<Body> {
        let Some(matched) = retrieval else {
            return resp;
        };
        if !resp.status().is_success() {
            return resp;
        }
        let (mut parts, body) = resp.into_parts();
        let plain = parts.headers.get(hyper::header::CONTENT_ENCODING).is_none();
        let raw = crate::service::collect_limited(body, crate::service::MAX_RESULT_BYTES).await;
        let mut value = raw
            .as_ref()
            .filter(|_| plain)
            .and_then(|b| serde_json::from_slice::<Value>(b).ok());
        let verdict = match &value {
            Some(_) => self.governor.decide_retrieval(&RetrievalInput {
                agent_id: self.agent_id.clone(),
                operation: RetrievalOperation::Retrieve,
                resource_type: matched.action,
                resource_metadata: json!({
                    "server": self.route.name, "method": method, "path": path, "params": matched.params,
                }),
                query: None,
                surface: Some("http".to_owned()),
                trust_tier: None,
            }),
            None => self
                .governor
                .decide_unjudgeable(Facet::Retrieval, "a response that is not readable JSON"),
        };
        self.decisions.count(verdict.decision, verdict.enforced);
        let withheld = |v: &Verdict| {
            envelope(
                StatusCode::FORBIDDEN,
                json!({"error": "withheld by policy", "code": "policy_denied",
                       "reason": v.reason, "rule_code": v.rule_code}),
            )
        };
        let redact = matches!(verdict.decision, Decision::Redact)
            || (verdict.decision == Decision::Escalate
                && verdict.hitl_fallback == Some(HitlFallback::Mask));
        let out = match (verdict.decision, value.as_mut(), raw) {
            (Decision::Deny, _, _) => return withheld(&verdict),
            (_, Some(v), _) if redact => match mask_or_block(&verdict, v) {
                MaskOutcome::Masked(_) => Bytes::from(v.to_string()),
                MaskOutcome::Blocked(_) => return withheld(&verdict),
            },
            (_, _, Some(raw)) => raw,
            // Observed but not whole (over the limit): nothing to pass on.
            (_, _, None) => {
                return envelope(
                    StatusCode::BAD_GATEWAY,
                    json!({"error": "the upstream's response is over the judged limit", "code": "upstream_unavailable"}),
                );
            }
        };
        parts.headers.remove(hyper::header::CONTENT_LENGTH);
        Response::from_parts(parts, full(out))
    }

    /// Forwards `body`, with the request's query replaced by `query` when
    /// masking rewrote it.
    async fn forward_rewritten(
        &self,
        mut parts: hyper::http::request::Parts,
        body: Bytes,
        query: Option<String>,
        decision_id: Option<uuid::Uuid>,
    ) -> (Response<Body>, Option<crate::control::ExecutionEvent>) {
        if let Some(q) = query {
            parts.uri = with_query(&parts.uri, &q);
        }
        self.forward(parts, full(body), decision_id).await
    }

    /// `mask`: rewrites the named arguments, or blocks if it cannot.
    fn mask(&self, verdict: &Verdict, judged: &Judged, context: &Value, uri: &Uri) -> Applied {
        let mut masked = context.clone();
        match mask_or_block(verdict, &mut masked) {
            MaskOutcome::Masked(_) => {
                let (body, query) = rebuild(judged, &masked, uri);
                Applied::Forward(body, query)
            }
            MaskOutcome::Blocked(why) => {
                let mut v = verdict.clone();
                v.decision = Decision::Deny;
                v.reason = format!("masking failed ({why}); blocked");
                Applied::Block(v)
            }
        }
    }

    /// `approval_required`: asks the control plane, which opens the approval
    /// item, then polls until a human answers or the window lapses; the
    /// rule's `hitl_fallback` (absent: deny) decides a rejection, a timeout
    /// or an unreachable control plane.
    async fn hold(
        &self,
        parts: hyper::http::request::Parts,
        body: Bytes,
        judged: &Judged,
        input: &ActionInput,
        verdict: &Verdict,
    ) -> Response<Body> {
        let (id, approved) = self.ask_approval(input).await;
        let applied = if approved {
            Applied::Forward(body, None)
        } else {
            match verdict.hitl_fallback.unwrap_or(HitlFallback::Deny) {
                HitlFallback::Mask => self.mask(verdict, judged, &input.context, &parts.uri),
                HitlFallback::Deny => {
                    let mut v = verdict.clone();
                    v.decision = Decision::Deny;
                    v.reason = format!("not approved: {}", verdict.reason);
                    Applied::Block(v)
                }
            }
        };
        match applied {
            Applied::Block(v) => blocked(&v, id),
            Applied::Forward(body, query) => {
                let (resp, execution) = self.forward_rewritten(parts, body, query, id).await;
                // The control plane stored this decision itself: only its
                // outcome is reported.
                self.report_execution(execution);
                resp
            }
        }
    }
}

fn with_query(uri: &Uri, query: &str) -> Uri {
    let path = uri.path();
    let pq = if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{query}")
    };
    pq.parse().unwrap_or_else(|_| uri.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(uri: &str, body: &str) -> (Uri, Result<Parsed, String>) {
        let uri: Uri = uri.parse().unwrap();
        let params = BTreeMap::from([("id".to_owned(), "42".to_owned())]);
        let j = context_of(&uri, &Bytes::from(body.to_owned()), &params);
        (uri, j)
    }

    #[test]
    fn body_query_and_path_make_the_context() {
        let (_, j) = judged(
            "/v1/x/42?card=4242&card_holder=ana",
            r#"{"amount": 5, "card": "x"}"#,
        );
        let (context, _) = j.unwrap();
        assert_eq!(
            Value::Object(context),
            json!({"amount": 5, "card": "x", "card_holder": "ana", "id": "42"}),
            "the body wins over the query, the query over the path"
        );
    }

    #[test]
    fn unreadable_bodies_are_named() {
        assert!(judged("/x", "not json").1.unwrap_err().contains("not JSON"));
        assert!(judged("/x", "[1]").1.unwrap_err().contains("not an object"));
    }

    #[test]
    fn a_masked_context_is_written_back_where_it_came_from() {
        let (uri, j) = judged(
            "/v1/x/42?token=abc&page=2",
            r#"{"card": "4242424242424242"}"#,
        );
        let (_, j) = j.unwrap();
        let masked = json!({"card": "****", "token": "***", "page": "2", "id": "42"});
        let (body, query) = rebuild(&j, &masked, &uri);
        assert_eq!(
            serde_json::from_slice::<Value>(&body).unwrap(),
            json!({"card": "****"})
        );
        assert_eq!(query.as_deref(), Some("token=***&page=2"));
    }
}
