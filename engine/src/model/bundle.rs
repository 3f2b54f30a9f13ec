//! The three rule bundles (spec 2.12).
//!
//! Clients ignore unknown fields; an unknown value of a known field (a new
//! facet, decision or mode) fails deserialization, which a client treats as a
//! bundle it must not run (spec §9 must-understand).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::agent::{AgentAttributes, ModeByOperation, NoCoverageSettings};
use super::rule::Bypass;
use super::vocab::{AgentMode, Decision, Facet};

/// One rule as the unified bundle carries it: everything a client needs to run
/// the cascade locally. Bundles list only enabled rules, in cascade order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BundleRule {
    /// Rule id.
    pub id: Uuid,
    /// `R-####`.
    pub rule_code: String,
    /// Rule name.
    pub name: String,
    /// Description.
    #[serde(default)]
    pub description: Option<String>,
    /// Derived effect.
    pub effect: Decision,
    /// The policy source.
    pub rego_source: String,
    /// Facets the rule runs for.
    pub applies_to: Vec<Facet>,
    /// Higher runs first.
    pub priority: i64,
    /// Priority tie-break (earlier first).
    pub created_at: DateTime<Utc>,
    /// Action facet: exact `target_app` pre-filter.
    #[serde(default)]
    pub target_app: Option<String>,
    /// Action facet: glob pre-filter.
    #[serde(default)]
    pub action_pattern: Option<String>,
    /// Retrieval facet: minimum trust tier.
    #[serde(default)]
    pub trust_tier: Option<String>,
    /// Retrieval facet: delivery surface.
    #[serde(default)]
    pub surface: Option<String>,
    /// Agent ids excluded from the rule.
    #[serde(default)]
    pub principal_exclusions: Option<Vec<String>>,
    /// Emergency bypass state.
    #[serde(flatten)]
    pub bypass: Bypass,
}

/// `GET /rules/bundle` (spec 2.12). `agent_id` and `mode_by_operation` are
/// additions of this implementation, so that a client can check the bundle is
/// its own and honour per-operation modes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnifiedBundle {
    /// SHA-256 over the canonical serialization of everything else.
    pub version: String,
    /// The dialect this bundle is written in.
    pub dialect_version: u32,
    /// The oldest engine dialect that may run it.
    pub min_dialect: u32,
    /// The agent the bundle was built for.
    pub agent_id: String,
    /// The agent's resolved mode.
    pub agent_mode: AgentMode,
    /// Per-operation overrides of `agent_mode`.
    #[serde(default)]
    pub mode_by_operation: ModeByOperation,
    /// Whether cognition capture is on for the agent.
    pub cognition_capture: bool,
    /// The agent's attributes (`input.agent`).
    pub agent_attributes: AgentAttributes,
    /// Enabled rules in cascade order.
    pub rules: Vec<BundleRule>,
    /// No-coverage settings.
    pub no_coverage: NoCoverageSettings,
}

/// One rule of the action bundle (`GET /allow/rules/bundle`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionBundleRule {
    /// Rule id.
    pub id: Uuid,
    /// `R-####`.
    pub rule_code: String,
    /// Name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// Derived effect.
    pub effect: Decision,
    /// Policy source.
    pub rego_source: String,
    /// Resource type the rule governs (`action`).
    pub resource_type: String,
    /// `target_app` pre-filter.
    pub target_app: Option<String>,
    /// `action_pattern` pre-filter.
    pub action_pattern: Option<String>,
    /// Deprecated; always empty.
    pub conditions: Vec<serde_json::Value>,
    /// Priority.
    pub priority: i64,
}

/// `GET /allow/rules/bundle` (spec 2.12).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionBundle {
    /// SHA-256 version.
    pub version: String,
    /// The agent's resolved action mode.
    pub agent_mode: AgentMode,
    /// Action rules in cascade order.
    pub rules: Vec<ActionBundleRule>,
    /// No-coverage settings.
    pub no_coverage: NoCoverageSettings,
}

/// One rule of the retrieval bundle (`GET /recall/rules/bundle`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrievalBundleRule {
    /// Rule id.
    pub id: Uuid,
    /// Name.
    pub name: String,
    /// Policy source.
    pub rego_source: String,
    /// Minimum tier.
    pub trust_tier: Option<String>,
    /// Surface.
    pub surface: Option<String>,
    /// Excluded agents.
    pub principal_exclusions: Option<Vec<String>>,
    /// Priority.
    pub priority: i64,
}

/// `GET /recall/rules/bundle` (spec 2.12).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrievalBundle {
    /// SHA-256 version.
    pub version: String,
    /// Retrieval rules, priority descending.
    pub rules: Vec<RetrievalBundleRule>,
}
