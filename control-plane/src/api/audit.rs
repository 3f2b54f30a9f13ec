//! `GET /v1/allow/audit-log` and `GET /v1/recall/audit-log` (spec 4.2,
//! 4.3): append-only decision logs with their filters. Payloads are shown
//! as stored: masked.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{DetailsShape, Issue, Pagination};
use crate::store::{ActionDecision, AuditFilter, RetrievalDecision};

/// The query of both logs (each uses its own subset).
#[derive(Debug, Default, Deserialize)]
pub struct LogQuery {
    agent_id: Option<String>,
    target_app: Option<String>,
    decision: Option<String>,
    hitl_result: Option<String>,
    operation: Option<String>,
    reason_code: Option<String>,
    start_date: Option<String>,
    end_date: Option<String>,
}

fn invalid(issues: Vec<Issue>) -> ApiError {
    ApiError::InvalidQuery(DetailsShape::RawIssues.render(issues))
}

fn one_of(field: &str, value: &Option<String>, allowed: &[&str], issues: &mut Vec<Issue>) {
    if let Some(v) = value
        && !allowed.contains(&v.as_str())
    {
        issues.push(Issue::new(
            field,
            "invalid_value",
            format!("must be one of {}", allowed.join(", ")),
        ));
    }
}

fn date(field: &str, value: &Option<String>, issues: &mut Vec<Issue>) -> Option<DateTime<Utc>> {
    let v = value.as_deref()?;
    match DateTime::parse_from_rfc3339(v) {
        Ok(t) => Some(t.with_timezone(&Utc)),
        Err(_) => {
            issues.push(Issue::new(
                field,
                "invalid_value",
                "must be an ISO 8601 date-time",
            ));
            None
        }
    }
}

fn filter(
    q: Result<Query<LogQuery>, QueryRejection>,
    action_log: bool,
) -> Result<AuditFilter, ApiError> {
    let Query(q) = q.map_err(|e| invalid(vec![Issue::new("", "invalid_query", e.body_text())]))?;
    let mut issues = Vec::new();
    let (start, end) = (
        date("start_date", &q.start_date, &mut issues),
        date("end_date", &q.end_date, &mut issues),
    );
    if action_log {
        one_of(
            "decision",
            &q.decision,
            &["permit", "deny", "approval_required", "mask"],
            &mut issues,
        );
        one_of(
            "hitl_result",
            &q.hitl_result,
            &["approved", "rejected", "timeout"],
            &mut issues,
        );
    } else {
        one_of(
            "decision",
            &q.decision,
            &["allow", "deny", "redact", "escalate"],
            &mut issues,
        );
        one_of(
            "operation",
            &q.operation,
            &["retrieve", "tool_call", "prompt_render"],
            &mut issues,
        );
        let codes = [
            "POLICY_ALLOW",
            "POLICY_DENY",
            "TIER_MISMATCH",
            "PRINCIPAL_EXCLUDED",
            "SURFACE_RESTRICTION",
            "AUDIENCE_EXPANSION",
            "DEFAULT_DENY",
            "EMERGENCY_BYPASS",
        ];
        one_of("reason_code", &q.reason_code, &codes, &mut issues);
    }
    if !issues.is_empty() {
        return Err(invalid(issues));
    }
    Ok(AuditFilter {
        agent_id: q.agent_id,
        target_app: q.target_app.filter(|_| action_log),
        decision: q.decision,
        hitl_result: q.hitl_result.filter(|_| action_log),
        operation: q.operation.filter(|_| !action_log),
        reason_code: q.reason_code.filter(|_| !action_log),
        start,
        end,
    })
}

