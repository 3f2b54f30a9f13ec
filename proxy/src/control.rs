//! The control plane as the sidecar sees it: the bundle (with `ETag`), the
//! mode stream (SSE), telemetry and execution events, and the approval
//! round trip. Every call carries the agent key; none logs it.

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A control-plane call that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Not reachable, timed out, or the connection broke.
    #[error("control plane unreachable: {0}")]
    Unreachable(String),
    /// It answered with an error status.
    #[error("control plane answered {status}: {code}")]
    Refused { status: u16, code: String },
}

impl From<reqwest::Error> for ControlError {
    fn from(e: reqwest::Error) -> ControlError {
        // Without the URL: it may carry the agent id, never the key, but one
        // rule for all is simpler to keep.
        ControlError::Unreachable(e.without_url().to_string())
    }
}

/// What a bundle pull brought.
#[derive(Debug)]
pub enum BundlePull {
    /// `304`: the bundle we hold is current.
    NotModified,
    /// A new bundle and its `ETag`.
    Fresh { etag: Option<String>, body: Bytes },
}

/// One decision reported through `POST /allow/telemetry`.
#[derive(Debug, Clone, Serialize)]
pub struct TelemetryItem {
    pub decision_id: uuid::Uuid,
    pub agent_id: String,
    pub target_app: String,
    pub action: String,
    pub decision: &'static str,
    pub reason: String,
    pub evaluated_at: chrono::DateTime<chrono::Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<uuid::Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule_code: Option<String>,
    pub enforced: bool,
    pub agent_mode: &'static str,
    pub evaluation_mode: &'static str,
    pub latency_ms: f64,
    /// Masked by the rule's directives before it leaves the sidecar (the
    /// control plane's floor masks it again at rest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<Value>,
}

/// What the upstream did with a forwarded call (`POST /allow/execution-events`).
#[derive(Debug, Clone, Serialize)]
pub struct ExecutionEvent {
    pub decision_id: uuid::Uuid,
    /// `success`, `failure` or `error`.
    pub result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<String>,
}

/// The server's answer to `POST /allow/evaluate` that the approval hold reads.
#[derive(Debug, Clone, Deserialize)]
pub struct RemoteDecision {
    pub decision_id: uuid::Uuid,
    pub decision: String,
}

/// The control-plane client of one sidecar.
#[derive(Clone)]
pub struct ControlPlane {
    http: reqwest::Client,
    base: String,
    key: String,
    agent_id: String,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("base", &self.base)
            .field("agent_id", &self.agent_id)
            .finish_non_exhaustive()
    }
}

/// `X-RateLimit-Remaining` (spec §8): what is left of the key's window.
fn rate_remaining(resp: &reqwest::Response) -> Option<u64> {
    resp.headers()
        .get("x-ratelimit-remaining")?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

async fn refused(resp: reqwest::Response) -> ControlError {
    let status = resp.status().as_u16();
    let code = resp
        .json::<Value>()
        .await
        .ok()
        .and_then(|v| v.get("code").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned());
    ControlError::Refused { status, code }
}

impl ControlPlane {
    pub fn new(base: &str, key: &str, agent_id: &str) -> ControlPlane {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .build()
            .unwrap_or_default();
        ControlPlane {
            http,
            base: base.to_owned(),
            key: key.to_owned(),
            agent_id: agent_id.to_owned(),
        }
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
    }

    /// `GET /rules/bundle?agent_id=…`, conditional on `etag`.
    pub async fn bundle(&self, etag: Option<&str>) -> Result<BundlePull, ControlError> {
        let mut req = self
            .get("/rules/bundle")
            .query(&[("agent_id", &self.agent_id)])
            .timeout(Duration::from_secs(10));
        if let Some(tag) = etag {
            req = req.header(reqwest::header::IF_NONE_MATCH, tag);
        }
        let resp = req.send().await?;
        match resp.status().as_u16() {
            304 => Ok(BundlePull::NotModified),
            200 => {
                let etag = resp
                    .headers()
                    .get(reqwest::header::ETAG)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                Ok(BundlePull::Fresh {
                    etag,
                    body: resp.bytes().await?,
                })
            }
            _ => Err(refused(resp).await),
        }
    }

    /// Opens `GET /allow/agents/me/stream`; the caller reads its events.
    pub async fn mode_stream(&self) -> Result<reqwest::Response, ControlError> {
        let resp = self
            .get("/allow/agents/me/stream")
            .query(&[("agent_id", &self.agent_id)])
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await?;
        if resp.status().is_success() {
            Ok(resp)
        } else {
            Err(refused(resp).await)
        }
    }

    /// `POST /allow/telemetry` with one batch (1-100 items).
    /// `items` serializes as the array of items. What is left of the key's
    /// rate budget, when the answer says.
    pub async fn telemetry(&self, items: &impl Serialize) -> Result<Option<u64>, ControlError> {
        /// The body, serialized straight from the items (no `Value` tree).
        #[derive(Serialize)]
        struct Batch<'a, T: Serialize> {
            decisions: &'a T,
        }
        let resp = self
            .post("/allow/telemetry")
            .timeout(Duration::from_secs(10))
            .json(&Batch { decisions: items })
            .send()
            .await?;
        if resp.status().is_success() {
            Ok(rate_remaining(&resp))
        } else {
            Err(refused(resp).await)
        }
    }

    /// `POST /allow/execution-events`. A second report (409) counts as done.
    /// What is left of the key's rate budget, when the answer says.
    pub async fn execution(&self, event: &ExecutionEvent) -> Result<Option<u64>, ControlError> {
        let resp = self
            .post("/allow/execution-events")
            .timeout(Duration::from_secs(10))
            .json(event)
            .send()
            .await?;
        match resp.status().as_u16() {
            200 | 409 => Ok(rate_remaining(&resp)),
            _ => Err(refused(resp).await),
        }
    }

    /// `POST /allow/evaluate`: the server decides again and, for an
    /// enforced `approval_required`, opens the approval item.
    pub async fn evaluate(
        &self,
        target_app: &str,
        action: &str,
        context: &Value,
    ) -> Result<RemoteDecision, ControlError> {
        let resp = self
            .post("/allow/evaluate")
            .timeout(Duration::from_secs(10))
            .json(&serde_json::json!({
                "agent_id": self.agent_id,
                "target_app": target_app,
                "action": action,
                "context": context,
            }))
            .send()
            .await?;
        if resp.status().is_success() {
            Ok(resp.json().await?)
        } else {
            Err(refused(resp).await)
        }
    }

    /// `GET /v1/allow/decisions/:id`: `hitl_result` once a human (or the
    /// window) resolved it.
    pub async fn hitl_result(&self, id: uuid::Uuid) -> Result<Option<String>, ControlError> {
        let resp = self
            .get(&format!("/v1/allow/decisions/{id}"))
            .timeout(Duration::from_secs(10))
            .send()
            .await?;
        if !resp.status().is_success() {
            return Err(refused(resp).await);
        }
        let record: Value = resp.json().await?;
        Ok(record
            .get("hitl_result")
            .and_then(Value::as_str)
            .map(str::to_owned))
    }
}
