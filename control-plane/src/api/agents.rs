//! `/allow/agents…` (spec 2.2, 3.2, 4.2).

use std::net::SocketAddr;

use axum::Json;
use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;
use warden_engine::model::{AgentMode, AgentNoCoverage, BusinessFunction, ModeByOperation};

use crate::agents::{self, AgentBody, RegisterBody};
use crate::api::rules::Deleted;
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{AgentIdPath, ApiJson, Pagination};
use crate::store::Agent;

/// An agent as reads show it: never key material.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentView {
    pub id: uuid::Uuid,
    pub agent_id: String,
    pub name: String,
    pub description: Option<String>,
    /// The resolved mode (the agent's own, or the organization default).
    #[schema(value_type = String)]
    pub mode: AgentMode,
    /// Whether `mode` is inherited from the organization's `default_agent_mode`.
    pub mode_inherited: bool,
    #[schema(value_type = Object)]
    pub mode_by_operation: ModeByOperation,
    pub owner_email: Option<String>,
    pub hitl_pathway: Option<String>,
    pub trust_tier: Option<String>,
    pub categories: Vec<String>,
    #[schema(value_type = Option<String>)]
    pub no_coverage: Option<AgentNoCoverage>,
    #[schema(value_type = Option<String>)]
    pub business_function: Option<BusinessFunction>,
    pub agent_os: Option<String>,
    pub agent_hostname: Option<String>,
    pub agent_ip: Option<String>,
    pub agent_username: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl AgentView {
    fn of(a: Agent, org_default: AgentMode) -> AgentView {
        let modes = agents::modes(&a, org_default);
        AgentView {
            id: a.id,
            agent_id: a.agent_id,
            name: a.doc.name,
            description: a.doc.description,
            mode: modes.mode,
            mode_inherited: a.mode.is_none(),
            mode_by_operation: a.doc.mode_by_operation,
            owner_email: a.doc.owner_email,
            hitl_pathway: a.doc.hitl_pathway,
            trust_tier: a.doc.trust_tier,
            categories: a.doc.categories,
            no_coverage: a.doc.no_coverage,
            business_function: a.doc.business_function,
            agent_os: a.doc.agent_os,
            agent_hostname: a.doc.agent_hostname,
            agent_ip: a.doc.agent_ip,
            agent_username: a.doc.agent_username,
            created_at: a.created_at,
            updated_at: a.updated_at,
        }
    }
}

/// A new agent and its key, shown once.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedAgent {
    #[serde(flatten)]
    pub agent: AgentView,
    /// The agent's `allow_` key (harness audience). Never shown again.
    pub api_key: String,
}

/// A page of agents, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentPage {
    pub data: Vec<AgentView>,
    pub total: u64,
    pub page: u32,
    pub limit: u32,
}

/// The answer to `regenerate-naming`.
#[derive(Debug, Serialize, ToSchema)]
pub struct NamingResult {
    /// `skipped` while no naming model is configured.
    pub status: String,
    pub reason: String,
}

/// The answer to registration.
#[derive(Debug, Serialize, ToSchema)]
pub struct Registered {
    pub ok: bool,
    pub agent_id: String,
}

fn mode_event(caller: &Caller, agent_id: &str) -> crate::store::ModeEvent {
    crate::store::ModeEvent {
        org: caller.key.org,
        agent_id: Some(agent_id.to_owned()),
    }
}

async fn org_default(state: &AppState, caller: &Caller) -> Result<AgentMode, ApiError> {
    Ok(state
        .store
        .ensure_settings(caller.key.org, Utc::now())
        .await?
        .0
        .doc
        .default_agent_mode)
}

