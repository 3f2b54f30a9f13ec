//! The human-in-the-loop queue and the decision record the sidecar polls
//! (spec 2.5, 2.8, 3.3, 4.2).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, DetailsShape, Issue, Issues, Pagination, path_uuid};
use crate::store::{ActionDecision, HitlItem, RuleId};

/// A queue item (spec 2.8).
#[derive(Debug, Serialize, ToSchema)]
pub struct HitlView {
    pub id: uuid::Uuid,
    pub decision_id: Option<uuid::Uuid>,
    pub agent_id: String,
    pub target_app: String,
    pub action: String,
    /// Masked like the decision's.
    pub context: Value,
    /// `enduser` (an agent is waiting) or `engineer` (a coverage gap).
    pub category: String,
    /// `pending`, `approved`, `rejected`, `timeout`, `dismissed`, `linked`.
    pub status: String,
    pub ai_recommended_rule: Option<String>,
    pub notified_via: Vec<String>,
    /// A dismissal note, or the id of the rule linked to cover the gap.
    pub resolution: Option<String>,
    pub expires_at: Option<DateTime<Utc>>,
    pub responded_at: Option<DateTime<Utc>>,
    pub responded_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl From<HitlItem> for HitlView {
    fn from(i: HitlItem) -> HitlView {
        HitlView {
            id: i.id,
            decision_id: i.decision_id,
            agent_id: i.agent_id,
            target_app: i.target_app,
            action: i.action,
            context: i.context,
            category: i.category,
            status: i.status,
            ai_recommended_rule: i.ai_recommended_rule,
            notified_via: i.notified_via,
            resolution: i.resolution,
            expires_at: i.expires_at,
            responded_at: i.responded_at,
            responded_by: i.responded_by,
            created_at: i.created_at,
        }
    }
}

/// The `hitl` object of a decision record.
#[derive(Debug, Serialize, ToSchema)]
pub struct HitlSummary {
    pub id: uuid::Uuid,
    pub status: String,
    pub category: String,
    pub expires_at: Option<DateTime<Utc>>,
    pub responded_at: Option<DateTime<Utc>>,
    pub responded_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// An action decision record (spec 2.5).
#[derive(Debug, Serialize, ToSchema)]
pub struct DecisionRecord {
    pub id: uuid::Uuid,
    pub vendor_id: uuid::Uuid,
    pub agent_id: String,
    pub target_app: String,
    pub action: String,
    /// Masked at rest.
    pub context: Value,
    pub decision: String,
    pub would_decide: Option<String>,
    pub reason: String,
    pub rule_id: Option<uuid::Uuid>,
    pub rule_code: Option<String>,
    pub enforced: bool,
    pub agent_mode: String,
    /// `approved`, `rejected`, `timeout`, or null.
    pub hitl_result: Option<String>,
    pub hitl_responded_at: Option<DateTime<Utc>>,
    pub hitl_responded_by: Option<String>,
    pub execution_result: Option<String>,
    pub execution_completed_at: Option<DateTime<Utc>>,
    pub execution_details: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Null when approval was not required.
    pub hitl: Option<HitlSummary>,
}

impl DecisionRecord {
    fn of(d: ActionDecision, hitl: Option<HitlItem>) -> DecisionRecord {
        DecisionRecord {
            id: d.id,
            vendor_id: d.org.0,
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
            agent_mode: d.agent_mode.as_str().into(),
            hitl_result: d.hitl_result,
            hitl_responded_at: d.hitl_responded_at,
            hitl_responded_by: d.hitl_responded_by,
            execution_result: d.execution_result,
            execution_completed_at: d.execution_completed_at,
            execution_details: d.execution_details,
            created_at: d.created_at,
            hitl: hitl.map(|h| HitlSummary {
                id: h.id,
                status: h.status,
                category: h.category,
                expires_at: h.expires_at,
                responded_at: h.responded_at,
                responded_by: h.responded_by,
                created_at: h.created_at,
            }),
        }
    }
}

#[utoipa::path(get, path = "/v1/allow/decisions/{id}", tag = "approvals", params(("id" = uuid::Uuid, Path)),
    responses((status = 200, body = DecisionRecord), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn decision(
    State(state): State<AppState>,
    caller: Caller,
    path: axum::extract::Path<String>,
) -> Result<Json<DecisionRecord>, ApiError> {
    let id = path_uuid(&path.0, "Invalid decision ID")?;
    let (store, org, now) = (state.store.as_ref(), caller.key.org, Utc::now());
    // A window that lapsed is a timeout now, even if no sweeper ran.
    store.expire_hitl(org, now).await?;
    let d = store
        .action_decision(org, id)
        .await?
        .ok_or(ApiError::NotFound)?;
    if !caller.acts_for(&d.agent_id) {
        return Err(ApiError::NotFound);
    }
    let hitl = store.hitl_for_decision(org, id).await?;
    Ok(Json(DecisionRecord::of(d, hitl)))
}

/// `GET /allow/hitl/queue` filter.
#[derive(Debug, Default, Deserialize)]
pub struct QueueFilter {
    pub status: Option<String>,
}

/// A page of queue items.
#[derive(Debug, Serialize, ToSchema)]
pub struct HitlPage {
    pub data: Vec<HitlView>,
    pub total: u64,
    pub page: u32,
    pub limit: u32,
}

const STATUSES: [&str; 6] = [
    "pending",
    "approved",
    "rejected",
    "timeout",
    "dismissed",
    "linked",
];

#[utoipa::path(get, path = "/allow/hitl/queue", tag = "approvals",
    params(("status" = Option<String>, Query, description = "default pending"), ("page" = Option<u32>, Query), ("limit" = Option<u32>, Query)),
    responses((status = 200, body = HitlPage), (status = 400, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn queue(
    State(state): State<AppState>,
    caller: Caller,
    Pagination(page): Pagination<100>,
    filter: Result<Query<QueueFilter>, QueryRejection>,
) -> Result<Json<HitlPage>, ApiError> {
    let invalid = |m: &str| {
        ApiError::InvalidQuery(DetailsShape::RawIssues.render(vec![Issue::new(
            "status",
            "invalid_value",
            m,
        )]))
    };
    let Query(filter) = filter.map_err(|e| invalid(&e.body_text()))?;
    let status = filter.status.unwrap_or_else(|| "pending".into());
    if !STATUSES.contains(&status.as_str()) {
        return Err(invalid(
            "must be pending, approved, rejected, timeout, dismissed or linked",
        ));
    }
    let (store, org) = (state.store.as_ref(), caller.key.org);
    store.expire_hitl(org, Utc::now()).await?;
    let (items, total) = store.list_hitl(org, &status, page).await?;
    Ok(Json(HitlPage {
        data: items.into_iter().map(HitlView::from).collect(),
        total,
        page: page.page,
        limit: page.limit,
    }))
}

/// `POST /allow/hitl/queue/:id`: `decision` for end-user gates; `dismiss`
/// (with an optional `note`) or `rule_id` for coverage-gap items.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Respond {
    /// End-user gates: `approved` or `rejected`.
    pub decision: Option<String>,
    /// Who answered (defaults to the answering key's id).
    pub responded_by: Option<String>,
    /// Coverage gaps: dismiss the item.
    pub dismiss: Option<bool>,
    pub note: Option<String>,
    /// Coverage gaps: the rule created to cover the gap.
    pub rule_id: Option<uuid::Uuid>,
}

#[utoipa::path(post, path = "/allow/hitl/queue/{id}", tag = "approvals", params(("id" = uuid::Uuid, Path)), request_body = Respond,
    responses((status = 200, body = HitlView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn respond(
    State(state): State<AppState>,
    caller: Caller,
    path: axum::extract::Path<String>,
    ApiJson(body): ApiJson<Respond>,
) -> Result<Json<HitlView>, ApiError> {
    let id = path_uuid(&path.0, "Invalid item ID")?;
    let (store, org, now) = (state.store.as_ref(), caller.key.org, Utc::now());
    store.expire_hitl(org, now).await?;
    let item = store.hitl(org, id).await?.ok_or(ApiError::NotFound)?;
    let mut issues = Issues::default();
    issues.length_opt("responded_by", body.responded_by.as_deref(), 1, 255);
    issues.length_opt("note", body.note.as_deref(), 0, 2000);
    let (status, resolution) = if item.category == "enduser" || item.category == "escalation" {
        if body.dismiss.is_some() || body.rule_id.is_some() || body.note.is_some() {
            issues.push(
                "",
                "an end-user gate takes `decision` (approved or rejected)",
            );
        }
        match body.decision.as_deref() {
            Some(d @ ("approved" | "rejected")) => (d.to_owned(), None),
            Some(_) => {
                issues.push("decision", "must be approved or rejected");
                (String::new(), None)
            }
            None => {
                issues.push("decision", "required for an end-user gate");
                (String::new(), None)
            }
        }
    } else {
        if body.decision.is_some() {
            issues.push(
                "decision",
                "a coverage-gap item takes `dismiss` or `rule_id`, not a decision",
            );
        }
        match (body.dismiss, body.rule_id) {
            (Some(true), None) => (
                "dismissed".to_owned(),
                Some(body.note.clone().unwrap_or_default()),
            ),
            (None, Some(rule)) => {
                if store.rule(org, RuleId(rule)).await?.is_none() {
                    issues.push("rule_id", "no such rule");
                }
                ("linked".to_owned(), Some(rule.to_string()))
            }
            _ => {
                issues.push("", "give `dismiss: true` or a `rule_id`");
                (String::new(), None)
            }
        }
    };
    issues.into_result(DetailsShape::RawIssues)?;
    if item.status != "pending" {
        return Err(ApiError::AlreadyResolved(item.status));
    }
    let by = body
        .responded_by
        .unwrap_or_else(|| caller.key.id.0.to_string());
    if !store
        .resolve_hitl(org, id, &status, Some(&by), resolution.as_deref(), now)
        .await?
    {
        // Resolved or lapsed between the read and the write.
        let current = store
            .hitl(org, id)
            .await?
            .map_or_else(|| "unknown".into(), |i| i.status);
        return Err(ApiError::AlreadyResolved(current));
    }
    let item = store.hitl(org, id).await?.ok_or(ApiError::NotFound)?;
    Ok(Json(item.into()))
}

/// `POST /allow/hitl/queue`: a retrieval `escalate` a sidecar resolved
/// locally, for a human to review.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Escalation {
    /// A known agent (404 otherwise).
    pub agent_id: Option<String>,
    /// `retrieve` (default), `tool_call` or `prompt_render`.
    pub operation: Option<String>,
    pub resource_type: Option<String>,
    /// Masked at rest.
    pub resource_metadata: Option<Value>,
    /// Masked at rest; at most 2000.
    pub query: Option<String>,
    /// At most 2000.
    pub reason: Option<String>,
    /// The rule that escalated.
    pub rule_id: Option<uuid::Uuid>,
}

#[utoipa::path(post, path = "/allow/hitl/queue", tag = "approvals", request_body = Escalation,
    responses((status = 201, body = HitlView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn escalate(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<Escalation>,
) -> Result<(axum::http::StatusCode, Json<HitlView>), ApiError> {
    let mut issues = Issues::default();
    let agent_id = body.agent_id.unwrap_or_default();
    issues.length("agent_id", &agent_id, 1, 255);
    let resource_type = body.resource_type.unwrap_or_else(|| "document".into());
    issues.length("resource_type", &resource_type, 1, 255);
    let operation = body.operation.unwrap_or_else(|| "retrieve".into());
    if !["retrieve", "tool_call", "prompt_render"].contains(&operation.as_str()) {
        issues.push("operation", "must be retrieve, tool_call or prompt_render");
    }
    issues.length_opt("query", body.query.as_deref(), 0, 2000);
    issues.length_opt("reason", body.reason.as_deref(), 0, 2000);
    let metadata = issues.object("resource_metadata", body.resource_metadata);
    issues.into_result(DetailsShape::RawIssues)?;
    let (store, org, now) = (state.store.as_ref(), caller.key.org, Utc::now());
    let agent = store
        .agent_by_agent_id(org, &agent_id)
        .await?
        .ok_or(ApiError::NotFound)?;
    let (metadata, mut detectors) = crate::evaluate::mask_at_rest(metadata, None);
    let query = crate::evaluate::mask_query(body.query.as_deref(), &mut detectors);
    let decision = crate::store::RetrievalDecision {
        id: uuid::Uuid::now_v7(),
        org,
        agent_id: agent.agent_id.clone(),
        operation: operation.clone(),
        resource_type: resource_type.clone(),
        resource_metadata: metadata.clone(),
        query,
        surface: None,
        trust_tier: agent.doc.trust_tier.clone(),
        decision: warden_engine::model::Decision::Escalate,
        would_decide: None,
        reason: body
            .reason
            .unwrap_or_else(|| "escalated for review by the sidecar".into()),
        reason_code: warden_engine::model::ReasonCode::PolicyDeny,
        rule_id: body.rule_id,
        enforced: true,
        agent_mode: warden_engine::model::AgentMode::Enforce,
        floor_detectors: detectors,
        created_at: now,
    };
    let item = HitlItem {
        id: uuid::Uuid::now_v7(),
        org,
        decision_id: Some(decision.id),
        agent_id: agent.agent_id,
        target_app: resource_type,
        action: operation,
        context: metadata,
        category: "escalation".into(),
        status: "pending".into(),
        ai_recommended_rule: None,
        notified_via: Vec::new(),
        resolution: None,
        dedupe_key: None,
        expires_at: None,
        responded_at: None,
        responded_by: None,
        created_at: now,
    };
    store.insert_retrieval_with_hitl(&decision, &item).await?;
    Ok((axum::http::StatusCode::CREATED, Json(item.into())))
}
