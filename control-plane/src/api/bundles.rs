//! `GET /rules/bundle`, `/allow/rules/bundle`, `/recall/rules/bundle`
//! (spec 2.12, 4.1-4.3): `ETag` is the quoted version, `If-None-Match`
//! answers `304`, and clients may cache privately for 60 s.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::{Deserialize, Serialize};

use crate::app::AppState;
use crate::auth::Caller;
use crate::bundles;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{DetailsShape, Issue};

/// The query of the agent-scoped bundles.
#[derive(Debug, Default, Deserialize)]
pub struct BundleQuery {
    pub agent_id: Option<String>,
}

/// The `agent_id` a bundle request names (required, 1-255), which an agent
/// key may only name as its own.
pub fn agent_id(
    caller: &Caller,
    query: Result<Query<BundleQuery>, QueryRejection>,
) -> Result<String, ApiError> {
    let invalid = |message: &str| {
        ApiError::InvalidQuery(DetailsShape::RawIssues.render(vec![Issue::new(
            "agent_id",
            "invalid_value",
            message,
        )]))
    };
    let Query(q) = query.map_err(|e| invalid(&e.body_text()))?;
    let value = q.agent_id.ok_or_else(|| invalid("agent_id is required"))?;
    if !(1..=255).contains(&value.chars().count()) {
        return Err(invalid("must be 1 to 255 characters"));
    }
    caller.require_acts_for(&value)?;
    Ok(value)
}

/// Whether `If-None-Match` names `etag` (or `*`).
fn not_modified(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == etag || t == "*")
}

fn respond<T: Serialize>(headers: &HeaderMap, version: &str, bundle: &T) -> Response {
    let etag = format!("\"{version}\"");
    let mut response = if not_modified(headers, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        axum::Json(bundle).into_response()
    };
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=60"),
    );
    response
}

#[utoipa::path(get, path = "/rules/bundle", tag = "bundles",
    params(("agent_id" = String, Query, description = "unknown ids are auto-provisioned in monitor mode"),
        ("If-None-Match" = Option<String>, Header)),
    responses((status = 200, description = "the unified bundle (spec 2.12)", body = Object), (status = 304, description = "unchanged"),
        (status = 400, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn unified(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<BundleQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let agent_id = agent_id(&caller, query)?;
    let bundle =
        bundles::unified(state.store.as_ref(), caller.key.org, &agent_id, Utc::now()).await?;
    Ok(respond(&headers, &bundle.version, &bundle))
}

#[utoipa::path(get, path = "/allow/rules/bundle", tag = "bundles",
    params(("agent_id" = String, Query), ("If-None-Match" = Option<String>, Header)),
    responses((status = 200, description = "the action bundle (spec 2.12)", body = Object), (status = 304, description = "unchanged"),
        (status = 400, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn action(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<BundleQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let agent_id = agent_id(&caller, query)?;
    let bundle =
        bundles::action(state.store.as_ref(), caller.key.org, &agent_id, Utc::now()).await?;
    Ok(respond(&headers, &bundle.version, &bundle))
}

#[utoipa::path(get, path = "/recall/rules/bundle", tag = "bundles",
    params(("If-None-Match" = Option<String>, Header)),
    responses((status = 200, description = "the retrieval bundle (spec 2.12)", body = Object), (status = 304, description = "unchanged")),
    security(("bearer" = [])))]
pub async fn retrieval(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let bundle = bundles::retrieval(state.store.as_ref(), caller.key.org).await?;
    Ok(respond(&headers, &bundle.version, &bundle))
}
