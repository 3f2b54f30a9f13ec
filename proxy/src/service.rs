//! What every adapter shares: the route's service (its upstream pool, the
//! governor, the control plane, telemetry), forwarding, the approval round
//! trip, and report building. [`RouteService::handle`] dispatches each
//! request to its route's adapter (`http.rs`, `mcp/`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::http::uri::{PathAndQuery, Scheme};
use hyper::{Request, Response, StatusCode, Uri};
use serde_json::{Value, json};
use warden_engine::Verdict;
use warden_engine::model::ActionInput;

use crate::config::{Kind, Route};
use crate::control::{ControlPlane, ExecutionEvent, TelemetryItem};
use crate::governor::Governor;
use crate::metrics::{Metrics, RouteDecisions};
use crate::telemetry::{Report, TelemetryQueue};

/// Bodies both ways: buffered (judged) or streamed (passed through).
pub type Body = http_body_util::combinators::BoxBody<Bytes, BoxError>;
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The upstream connection pool (plain HTTP and HTTPS).
pub type Upstream = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Body,
>;

/// Where a request goes when it names its own upstream (the forward
/// proxy): scheme and authority; the request's path is kept.
#[derive(Debug, Clone)]
pub struct UpstreamBase(pub Uri);

/// How often a held call asks whether it was approved, and for how long
/// (spec 4.2: every 2 s, at most 120 s).
const APPROVAL_POLL: Duration = Duration::from_secs(2);
const APPROVAL_WINDOW: Duration = Duration::from_secs(120);

/// The largest response body judged; a larger one is unjudgeable.
pub(crate) const MAX_RESULT_BYTES: usize = 16 * 1024 * 1024;

/// The largest `context` telemetry carries (spec 4.2).
const MAX_TELEMETRY_CONTEXT: usize = 32 * 1024;