#[utoipa::path(get, path = "/allow/agents", tag = "agents",
    params(("page" = Option<u32>, Query), ("limit" = Option<u32>, Query, description = "1-100, default 50")),
    responses((status = 200, body = AgentPage), (status = 400, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Pagination(page): Pagination<100>,
) -> Result<Json<AgentPage>, ApiError> {
    let default = org_default(&state, &caller).await?;
    let (rows, total) = state.store.list_agents(caller.key.org, page).await?;
    Ok(Json(AgentPage {
        data: rows
            .into_iter()
            .map(|a| AgentView::of(a, default))
            .collect(),
        total,
        page: page.page,
        limit: page.limit,
    }))
}

#[utoipa::path(post, path = "/allow/agents", tag = "agents", request_body = AgentBody,
    responses((status = 201, body = CreatedAgent), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<AgentBody>,
) -> Result<(StatusCode, Json<CreatedAgent>), ApiError> {
    let (agent, issued) = agents::create(
        state.store.as_ref(),
        caller.key.org,
        &caller.key,
        body,
        Utc::now(),
    )
    .await?;
    state
        .announce_mode(mode_event(&caller, &agent.agent_id))
        .await;
    let default = org_default(&state, &caller).await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedAgent {
            agent: AgentView::of(agent, default),
            api_key: issued.plaintext,
        }),
    ))
}

#[utoipa::path(get, path = "/allow/agents/{id}", tag = "agents", params(("id" = uuid::Uuid, Path)),
    responses((status = 200, body = AgentView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    AgentIdPath(id): AgentIdPath,
) -> Result<Json<AgentView>, ApiError> {
    let agent = agents::live(state.store.as_ref(), caller.key.org, id).await?;
    Ok(Json(AgentView::of(
        agent,
        org_default(&state, &caller).await?,
    )))
}

#[utoipa::path(put, path = "/allow/agents/{id}", tag = "agents", params(("id" = uuid::Uuid, Path)), request_body = AgentBody,
    responses((status = 200, body = AgentView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    AgentIdPath(id): AgentIdPath,
    ApiJson(body): ApiJson<AgentBody>,
) -> Result<Json<AgentView>, ApiError> {
    let agent = agents::update(state.store.as_ref(), caller.key.org, id, body, Utc::now()).await?;
    // Subscribers re-read the mode and hear only real changes.
    state
        .announce_mode(mode_event(&caller, &agent.agent_id))
        .await;
    Ok(Json(AgentView::of(
        agent,
        org_default(&state, &caller).await?,
    )))
}

#[utoipa::path(delete, path = "/allow/agents/{id}", tag = "agents", params(("id" = uuid::Uuid, Path)),
    responses((status = 200, body = Deleted), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    AgentIdPath(id): AgentIdPath,
) -> Result<Json<Deleted>, ApiError> {
    let agent = agents::live(state.store.as_ref(), caller.key.org, id).await?;
    let now = Utc::now();
    // Shut down, not forgotten: its sidecar now gets the terminal bundle.
    state
        .store
        .save_agent(caller.key.org, id, agent.mode, &agent.doc, Some(now), now)
        .await?;
    state
        .announce_mode(mode_event(&caller, &agent.agent_id))
        .await;
    Ok(Json(Deleted { deleted: true }))
}

#[utoipa::path(post, path = "/allow/agents/{id}/regenerate-naming", tag = "agents", params(("id" = uuid::Uuid, Path)),
    responses((status = 200, body = NamingResult), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn regenerate_naming(
    State(state): State<AppState>,
    caller: Caller,
    AgentIdPath(id): AgentIdPath,
) -> Result<Json<NamingResult>, ApiError> {
    agents::live(state.store.as_ref(), caller.key.org, id).await?;
    Ok(Json(NamingResult {
        status: "skipped".into(),
        reason: "no naming model is configured".into(),
    }))
}

#[utoipa::path(post, path = "/allow/agents/register", tag = "agents", request_body = RegisterBody,
    responses((status = 200, body = Registered), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn register(
    State(state): State<AppState>,
    caller: Caller,
    peer: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    ApiJson(body): ApiJson<RegisterBody>,
) -> Result<Json<Registered>, ApiError> {
    caller.require_acts_for(&body.agent_id)?;
    let source = peer.map(|axum::Extension(ConnectInfo(addr))| addr.ip().to_string());
    let agent = agents::register(
        state.store.as_ref(),
        caller.key.org,
        body,
        source,
        Utc::now(),
    )
    .await?;
    Ok(Json(Registered {
        ok: true,
        agent_id: agent.agent_id,
    }))
}
