//! The one rules collection behind `/rules`, `/allow/rules` and
//! `/recall/rules` (spec 2.3, 4.1–4.3): validation, compilation by the
//! engine, and the emergency bypass (3.6).

use chrono::{DateTime, TimeDelta, Utc};
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;
use warden_engine::Policy;
use warden_engine::model::{Bypass, Facet, Rule, TrustTier};

use crate::error::ApiError;
use crate::extract::{DetailsShape, Issue, Issues};
use crate::store::{AuditEntry, OrgId, RuleId, Store, StoreError};

/// The surface a rule request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// `/rules`: `operations` required on create.
    Unified,
    /// `/allow/rules`: action rules.
    Action,
    /// `/recall/rules`: retrieval rules.
    Retrieval,
}

impl Surface {
    /// The facets a rule created here applies to when the body names none.
    fn implied(self) -> Option<Facet> {
        match self {
            Surface::Unified => None,
            Surface::Action => Some(Facet::Action),
            Surface::Retrieval => Some(Facet::Retrieval),
        }
    }

    /// `trust_tier` and `surface` length limits (spec §8).
    fn limits(self) -> (usize, usize) {
        match self {
            Surface::Retrieval => (50, 100),
            _ => (64, 128),
        }
    }
}

/// The body of `POST` and `PUT` on every rule surface. On `POST` the
/// required fields are checked by [`create`]; on `PUT` everything is
/// optional, at least one field required, and `null` clears a nullable field.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleBody {
    /// `/rules` only: 1-3 of `action`, `retrieval`, `delegation`.
    #[serde(default)]
    pub operations: Option<Vec<String>>,
    /// 1-255 characters, unique in the organization.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "crate::extract::nullable")]
    #[schema(value_type = Option<String>)]
    pub description: Option<Option<String>>,
    /// 1-100,000 characters of the rule dialect.
    #[serde(default)]
    pub rego_source: Option<String>,
    #[serde(default, deserialize_with = "crate::extract::nullable")]
    #[schema(value_type = Option<String>)]
    pub natural_language: Option<Option<String>>,
    /// Default 0; higher runs first.
    #[serde(default)]
    pub priority: Option<i64>,
    /// Default true.
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default, deserialize_with = "crate::extract::nullable")]
    #[schema(value_type = Option<String>)]
    pub target_app: Option<Option<String>>,
    #[serde(default, deserialize_with = "crate::extract::nullable")]
    #[schema(value_type = Option<String>)]
    pub action_pattern: Option<Option<String>>,
    /// `tier1` (highest trust), `tier2`, …
    #[serde(default, deserialize_with = "crate::extract::nullable")]
    #[schema(value_type = Option<String>)]
    pub trust_tier: Option<Option<String>>,
    #[serde(default, deserialize_with = "crate::extract::nullable")]
    #[schema(value_type = Option<String>)]
    pub surface: Option<Option<String>>,
    #[serde(default, deserialize_with = "crate::extract::nullable")]
    #[schema(value_type = Option<Vec<String>>)]
    pub principal_exclusions: Option<Option<Vec<String>>>,
}

impl RuleBody {
    fn is_empty(&self) -> bool {
        let RuleBody {
            operations,
            name,
            description,
            rego_source,
            natural_language,
            priority,
            enabled,
            target_app,
            action_pattern,
            trust_tier,
            surface,
            principal_exclusions,
        } = self;
        operations.is_none()
            && name.is_none()
            && description.is_none()
            && rego_source.is_none()
            && natural_language.is_none()
            && priority.is_none()
            && enabled.is_none()
            && target_app.is_none()
            && action_pattern.is_none()
            && trust_tier.is_none()
            && surface.is_none()
            && principal_exclusions.is_none()
    }
}

/// Parses `operations`: 1-3 known facets, deduplicated, in canonical order.
pub fn parse_operations(ops: &[String], path: &str, issues: &mut Issues) -> Vec<Facet> {
    if ops.is_empty() || ops.len() > 3 {
        issues.push(path, "must list 1 to 3 of action, retrieval, delegation");
    }
    let mut facets = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        match Facet::parse(op) {
            Some(f) => facets.push(f),
            None => issues.push(&format!("{path}.{i}"), format!("unknown operation `{op}`")),
        }
    }
    Facet::ALL
        .into_iter()
        .filter(|f| facets.contains(f))
        .collect()
}

