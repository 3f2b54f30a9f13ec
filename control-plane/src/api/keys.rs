//! `/api/keys`: key management over HTTP (the spec leaves these paths to us;
//! they are documented in the OpenAPI document), and self-revocation.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::app::AppState;
use crate::auth::{Audience, Caller, Environment, Permission, Scope};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, DetailsShape, Issues, KeyIdPath, Pagination};
use crate::keys::{self, Expiry, Grace, Issued, KeySpec};
use crate::store::{ApiKey, KeyStatus};

/// A key as reads show it: never the secret or its hash.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyView {
    pub id: uuid::Uuid,
    pub name: String,
    /// The first 16 characters followed by asterisks.
    pub display: String,
    pub audience: Audience,
    pub environment: Environment,
    pub permissions: Vec<Permission>,
    pub scopes: Vec<Scope>,
    #[schema(value_type = String)]
    pub status: KeyStatus,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub replaced_by_key_id: Option<uuid::Uuid>,
    pub created_by_key_id: Option<uuid::Uuid>,
}

impl KeyView {
    pub fn of(k: &ApiKey, now: DateTime<Utc>) -> KeyView {
        KeyView {
            id: k.id.0,
            name: k.name.clone(),
            display: k.display.clone(),
            audience: k.audience,
            environment: k.environment,
            permissions: k.permissions.clone(),
            scopes: k.scopes.clone(),
            status: k.status(now),
            created_at: k.created_at,
            expires_at: k.expires_at,
            revoked_at: k.revoked_at,
            last_used_at: k.last_used_at,
            replaced_by_key_id: k.replaced_by.map(|r| r.0),
            created_by_key_id: k.created_by.map(|c| c.0),
        }
    }
}

/// A key just created or rotated: the view and the plaintext, shown once.
#[derive(Debug, Serialize, ToSchema)]
pub struct IssuedKey {
    #[serde(flatten)]
    pub key: KeyView,
    /// The secret. It is never shown again.
    pub api_key: String,
}

impl IssuedKey {
    fn of(issued: Issued, now: DateTime<Utc>) -> IssuedKey {
        IssuedKey {
            key: KeyView::of(&issued.key, now),
            api_key: issued.plaintext,
        }
    }
}

/// `POST /api/keys`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    /// 1-50 characters.
    pub name: String,
    pub audience: Audience,
    /// Default `production`.
    #[serde(default)]
    pub environment: Option<Environment>,
    /// Management keys only; each must be one the caller holds.
    #[serde(default)]
    pub permissions: Vec<Permission>,
    /// Default `full_access` when the caller has it, else the caller's scopes.
    #[serde(default)]
    pub scopes: Option<Vec<Scope>>,
    /// `30d`, `90d` (default), `180d`, `1y` or `never`.
    #[serde(default)]
    pub expires: Option<Expiry>,
}

/// A page of keys.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyPage {
    pub data: Vec<KeyView>,
    pub total: u64,
    pub page: u32,
    pub limit: u32,
}

/// `POST /api/keys/{id}/rotate`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateKey {
    /// `immediate`, `1h`, `24h` (default) or `7d`.
    #[serde(default)]
    pub grace: Option<Grace>,
}

/// The answer to a revocation.
#[derive(Debug, Serialize, ToSchema)]
pub struct Revoked {
    pub revoked: bool,
    pub api_key_id: uuid::Uuid,
    /// The revoked key's audience.
    pub key_type: Audience,
}

