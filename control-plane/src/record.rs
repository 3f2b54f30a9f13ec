//! The record seam: every governance decision passes through one
//! [`Recorder`] after it is stored. The audit-trail issue plugs the signed,
//! hash-chained record envelopes in here; until then the recorder writes a
//! structured log event per decision (ids and outcomes only, never payloads).

use crate::store::{ActionDecision, RetrievalDecision};

/// Receives every stored decision.
pub trait Recorder: Send + Sync + 'static {
    /// An action or delegation decision.
    fn action(&self, decision: &ActionDecision);
    /// A retrieval decision.
    fn retrieval(&self, decision: &RetrievalDecision);
}

/// The recorder in use until record envelopes exist: one log event per decision.
#[derive(Debug, Default)]
pub struct LogRecorder;

impl Recorder for LogRecorder {
    fn action(&self, d: &ActionDecision) {
        tracing::debug!(
            decision_id = %d.id,
            agent_id = %d.agent_id,
            decision = d.decision.as_str(),
            rule_code = d.rule_code.as_deref().unwrap_or(""),
            "action decision recorded"
        );
    }

    fn retrieval(&self, d: &RetrievalDecision) {
        tracing::debug!(
            decision_id = %d.id,
            agent_id = %d.agent_id,
            decision = d.decision.as_str(),
            reason_code = d.reason_code.as_str(),
            "retrieval decision recorded"
        );
    }
}
