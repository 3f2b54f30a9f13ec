//! A rule compiled for the cascade: its policy plus its pre-filters.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::dialect::{CompileError, Policy, Strategy};
use crate::glob::ActionGlob;
use crate::model::{BundleRule, Bypass, Decision, Facet, TrustTier};

/// A rule's minimum trust tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TierRequirement {
    Tier(TrustTier),
    /// A tier name this engine does not know: no agent can be shown to meet
    /// it, so the rule denies (must-understand).
    Unknown,
}

/// A rule ready to run: compiled once, shared by every policy set that holds it.
#[derive(Debug)]
pub struct CompiledRule {
    /// Rule id.
    pub id: Uuid,
    /// `R-####`.
    pub rule_code: String,
    /// Rule name.
    pub name: String,
    /// Facets the rule runs for.
    pub applies_to: Vec<Facet>,
    /// Higher runs first.
    pub priority: i64,
    /// Priority tie-break.
    pub created_at: DateTime<Utc>,
    pub(crate) target_app: Option<String>,
    pub(crate) action_pattern: Option<ActionGlob>,
    pub(crate) trust_tier: Option<TierRequirement>,
    pub(crate) surface: Option<String>,
    pub(crate) principal_exclusions: Vec<String>,
    pub(crate) bypass: Bypass,
    pub(crate) policy: Policy,
}

impl CompiledRule {
    /// Compiles a bundle rule.
    pub fn compile(rule: &BundleRule) -> Result<CompiledRule, CompileError> {
        CompiledRule::compile_with(rule, Strategy::PreferNative)
    }

    /// Compiles a bundle rule with a chosen strategy.
    pub fn compile_with(
        rule: &BundleRule,
        strategy: Strategy,
    ) -> Result<CompiledRule, CompileError> {
        let policy = Policy::compile_with(&rule.rego_source, &rule.applies_to, strategy)?;
        Ok(CompiledRule {
            id: rule.id,
            rule_code: rule.rule_code.clone(),
            name: rule.name.clone(),
            applies_to: rule.applies_to.clone(),
            priority: rule.priority,
            created_at: rule.created_at,
            target_app: rule.target_app.clone(),
            action_pattern: rule.action_pattern.as_deref().map(ActionGlob::new),
            trust_tier: rule.trust_tier.as_deref().map(|t| {
                TrustTier::parse(t).map_or(TierRequirement::Unknown, TierRequirement::Tier)
            }),
            surface: rule.surface.clone(),
            principal_exclusions: rule.principal_exclusions.clone().unwrap_or_default(),
            bypass: rule.bypass.clone(),
            policy,
        })
    }

    /// The rule's derived effect.
    pub fn effect(&self) -> Decision {
        self.policy.effect()
    }

    /// Whether the rule's policy runs natively.
    pub fn is_native(&self) -> bool {
        self.policy.is_native()
    }

    /// What the rule's policy runs on.
    pub fn runtime(&self) -> crate::Runtime {
        self.policy.runtime()
    }

    pub(crate) fn applies(&self, facet: Facet) -> bool {
        self.applies_to.contains(&facet)
    }

    /// The action-facet pre-filters (DESIGN §4): skip without evaluating.
    pub(crate) fn passes_prefilters(&self, target_app: &str, action: &str) -> bool {
        self.target_app.as_deref().is_none_or(|t| t == target_app)
            && self
                .action_pattern
                .as_ref()
                .is_none_or(|g| g.matches(action))
    }
}

/// The cascade order: priority descending, then `created_at` ascending, then id.
pub(crate) fn cascade_order(a: &CompiledRule, b: &CompiledRule) -> std::cmp::Ordering {
    b.priority
        .cmp(&a.priority)
        .then(a.created_at.cmp(&b.created_at))
        .then(a.id.cmp(&b.id))
}
