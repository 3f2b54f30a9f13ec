//! Extractors whose rejections are [`ApiError`]s, so malformed input gets the
//! same envelope as every other error.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::error::ApiError;
use crate::store::{KeyId, Page};

/// A JSON body. Unparseable JSON is `400 Invalid JSON body`; JSON of the
/// wrong shape is `400 Invalid request body` with the offending path in
/// `details`; a body over the limit is `413`. An empty body reads as `{}`.
#[derive(Debug, Clone)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<ApiJson<T>, ApiError> {
        let limit = req.extensions().get::<BodyLimit>().map_or(0, |l| l.0);
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge { limit }
            } else {
                ApiError::InvalidJson(e.body_text())
            }
        })?;
        parse(if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        })
        .map(ApiJson)
    }
}

/// The body limit in force, recorded for the 413 message.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// Parses a JSON document into `T` (see [`ApiJson`]).
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data => {
                ApiError::InvalidBody(vec![issue(&path, "invalid_type", &inner.to_string())])
            }
            _ => ApiError::InvalidJson(inner.to_string()),
        }
    })?;
    de.end().map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    Ok(value)
}

/// One validation issue in the raw-issues shape of spec §7 (`code`, `path`
/// as an array, `message`).
pub fn issue(path: &str, code: &str, message: &str) -> Value {
    let segments: Vec<Value> = path
        .split('.')
        .filter(|s| !s.is_empty() && *s != "?")
        .map(|s| s.parse::<u64>().map_or_else(|_| json!(s), |n| json!(n)))
        .collect();
    json!({ "code": code, "path": segments, "message": message })
}

/// Collects validation issues; empty means valid.
#[derive(Debug, Default)]
pub struct Issues(Vec<Value>);

impl Issues {
    pub fn push(&mut self, path: &str, message: impl Into<String>) {
        self.0.push(issue(path, "custom", &message.into()));
    }

    /// Checks that `text` has `min..=max` characters.
    pub fn length(&mut self, path: &str, text: &str, min: usize, max: usize) {
        let n = text.chars().count();
        if n < min || n > max {
            self.push(path, format!("must be {min} to {max} characters, got {n}"));
        }
    }

    pub fn into_result(self) -> Result<(), ApiError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ApiError::InvalidBody(self.0))
        }
    }
}

/// A key id in the path: a malformed one is `400 Invalid key ID`.
#[derive(Debug, Clone, Copy)]
pub struct KeyIdPath(pub KeyId);

impl<S: Send + Sync> FromRequestParts<S> for KeyIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<KeyIdPath, ApiError> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::InvalidPathId("Invalid key ID"))?;
        Uuid::parse_str(&raw)
            .map(|u| KeyIdPath(KeyId(u)))
            .map_err(|_| ApiError::InvalidPathId("Invalid key ID"))
    }
}

/// `page` and `limit` (spec §8): default 50, at most `MAX`.
#[derive(Debug, Clone, Copy)]
pub struct Pagination<const MAX: u32>(pub Page);

impl<const MAX: u32, S: Send + Sync> FromRequestParts<S> for Pagination<MAX> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Pagination<MAX>, ApiError> {
        let query = parts.uri.query().unwrap_or("");
        let mut page = Page {
            page: 1,
            limit: 50.min(MAX),
        };
        let mut issues = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let slot = match name {
                "page" => &mut page.page,
                "limit" => &mut page.limit,
                _ => continue,
            };
            match value.parse::<u32>() {
                Ok(n) if n >= 1 && (name == "page" || n <= MAX) => *slot = n,
                _ => issues.push(issue(
                    name,
                    "invalid_value",
                    &if name == "page" {
                        "must be a positive integer".to_owned()
                    } else {
                        format!("must be an integer from 1 to {MAX}")
                    },
                )),
            }
        }
        if issues.is_empty() {
            Ok(Pagination(page))
        } else {
            Err(ApiError::InvalidQuery(issues))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Body {
        name: String,
        n: u32,
    }

    #[test]
    fn syntax_errors_and_shape_errors_are_told_apart() {
        assert!(matches!(
            parse::<Body>(b"{\"name\": "),
            Err(ApiError::InvalidJson(_))
        ));
        assert!(matches!(
            parse::<Body>(br#"{"name": "a", "n": 1} trailing"#),
            Err(ApiError::InvalidJson(_))
        ));
        match parse::<Body>(br#"{"name": "a", "n": "x"}"#) {
            Err(ApiError::InvalidBody(d)) => assert_eq!(d[0]["path"], json!(["n"])),
            other => panic!("{other:?}"),
        }
    }
}