/// One action-log item.
#[derive(Debug, Serialize, ToSchema)]
pub struct ActionLogItem {
    pub id: uuid::Uuid,
    pub agent_id: String,
    pub target_app: String,
    pub action: String,
    /// Masked at rest.
    pub context: Value,
    pub decision: String,
    /// Monitor-mode observations: the real outcome.
    pub would_decide: Option<String>,
    pub reason: String,
    pub rule_id: Option<uuid::Uuid>,
    pub rule_code: Option<String>,
    pub enforced: bool,
    pub hitl_result: Option<String>,
    pub hitl_responded_at: Option<DateTime<Utc>>,
    pub hitl_responded_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl From<ActionDecision> for ActionLogItem {
    fn from(d: ActionDecision) -> ActionLogItem {
        ActionLogItem {
            id: d.id,
            agent_id: d.agent_id,
            target_app: d.target_app,
            action: d.action,
            context: d.context,
            decision: d.decision.as_str().into(),
            would_decide: d.would_decide.map(|w| w.as_str().into()),
            reason: d.reason,
            rule_id: d.rule_id,
            rule_code: d.rule_code,
            enforced: d.enforced,
            hitl_result: d.hitl_result,
            hitl_responded_at: d.hitl_responded_at,
            hitl_responded_by: d.hitl_responded_by,
            created_at: d.created_at,
        }
    }
}

/// One retrieval-log item.
#[derive(Debug, Serialize, ToSchema)]
pub struct RetrievalLogItem {
    pub id: uuid::Uuid,
    pub agent_id: String,
    pub operation: String,
    pub resource_type: String,
    pub decision: String,
    pub reason_code: String,
    pub reason: String,
    pub rule_id: Option<uuid::Uuid>,
    /// Legacy; null on new rows.
    pub receipt_id: Option<uuid::Uuid>,
    /// `surface`, `trust_tier`, `query` (masked), `resource_metadata`
    /// (masked), `floor_detectors`, `decision_id`.
    pub metadata: Value,
    pub created_at: DateTime<Utc>,
}

impl From<RetrievalDecision> for RetrievalLogItem {
    fn from(d: RetrievalDecision) -> RetrievalLogItem {
        RetrievalLogItem {
            metadata: json!({
                "surface": d.surface,
                "trust_tier": d.trust_tier,
                "query": d.query,
                "resource_metadata": d.resource_metadata,
                "floor_detectors": d.floor_detectors,
                "decision_id": d.id,
            }),
            id: d.id,
            agent_id: d.agent_id,
            operation: d.operation,
            resource_type: d.resource_type,
            decision: d.decision.as_str().into(),
            reason_code: d.reason_code.as_str().into(),
            reason: d.reason,
            rule_id: d.rule_id,
            receipt_id: None,
            created_at: d.created_at,
        }
    }
}

/// A page of a log, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct LogPage<T> {
    pub data: Vec<T>,
    pub total: u64,
    pub page: u32,
    pub limit: u32,
}

#[utoipa::path(get, path = "/v1/allow/audit-log", tag = "audit",
    params(("agent_id" = Option<String>, Query), ("target_app" = Option<String>, Query),
        ("decision" = Option<String>, Query, description = "permit, deny, approval_required, mask"),
        ("hitl_result" = Option<String>, Query, description = "approved, rejected, timeout"),
        ("start_date" = Option<String>, Query), ("end_date" = Option<String>, Query),
        ("page" = Option<u32>, Query), ("limit" = Option<u32>, Query)),
    responses((status = 200, body = LogPage<ActionLogItem>), (status = 400, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn allow(
    State(state): State<AppState>,
    caller: Caller,
    Pagination(page): Pagination<100>,
    q: Result<Query<LogQuery>, QueryRejection>,
) -> Result<Json<LogPage<ActionLogItem>>, ApiError> {
    let f = filter(q, true)?;
    let org = caller.key.org;
    state.store.expire_hitl(org, Utc::now()).await?;
    let (rows, total) = state.store.action_log(org, &f, page).await?;
    Ok(Json(LogPage {
        data: rows.into_iter().map(ActionLogItem::from).collect(),
        total,
        page: page.page,
        limit: page.limit,
    }))
}

#[utoipa::path(get, path = "/v1/recall/audit-log", tag = "audit",
    params(("agent_id" = Option<String>, Query), ("operation" = Option<String>, Query), ("decision" = Option<String>, Query),
        ("reason_code" = Option<String>, Query), ("start_date" = Option<String>, Query), ("end_date" = Option<String>, Query),
        ("page" = Option<u32>, Query), ("limit" = Option<u32>, Query)),
    responses((status = 200, body = LogPage<RetrievalLogItem>), (status = 400, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn recall(
    State(state): State<AppState>,
    caller: Caller,
    Pagination(page): Pagination<100>,
    q: Result<Query<LogQuery>, QueryRejection>,
) -> Result<Json<LogPage<RetrievalLogItem>>, ApiError> {
    let f = filter(q, false)?;
    let (rows, total) = state.store.retrieval_log(caller.key.org, &f, page).await?;
    Ok(Json(LogPage {
        data: rows.into_iter().map(RetrievalLogItem::from).collect(),
        total,
        page: page.page,
        limit: page.limit,
    }))
}
