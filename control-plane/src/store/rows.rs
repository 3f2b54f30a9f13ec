//! Rows as both backends return them, and their conversion to typed values.

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use uuid::Uuid;

use super::{ApiKey, AuditEntry, KeyId, OrgId, Organization, StoreError, StoreResult};
use crate::auth::{Audience, Environment, Permission, Scope};

#[derive(sqlx::FromRow)]
pub(super) struct OrgRow {
    id: Uuid,
    name: String,
    created_at: DateTime<Utc>,
}

impl From<OrgRow> for Organization {
    fn from(r: OrgRow) -> Organization {
        Organization {
            id: OrgId(r.id),
            name: r.name,
            created_at: r.created_at,
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct KeyRow {
    id: Uuid,
    org_id: Uuid,
    name: String,
    key_hash: String,
    display: String,
    audience: String,
    environment: String,
    permissions: Json<Vec<String>>,
    scopes: Json<Vec<String>>,
    agent_id: Option<String>,
    created_by: Option<Uuid>,
    created_at: DateTime<Utc>,
    expires_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
    replaced_by: Option<Uuid>,
    last_used_at: Option<DateTime<Utc>>,
}

fn parse_each<T>(
    items: &[String],
    parse: impl Fn(&str) -> Option<T>,
    what: &str,
) -> StoreResult<Vec<T>> {
    items
        .iter()
        .map(|s| parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown {what} `{s}`"))))
        .collect()
}

impl TryFrom<KeyRow> for ApiKey {
    type Error = StoreError;

    fn try_from(r: KeyRow) -> StoreResult<ApiKey> {
        let corrupt = |what: &str, v: &str| StoreError::Corrupt(format!("unknown {what} `{v}`"));
        Ok(ApiKey {
            id: KeyId(r.id),
            org: OrgId(r.org_id),
            audience: Audience::parse(&r.audience)
                .ok_or_else(|| corrupt("audience", &r.audience))?,
            environment: Environment::parse(&r.environment)
                .ok_or_else(|| corrupt("environment", &r.environment))?,
            permissions: parse_each(&r.permissions.0, Permission::parse, "permission")?,
            scopes: parse_each(&r.scopes.0, Scope::parse, "scope")?,
            name: r.name,
            hash: r.key_hash,
            display: r.display,
            agent_id: r.agent_id,
            created_by: r.created_by.map(KeyId),
            created_at: r.created_at,
            expires_at: r.expires_at,
            revoked_at: r.revoked_at,
            replaced_by: r.replaced_by.map(KeyId),
            last_used_at: r.last_used_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct AuditRow {
    org_id: Uuid,
    action: String,
    actor: Option<Uuid>,
    target_type: String,
    target_id: String,
    details: Json<serde_json::Value>,
    at: DateTime<Utc>,
}

impl From<AuditRow> for AuditEntry {
    fn from(r: AuditRow) -> AuditEntry {
        AuditEntry {
            org: OrgId(r.org_id),
            action: r.action,
            actor: r.actor.map(KeyId),
            target_type: r.target_type,
            target_id: r.target_id,
            details: r.details.0,
            at: r.at,
        }
    }
}

/// A list of enum values as stored (a JSON array of their wire spellings).
pub(super) fn names<T: Copy>(items: &[T], name: impl Fn(T) -> &'static str) -> Json<Vec<String>> {
    Json(items.iter().map(|i| name(*i).to_owned()).collect())
}

#[derive(sqlx::FromRow)]
pub(super) struct IdemRow {
    request_hash: String,
    done: bool,
    status: Option<i32>,
    headers: Json<Vec<(String, String)>>,
    body: Vec<u8>,
    started_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
}

impl From<IdemRow> for super::IdemRecord {
    fn from(r: IdemRow) -> super::IdemRecord {
        super::IdemRecord {
            request_hash: r.request_hash,
            done: r.done,
            status: r.status.and_then(|s| u16::try_from(s).ok()),
            headers: r.headers.0,
            body: r.body,
            started_at: r.started_at,
            expires_at: r.expires_at,
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct RuleRow {
    id: Uuid,
    rule_code: String,
    name: String,
    description: Option<String>,
    natural_language: Option<String>,
    rego_source: Option<String>,
    effect: String,
    priority: i64,
    enabled: bool,
    /// A JSON array as text in both backends, so a `LIKE` can filter it.
    applies_to: String,
    target_app: Option<String>,
    action_pattern: Option<String>,
    trust_tier: Option<String>,
    surface: Option<String>,
    principal_exclusions: Option<Json<Vec<String>>>,
    bypass_active: bool,
    bypass_reason: Option<String>,
    bypass_activated_by: Option<String>,
    bypass_activated_at: Option<DateTime<Utc>>,
    bypass_expires_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<RuleRow> for warden_engine::model::Rule {
    type Error = StoreError;

    fn try_from(r: RuleRow) -> StoreResult<warden_engine::model::Rule> {
        use warden_engine::model::{Bypass, Decision, Facet};
        Ok(warden_engine::model::Rule {
            id: r.id,
            rule_code: r.rule_code,
            name: r.name,
            description: r.description,
            natural_language: r.natural_language,
            rego_source: r.rego_source,
            effect: Decision::parse(&r.effect)
                .ok_or_else(|| StoreError::Corrupt(format!("unknown effect `{}`", r.effect)))?,
            priority: r.priority,
            enabled: r.enabled,
            applies_to: parse_each(
                &serde_json::from_str::<Vec<String>>(&r.applies_to)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                Facet::parse,
                "facet",
            )?,
            target_app: r.target_app,
            action_pattern: r.action_pattern,
            trust_tier: r.trust_tier,
            surface: r.surface,
            principal_exclusions: r.principal_exclusions.map(|j| j.0),
            bypass: Bypass {
                bypass_active: r.bypass_active,
                bypass_reason: r.bypass_reason,
                bypass_activated_by: r.bypass_activated_by,
                bypass_activated_at: r.bypass_activated_at,
                bypass_expires_at: r.bypass_expires_at,
            },
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct SettingsRow {
    id: Uuid,
    doc: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<SettingsRow> for super::Settings {
    type Error = StoreError;

    fn try_from(r: SettingsRow) -> StoreResult<super::Settings> {
        Ok(super::Settings {
            id: r.id,
            doc: serde_json::from_str(&r.doc)
                .map_err(|e| StoreError::Corrupt(format!("settings: {e}")))?,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct AgentRow {
    id: Uuid,
    org_id: Uuid,
    agent_id: String,
    mode: Option<String>,
    doc: String,
    deleted_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<AgentRow> for super::Agent {
    type Error = StoreError;

    fn try_from(r: AgentRow) -> StoreResult<super::Agent> {
        let mode = match r.mode {
            None => None,
            Some(m) => Some(
                serde_json::from_value(serde_json::Value::String(m.clone()))
                    .map_err(|_| StoreError::Corrupt(format!("unknown mode `{m}`")))?,
            ),
        };
        Ok(super::Agent {
            id: r.id,
            org: OrgId(r.org_id),
            agent_id: r.agent_id,
            mode,
            doc: serde_json::from_str(&r.doc)
                .map_err(|e| StoreError::Corrupt(format!("agent: {e}")))?,
            deleted_at: r.deleted_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// A stored enum spelling back into its type.
pub(super) fn spelled<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> StoreResult<T> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| StoreError::Corrupt(format!("unknown {what} `{text}`")))
}

fn json_of<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> StoreResult<T> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

#[derive(sqlx::FromRow)]
pub(super) struct ActionDecisionRow {
    id: Uuid,
    org_id: Uuid,
    agent_id: String,
    target_app: String,
    action: String,
    context: String,
    decision: String,
    would_decide: Option<String>,
    reason: String,
    reason_code: Option<String>,
    rule_id: Option<Uuid>,
    rule_code: Option<String>,
    enforced: bool,
    agent_mode: String,
    floor_detectors: String,
    source: String,
    hitl_result: Option<String>,
    hitl_responded_at: Option<DateTime<Utc>>,
    hitl_responded_by: Option<String>,
    execution_result: Option<String>,
    execution_completed_at: Option<DateTime<Utc>>,
    execution_details: Option<String>,
    created_at: DateTime<Utc>,
}

impl TryFrom<ActionDecisionRow> for super::ActionDecision {
    type Error = StoreError;

    fn try_from(r: ActionDecisionRow) -> StoreResult<super::ActionDecision> {
        Ok(super::ActionDecision {
            id: r.id,
            org: OrgId(r.org_id),
            agent_id: r.agent_id,
            target_app: r.target_app,
            action: r.action,
            context: json_of(&r.context, "context")?,
            decision: spelled(&r.decision, "decision")?,
            would_decide: r
                .would_decide
                .as_deref()
                .map(|d| spelled(d, "decision"))
                .transpose()?,
            reason: r.reason,
            reason_code: r
                .reason_code
                .as_deref()
                .map(|c| spelled(c, "reason code"))
                .transpose()?,
            rule_id: r.rule_id,
            rule_code: r.rule_code,
            enforced: r.enforced,
            agent_mode: spelled(&r.agent_mode, "mode")?,
            floor_detectors: json_of(&r.floor_detectors, "floor_detectors")?,
            source: r.source,
            hitl_result: r.hitl_result,
            hitl_responded_at: r.hitl_responded_at,
            hitl_responded_by: r.hitl_responded_by,
            execution_result: r.execution_result,
            execution_completed_at: r.execution_completed_at,
            execution_details: r.execution_details,
            created_at: r.created_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct HitlRow {
    id: Uuid,
    org_id: Uuid,
    decision_id: Option<Uuid>,
    agent_id: String,
    target_app: String,
    action: String,
    context: String,
    category: String,
    status: String,
    ai_recommended_rule: Option<String>,
    notified_via: String,
    resolution: Option<String>,
    dedupe_key: Option<String>,
    expires_at: Option<DateTime<Utc>>,
    responded_at: Option<DateTime<Utc>>,
    responded_by: Option<String>,
    created_at: DateTime<Utc>,
}

impl TryFrom<HitlRow> for super::HitlItem {
    type Error = StoreError;

    fn try_from(r: HitlRow) -> StoreResult<super::HitlItem> {
        Ok(super::HitlItem {
            id: r.id,
            org: OrgId(r.org_id),
            decision_id: r.decision_id,
            agent_id: r.agent_id,
            target_app: r.target_app,
            action: r.action,
            context: json_of(&r.context, "context")?,
            category: r.category,
            status: r.status,
            ai_recommended_rule: r.ai_recommended_rule,
            notified_via: json_of(&r.notified_via, "notified_via")?,
            resolution: r.resolution,
            dedupe_key: r.dedupe_key,
            expires_at: r.expires_at,
            responded_at: r.responded_at,
            responded_by: r.responded_by,
            created_at: r.created_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct RetrievalDecisionRow {
    id: Uuid,
    org_id: Uuid,
    agent_id: String,
    operation: String,
    resource_type: String,
    resource_metadata: String,
    query: Option<String>,
    surface: Option<String>,
    trust_tier: Option<String>,
    decision: String,
    would_decide: Option<String>,
    reason: String,
    reason_code: String,
    rule_id: Option<Uuid>,
    enforced: bool,
    agent_mode: String,
    floor_detectors: String,
    created_at: DateTime<Utc>,
}

impl TryFrom<RetrievalDecisionRow> for super::RetrievalDecision {
    type Error = StoreError;

    fn try_from(r: RetrievalDecisionRow) -> StoreResult<super::RetrievalDecision> {
        Ok(super::RetrievalDecision {
            id: r.id,
            org: OrgId(r.org_id),
            agent_id: r.agent_id,
            operation: r.operation,
            resource_type: r.resource_type,
            resource_metadata: json_of(&r.resource_metadata, "resource_metadata")?,
            query: r.query,
            surface: r.surface,
            trust_tier: r.trust_tier,
            decision: spelled(&r.decision, "decision")?,
            would_decide: r
                .would_decide
                .as_deref()
                .map(|d| spelled(d, "decision"))
                .transpose()?,
            reason: r.reason,
            reason_code: spelled(&r.reason_code, "reason code")?,
            rule_id: r.rule_id,
            enforced: r.enforced,
            agent_mode: spelled(&r.agent_mode, "mode")?,
            floor_detectors: json_of(&r.floor_detectors, "floor_detectors")?,
            created_at: r.created_at,
        })
    }
}
