//! Idempotent writes (spec §8): a write carrying `Idempotency-Key` (or the
//! legacy `X-Idempotency-Key`) runs once per sending credential and key for
//! 24 hours; repeats get the stored response with `X-Idempotent-Replayed`.
//!
//! The middleware sits inside `authorize` (it needs the caller) on the write
//! routes the route table marks idempotent. A repeat with another method,
//! path, query or body is 422; a repeat while the first still runs waits
//! briefly, then 409; 5xx and 429 responses release the key; other 4xx are
//! stored. A key held over 2 minutes without finishing is abandoned and
//! taken over. If the store cannot answer: 503, request not processed.

use std::time::Duration;

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::{TimeDelta, Utc};
use sha2::{Digest, Sha256};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::store::{IdemClaim, IdemKey, IdemRecord};

/// How long a key and its response are kept.
const TTL: TimeDelta = TimeDelta::hours(24);
/// A key held this long without finishing is abandoned.
const ABANDONED_AFTER: TimeDelta = TimeDelta::minutes(2);
/// How long a repeat waits for the first request before answering 409.
const WAIT_FOR_FIRST: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(100);
/// Responses larger than this are not stored (the key is released).
const MAX_STORED_BODY: usize = 4 * 1024 * 1024;

/// The headers a replay carries over from the original response (never cookies).
const REPLAYED: [HeaderName; 7] = [
    header::CONTENT_TYPE,
    header::LOCATION,
    header::CONTENT_LOCATION,
    header::ETAG,
    header::LINK,
    HeaderName::from_static("deprecation"),
    HeaderName::from_static("sunset"),
];

/// The key a request carries, validated: 1-256 letters, digits, `-`, `_`.
fn key_of(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let read = |name: &str| headers.get(name).map(|v| v.to_str().map(str::to_owned));
    let key = match (read("idempotency-key"), read("x-idempotency-key")) {
        (None, None) => return Ok(None),
        (Some(Ok(a)), Some(Ok(b))) if a != b => {
            return Err(ApiError::InvalidIdempotencyKey(
                "Idempotency-Key and X-Idempotency-Key differ",
            ));
        }
        (Some(Ok(k)), _) | (None, Some(Ok(k))) => k,
        _ => return Err(ApiError::InvalidIdempotencyKey("the key must be ASCII")),
    };
    let ok = (1..=256).contains(&key.len())
        && key
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_');
    if ok {
        Ok(Some(key))
    } else {
        Err(ApiError::InvalidIdempotencyKey(
            "the key must be 1-256 letters, digits, '-' or '_'",
        ))
    }
}

/// What identifies "the same request": SHA-256 over method, path, query
/// and body.
pub fn request_hash(method: &str, path: &str, query: Option<&str>, body: &[u8]) -> String {
    let mut h = Sha256::new();
    for part in [
        method.as_bytes(),
        path.as_bytes(),
        query.unwrap_or("").as_bytes(),
    ] {
        h.update(part);
        h.update(b"\n");
    }
    h.update(body);
    hex::encode(h.finalize())
}

fn unavailable(e: impl std::fmt::Display) -> Response {
    tracing::warn!(error = %e, "idempotency store unavailable");
    ApiError::LimiterUnavailable {
        retry_after_secs: 1,
    }
    .into_response()
}

fn replay(rec: &IdemRecord) -> Response {
    let status = rec
        .status
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let mut response = (status, rec.body.clone()).into_response();
    let headers = response.headers_mut();
    for (name, value) in &rec.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.insert(n, v);
        }
    }
    headers.insert("x-idempotent-replayed", HeaderValue::from_static("true"));
    response
}

/// The middleware (see the module docs).
pub async fn idempotent(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let key = match key_of(req.headers()) {
        Ok(Some(k)) => k,
        Ok(None) => return next.run(req).await,
        Err(e) => return e.into_response(),
    };
    let Some(caller) = req.extensions().get::<Caller>().cloned() else {
        return ApiError::Unauthenticated.into_response();
    };
    let limit = state.config.max_body_bytes;
    let (parts, body) = req.into_parts();
    let Ok(bytes) = to_bytes(body, limit).await else {
        return ApiError::PayloadTooLarge { limit }.into_response();
    };
    let hash = request_hash(
        parts.method.as_str(),
        parts.uri.path(),
        parts.uri.query(),
        &bytes,
    );
    let id = IdemKey {
        org: caller.key.org,
        credential: caller.key.id,
        key: &key,
    };
    let store = state.store.as_ref();
    let started = std::time::Instant::now();
    loop {
        let now = Utc::now();
        let held = match store.idem_claim(id, &hash, now, now + TTL).await {
            Ok(IdemClaim::Claimed) => break,
            Ok(IdemClaim::Held(rec)) => rec,
            Err(e) => return unavailable(e),
        };
        if held.expires_at <= now || (!held.done && held.started_at < now - ABANDONED_AFTER) {
            match store
                .idem_take_over(id, &hash, now, now + TTL, now - ABANDONED_AFTER)
                .await
            {
                Ok(true) => break,
                Ok(false) => continue,
                Err(e) => return unavailable(e),
            }
        }
        if held.request_hash != hash {
            return ApiError::IdempotencyKeyReused.into_response();
        }
        if held.done {
            return replay(&held);
        }
        if started.elapsed() >= WAIT_FOR_FIRST {
            return ApiError::IdempotencyInFlight.into_response();
        }
        tokio::time::sleep(POLL).await;
    }

    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    let (parts, body) = response.into_parts();
    let status = parts.status;
    let body = match to_bytes(body, MAX_STORED_BODY).await {
        Ok(b) => b,
        Err(e) => {
            let _ = store.idem_release(id).await;
            return ApiError::Internal(format!("response too large to store: {e}")).into_response();
        }
    };
    let outcome = if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        store.idem_release(id).await
    } else {
        let headers: Vec<(String, String)> = REPLAYED
            .iter()
            .filter_map(|n| {
                Some((
                    n.as_str().to_owned(),
                    parts.headers.get(n)?.to_str().ok()?.to_owned(),
                ))
            })
            .collect();
        store
            .idem_finish(id, status.as_u16(), &headers, &body)
            .await
    };
    if let Err(e) = outcome {
        // The write itself happened; a repeat will wait, then find the key
        // abandoned and run again. Say so in the log.
        tracing::error!(error = %e, "could not record the idempotent response");
    }
    Response::from_parts(parts, Body::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn keys_are_validated() {
        assert_eq!(key_of(&headers(&[])).unwrap(), None);
        assert_eq!(
            key_of(&headers(&[("idempotency-key", "abc-1_2")]))
                .unwrap()
                .as_deref(),
            Some("abc-1_2")
        );
        assert_eq!(
            key_of(&headers(&[("x-idempotency-key", "legacy")]))
                .unwrap()
                .as_deref(),
            Some("legacy")
        );
        assert!(
            key_of(&headers(&[
                ("idempotency-key", "a"),
                ("x-idempotency-key", "b")
            ]))
            .is_err()
        );
        assert!(
            key_of(&headers(&[
                ("idempotency-key", "a"),
                ("x-idempotency-key", "a")
            ]))
            .is_ok()
        );
        assert!(key_of(&headers(&[("idempotency-key", "has space")])).is_err());
        assert!(key_of(&headers(&[("idempotency-key", &"k".repeat(257))])).is_err());
    }
}
