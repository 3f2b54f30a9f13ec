//! `/rules`, `/allow/rules`, `/recall/rules`: one collection, three
//! surfaces (spec 4.1–4.3), and the emergency bypass.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use warden_engine::model::{Decision, Facet, Rule};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, DetailsShape, Issues, Pagination, RuleIdPath};
use crate::rules::{self, BypassBody, RuleBody, Surface};

/// A rule as the API shows it (spec 2.3). `rego_source` is present on
/// single reads, create and update, and omitted from lists.
#[derive(Debug, Serialize, ToSchema)]
pub struct RuleView {
    pub id: uuid::Uuid,
    /// `R-0001`…, per organization.
    pub rule_code: String,
    pub name: String,
    pub description: Option<String>,
    pub natural_language: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rego_source: Option<String>,
    /// Derived from the policy's `decision` literals.
    #[schema(value_type = String)]
    pub effect: Decision,
    pub priority: i64,
    pub enabled: bool,
    /// The stored form of `operations`.
    #[schema(value_type = Vec<String>)]
    pub applies_to: Vec<Facet>,
    pub target_app: Option<String>,
    pub action_pattern: Option<String>,
    pub trust_tier: Option<String>,
    pub surface: Option<String>,
    pub principal_exclusions: Option<Vec<String>>,
    pub bypass_active: bool,
    pub bypass_reason: Option<String>,
    pub bypass_activated_by: Option<String>,
    pub bypass_activated_at: Option<DateTime<Utc>>,
    pub bypass_expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<Rule> for RuleView {
    fn from(r: Rule) -> RuleView {
        RuleView {
            id: r.id,
            rule_code: r.rule_code,
            name: r.name,
            description: r.description,
            natural_language: r.natural_language,
            rego_source: r.rego_source,
            effect: r.effect,
            priority: r.priority,
            enabled: r.enabled,
            applies_to: r.applies_to,
            target_app: r.target_app,
            action_pattern: r.action_pattern,
            trust_tier: r.trust_tier,
            surface: r.surface,
            principal_exclusions: r.principal_exclusions,
            bypass_active: r.bypass.bypass_active,
            bypass_reason: r.bypass.bypass_reason,
            bypass_activated_by: r.bypass.bypass_activated_by,
            bypass_activated_at: r.bypass.bypass_activated_at,
            bypass_expires_at: r.bypass.bypass_expires_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// A page of rules, priority descending.
#[derive(Debug, Serialize, ToSchema)]
pub struct RulePage {
    pub data: Vec<RuleView>,
    pub total: u64,
    pub page: u32,
    pub limit: u32,
}

/// The answer to a delete.
#[derive(Debug, Serialize, ToSchema)]
pub struct Deleted {
    pub deleted: bool,
}

/// `GET /rules` filter.
#[derive(Debug, Default, Deserialize)]
pub struct RuleFilter {
    /// Comma-separated subset of `action`, `retrieval`, `delegation`.
    pub operations: Option<String>,
}

async fn list(
    state: AppState,
    caller: Caller,
    page: crate::store::Page,
    facets: Option<Vec<Facet>>,
) -> Result<Json<RulePage>, ApiError> {
    let (rules, total) = state
        .store
        .list_rules(caller.key.org, facets.as_deref(), page)
        .await?;
    Ok(Json(RulePage {
        data: rules.into_iter().map(RuleView::from).collect(),
        total,
        page: page.page,
        limit: page.limit,
    }))
}

async fn create(
    state: AppState,
    caller: Caller,
    surface: Surface,
    body: RuleBody,
) -> Result<(StatusCode, Json<RuleView>), ApiError> {
    let rule = rules::create(
        state.store.as_ref(),
        caller.key.org,
        surface,
        body,
        Utc::now(),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(rule.into())))
}

async fn get(state: AppState, caller: Caller, id: RuleIdPath) -> Result<Json<RuleView>, ApiError> {
    let rule = state
        .store
        .rule(caller.key.org, id.0)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(Json(rule.into()))
}

async fn update(
    state: AppState,
    caller: Caller,
    surface: Surface,
    id: RuleIdPath,
    body: RuleBody,
) -> Result<Json<RuleView>, ApiError> {
    let rule = rules::update(
        state.store.as_ref(),
        caller.key.org,
        surface,
        id.0,
        body,
        Utc::now(),
    )
    .await?;
    Ok(Json(rule.into()))
}

async fn delete(
    state: AppState,
    caller: Caller,
    id: RuleIdPath,
) -> Result<Json<Deleted>, ApiError> {
    if !state.store.delete_rule(caller.key.org, id.0).await? {
        return Err(ApiError::NotFound);
    }
    Ok(Json(Deleted { deleted: true }))
}

/// Handlers for one surface, documented for OpenAPI.
macro_rules! surface {
    ($module:ident, $surface:expr, $tag:literal, $list:literal, $item:literal) => {
        pub mod $module {
            use super::*;

            #[utoipa::path(get, path = $list, tag = $tag,
                params(("page" = Option<u32>, Query), ("limit" = Option<u32>, Query, description = "1-100, default 50")),
                responses((status = 200, body = RulePage), (status = 400, body = ErrorBody)),
                security(("bearer" = [])))]
            pub async fn list(State(state): State<AppState>, caller: Caller, Pagination(page): Pagination<100>) -> Result<Json<RulePage>, ApiError> {
                super::list(state, caller, page, None).await
            }

            #[utoipa::path(post, path = $list, tag = $tag, request_body = RuleBody,
                responses((status = 201, body = RuleView), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)),
                security(("bearer" = [])))]
            pub async fn create(State(state): State<AppState>, caller: Caller, ApiJson(body): ApiJson<RuleBody>) -> Result<(StatusCode, Json<RuleView>), ApiError> {
                super::create(state, caller, $surface, body).await
            }

