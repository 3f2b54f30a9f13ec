//! What the governance API persists about each decision: action and
//! retrieval decisions (masked at rest), approval queue items, and the
//! audit-log filters that read them back.

use chrono::{DateTime, Utc};
use tokio::sync::oneshot;
use uuid::Uuid;
use warden_engine::model::{AgentMode, Decision, ReasonCode};

use super::{OrgId, StoreError, StoreResult};

/// An action (or delegation) decision as persisted (spec 2.5). `context`
/// is already masked: the raw original is never stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionDecision {
    pub id: Uuid,
    pub org: OrgId,
    pub agent_id: String,
    pub target_app: String,
    pub action: String,
    pub context: serde_json::Value,
    pub decision: Decision,
    pub would_decide: Option<Decision>,
    pub reason: String,
    pub reason_code: Option<ReasonCode>,
    pub rule_id: Option<Uuid>,
    pub rule_code: Option<String>,
    pub enforced: bool,
    pub agent_mode: AgentMode,
    pub floor_detectors: Vec<String>,
    /// `server` (decided here) or `telemetry` (reported by a sidecar).
    pub source: String,
    pub hitl_result: Option<String>,
    pub hitl_responded_at: Option<DateTime<Utc>>,
    pub hitl_responded_by: Option<String>,
    pub execution_result: Option<String>,
    pub execution_completed_at: Option<DateTime<Utc>>,
    pub execution_details: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A retrieval decision as persisted (spec 2.6), with `resource_metadata`
/// and `query` masked at rest.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrievalDecision {
    pub id: Uuid,
    pub org: OrgId,
    pub agent_id: String,
    pub operation: String,
    pub resource_type: String,
    pub resource_metadata: serde_json::Value,
    pub query: Option<String>,
    pub surface: Option<String>,
    pub trust_tier: Option<String>,
    pub decision: Decision,
    pub would_decide: Option<Decision>,
    pub reason: String,
    pub reason_code: ReasonCode,
    pub rule_id: Option<Uuid>,
    pub enforced: bool,
    pub agent_mode: AgentMode,
    pub floor_detectors: Vec<String>,
    pub created_at: DateTime<Utc>,
}

/// A human-in-the-loop queue item (spec 2.8).
#[derive(Debug, Clone, PartialEq)]
pub struct HitlItem {
    pub id: Uuid,
    pub org: OrgId,
    pub decision_id: Option<Uuid>,
    pub agent_id: String,
    pub target_app: String,
    pub action: String,
    /// Masked like the decision's.
    pub context: serde_json::Value,
    /// `enduser` (a live approval gate) or `engineer` (a coverage gap).
    pub category: String,
    /// `pending`, `approved`, `rejected`, `timeout`, `dismissed`, `linked`.
    pub status: String,
    pub ai_recommended_rule: Option<String>,
    pub notified_via: Vec<String>,
    /// A dismissal note or the linked rule's id.
    pub resolution: Option<String>,
    /// Engineer items: one per agent + app + action.
    pub dedupe_key: Option<String>,
    pub expires_at: Option<DateTime<Utc>>,
    pub responded_at: Option<DateTime<Utc>>,
    pub responded_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// Decisions committed together: the decision sink's group commit. A gate
/// in `gates` belongs to one of `actions`; the batch is stored whole or not
/// at all, so a gate never exists without its decision, nor a gated
/// decision without its gate.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DecisionBatch {
    pub actions: Vec<ActionDecision>,
    pub gates: Vec<HitlItem>,
    pub retrievals: Vec<RetrievalDecision>,
}

/// A committed batch's way to stable storage. A backend whose commit is
/// flushed before it returns (PostgreSQL with `synchronous_commit` on) gives
/// [`Flush::done`]. SQLite's decision writer commits without waiting for the
/// disk and flushes its log on another thread, so that the next batch
/// commits while this one's flush runs; its flush resolves once the log is
/// on stable storage. Until then the batch is committed (readers may see
/// it) but not durable, and nobody may be told it is stored.
#[derive(Debug)]
#[must_use = "a commit is durable only once its flush resolves"]
pub struct Flush(Option<oneshot::Receiver<StoreResult<()>>>);

impl Flush {
    /// The commit is already on stable storage.
    pub fn done() -> Flush {
        Flush(None)
    }

    /// The commit is durable when `flushed` answers `Ok`.
    pub(super) fn pending(flushed: oneshot::Receiver<StoreResult<()>>) -> Flush {
        Flush(Some(flushed))
    }

    /// Whether the commit is already on stable storage.
    pub fn is_done(&self) -> bool {
        self.0.is_none()
    }

    /// Waits until the commit is on stable storage.
    pub async fn wait(self) -> StoreResult<()> {
        match self.0 {
            None => Ok(()),
            Some(flushed) => flushed
                .await
                .map_err(|_| StoreError::Writer("the log flusher stopped".into()))?,
        }
    }
}

/// Filters of the audit-log reads (spec 4.2, 4.3); `None` matches all.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditFilter {
    pub agent_id: Option<String>,
    /// Action log only.
    pub target_app: Option<String>,
    pub decision: Option<String>,
    /// Action log only.
    pub hitl_result: Option<String>,
    /// Retrieval log only.
    pub operation: Option<String>,
    /// Retrieval log only.
    pub reason_code: Option<String>,
    pub start: Option<DateTime<Utc>>,
    pub end: Option<DateTime<Utc>>,
}
