//! The closed vocabularies of the spec: facets, decisions, reason codes, modes.
//!
//! Every value that travels on the wire as a string is an enum here, with the
//! spec's exact spelling as its serde name, so that no decision is ever compared
//! as a string inside the code.

use std::fmt;

use serde::{Deserialize, Serialize};

/// An operation facet a rule can apply to (spec §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Facet {
    /// Writes and tool calls.
    Action,
    /// Retrieved documents, tool results, rendered prompts.
    Retrieval,
    /// Authority transfer between agents (`orchestrate.delegate`).
    Delegation,
}

impl Facet {
    /// All facets in canonical order (the order `applies_to` is stored in).
    pub const ALL: [Facet; 3] = [Facet::Action, Facet::Retrieval, Facet::Delegation];

    /// The spec's name of the facet.
    pub const fn as_str(self) -> &'static str {
        match self {
            Facet::Action => "action",
            Facet::Retrieval => "retrieval",
            Facet::Delegation => "delegation",
        }
    }

    /// Parses the spec's name of a facet.
    pub fn parse(s: &str) -> Option<Facet> {
        Facet::ALL.into_iter().find(|f| f.as_str() == s)
    }

    /// The decisions a rule of this facet may produce (DESIGN §3).
    pub const fn vocabulary(self) -> &'static [Decision] {
        match self {
            Facet::Action => &[
                Decision::Permit,
                Decision::Deny,
                Decision::ApprovalRequired,
                Decision::Mask,
            ],
            Facet::Retrieval => &[
                Decision::Allow,
                Decision::Deny,
                Decision::Redact,
                Decision::Escalate,
            ],
            Facet::Delegation => &[Decision::Permit, Decision::Deny],
        }
    }

    /// Whether `decision` belongs to this facet's vocabulary.
    pub fn allows(self, decision: Decision) -> bool {
        self.vocabulary().contains(&decision)
    }
}

impl fmt::Display for Facet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every decision word of every facet. Which words a facet may use is
/// [`Facet::vocabulary`]; the unified union treats `allow` as `permit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Action or delegation proceeds unchanged.
    Permit,
    /// Retrieval passes content unchanged.
    Allow,
    /// Blocked (action) or suppressed (retrieval).
    Deny,
    /// Action pauses for a human.
    ApprovalRequired,
    /// Action proceeds with named arguments redacted.
    Mask,
    /// Retrieval proceeds with fields or patterns masked.
    Redact,
    /// Retrieval is recorded for review and passes (masked if the rule says so).
    Escalate,
}

impl Decision {
    /// All decision words.
    pub const ALL: [Decision; 7] = [
        Decision::Permit,
        Decision::Allow,
        Decision::Deny,
        Decision::ApprovalRequired,
        Decision::Mask,
        Decision::Redact,
        Decision::Escalate,
    ];

    /// The spec's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Decision::Permit => "permit",
            Decision::Allow => "allow",
            Decision::Deny => "deny",
            Decision::ApprovalRequired => "approval_required",
            Decision::Mask => "mask",
            Decision::Redact => "redact",
            Decision::Escalate => "escalate",
        }
    }

    /// Parses the spec's spelling.
    pub fn parse(s: &str) -> Option<Decision> {
        Decision::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// The decision in the unified vocabulary of `POST /evaluate` (`allow` is `permit`).
    pub const fn to_union(self) -> Decision {
        match self {
            Decision::Allow => Decision::Permit,
            other => other,
        }
    }

    /// How restrictive the decision is in the union: `deny` > `approval_required` >
    /// `escalate` > `mask` > `redact` > `permit` (DESIGN §4). Higher is stricter.
    pub const fn restrictiveness(self) -> u8 {
        match self.to_union() {
            Decision::Deny => 5,
            Decision::ApprovalRequired => 4,
            Decision::Escalate => 3,
            Decision::Mask => 2,
            Decision::Redact => 1,
            _ => 0,
        }
    }

    /// Whether the call proceeds to its target without a change or a wait.
    pub const fn is_pass(self) -> bool {
        matches!(self, Decision::Permit | Decision::Allow)
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Retrieval reason codes (spec §4.3). Action decisions carry the same codes for
/// matched rules; no-coverage action defaults carry a synthetic rule code instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReasonCode {
    /// A matched rule allowed.
    PolicyAllow,
    /// A matched rule gave deny, redact or escalate.
    PolicyDeny,
    /// The agent's trust tier is below the rule's minimum.
    TierMismatch,
    /// The agent is listed in the rule's `principal_exclusions`.
    PrincipalExcluded,
    /// The rule is scoped to another delivery surface.
    SurfaceRestriction,
    /// Reserved by the spec; never emitted.
    AudienceExpansion,
    /// No rule matched; retrieval fails closed.
    DefaultDeny,
    /// An active emergency bypass on the reached rule allowed.
    EmergencyBypass,
    /// Monitor mode: the real outcome is only recorded.
    MonitorMode,
}

impl ReasonCode {
    /// The spec's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReasonCode::PolicyAllow => "POLICY_ALLOW",
            ReasonCode::PolicyDeny => "POLICY_DENY",
            ReasonCode::TierMismatch => "TIER_MISMATCH",
            ReasonCode::PrincipalExcluded => "PRINCIPAL_EXCLUDED",
            ReasonCode::SurfaceRestriction => "SURFACE_RESTRICTION",
            ReasonCode::AudienceExpansion => "AUDIENCE_EXPANSION",
            ReasonCode::DefaultDeny => "DEFAULT_DENY",
            ReasonCode::EmergencyBypass => "EMERGENCY_BYPASS",
            ReasonCode::MonitorMode => "MONITOR_MODE",
        }
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An agent's governance mode (spec §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentMode {
    /// Decisions are enforced.
    Enforce,
    /// Decisions are evaluated and recorded, never enforced.
    Monitor,
    /// Evaluation is skipped entirely: no enforcement, no telemetry.
    Off,
}