#[utoipa::path(post, path = "/api/keys", tag = "keys", request_body = CreateKey,
    responses((status = 201, body = IssuedKey), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateKey>,
) -> Result<(StatusCode, Json<IssuedKey>), ApiError> {
    let mut issues = Issues::default();
    issues.length("name", &body.name, 1, 50);
    if body.audience == Audience::Harness && !body.permissions.is_empty() {
        issues.push(
            "permissions",
            "harness keys carry no permissions: they reach the operational allowlist only",
        );
    }
    issues.into_result(DetailsShape::RawIssues)?;
    let scopes = body.scopes.unwrap_or_else(|| caller.key.scopes.clone());
    let now = Utc::now();
    let spec = KeySpec {
        name: body.name,
        audience: body.audience,
        environment: body.environment.unwrap_or(Environment::Production),
        permissions: body.permissions,
        scopes,
        expiry: body.expires.unwrap_or_default(),
        agent_id: None,
        plaintext: None,
    };
    let issued = keys::create(
        state.store.as_ref(),
        caller.key.org,
        Some(&caller.key),
        spec,
        now,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(IssuedKey::of(issued, now))))
}

#[utoipa::path(get, path = "/api/keys", tag = "keys",
    params(("page" = Option<u32>, Query), ("limit" = Option<u32>, Query, description = "1-100, default 50")),
    responses((status = 200, body = KeyPage), (status = 400, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Pagination(page): Pagination<100>,
) -> Result<Json<KeyPage>, ApiError> {
    let (rows, total) = state.store.list_keys(caller.key.org, page).await?;
    let now = Utc::now();
    Ok(Json(KeyPage {
        data: rows.iter().map(|k| KeyView::of(k, now)).collect(),
        total,
        page: page.page,
        limit: page.limit,
    }))
}

#[utoipa::path(get, path = "/api/keys/{id}", tag = "keys", params(("id" = uuid::Uuid, Path)),
    responses((status = 200, body = KeyView), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    KeyIdPath(id): KeyIdPath,
) -> Result<Json<KeyView>, ApiError> {
    let key = state
        .store
        .key(caller.key.org, id)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(Json(KeyView::of(&key, Utc::now())))
}

#[utoipa::path(post, path = "/api/keys/{id}/rotate", tag = "keys", params(("id" = uuid::Uuid, Path)), request_body = RotateKey,
    responses((status = 201, body = IssuedKey), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn rotate(
    State(state): State<AppState>,
    caller: Caller,
    KeyIdPath(id): KeyIdPath,
    ApiJson(body): ApiJson<RotateKey>,
) -> Result<(StatusCode, Json<IssuedKey>), ApiError> {
    let old = state
        .store
        .key(caller.key.org, id)
        .await?
        .ok_or(ApiError::NotFound)?;
    let now = Utc::now();
    let issued = keys::rotate(
        state.store.as_ref(),
        &old,
        Some(&caller.key),
        body.grace.unwrap_or_default(),
        now,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(IssuedKey::of(issued, now))))
}

#[utoipa::path(delete, path = "/api/keys/{id}", tag = "keys", params(("id" = uuid::Uuid, Path)),
    responses((status = 200, body = Revoked), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    KeyIdPath(id): KeyIdPath,
) -> Result<Json<Revoked>, ApiError> {
    let target = state
        .store
        .key(caller.key.org, id)
        .await?
        .ok_or(ApiError::NotFound)?;
    keys::revoke(state.store.as_ref(), &target, Some(&caller.key), Utc::now()).await?;
    Ok(Json(Revoked {
        revoked: true,
        api_key_id: target.id.0,
        key_type: target.audience,
    }))
}

/// `POST /allow/self/revoke` and `POST /api/allow/self/revoke` (spec 4.6).
#[utoipa::path(post, path = "/allow/self/revoke", tag = "keys",
    responses((status = 200, body = Revoked), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn self_revoke(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<Revoked>, ApiError> {
    keys::revoke(
        state.store.as_ref(),
        &caller.key,
        Some(&caller.key),
        Utc::now(),
    )
    .await?;
    Ok(Json(Revoked {
        revoked: true,
        api_key_id: caller.key.id.0,
        key_type: caller.key.audience,
    }))
}

#[utoipa::path(post, path = "/api/allow/self/revoke", tag = "keys",
    responses((status = 200, body = Revoked), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn self_revoke_api(
    state: State<AppState>,
    caller: Caller,
) -> Result<Json<Revoked>, ApiError> {
    self_revoke(state, caller).await
}