            #[utoipa::path(get, path = $item, tag = $tag, params(("id" = uuid::Uuid, Path)),
                responses((status = 200, body = RuleView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
                security(("bearer" = [])))]
            pub async fn get(State(state): State<AppState>, caller: Caller, id: RuleIdPath) -> Result<Json<RuleView>, ApiError> {
                super::get(state, caller, id).await
            }

            #[utoipa::path(put, path = $item, tag = $tag, params(("id" = uuid::Uuid, Path)), request_body = RuleBody,
                responses((status = 200, body = RuleView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
                security(("bearer" = [])))]
            pub async fn update(State(state): State<AppState>, caller: Caller, id: RuleIdPath, ApiJson(body): ApiJson<RuleBody>) -> Result<Json<RuleView>, ApiError> {
                super::update(state, caller, $surface, id, body).await
            }

            #[utoipa::path(delete, path = $item, tag = $tag, params(("id" = uuid::Uuid, Path)),
                responses((status = 200, body = Deleted), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
                security(("bearer" = [])))]
            pub async fn delete(State(state): State<AppState>, caller: Caller, id: RuleIdPath) -> Result<Json<Deleted>, ApiError> {
                super::delete(state, caller, id).await
            }
        }
    };
}

surface!(
    action,
    Surface::Action,
    "action rules",
    "/allow/rules",
    "/allow/rules/{id}"
);
surface!(
    retrieval,
    Surface::Retrieval,
    "retrieval rules",
    "/recall/rules",
    "/recall/rules/{id}"
);

/// The unified surface: its list takes an `operations` filter.
pub mod unified {
    use super::*;