/// Checks every field of a rule as it would be stored, and compiles its
/// policy. Returns the rule with its derived effect.
fn validate(surface: Surface, mut rule: Rule, issues: &mut Issues) -> Result<Rule, ApiError> {
    let (tier_max, surface_max) = surface.limits();
    issues.length("name", &rule.name, 1, 255);
    issues.length_opt("description", rule.description.as_deref(), 0, 1000);
    issues.length_opt(
        "natural_language",
        rule.natural_language.as_deref(),
        0,
        2000,
    );
    issues.length_opt("target_app", rule.target_app.as_deref(), 1, 255);
    issues.length_opt("action_pattern", rule.action_pattern.as_deref(), 1, 255);
    issues.length_opt("trust_tier", rule.trust_tier.as_deref(), 1, tier_max);
    if let Some(t) = rule.trust_tier.as_deref()
        && TrustTier::parse(t).is_none()
    {
        issues.push(
            "trust_tier",
            "must be a tier such as tier1 (highest trust), tier2, tier3",
        );
    }
    issues.length_opt("surface", rule.surface.as_deref(), 1, surface_max);
    for (i, agent) in rule.principal_exclusions.iter().flatten().enumerate() {
        issues.length(&format!("principal_exclusions.{i}"), agent, 1, 255);
    }
    let source = rule.rego_source.as_deref().unwrap_or_default();
    if !rule.applies_to.is_empty() {
        match Policy::compile(source, &rule.applies_to) {
            Ok(policy) => rule.effect = policy.effect(),
            Err(e) => issues.add(
                Issue::new("rego_source", "invalid_policy", e.message.clone()).at(e.line, e.column),
            ),
        }
    }
    std::mem::take(issues).into_result(DetailsShape::RawIssues)?;
    Ok(rule)
}

/// Creates a rule from a `POST` body on `surface`.
pub async fn create(
    store: &dyn Store,
    org: OrgId,
    surface: Surface,
    body: RuleBody,
    now: DateTime<Utc>,
) -> Result<Rule, ApiError> {
    let mut issues = Issues::default();
    let applies_to = match (surface.implied(), &body.operations) {
        (None, Some(ops)) => parse_operations(ops, "operations", &mut issues),
        (None, None) => {
            issues.push("operations", "required");
            Vec::new()
        }
        (Some(_), Some(_)) => {
            issues.push(
                "operations",
                "only /rules takes operations; this surface implies its facet",
            );
            Vec::new()
        }
        (Some(f), None) => vec![f],
    };
    if body.name.is_none() {
        issues.push("name", "required");
    }
    if body.rego_source.is_none() {
        issues.push("rego_source", "required");
    }
    let draft = Rule {
        id: uuid::Uuid::nil(),
        rule_code: String::new(),
        name: body.name.unwrap_or_default(),
        description: body.description.flatten(),
        natural_language: body.natural_language.flatten(),
        rego_source: body.rego_source,
        effect: warden_engine::model::Decision::Deny,
        priority: body.priority.unwrap_or(0),
        enabled: body.enabled.unwrap_or(true),
        applies_to,
        target_app: body.target_app.flatten(),
        action_pattern: body.action_pattern.flatten(),
        trust_tier: body.trust_tier.flatten(),
        surface: body.surface.flatten(),
        principal_exclusions: body.principal_exclusions.flatten(),
        bypass: Bypass::default(),
        created_at: now,
        updated_at: now,
    };
    let rule = validate(surface, draft, &mut issues)?;
    store
        .create_rule(org, &rule, now)
        .await
        .map_err(|e| match e {
            StoreError::Conflict(_) => ApiError::Conflict("a rule with this name exists".into()),
            other => other.into(),
        })
}

