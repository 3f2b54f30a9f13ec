//! `POST /allow/telemetry` and `POST /allow/execution-events` (spec 4.2):
//! what sidecars report after deciding locally.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;
use warden_engine::model::{
    AgentMode, Decision, Facet, TELEMETRY_BATCH_MAX, TELEMETRY_CONTEXT_MAX_BYTES, TelemetryItem,
};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::evaluate::mask_at_rest;
use crate::extract::{ApiJson, DetailsShape, Issue, Issues};
use crate::store::{ActionDecision, HitlItem};

/// `POST /allow/telemetry`: 1-100 decisions made locally.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetryBatch {
    /// Each item: `decision_id`, `agent_id`, `target_app`, `action`,
    /// `decision`, `reason`, `evaluated_at` (required); `rule_id`,
    /// `rule_code`, `enforced`, `agent_mode`, `raw_event`,
    /// `evaluation_mode`, `latency_ms`, `context` (optional, ≤ 32 KB).
    /// An item with `enforced: false` and `agent_mode: monitor` reports
    /// what the rule decided; it is stored as `permit` with that outcome in
    /// `would_decide`.
    #[schema(value_type = Vec<Object>)]
    pub decisions: Option<Vec<Value>>,
}

/// One refused item.
#[derive(Debug, Serialize, ToSchema)]
pub struct Rejected {
    pub index: usize,
    /// Each with `path` (an array) and `message`.
    #[schema(value_type = Vec<Object>)]
    pub issues: Vec<Value>,
}

/// The answer to a telemetry batch.
#[derive(Debug, Serialize, ToSchema)]
pub struct TelemetryReceipt {
    /// Items ingested.
    pub received: usize,
    /// Ingested items no rule covered (each opens or joins a coverage-gap item).
    pub uncovered: usize,
    /// App/action pairs seen for the first time.
    pub new_schemas: u64,
    pub rejected: Vec<Rejected>,
}

/// Validates one item; the issues in the telemetry shape (`path`, `message`).
fn item(raw: Value, caller: &Caller) -> Result<TelemetryItem, Vec<Value>> {
    let issue = |path: &str, message: &str| {
        let p: Vec<Value> = path
            .split('.')
            .filter(|s| !s.is_empty())
            .map(|s| json!(s))
            .collect();
        json!({ "path": p, "message": message })
    };
    let item: TelemetryItem = serde_path_to_error::deserialize(raw)
        .map_err(|e| vec![issue(&e.path().to_string(), &e.inner().to_string())])?;
    let mut issues = Vec::new();
    for (path, v) in [
        ("agent_id", &item.agent_id),
        ("target_app", &item.target_app),
        ("action", &item.action),
    ] {
        if !(1..=255).contains(&v.chars().count()) {
            issues.push(issue(path, "must be 1 to 255 characters"));
        }
    }
    if !Facet::Action.allows(item.decision) {
        issues.push(issue(
            "decision",
            "must be permit, deny, approval_required or mask",
        ));
    }
    if let Some(ctx) = &item.context
        && serde_json::to_vec(ctx).map_or(true, |b| b.len() > TELEMETRY_CONTEXT_MAX_BYTES)
    {
        issues.push(issue("context", "must be at most 32 KB serialized"));
    }
    if !caller.acts_for(&item.agent_id) {
        issues.push(issue(
            "agent_id",
            "this agent key reports only for its own agent",
        ));
    }
    if issues.is_empty() {
        Ok(item)
    } else {
        Err(issues)
    }
}

