//! What a decision says: the outcome, why, and what to apply.

use std::sync::Arc;

use uuid::Uuid;

use crate::model::{AgentMode, Decision, Facet, HitlFallback, ReasonCode};
use crate::redact::RedactionSet;

/// The rule that decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleHit {
    /// Rule id.
    pub id: Uuid,
    /// `R-####`.
    pub rule_code: String,
}

/// One facet's decision.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The facet decided.
    pub facet: Facet,
    /// What the caller must do. In monitor mode this is the pass decision
    /// (`permit`, retrieval `allow`) and the real outcome is in `would_decide`.
    pub decision: Decision,
    /// Monitor mode: what enforce mode would have decided.
    pub would_decide: Option<Decision>,
    /// False when observational (monitor, off).
    pub enforced: bool,
    /// The mode the facet ran in.
    pub agent_mode: AgentMode,
    /// Whether the engine evaluated at all (false in `off` mode: no telemetry).
    pub evaluated: bool,
    /// Human-readable reason.
    pub reason: String,
    /// The reason code (always set for retrieval; for actions on matched rules).
    pub reason_code: Option<ReasonCode>,
    /// The matched rule, if one decided.
    pub rule: Option<RuleHit>,
    /// `R-####` of the matched rule, or the synthetic no-coverage code.
    pub rule_code: Option<String>,
    /// Directives of a `mask`, `redact`, or `escalate` with mask fallback; kept
    /// in monitor mode too so persisted copies are masked as the rule says.
    pub redactions: Option<Arc<RedactionSet>>,
    /// Fallback of an `approval_required` raised by a rule, or of an `escalate`.
    pub hitl_fallback: Option<HitlFallback>,
}

impl Verdict {
    /// The outcome this verdict stands for, whatever the mode.
    pub fn outcome(&self) -> Decision {
        self.would_decide.unwrap_or(self.decision)
    }

    /// Whether no rule covered the event (the no-coverage default decided).
    pub fn is_uncovered(&self) -> bool {
        self.rule.is_none()
    }

    pub(crate) fn new(facet: Facet, decision: Decision, reason: impl Into<String>) -> Verdict {
        Verdict {
            facet,
            decision,
            would_decide: None,
            enforced: true,
            agent_mode: AgentMode::Enforce,
            evaluated: true,
            reason: reason.into(),
            reason_code: None,
            rule: None,
            rule_code: None,
            redactions: None,
            hitl_fallback: None,
        }
    }

    /// Applies the facet's mode to an enforce-mode verdict (DESIGN §4).
    pub(crate) fn in_mode(mut self, mode: AgentMode) -> Verdict {
        self.agent_mode = mode;
        match mode {
            AgentMode::Enforce => self,
            AgentMode::Monitor => {
                let pass = pass_word(self.facet);
                self.enforced = false;
                if self.decision != pass {
                    self.would_decide = Some(self.decision);
                    self.decision = pass;
                    if self.facet == Facet::Retrieval {
                        self.reason_code = Some(ReasonCode::MonitorMode);
                        self.reason = format!("Monitor: {}", self.reason);
                    }
                }
                self
            }
            AgentMode::Off => {
                let mut v = Verdict::new(
                    self.facet,
                    pass_word(self.facet),
                    "agent mode is off: not evaluated",
                );
                v.agent_mode = AgentMode::Off;
                v.enforced = false;
                v.evaluated = false;
                v
            }
        }
    }
}

/// The word for "proceed unchanged" in a facet's vocabulary.
pub(crate) const fn pass_word(facet: Facet) -> Decision {
    match facet {
        Facet::Retrieval => Decision::Allow,
        Facet::Action | Facet::Delegation => Decision::Permit,
    }
}

/// The result of a unified `POST /evaluate` (spec 4.1).
#[derive(Debug, Clone)]
pub struct UnifiedVerdict {
    /// The most restrictive facet outcome, in the union vocabulary.
    pub decision: Decision,
    /// Index into `results` of the facet that set `decision`.
    pub deciding: usize,
    /// One verdict per requested facet, in request order.
    pub results: Vec<Verdict>,
}

impl UnifiedVerdict {
    /// Combines facet verdicts: the most restrictive wins, the first on ties.
    pub fn combine(results: Vec<Verdict>) -> UnifiedVerdict {
        let mut deciding = 0;
        for (i, v) in results.iter().enumerate() {
            if v.decision.restrictiveness() > results[deciding].decision.restrictiveness() {
                deciding = i;
            }
        }
        let decision = results
            .get(deciding)
            .map_or(Decision::Deny, |v| v.decision.to_union());
        UnifiedVerdict {
            decision,
            deciding,
            results,
        }
    }

    /// The verdict that decided.
    pub fn deciding_verdict(&self) -> Option<&Verdict> {
        self.results.get(self.deciding)
    }
}