/// What one route's requests need.
#[derive(Debug)]
pub struct RouteService {
    pub route: Route,
    /// The route's decision counters.
    pub decisions: RouteDecisions,
    pub agent_id: String,
    pub max_body_bytes: usize,
    pub governor: Arc<Governor>,
    pub control: ControlPlane,
    pub telemetry: Arc<TelemetryQueue>,
    pub metrics: Arc<Metrics>,
    pub upstream: Upstream,
}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A JSON answer from the sidecar itself, in the spec's error envelope.
pub(crate) fn envelope(status: StatusCode, body: Value) -> Response<Body> {
    let mut resp = Response::new(full(body.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Headers that describe one hop, never forwarded. Typed names: removing by
/// a string parses the name on every call (twice per request here).
const HOP_BY_HOP: [header::HeaderName; 9] = [
    header::CONNECTION,
    header::HeaderName::from_static("keep-alive"),
    header::HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none of them: one look at the few names present
    // is cheaper than nine removals, each of which hashes its name.
    if headers.keys().any(|name| HOP_BY_HOP.contains(name)) {
        for name in &HOP_BY_HOP {
            headers.remove(name);
        }
    }
}

impl RouteService {
    /// Serves one request; never fails (errors become responses).
    pub async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, Infallible> {
        Ok(match self.route.kind {
            Kind::Http => self.govern_http(req).await,
            Kind::Mcp => self.govern_mcp(req).await,
        })
    }

    /// Asks the control plane to decide `input` (it opens the approval item
    /// for an enforced `approval_required`), then waits for a human or the
    /// window: the server's decision id, and whether the call may go.
    pub(crate) async fn ask_approval(&self, input: &ActionInput) -> (Option<uuid::Uuid>, bool) {
        let remote = self
            .control
            .evaluate(&input.target_app, &input.action, &input.context)
            .await;
        match remote {
            Ok(d) if d.decision == "permit" => (Some(d.decision_id), true),
            Ok(d) if d.decision == "approval_required" => (
                Some(d.decision_id),
                self.await_approval(d.decision_id).await,
            ),
            Ok(d) => (Some(d.decision_id), false),
            Err(e) => {
                tracing::warn!(error = %e, "approval: control plane unreachable; applying the fallback");
                (None, false)
            }
        }
    }

    async fn await_approval(&self, id: uuid::Uuid) -> bool {
        let deadline = Instant::now() + APPROVAL_WINDOW;
        while Instant::now() < deadline {
            match self.control.hitl_result(id).await {
                Ok(Some(result)) => return result == "approved",
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "approval poll failed; retrying"),
            }
            tokio::time::sleep(APPROVAL_POLL).await;
        }
        false
    }

    /// Sends a call upstream; the response and, for a reported decision, its
    /// execution outcome.
    pub(crate) async fn forward(
        &self,
        mut parts: hyper::http::request::Parts,
        body: Body,
        decision_id: Option<uuid::Uuid>,
    ) -> (Response<Body>, Option<ExecutionEvent>) {
        let named = parts.extensions.get::<UpstreamBase>().map(|b| b.0.clone());
        let Some(base) = named.clone().or_else(|| self.route.upstream.clone()) else {
            return (
                envelope(
                    StatusCode::BAD_GATEWAY,
                    json!({"error": "this route has no upstream", "code": "upstream_unavailable"}),
                ),
                None,
            );
        };
        let Ok(uri) = upstream_target(&base, named.is_some(), self.route.kind, &parts.uri) else {
            return (
                envelope(
                    StatusCode::BAD_REQUEST,
                    json!({"error": "the request target is not valid", "code": "bad_request"}),
                ),
                None,
            );
        };
        strip_hop_by_hop(&mut parts.headers);
        // The body may have been rewritten: its length is the new body's.
        parts.headers.remove(header::CONTENT_LENGTH);
        if let Some(authority) = base.authority()
            && let Ok(host) = HeaderValue::from_str(authority.as_str())
        {
            parts.headers.insert(header::HOST, host);
        }
        parts.uri = uri;
        let req = Request::from_parts(parts, body);
        match self.upstream.request(req).await {
            Ok(resp) => {
                let status = resp.status();
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                let body = body.map_err(|e| Box::new(e) as BoxError).boxed();
                let execution = decision_id.map(|id| ExecutionEvent {
                    decision_id: id,
                    result: if status.is_success() {
                        "success"
                    } else {
                        "failure"
                    },
                    details: (!status.is_success()).then(|| format!("upstream answered {status}")),
                });
                (Response::from_parts(parts, body), execution)
            }
            Err(e) => {
                tracing::warn!(route = %self.route.name, error = %causes(&e), "upstream unreachable");
                let execution = decision_id.map(|id| ExecutionEvent {
                    decision_id: id,
                    result: "error",
                    details: Some("upstream unreachable".to_owned()),
                });
                (
                    envelope(
                        StatusCode::BAD_GATEWAY,
                        json!({"error": "the upstream is unreachable", "code": "upstream_unavailable"}),
                    ),
                    execution,
                )
            }
        }
    }

    /// Sends an execution outcome now (for a decision the control plane
    /// stored itself, so no telemetry batch has to precede it).
    pub(crate) fn report_execution(&self, execution: Option<ExecutionEvent>) {
        if let Some(event) = execution {
            let control = self.control.clone();
            tokio::spawn(async move {
                if let Err(e) = control.execution(&event).await {
                    tracing::warn!(error = %e, "execution event not delivered");
                }
            });
        }
    }

    /// The context as reported: masked by the rule's directives when it has
    /// any; omitted when masking fails or when it may be too large
    /// (`size_hint`: the bytes it was parsed from, so nothing is serialized
    /// on the request path to measure it).
    fn report_context(
        &self,
        verdict: &Verdict,
        mut context: Value,
        size_hint: usize,
    ) -> Option<Value> {
        if size_hint > MAX_TELEMETRY_CONTEXT {
            return None;
        }
        if let Some(set) = &verdict.redactions
            && set.apply(&mut context).is_err()
        {
            return None;
        }
        Some(context)
    }

    /// Queues the report of an evaluated decision (a decision that was not
    /// evaluated, in mode `off`, sends nothing). The input moves into the
    /// report: it is the last use of the call's names and context.
    pub(crate) fn report_decision(
        &self,
        id: uuid::Uuid,
        input: ActionInput,
        verdict: &Verdict,
        latency: Duration,
        size_hint: usize,
        execution: Option<ExecutionEvent>,
    ) {
        if !verdict.evaluated {
            return;
        }
        let ActionInput {
            agent_id,
            target_app,
            action,
            context,
        } = input;
        let item = TelemetryItem {
            decision_id: id,
            agent_id,
            target_app,
            action,
            // In monitor mode, the rule's real outcome (the control plane
            // records `permit` with it as `would_decide`).
            decision: verdict.outcome().as_str(),
            reason: verdict.reason.clone(),
            evaluated_at: chrono::Utc::now(),
            rule_id: verdict.rule.as_ref().map(|r| r.id),
            rule_code: verdict.rule_code.clone(),
            enforced: verdict.enforced,
            agent_mode: verdict.agent_mode.as_str(),
            evaluation_mode: "local",
            latency_ms: latency.as_secs_f64() * 1000.0,
            context: self.report_context(verdict, context, size_hint),
        };
        self.telemetry.push(Report { item, execution });
    }
}

/// Where a request goes upstream: the forward proxy keeps the request's
/// path; HTTP routes append it to the upstream's base path; an MCP route's
/// upstream is its endpoint (with the request's query, if any). Built from
/// parts: only a path that must be joined is written out and parsed.
fn upstream_target(base: &Uri, named: bool, kind: Kind, request: &Uri) -> Result<Uri, ()> {
    if !named && kind == Kind::Mcp && request.query().is_none() && base.query().is_none() {
        // The endpoint as configured: a clone, nothing to build.
        return Ok(base.clone());
    }
    let request_pq = || {
        request
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"))
    };
    let base_path = base.path().trim_end_matches('/');
    let path_and_query = match (named, kind) {
        (true, _) => request_pq(),
        (false, Kind::Http) if base_path.is_empty() => request_pq(),
        (false, Kind::Http) => {
            PathAndQuery::try_from(format!("{base_path}{}", request_pq())).map_err(drop)?
        }
        (false, Kind::Mcp) => match request.query() {
            Some(q) => PathAndQuery::try_from(format!("{}?{q}", base.path())).map_err(drop)?,
            None => PathAndQuery::try_from(base.path()).map_err(drop)?,
        },
    };
    let mut parts = hyper::http::uri::Parts::default();
    parts.scheme = Some(base.scheme().cloned().unwrap_or(Scheme::HTTP));
    parts.authority = base.authority().cloned();
    parts.path_and_query = Some(path_and_query);
    Uri::from_parts(parts).map_err(drop)
}

/// An error and its causes, `: `-separated (hyper's own message is only
/// the outermost, such as "client error (Connect)").
pub(crate) fn causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// A response body, whole, if it fits in `limit` bytes.
pub(crate) async fn collect_limited(mut body: Body, limit: usize) -> Option<Bytes> {
    let mut buf = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.ok()?.into_data() {
            if buf.len() + data.len() > limit {
                return None;
            }
            buf.extend_from_slice(&data);
        }
    }
    Some(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(base: &str, named: bool, kind: Kind, request: &str) -> String {
        let (base, request) = (base.parse().unwrap(), request.parse().unwrap());
        upstream_target(&base, named, kind, &request)
            .unwrap()
            .to_string()
    }

    #[test]
    fn upstream_targets_follow_the_route_kind() {
        let mcp = "http://10.0.0.1:7100/mcp";
        assert_eq!(target(mcp, false, Kind::Mcp, "/anything"), mcp);
        assert_eq!(
            target(mcp, false, Kind::Mcp, "/x?session=1"),
            "http://10.0.0.1:7100/mcp?session=1"
        );
        assert_eq!(
            target("http://api:7000", false, Kind::Http, "/v1/charges?a=1"),
            "http://api:7000/v1/charges?a=1"
        );
        assert_eq!(
            target("http://api:7000/base/", false, Kind::Http, "/v1/charges"),
            "http://api:7000/base/v1/charges"
        );
        assert_eq!(
            target("https://api.example.com", true, Kind::Http, "/v1/x?q=2"),
            "https://api.example.com/v1/x?q=2"
        );
    }
}
