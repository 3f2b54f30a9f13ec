//! Agent attributes, modes and no-coverage settings (spec 2.2, 2.9).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::vocab::{ActionClass, AgentMode, Facet};

/// Business functions an agent can be classified under (spec 2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum BusinessFunction {
    FinanceAccounting,
    Hr,
    Engineering,
    ItSecurity,
    Legal,
    PrivacyCompliance,
    Sales,
    Marketing,
    Operations,
    CustomerSupport,
    Procurement,
    Generic,
}

/// A per-agent override of the no-coverage defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentNoCoverage {
    /// Every uncovered action is permitted.
    Open,
    /// Every uncovered action is denied.
    Closed,
}

/// Per-operation mode overrides (`mode_by_operation`).
pub type ModeByOperation = BTreeMap<Facet, AgentMode>;

/// Resolves an operation's mode: its override, else the agent's mode, else the
/// organization's `default_agent_mode` (spec 2.2).
pub fn resolve_mode(
    facet: Facet,
    by_operation: &ModeByOperation,
    agent_mode: Option<AgentMode>,
    org_default: AgentMode,
) -> AgentMode {
    by_operation
        .get(&facet)
        .copied()
        .or(agent_mode)
        .unwrap_or(org_default)
}

/// The agent attributes rules see as `input.agent` and the bundle carries as
/// `agent_attributes` (spec 2.12).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentAttributes {
    /// Assigned trust tier; overrides a tier the request claims.
    #[serde(default)]
    pub trust_tier: Option<String>,
    /// Free-form categories.
    #[serde(default)]
    pub categories: Vec<String>,
    /// Every business function the agent serves.
    #[serde(default)]
    pub business_functions: Vec<String>,
    /// The primary business function.
    #[serde(default)]
    pub business_function: Option<BusinessFunction>,
    /// Blast-radius tier.
    #[serde(default)]
    pub blast_radius_tier: Option<String>,
    /// Per-agent no-coverage override.
    #[serde(default)]
    pub no_coverage: Option<AgentNoCoverage>,
}

/// What an uncovered action of one class resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoCoverageValue {
    /// Permit (the earlier form's `approve` means the same).
    #[serde(alias = "approve")]
    Allow,
    /// Deny.
    Deny,
    /// Hold for a human (`approval_required` without a fallback: deny on timeout).
    Ask,
}

impl NoCoverageValue {
    /// The spec's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            NoCoverageValue::Allow => "allow",
            NoCoverageValue::Deny => "deny",
            NoCoverageValue::Ask => "ask",
        }
    }
}

/// `no_coverage_defaults` (spec 2.9): the outcome of an uncovered action by class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoCoverageDefaults {
    /// Uncovered reads.
    pub read: NoCoverageValue,
    /// Uncovered writes (and unrecognised verbs).
    pub write: NoCoverageValue,
    /// Uncovered deletions.
    pub delete: NoCoverageValue,
    /// Uncovered administrative actions.
    pub admin: NoCoverageValue,
}

impl Default for NoCoverageDefaults {
    /// DESIGN §4: read allow, write allow, delete ask, admin deny.
    fn default() -> Self {
        NoCoverageDefaults {
            read: NoCoverageValue::Allow,
            write: NoCoverageValue::Allow,
            delete: NoCoverageValue::Ask,
            admin: NoCoverageValue::Deny,
        }
    }
}

impl NoCoverageDefaults {
    /// Every class denied: the terminal bundle's defaults.
    pub const ALL_DENY: NoCoverageDefaults = NoCoverageDefaults {
        read: NoCoverageValue::Deny,
        write: NoCoverageValue::Deny,
        delete: NoCoverageValue::Deny,
        admin: NoCoverageValue::Deny,
    };

    /// The entry for one action class.
    pub const fn for_class(&self, class: ActionClass) -> NoCoverageValue {
        match class {
            ActionClass::Read => self.read,
            ActionClass::Write => self.write,
            ActionClass::Delete => self.delete,
            ActionClass::Admin => self.admin,
        }
    }
}

/// The bundle's `no_coverage` object (spec 2.12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoCoverageSettings {
    /// Outcome of uncovered actions by class.
    pub no_coverage_defaults: NoCoverageDefaults,
    /// Whether AI drafts rules for uncovered scenarios.
    pub autopilot_enabled: bool,
    /// Whether end-user approval gates are enabled.
    pub enduser_hitl_enabled: bool,
    /// Approval window, 30–120 seconds.
    pub hitl_timeout_seconds: u32,
}

impl Default for NoCoverageSettings {
    fn default() -> Self {
        NoCoverageSettings {
            no_coverage_defaults: NoCoverageDefaults::default(),
            autopilot_enabled: false,
            enduser_hitl_enabled: true,
            hitl_timeout_seconds: 120,
        }
    }
}
