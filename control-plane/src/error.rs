//! The one error type of the API: every failure a client sees is an
//! [`ApiError`], rendered as the spec's envelope (2.13) with the `code`
//! derivation of §7. Handlers never build error JSON by hand.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::auth::{Permission, Scope};
use crate::store::StoreError;

/// The error envelope of spec 2.13 (extra properties are flattened in).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// Human-readable, or an identifier.
    pub error: String,
    /// Stable, `^[a-z][a-z0-9_]*$`; clients branch on it.
    pub code: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Validation issues on 400.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Vec<Value>>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Map<String, Value>,
}

/// Every error the API returns. Each variant's doc gives its status and code.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400 `Invalid request body` / `invalid_request`, with `details`.
    #[error("invalid request body")]
    InvalidBody(Vec<Value>),
    /// 400 `Invalid query parameters` / `invalid_request`, with `details`.
    #[error("invalid query parameters")]
    InvalidQuery(Vec<Value>),
    /// 400 `Invalid JSON body` / `invalid_request` (no `details`).
    #[error("invalid JSON body: {0}")]
    InvalidJson(String),
    /// 400 `Invalid <thing> ID` / `invalid_request`: a path parameter of the
    /// wrong shape (the string is the full message, e.g. `Invalid rule ID`).
    #[error("{0}")]
    InvalidPathId(&'static str),
    /// 400 `No fields to update` / `invalid_request`: an empty update body.
    #[error("no fields to update")]
    NoFieldsToUpdate,
    /// 400 with its own snake_case code (e.g. `not_an_api_key`).
    #[error("{0}")]
    BadRequestCode(&'static str, String),
    /// 401 `Unauthorized` / `unauthenticated`: no credential.
    #[error("missing credential")]
    Unauthenticated,
    /// 401 `Invalid API key or token` / `unauthenticated`.
    #[error("invalid API key")]
    InvalidKey,
    /// 401 `API key has expired` / `unauthenticated`.
    #[error("API key has expired")]
    KeyExpired,
    /// 403 `insufficient_permission` with `detail` and `requiredPermission`.
    #[error("insufficient permission: {0}")]
    InsufficientPermission(Permission),
    /// 403 `insufficient_scope` with `requiredScopes` and `grantedScopes`.
    #[error("insufficient scope")]
    InsufficientScope {
        required: Vec<Scope>,
        granted: Vec<Scope>,
    },
    /// 403 `harness_key_not_permitted`.
    #[error("harness key on a management route")]
    HarnessKeyNotPermitted,
    /// 403 with a message and `exceededPermissions` (creating, rotating or
    /// revoking beyond the caller's own permissions).
    #[error("{0}")]
    ExceededPermissions(&'static str, Vec<Permission>),
    /// 403 `agent_key_mismatch`: an agent key acting for another agent.
    #[error("agent key bound to another agent")]
    AgentKeyMismatch,
    /// 404 `not_found`.
    #[error("not found")]
    NotFound,
    /// 409 `conflict`.
    #[error("conflict: {0}")]
    Conflict(String),
    /// 409 `conflict` on a queue item already resolved, with its `status`.
    #[error("already resolved: {0}")]
    AlreadyResolved(String),
    /// 400 `invalid_idempotency_key`: malformed, or the two headers differ.
    #[error("invalid idempotency key: {0}")]
    InvalidIdempotencyKey(&'static str),
    /// 422 `idempotency_key_reused`: the key was used for another request.
    #[error("idempotency key reused for a different request")]
    IdempotencyKeyReused,
    /// 409 `idempotency_request_in_flight`: the first request is still running.
    #[error("idempotent request still in flight")]
    IdempotencyInFlight,
    /// 413 `payload_too_large`.
    #[error("payload too large")]
    PayloadTooLarge { limit: usize },
    /// 422 `unprocessable` (or a more specific code).
    #[error("{1}")]
    Unprocessable(&'static str, String),
    /// 429 `rate_limited` with `detail`, `retryAfter` and `Retry-After`.
    #[error("rate limited")]
    RateLimited { retry_after_secs: u64 },
    /// 503 `rate_limiter_unavailable` with `Retry-After`.
    #[error("rate limiter unavailable")]
    LimiterUnavailable { retry_after_secs: u64 },
    /// 500 with a specific message (the spec lists a few).
    #[error("{0}")]
    InternalMessage(&'static str),
    /// 500 `internal_error`: the cause is logged, never sent.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            StoreError::Conflict(what) => ApiError::Conflict(what),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl ApiError {
    /// The status this error answers with.
    pub fn status(&self) -> StatusCode {
        use ApiError::*;
        match self {
            InvalidBody(_) | InvalidQuery(_) | InvalidJson(_) | InvalidPathId(_)
            | BadRequestCode(..) | NoFieldsToUpdate => StatusCode::BAD_REQUEST,
            Unauthenticated | InvalidKey | KeyExpired => StatusCode::UNAUTHORIZED,
            InsufficientPermission(_)
            | InsufficientScope { .. }
            | HarnessKeyNotPermitted
            | ExceededPermissions(..)
            | AgentKeyMismatch => StatusCode::FORBIDDEN,
            NotFound => StatusCode::NOT_FOUND,
            Conflict(_) | IdempotencyInFlight | AlreadyResolved(_) => StatusCode::CONFLICT,
            InvalidIdempotencyKey(_) => StatusCode::BAD_REQUEST,
            IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Unprocessable(..) => StatusCode::UNPROCESSABLE_ENTITY,
            RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            LimiterUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            InternalMessage(_) | Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The envelope.
    pub fn body(&self) -> ErrorBody {
        use ApiError::*;
        let mut extra = Map::new();
        let (error, detail, details): (String, Option<String>, Option<Vec<Value>>) = match self {
            InvalidBody(d) => ("Invalid request body".into(), None, Some(d.clone())),
            InvalidQuery(d) => ("Invalid query parameters".into(), None, Some(d.clone())),
            InvalidJson(why) => ("Invalid JSON body".into(), Some(why.clone()), None),
            InvalidPathId(msg) => ((*msg).into(), None, None),
            NoFieldsToUpdate => ("No fields to update".into(), None, None),
            BadRequestCode(code, detail) => ((*code).into(), Some(detail.clone()), None),
            Unauthenticated => (
                "Unauthorized".into(),
                Some("Authorization: Bearer <API_KEY> is required".into()),
                None,
            ),
            InvalidKey => ("Invalid API key or token".into(), None, None),
            KeyExpired => ("API key has expired".into(), None, None),
            InsufficientPermission(p) => {
                extra.insert("requiredPermission".into(), json!(p));
                (
                    "insufficient_permission".into(),
                    Some(format!("this key lacks the permission `{p}`")),
                    None,
                )
            }
            InsufficientScope { required, granted } => {
                extra.insert("requiredScopes".into(), json!(required));
                extra.insert("grantedScopes".into(), json!(granted));
                (
                    "insufficient_scope".into(),
                    Some("this key's scopes do not cover the route".into()),
                    None,
                )
            }
            HarnessKeyNotPermitted => (
                "harness_key_not_permitted".into(),
                Some("harness keys reach only the operational allowlist".into()),
                None,
            ),
            ExceededPermissions(msg, exceeded) => {
                extra.insert("exceededPermissions".into(), json!(exceeded));
                ((*msg).into(), None, None)
            }
            NotFound => ("not_found".into(), None, None),
            AgentKeyMismatch => (
                "agent_key_mismatch".into(),
                Some("this agent key acts only for the agent it was issued to".into()),
                None,
            ),
            Conflict(what) => ("conflict".into(), Some(what.clone()), None),
            AlreadyResolved(status) => {
                extra.insert("status".into(), json!(status));
                ("conflict".into(), Some(format!("the item is already resolved ({status})")), None)
            }
            InvalidIdempotencyKey(why) => ("invalid_idempotency_key".into(), Some((*why).into()), None),
            IdempotencyKeyReused => (
                "idempotency_key_reused".into(),
                Some("this Idempotency-Key was used for a different method, path, query or body".into()),
                None,
            ),
            IdempotencyInFlight => (
                "idempotency_request_in_flight".into(),
                Some("the first request with this Idempotency-Key is still running; retry shortly".into()),
                None,
            ),
            PayloadTooLarge { limit } => (
                "payload_too_large".into(),
                Some(format!("the body exceeds the limit of {limit} bytes")),
                None,
            ),
            Unprocessable(code, detail) => ((*code).into(), Some(detail.clone()), None),
            RateLimited { retry_after_secs } => {
                extra.insert("retryAfter".into(), json!(retry_after_secs));
                (
                    "rate_limited".into(),
                    Some(format!("too many requests; retry in {retry_after_secs} s")),
                    None,
                )
            }
            LimiterUnavailable { .. } => (
                "rate_limiter_unavailable".into(),
                Some("the rate limiter or idempotency store cannot answer; the request was not processed".into()),
                None,
            ),
            InternalMessage(msg) => ((*msg).into(), None, None),
            Internal(_) => ("internal_error".into(), None, None),
        };
        ErrorBody {
            code: derive_code(self.status(), &error),
            error,
            detail,
            details,
            extra,
        }
    }
}

/// The `code` of spec §7: the `error` itself when it is a snake_case
/// identifier, else derived from the status.
pub fn derive_code(status: StatusCode, error: &str) -> String {
    let is_identifier = error.starts_with(|c: char| c.is_ascii_lowercase())
        && error
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if is_identifier {
        return error.to_owned();
    }
    match status {
        StatusCode::BAD_REQUEST => "invalid_request",
        StatusCode::UNAUTHORIZED => "unauthenticated",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::CONFLICT => "conflict",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNPROCESSABLE_ENTITY => "unprocessable",
        StatusCode::TOO_MANY_REQUESTS => "rate_limited",
        StatusCode::SERVICE_UNAVAILABLE => "service_unavailable",
        _ => "internal_error",
    }
    .to_owned()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            // The cause goes to the log only; the client sees the envelope.
            tracing::error!(error = %self, "request failed");
        }
        let retry_after = match &self {
            ApiError::RateLimited { retry_after_secs }
            | ApiError::LimiterUnavailable { retry_after_secs } => Some(*retry_after_secs),
            _ => None,
        };
        let mut response = (status, axum::Json(self.body())).into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_section_7() {
        assert_eq!(
            derive_code(StatusCode::BAD_REQUEST, "Invalid JSON body"),
            "invalid_request"
        );
        assert_eq!(
            derive_code(StatusCode::UNAUTHORIZED, "API key has expired"),
            "unauthenticated"
        );
        assert_eq!(
            derive_code(StatusCode::FORBIDDEN, "harness_key_not_permitted"),
            "harness_key_not_permitted"
        );
        assert_eq!(derive_code(StatusCode::NOT_FOUND, "not_found"), "not_found");
        assert_eq!(
            derive_code(StatusCode::BAD_REQUEST, "not_an_api_key"),
            "not_an_api_key"
        );
    }

    #[test]
    fn every_code_matches_the_pattern() {
        let samples = [
            ApiError::InvalidBody(vec![]),
            ApiError::InvalidPathId("Invalid rule ID"),
            ApiError::Unauthenticated,
            ApiError::InsufficientPermission(Permission::ApiKeysCreate),
            ApiError::ExceededPermissions("Cannot revoke a key more powerful than you", vec![]),
            ApiError::PayloadTooLarge { limit: 1 },
            ApiError::RateLimited {
                retry_after_secs: 3,
            },
            ApiError::Internal("boom".into()),
        ];
        for e in samples {
            let code = e.body().code;
            assert!(
                code.starts_with(|c: char| c.is_ascii_lowercase())
                    && code
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{code}"
            );
        }
    }

    #[test]
    fn internal_causes_are_not_sent() {
        let body = ApiError::Internal("password=hunter2".into()).body();
        assert!(!serde_json::to_string(&body).unwrap().contains("hunter2"));
    }
}