    #[utoipa::path(get, path = "/rules", tag = "rules",
        params(("page" = Option<u32>, Query), ("limit" = Option<u32>, Query, description = "1-100, default 50"),
            ("operations" = Option<String>, Query, description = "comma-separated subset of action, retrieval, delegation")),
        responses((status = 200, body = RulePage), (status = 400, body = ErrorBody)),
        security(("bearer" = [])))]
    pub async fn list(
        State(state): State<AppState>,
        caller: Caller,
        Pagination(page): Pagination<100>,
        filter: Result<Query<RuleFilter>, axum::extract::rejection::QueryRejection>,
    ) -> Result<Json<RulePage>, ApiError> {
        let Query(filter) = filter.map_err(|e| {
            ApiError::InvalidQuery(vec![serde_json::json!({"message": e.body_text()})])
        })?;
        let facets = match filter.operations {
            None => None,
            Some(text) => {
                let ops: Vec<String> = text
                    .split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect();
                let mut issues = Issues::default();
                let facets = rules::parse_operations(&ops, "operations", &mut issues);
                issues
                    .into_result(DetailsShape::RawIssues)
                    .map_err(|e| match e {
                        ApiError::InvalidBody(d) => ApiError::InvalidQuery(d),
                        other => other,
                    })?;
                Some(facets)
            }
        };
        super::list(state, caller, page, facets).await
    }

    #[utoipa::path(post, path = "/rules", tag = "rules", request_body = RuleBody,
        responses((status = 201, body = RuleView), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)),
        security(("bearer" = [])))]
    pub async fn create(
        State(state): State<AppState>,
        caller: Caller,
        ApiJson(body): ApiJson<RuleBody>,
    ) -> Result<(StatusCode, Json<RuleView>), ApiError> {
        super::create(state, caller, Surface::Unified, body).await
    }

    #[utoipa::path(get, path = "/rules/{id}", tag = "rules", params(("id" = uuid::Uuid, Path)),
        responses((status = 200, body = RuleView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
        security(("bearer" = [])))]
    pub async fn get(
        State(state): State<AppState>,
        caller: Caller,
        id: RuleIdPath,
    ) -> Result<Json<RuleView>, ApiError> {
        super::get(state, caller, id).await
    }

    #[utoipa::path(put, path = "/rules/{id}", tag = "rules", params(("id" = uuid::Uuid, Path)), request_body = RuleBody,
        responses((status = 200, body = RuleView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
        security(("bearer" = [])))]
    pub async fn update(
        State(state): State<AppState>,
        caller: Caller,
        id: RuleIdPath,
        ApiJson(body): ApiJson<RuleBody>,
    ) -> Result<Json<RuleView>, ApiError> {
        super::update(state, caller, Surface::Unified, id, body).await
    }

    #[utoipa::path(delete, path = "/rules/{id}", tag = "rules", params(("id" = uuid::Uuid, Path)),
        responses((status = 200, body = Deleted), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
        security(("bearer" = [])))]
    pub async fn delete(
        State(state): State<AppState>,
        caller: Caller,
        id: RuleIdPath,
    ) -> Result<Json<Deleted>, ApiError> {
        super::delete(state, caller, id).await
    }
}

#[utoipa::path(post, path = "/recall/rules/{id}/bypass", tag = "retrieval rules", params(("id" = uuid::Uuid, Path)), request_body = BypassBody,
    responses((status = 200, body = RuleView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn bypass_on(
    State(state): State<AppState>,
    caller: Caller,
    id: RuleIdPath,
    ApiJson(body): ApiJson<BypassBody>,
) -> Result<Json<RuleView>, ApiError> {
    let rule = rules::bypass(
        state.store.as_ref(),
        caller.key.org,
        id.0,
        Some(body),
        &caller.key,
        Utc::now(),
    )
    .await?;
    Ok(Json(rule.into()))
}

#[utoipa::path(delete, path = "/recall/rules/{id}/bypass", tag = "retrieval rules", params(("id" = uuid::Uuid, Path)),
    responses((status = 200, body = RuleView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn bypass_off(
    State(state): State<AppState>,
    caller: Caller,
    id: RuleIdPath,
) -> Result<Json<RuleView>, ApiError> {
    let rule = rules::bypass(
        state.store.as_ref(),
        caller.key.org,
        id.0,
        None,
        &caller.key,
        Utc::now(),
    )
    .await?;
    Ok(Json(rule.into()))
}