#[utoipa::path(post, path = "/allow/telemetry", tag = "telemetry", request_body = TelemetryBatch,
    responses((status = 202, body = TelemetryReceipt), (status = 400, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn telemetry(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(batch): ApiJson<TelemetryBatch>,
) -> Result<(StatusCode, Json<TelemetryReceipt>), ApiError> {
    let items = batch.decisions.unwrap_or_default();
    if items.is_empty() || items.len() > TELEMETRY_BATCH_MAX {
        let mut issues = Issues::default();
        issues.add(Issue::new(
            "decisions",
            "invalid_size",
            format!("must hold 1 to {TELEMETRY_BATCH_MAX} items"),
        ));
        issues.into_result(DetailsShape::RawIssues)?;
    }
    let count = items.len();
    let (org, now) = (caller.key.org, Utc::now());
    let mut rejected = Vec::new();
    let (mut rows, mut gaps) = (Vec::new(), Vec::new());
    for (index, raw) in items.into_iter().enumerate() {
        let it = match item(raw, &caller) {
            Ok(it) => it,
            Err(issues) => {
                rejected.push(Rejected { index, issues });
                continue;
            }
        };
        let (context, floor_detectors) =
            mask_at_rest(it.context.clone().unwrap_or_else(|| json!({})), None);
        if it.rule_id.is_none() {
            gaps.push(HitlItem {
                id: uuid::Uuid::now_v7(),
                org,
                decision_id: None,
                agent_id: it.agent_id.clone(),
                target_app: it.target_app.clone(),
                action: it.action.clone(),
                context: context.clone(),
                category: "engineer".into(),
                status: "pending".into(),
                ai_recommended_rule: None,
                notified_via: Vec::new(),
                resolution: None,
                dedupe_key: Some(format!(
                    "{}\u{1f}{}\u{1f}{}",
                    it.agent_id, it.target_app, it.action
                )),
                expires_at: None,
                responded_at: None,
                responded_by: None,
                created_at: now,
            });
        }
        // A monitoring client reports what the rule decided with
        // `enforced: false`; the record says what happened (`permit`) and
        // keeps the real outcome in `would_decide`, as a server-side
        // evaluation in monitor mode does (spec 4.2).
        let enforced = it.enforced.unwrap_or(true);
        let monitored = !enforced && it.agent_mode == Some(AgentMode::Monitor);
        let (decision, would_decide) = if monitored {
            (Decision::Permit, Some(it.decision))
        } else {
            (it.decision, None)
        };
        rows.push(ActionDecision {
            id: it.decision_id,
            org,
            agent_id: it.agent_id,
            target_app: it.target_app,
            action: it.action,
            context,
            decision,
            would_decide,
            reason: it.reason,
            reason_code: None,
            rule_id: it.rule_id,
            rule_code: it.rule_code,
            enforced,
            agent_mode: it.agent_mode.unwrap_or(AgentMode::Enforce),
            floor_detectors,
            source: "telemetry".into(),
            hitl_result: None,
            hitl_responded_at: None,
            hitl_responded_by: None,
            execution_result: None,
            execution_completed_at: None,
            execution_details: None,
            created_at: it.evaluated_at,
        });
    }
    if rows.is_empty() {
        let details = rejected
            .iter()
            .map(|r| json!({"index": r.index, "issues": r.issues}))
            .collect();
        return Err(ApiError::InvalidBody(details));
    }
    let new_schemas = state.store.ingest_telemetry(org, &rows, &gaps, now).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(TelemetryReceipt {
            received: count - rejected.len(),
            uncovered: gaps.len(),
            new_schemas,
            rejected,
        }),
    ))
}

/// `POST /allow/execution-events`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutionEvent {
    pub decision_id: Option<uuid::Uuid>,
    /// `success`, `failure` or `error`.
    pub result: Option<String>,
    /// At most 2000 characters.
    pub details: Option<String>,
}

/// The answer to an execution event.
#[derive(Debug, Serialize, ToSchema)]
pub struct Updated {
    pub updated: bool,
}

#[utoipa::path(post, path = "/allow/execution-events", tag = "telemetry", request_body = ExecutionEvent,
    responses((status = 200, body = Updated), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn execution(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(ev): ApiJson<ExecutionEvent>,
) -> Result<Json<Updated>, ApiError> {
    let mut issues = Issues::default();
    if ev.decision_id.is_none() {
        issues.push("decision_id", "required");
    }
    match ev.result.as_deref() {
        Some("success" | "failure" | "error") => {}
        Some(_) => issues.push("result", "must be success, failure or error"),
        None => issues.push("result", "required"),
    }
    issues.length_opt("details", ev.details.as_deref(), 0, 2000);
    issues.into_result(DetailsShape::RawIssues)?;
    let (id, result) = (
        ev.decision_id.unwrap_or_default(),
        ev.result.unwrap_or_default(),
    );
    let org = caller.key.org;
    // Only an agent key needs the decision read: to check it is its agent's.
    if caller.key.agent_id.is_some() {
        let d = state
            .store
            .action_decision(org, id)
            .await?
            .ok_or(ApiError::NotFound)?;
        if !caller.acts_for(&d.agent_id) {
            return Err(ApiError::NotFound);
        }
    }
    match state
        .store
        .record_execution(org, id, &result, ev.details.as_deref(), Utc::now())
        .await?
    {
        Some(true) => Ok(Json(Updated { updated: true })),
        Some(false) => Err(ApiError::Conflict(
            "an execution result is already recorded for this decision".into(),
        )),
        None => Err(ApiError::NotFound),
    }
}
