//! Authentication and authorization (spec §5): who the caller is, and
//! whether the route they asked for admits them.
//!
//! A route's requirement ([`Access`]) is declared once, in the route table
//! (`crate::routes`). The `authorize` middleware runs, in order:
//! authenticate (401) → rate limit (429/503, and the rate headers on every
//! authenticated response) → harness allowlist (403) → permission (403) →
//! scope (403). Handlers receive the [`Caller`] as an extractor.

mod key;
mod permission;

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};

pub use key::{
    AGENT_KEY_PREFIX, NewSecret, custom, display, generate, hash, hashes_match, prefix,
    presentable, well_formed,
};
pub use permission::{
    Audience, Environment, Permission, Scope, exceeded, parse_list, scopes_satisfy,
};

use crate::app::AppState;
use crate::error::ApiError;
use crate::limit::Verdict as LimitVerdict;
use crate::store::{ApiKey, KeyStatus};

/// What a route requires of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The caller needs one of these permissions (empty: none).
    pub permissions: &'static [Permission],
    /// The caller's scopes must include one of these (empty: none).
    pub scopes: &'static [Scope],
    /// On the harness allowlist of spec §5.2: harness keys may call it, with
    /// full power (no permission or scope check).
    pub harness: bool,
}

/// The authenticated caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub key: Arc<ApiKey>,
}

impl Caller {
    /// Whether the caller may act for `agent_id`: an agent key (`allow_…`)
    /// only for its own agent, any other key for every agent.
    pub fn acts_for(&self, agent_id: &str) -> bool {
        self.key
            .agent_id
            .as_deref()
            .is_none_or(|own| own == agent_id)
    }

    /// [`Caller::acts_for`], as `403 agent_key_mismatch`.
    pub fn require_acts_for(&self, agent_id: &str) -> Result<(), ApiError> {
        if self.acts_for(agent_id) {
            Ok(())
        } else {
            Err(ApiError::AgentKeyMismatch)
        }
    }

    /// Whether the caller holds `p` (harness keys hold none).
    pub fn holds(&self, p: Permission) -> bool {
        self.key.permissions.contains(&p)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Caller, ApiError> {
        // Set by `authorize`; a handler on a public route asking for a caller
        // is a programming error, answered as unauthenticated.
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or(ApiError::Unauthenticated)
    }
}

/// The bearer token of a request, if it carries one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Finds the key a request presents and checks that it is alive at `now`.
pub async fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
    now: DateTime<Utc>,
) -> Result<ApiKey, ApiError> {
    let token = bearer(headers).ok_or(ApiError::Unauthenticated)?;
    if !presentable(token) {
        return Err(ApiError::InvalidKey);
    }
    let digest = hash(token);
    let key = state
        .store
        .key_by_hash(&digest)
        .await?
        .ok_or(ApiError::InvalidKey)?;
    // The lookup was by hash; compare again in constant time so that no
    // code path compares secrets with an early exit.
    if !hashes_match(&key.hash, &digest) {
        return Err(ApiError::InvalidKey);
    }
    match key.status(now) {
        KeyStatus::Active | KeyStatus::Retiring => Ok(key),
        KeyStatus::Expired => Err(ApiError::KeyExpired),
        KeyStatus::Revoked => Err(ApiError::InvalidKey),
    }
}

/// Checks a caller against a route's requirement (after authentication).
pub fn admit(key: &ApiKey, access: &Access) -> Result<(), ApiError> {
    match key.audience {
        Audience::Harness if access.harness => return Ok(()),
        Audience::Harness => return Err(ApiError::HarnessKeyNotPermitted),
        Audience::Management => {}
    }
    if let Some(first) = access.permissions.first()
        && !access
            .permissions
            .iter()
            .any(|p| key.permissions.contains(p))
    {
        return Err(ApiError::InsufficientPermission(*first));
    }
    if !scopes_satisfy(&key.scopes, access.scopes) {
        return Err(ApiError::InsufficientScope {
            required: access.scopes.to_vec(),
            granted: key.scopes.clone(),
        });
    }
    Ok(())
}