/// Applies a `PUT` body to rule `id`.
pub async fn update(
    store: &dyn Store,
    org: OrgId,
    surface: Surface,
    id: RuleId,
    body: RuleBody,
    now: DateTime<Utc>,
) -> Result<Rule, ApiError> {
    if body.is_empty() {
        return Err(ApiError::NoFieldsToUpdate);
    }
    let mut rule = store.rule(org, id).await?.ok_or(ApiError::NotFound)?;
    let mut issues = Issues::default();
    if let Some(ops) = &body.operations {
        if surface == Surface::Unified {
            rule.applies_to = parse_operations(ops, "operations", &mut issues);
        } else {
            issues.push("operations", "only /rules takes operations");
        }
    }
    macro_rules! set {
        ($($field:ident),*) => { $(if let Some(v) = body.$field { rule.$field = v; })* };
    }
    set!(
        description,
        natural_language,
        target_app,
        action_pattern,
        trust_tier,
        surface,
        principal_exclusions
    );
    if let Some(v) = body.name {
        rule.name = v;
    }
    if let Some(v) = body.rego_source {
        rule.rego_source = Some(v);
    }
    if let Some(v) = body.priority {
        rule.priority = v;
    }
    if let Some(v) = body.enabled {
        rule.enabled = v;
    }
    let rule = validate(surface, rule, &mut issues)?;
    store
        .replace_rule(org, &rule, now)
        .await
        .map_err(|e| match e {
            StoreError::Conflict(_) => ApiError::Conflict("a rule with this name exists".into()),
            other => other.into(),
        })?
        .ok_or(ApiError::NotFound)
}

/// `POST /recall/rules/:id/bypass`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BypassBody {
    /// Why the bypass is needed (1-2000 characters).
    #[serde(default)]
    pub reason: Option<String>,
    /// When it lapses by itself.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
    /// Or: how long it lasts (1-604800 seconds).
    #[serde(default)]
    pub duration_seconds: Option<i64>,
}

/// Switches the emergency bypass of rule `id` on (`Some(body)`) or off.
/// `actor` names who did it (the key's id); the audit entry carries the
/// reason code `EMERGENCY_BYPASS`.
pub async fn bypass(
    store: &dyn Store,
    org: OrgId,
    id: RuleId,
    on: Option<BypassBody>,
    actor: &crate::store::ApiKey,
    now: DateTime<Utc>,
) -> Result<Rule, ApiError> {
    let rule = store.rule(org, id).await?.ok_or(ApiError::NotFound)?;
    let active = rule.bypass.is_in_force(now);
    let (state, action) = match on {
        Some(body) => {
            if active {
                return Err(ApiError::Conflict(
                    "an emergency bypass is already active on this rule".into(),
                ));
            }
            let mut issues = Issues::default();
            let reason = body.reason.unwrap_or_default();
            issues.length("reason", &reason, 1, 2000);
            let expires_at = match (body.expires_at, body.duration_seconds) {
                (Some(_), Some(_)) => {
                    issues.push(
                        "expires_at",
                        "give expires_at or duration_seconds, not both",
                    );
                    None
                }
                (Some(t), None) if t <= now => {
                    issues.push("expires_at", "must be in the future");
                    None
                }
                (Some(t), None) => Some(t),
                (None, Some(s)) if !(1..=604_800).contains(&s) => {
                    issues.push("duration_seconds", "must be 1 to 604800");
                    None
                }
                (None, Some(s)) => Some(now + TimeDelta::seconds(s)),
                (None, None) => None,
            };
            issues.into_result(DetailsShape::RawIssues)?;
            let state = Bypass {
                bypass_active: true,
                bypass_reason: Some(reason),
                bypass_activated_by: Some(actor.id.0.to_string()),
                bypass_activated_at: Some(now),
                bypass_expires_at: expires_at,
            };
            (state, "EMERGENCY_BYPASS_ACTIVATED")
        }
        None => {
            if !active {
                return Err(ApiError::Conflict(
                    "no emergency bypass is active on this rule".into(),
                ));
            }
            (Bypass::default(), "EMERGENCY_BYPASS_DEACTIVATED")
        }
    };
    let audit = AuditEntry {
        org,
        action: action.into(),
        actor: Some(actor.id),
        target_type: "rule".into(),
        target_id: id.0.to_string(),
        details: json!({
            "reason_code": "EMERGENCY_BYPASS",
            "rule_code": rule.rule_code,
            "reason": state.bypass_reason,
            "expires_at": state.bypass_expires_at,
        }),
        at: now,
    };
    store
        .set_bypass(org, id, &state, audit, now)
        .await?
        .ok_or(ApiError::NotFound)
}
