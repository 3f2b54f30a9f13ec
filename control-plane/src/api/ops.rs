//! Operational endpoints: liveness, readiness, metrics, the OpenAPI
//! document. They are public (probes and scrapers carry no API key) and
//! reveal nothing about tenants.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::app::AppState;

/// `GET /healthz`: the process is up.
#[utoipa::path(get, path = "/healthz", tag = "ops", responses((status = 200, body = String)))]
pub async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz`: the database (and Redis, when configured) answer, and a
/// replica hears the others (PostgreSQL's listener is connected: without
/// it, mode changes made elsewhere would not reach this replica's streams).
#[utoipa::path(get, path = "/readyz", tag = "ops",
    responses((status = 200, body = String), (status = 503, body = String)))]
pub async fn readyz(State(state): State<AppState>) -> Response {
    if let Err(e) = state.store.ping().await {
        tracing::warn!(error = %e, "not ready: database");
        return (StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response();
    }
    if !state.store.hears_replicas() {
        tracing::warn!("not ready: not listening to the other replicas yet");
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "replica listener not connected",
        )
            .into_response();
    }
    if let Some(redis) = &state.redis
        && let Err(e) = redis.ping().await
    {
        tracing::warn!(error = %e, "not ready: redis");
        return (StatusCode::SERVICE_UNAVAILABLE, "redis unavailable").into_response();
    }
    "ready".into_response()
}

/// `GET /metrics`: Prometheus (OpenMetrics) text.
#[utoipa::path(get, path = "/metrics", tag = "ops", responses((status = 200, body = String)))]
pub async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

/// `GET /openapi.json`: this API's OpenAPI 3.1 document, generated from the code.
#[utoipa::path(get, path = "/openapi.json", tag = "ops", responses((status = 200, body = Object)))]
pub async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(crate::openapi::document())
}