/// The middleware every authenticated route runs (see the module docs).
pub async fn authorize(
    State((state, access)): State<(AppState, Access)>,
    mut req: Request,
    next: Next,
) -> Response {
    let now = Utc::now();
    let key = match authenticate(&state, req.headers(), now).await {
        Ok(key) => key,
        Err(e) => return e.into_response(),
    };
    let limit = match state.limiter.check(key.id, now).await {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(error = %e, "rate limiter unavailable");
            return ApiError::LimiterUnavailable {
                retry_after_secs: 1,
            }
            .into_response();
        }
    };
    let mut response = if !limit.allowed {
        ApiError::RateLimited {
            retry_after_secs: limit.retry_after_secs,
        }
        .into_response()
    } else if let Err(e) = admit(&key, &access) {
        e.into_response()
    } else {
        state.touch(&key, req.uri().path(), now);
        req.extensions_mut().insert(Caller { key: Arc::new(key) });
        next.run(req).await
    };
    rate_headers(response.headers_mut(), &limit);
    response
}

/// Typed names: inserting by a string validates the name on every response.
const RATE_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const RATE_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");

fn rate_headers(headers: &mut HeaderMap, v: &LimitVerdict) {
    headers.insert(RATE_LIMIT, HeaderValue::from(v.limit));
    headers.insert(RATE_REMAINING, HeaderValue::from(v.remaining));
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use uuid::Uuid;

    use super::*;
    use crate::store::{KeyId, OrgId};

    fn key(audience: Audience, permissions: &[Permission], scopes: &[Scope]) -> ApiKey {
        ApiKey {
            id: KeyId(Uuid::nil()),
            org: OrgId(Uuid::nil()),
            name: "k".into(),
            hash: String::new(),
            display: String::new(),
            audience,
            environment: Environment::Production,
            permissions: permissions.to_vec(),
            scopes: scopes.to_vec(),
            agent_id: None,
            created_by: None,
            created_at: Utc::now(),
            expires_at: None,
            revoked_at: None,
            replaced_by: None,
            last_used_at: None,
        }
    }

    const EVALUATE: Access = Access {
        permissions: &[],
        scopes: &[Scope::RulesEvaluate, Scope::AllowWrite],
        harness: true,
    };
    const RULES_WRITE: Access = Access {
        permissions: &[Permission::AllowRulesCreate],
        scopes: &[Scope::RulesWrite],
        harness: false,
    };

    #[test]
    fn admission_follows_section_5() {
        let m = |p: &[Permission], s: &[Scope]| key(Audience::Management, p, s);
        // Harness keys: full power on the allowlist, refused elsewhere.
        assert!(admit(&key(Audience::Harness, &[], &[]), &EVALUATE).is_ok());
        assert!(matches!(
            admit(
                &key(Audience::Harness, &[], &[Scope::FullAccess]),
                &RULES_WRITE
            ),
            Err(ApiError::HarnessKeyNotPermitted)
        ));
        // Scopes: any accepted one, or full_access.
        assert!(admit(&m(&[], &[Scope::AllowWrite]), &EVALUATE).is_ok());
        assert!(admit(&m(&[], &[Scope::FullAccess]), &EVALUATE).is_ok());
        match admit(&m(&[], &[Scope::RulesRead]), &EVALUATE) {
            Err(ApiError::InsufficientScope { required, granted }) => {
                assert_eq!(required, [Scope::RulesEvaluate, Scope::AllowWrite]);
                assert_eq!(granted, [Scope::RulesRead]);
            }
            other => panic!("{other:?}"),
        }
        // Permission before scope.
        assert!(matches!(
            admit(&m(&[], &[]), &RULES_WRITE),
            Err(ApiError::InsufficientPermission(
                Permission::AllowRulesCreate
            ))
        ));
        assert!(matches!(
            admit(
                &m(&[Permission::AllowRulesCreate], &[Scope::RulesRead]),
                &RULES_WRITE
            ),
            Err(ApiError::InsufficientScope { .. })
        ));
        assert!(
            admit(
                &m(&[Permission::AllowRulesCreate], &[Scope::RulesWrite]),
                &RULES_WRITE
            )
            .is_ok()
        );
    }

    #[test]
    fn bearer_tokens_are_read_case_insensitively() {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer abc"),
        );
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&h), None);
    }
}
