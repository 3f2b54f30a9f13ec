//! Telemetry items a client reports through `POST /allow/telemetry` (spec 4.2).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::vocab::{AgentMode, Decision};

/// Whether a decision was made from the cached bundle or by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvaluationMode {
    /// Decided locally against the cached bundle.
    Local,
    /// Decided by the control plane.
    Remote,
}

/// Largest serialized `context` a telemetry item may carry (spec §8).
pub const TELEMETRY_CONTEXT_MAX_BYTES: usize = 32 * 1024;
/// Most items one telemetry batch may carry (spec §8).
pub const TELEMETRY_BATCH_MAX: usize = 100;

/// One locally made decision (spec 4.2). Items without `rule_id` are uncovered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetryItem {
    /// Client-generated id.
    pub decision_id: Uuid,
    /// The deciding agent.
    pub agent_id: String,
    /// Target application.
    pub target_app: String,
    /// Action name.
    pub action: String,
    /// The action decision (`permit`, `deny`, `approval_required`, `mask`).
    pub decision: Decision,
    /// Why.
    pub reason: String,
    /// When the client decided.
    pub evaluated_at: DateTime<Utc>,
    /// The matched rule, absent when a no-coverage default decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<Uuid>,
    /// `R-####` or a synthetic `D-…` code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_code: Option<String>,
    /// False for observations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforced: Option<bool>,
    /// Mode the decision was made in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_mode: Option<AgentMode>,
    /// The raw intercepted event, opaque.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_event: Option<serde_json::Value>,
    /// Local or remote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation_mode: Option<EvaluationMode>,
    /// Decision latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    /// The action's arguments, at most 32 KB serialized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<serde_json::Value>,
}
