//! Builders shared by the test modules.

use chrono::{DateTime, TimeZone, Utc};
use uuid::Uuid;
use warden_engine::AgentContext;
use warden_engine::model::{
    AgentAttributes, AgentMode, BundleRule, Bypass, Decision, Facet, ModeByOperation,
};

/// The creation time of fixture rules; offsets from it order ties.
pub(crate) fn epoch() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

/// A bundle rule with priority 0, created at [`epoch`], and no pre-filters,
/// tier, surface, exclusions or bypass; override fields with struct update.
pub(crate) fn bundle_rule(id: u128, code: &str, applies_to: Vec<Facet>, rego: &str) -> BundleRule {
    BundleRule {
        id: Uuid::from_u128(id),
        rule_code: code.to_owned(),
        name: format!("rule {code}"),
        description: None,
        effect: Decision::Deny,
        rego_source: rego.to_owned(),
        applies_to,
        priority: 0,
        created_at: epoch(),
        target_app: None,
        action_pattern: None,
        trust_tier: None,
        surface: None,
        principal_exclusions: None,
        bypass: Bypass::default(),
    }
}

/// `agent-1` in enforce mode with the given attributes.
pub(crate) fn agent(attributes: AgentAttributes) -> AgentContext {
    AgentContext {
        agent_id: "agent-1".into(),
        mode: AgentMode::Enforce,
        mode_by_operation: ModeByOperation::new(),
        attributes,
    }
}
