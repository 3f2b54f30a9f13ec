//! Rules (spec 2.3) and redaction directives (spec 2.4).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::vocab::{Decision, Facet};

/// A rule as the API shows it (spec 2.3). `rego_source` is omitted from lists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    /// Row id.
    pub id: Uuid,
    /// `R-0001`-style code, unique per organization.
    pub rule_code: String,
    /// Unique per organization, at most 255 characters.
    pub name: String,
    /// At most 1000 characters.
    #[serde(default)]
    pub description: Option<String>,
    /// The plain-English intent, at most 2000 characters.
    #[serde(default)]
    pub natural_language: Option<String>,
    /// The policy source; omitted from list responses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rego_source: Option<String>,
    /// Derived from the `decision` literals of the policy.
    pub effect: Decision,
    /// Higher runs first; first match wins.
    pub priority: i64,
    /// Disabled rules never run.
    pub enabled: bool,
    /// Facets the rule runs for, deduplicated, in canonical order.
    pub applies_to: Vec<Facet>,
    /// Action facet: exact `target_app` pre-filter.
    #[serde(default)]
    pub target_app: Option<String>,
    /// Action facet: glob (`*`, `?`) pre-filter on the action name.
    #[serde(default)]
    pub action_pattern: Option<String>,
    /// Retrieval facet: minimum trust tier.
    #[serde(default)]
    pub trust_tier: Option<String>,
    /// Retrieval facet: exact-match delivery surface.
    #[serde(default)]
    pub surface: Option<String>,
    /// Agent ids the rule denies with `PRINCIPAL_EXCLUDED`.
    #[serde(default)]
    pub principal_exclusions: Option<Vec<String>>,
    /// Emergency bypass state (retrieval rules).
    #[serde(flatten)]
    pub bypass: Bypass,
    /// Creation time; the priority tie-break.
    pub created_at: DateTime<Utc>,
    /// Last update time.
    pub updated_at: DateTime<Utc>,
}

/// Emergency bypass state of a retrieval rule (spec 3.6).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Bypass {
    /// Whether an operator switched the bypass on.
    #[serde(default)]
    pub bypass_active: bool,
    /// Why.
    #[serde(default)]
    pub bypass_reason: Option<String>,
    /// Who switched it on.
    #[serde(default)]
    pub bypass_activated_by: Option<String>,
    /// When.
    #[serde(default)]
    pub bypass_activated_at: Option<DateTime<Utc>>,
    /// When it lapses by itself; checked at evaluation time.
    #[serde(default)]
    pub bypass_expires_at: Option<DateTime<Utc>>,
}

impl Bypass {
    /// Whether the bypass is in force at `now`: switched on and not yet expired.
    pub fn is_in_force(&self, now: DateTime<Utc>) -> bool {
        self.bypass_active && self.bypass_expires_at.is_none_or(|at| now < at)
    }
}

/// How a directive masks what it matched (spec 2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskMode {
    /// The whole match is replaced.
    #[default]
    Full,
    /// `keepFirst` and `keepLast` characters are kept, the middle masked.
    Partial,
    /// The first character of the local part and the domain are kept.
    Email,
    /// Every `keepPattern` match is kept, everything else masked.
    Custom,
}

/// A redaction directive (spec 2.4): which values to mask and how. Every property
/// is optional; a directive with neither `field` nor `pattern` masks nothing and
/// is therefore not usable.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedactionDirective {
    /// Object key to mask, at any depth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Regular expression matched against string values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Replacement text for `full` mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    /// Masking mode; `full` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<MaskMode>,
    /// Characters kept at the start in `partial` mode.
    #[serde(default, rename = "keepFirst", skip_serializing_if = "Option::is_none")]
    pub keep_first: Option<u32>,
    /// Characters kept at the end in `partial` mode.
    #[serde(default, rename = "keepLast", skip_serializing_if = "Option::is_none")]
    pub keep_last: Option<u32>,
    /// The masking character; `*` when absent.
    #[serde(default, rename = "maskChar", skip_serializing_if = "Option::is_none")]
    pub mask_char: Option<String>,
    /// Pattern whose matches are kept in `custom` mode.
    #[serde(
        default,
        rename = "keepPattern",
        skip_serializing_if = "Option::is_none"
    )]
    pub keep_pattern: Option<String>,
}