impl AgentMode {
    /// The spec's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            AgentMode::Enforce => "enforce",
            AgentMode::Monitor => "monitor",
            AgentMode::Off => "off",
        }
    }
}

impl fmt::Display for AgentMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happens to a held call when no human answers in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HitlFallback {
    /// Block the call (the default, and the meaning of an absent fallback).
    #[default]
    Deny,
    /// Let the call proceed with the rule's redactions applied.
    Mask,
}

/// The kind of retrieval being governed (spec §4.3 `operation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetrievalOperation {
    /// A document or resource read.
    #[default]
    Retrieve,
    /// The result of a tool call.
    ToolCall,
    /// A rendered prompt.
    PromptRender,
}

impl RetrievalOperation {
    /// The spec's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            RetrievalOperation::Retrieve => "retrieve",
            RetrievalOperation::ToolCall => "tool_call",
            RetrievalOperation::PromptRender => "prompt_render",
        }
    }
}

/// The class of an action, derived from the verb in its name (DESIGN §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionClass {
    /// Reads: `get`, `list`, `search`, …
    Read,
    /// Writes, and every verb not recognised.
    Write,
    /// Deletions: `delete`, `remove`, `drop`, …
    Delete,
    /// Administrative verbs: `grant`, `revoke`, `sudo`, …
    Admin,
}

impl ActionClass {
    /// The spec's spelling (the `no_coverage_defaults` key).
    pub const fn as_str(self) -> &'static str {
        match self {
            ActionClass::Read => "read",
            ActionClass::Write => "write",
            ActionClass::Delete => "delete",
            ActionClass::Admin => "admin",
        }
    }
}

/// A trust tier: `tier1` is the highest trust, larger numbers are lower trust.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TrustTier(u16);

impl TrustTier {
    /// Parses `tierN` with N ≥ 1. Anything else is not a tier this engine knows.
    pub fn parse(s: &str) -> Option<TrustTier> {
        let n: u16 = s.strip_prefix("tier")?.parse().ok()?;
        (n >= 1 && !s[4..].starts_with('+') && !s[4..].starts_with('0')).then_some(TrustTier(n))
    }

    /// Whether an agent of this tier meets a rule's minimum tier.
    pub const fn meets(self, required: TrustTier) -> bool {
        self.0 <= required.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_tiers_order_with_tier1_highest() {
        let t1 = TrustTier::parse("tier1").unwrap();
        let t3 = TrustTier::parse("tier3").unwrap();
        assert!(t1.meets(t3));
        assert!(!t3.meets(t1));
        assert!(t3.meets(t3));
        for bad in ["tier0", "tier", "Tier1", "tier+1", "tier01", "gold"] {
            assert_eq!(TrustTier::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn union_order_is_the_designs() {
        let mut all = Decision::ALL.to_vec();
        all.sort_by_key(|d| std::cmp::Reverse(d.restrictiveness()));
        assert_eq!(all[0], Decision::Deny);
        assert_eq!(
            Decision::Allow.restrictiveness(),
            Decision::Permit.restrictiveness()
        );
        assert!(Decision::Escalate.restrictiveness() > Decision::Mask.restrictiveness());
        assert!(Decision::Mask.restrictiveness() > Decision::Redact.restrictiveness());
    }

    #[test]
    fn vocabularies_are_the_specs() {
        assert!(Facet::Action.allows(Decision::Mask));
        assert!(!Facet::Action.allows(Decision::Allow));
        assert!(Facet::Retrieval.allows(Decision::Escalate));
        assert!(!Facet::Retrieval.allows(Decision::Permit));
        assert!(!Facet::Delegation.allows(Decision::Mask));
    }
}
