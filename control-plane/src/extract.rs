//! Extractors whose rejections are [`ApiError`]s, so malformed input gets the
//! same envelope as every other error; and [`ApiJson`] as a response too.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::error::ApiError;
use crate::store::{KeyId, Page};

/// For `Option<Option<T>>` body fields: `Some(None)` for an explicit
/// `null` (clear the field), `None` when absent (leave it alone).
pub fn nullable<'de, D: serde::Deserializer<'de>, T: serde::Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    <Option<T> as serde::Deserialize>::deserialize(d).map(Some)
}

/// A JSON body. Unparseable JSON is `400 Invalid JSON body`; JSON of the
/// wrong shape is `400 Invalid request body` with the offending path in
/// `details`; a body over the limit is `413`. An empty body reads as `{}`.
#[derive(Debug, Clone)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<ApiJson<T>, ApiError> {
        let limit = req.extensions().get::<BodyLimit>().map_or(0, |l| l.0);
        let req_path = req.uri().path().to_owned();
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge { limit }
            } else {
                ApiError::InvalidJson(e.body_text())
            }
        })?;
        let body: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        parse(body, DetailsShape::for_path(&req_path)).map(ApiJson)
    }
}

/// As a response: the value as JSON, written into one buffer sized for a
/// typical answer. (axum's `Json` writes into a `BytesMut` through
/// `io::Write`, one small write per token: ~7,000 instructions for an
/// evaluation's answer, under callgrind.)
impl<T: serde::Serialize> IntoResponse for ApiJson<T> {
    fn into_response(self) -> Response {
        let mut body = Vec::with_capacity(RESPONSE_CAPACITY);
        match serde_json::to_writer(&mut body, &self.0) {
            Ok(()) => (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response(),
            Err(e) => {
                ApiError::Internal(format!("cannot serialize the response: {e}")).into_response()
            }
        }
    }
}

/// The first allocation of a JSON response (an evaluation's answer is
/// 200-300 bytes).
const RESPONSE_CAPACITY: usize = 384;

/// The body limit in force, recorded for the 413 message.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// Parses a JSON document into `T` (see [`ApiJson`]); shape errors are
/// reported in `shape`.
pub fn parse<T: DeserializeOwned>(bytes: &[u8], shape: DetailsShape) -> Result<T, ApiError> {
    // Most bodies parse: they pay for serde_json alone. Only a body that
    // fails is parsed again, tracking paths, for the error's details.
    if let Ok(value) = serde_json::from_slice(bytes) {
        return Ok(value);
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data => ApiError::InvalidBody(
                shape.render(vec![Issue::new(&path, "invalid_type", inner.to_string())]),
            ),
            _ => ApiError::InvalidJson(inner.to_string()),
        }
    })?;
    de.end().map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    Ok(value)
}

/// The three shapes of validation `details` (spec §7), chosen per surface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetailsShape {
    /// `POST /evaluate` and `/orchestrate/*`: one object with `formErrors`
    /// (messages about the whole body) and `fieldErrors` (field → messages).
    Flattened,
    /// `/rules` CRUD and, by choice, every surface the spec does not name:
    /// one object per issue with `code`, `path` (an array) and `message`.
    RawIssues,
    /// `/record/*`: one object per issue with `field` (a dotted path) and `message`.
    Mapped,
}

impl DetailsShape {
    /// The shape of the surface `path` belongs to.
    pub fn for_path(path: &str) -> DetailsShape {
        if path == "/evaluate" || path.starts_with("/orchestrate/") {
            DetailsShape::Flattened
        } else if path.starts_with("/record/") {
            DetailsShape::Mapped
        } else {
            DetailsShape::RawIssues
        }
    }

    /// Renders `issues` as `details`. The envelope's `details` is an array
    /// (spec 2.13): the flattened shape is that array's one object.
    pub fn render(self, issues: Vec<Issue>) -> Vec<Value> {
        match self {
            DetailsShape::RawIssues => issues
                .into_iter()
                .map(|i| {
                    i.with_position(json!({ "code": i.code, "path": i.path, "message": i.message }))
                })
                .collect(),
            DetailsShape::Mapped => issues
                .into_iter()
                .map(|i| i.with_position(json!({ "field": i.dotted(), "message": i.message })))
                .collect(),
            DetailsShape::Flattened => {
                let mut form: Vec<String> = Vec::new();
                let mut fields = serde_json::Map::new();
                for i in issues {
                    if i.path.is_empty() {
                        form.push(i.message);
                    } else {
                        let list = fields.entry(i.dotted()).or_insert_with(|| json!([]));
                        if let Some(list) = list.as_array_mut() {
                            list.push(json!(i.message));
                        }
                    }
                }
                vec![json!({ "formErrors": form, "fieldErrors": fields })]
            }
        }
    }
}

/// One validation issue: where (path segments), what kind, and a message.
#[derive(Debug, Clone, PartialEq)]
pub struct Issue {
    pub path: Vec<Value>,
    pub code: String,
    pub message: String,
    /// Where in a policy source the problem is (1-based line and column).
    pub position: Option<(u32, u32)>,
}

impl Issue {
    /// An issue at a dotted `path` (`a.b.0`; empty for the whole body).
    pub fn new(path: &str, code: &str, message: impl Into<String>) -> Issue {
        Issue {
            path: path
                .split('.')
                .filter(|s| !s.is_empty() && *s != "?")
                .map(|s| s.parse::<u64>().map_or_else(|_| json!(s), |n| json!(n)))
                .collect(),
            code: code.to_owned(),
            message: message.into(),
            position: None,
        }
    }

    /// The same issue, located in a source text.
    pub fn at(self, line: u32, column: u32) -> Issue {
        Issue {
            position: Some((line, column)),
            ..self
        }
    }

    fn with_position(&self, mut v: Value) -> Value {
        if let (Some((line, column)), Some(o)) = (self.position, v.as_object_mut()) {
            o.insert("line".into(), json!(line));
            o.insert("column".into(), json!(column));
        }
        v
    }

    fn dotted(&self) -> String {
        self.path
            .iter()
            .map(|s| s.as_str().map_or_else(|| s.to_string(), str::to_owned))
            .collect::<Vec<_>>()
            .join(".")
    }
}

/// Collects validation issues; empty means valid.
#[derive(Debug, Default)]
pub struct Issues(Vec<Issue>);

impl Issues {
    pub fn push(&mut self, path: &str, message: impl Into<String>) {
        self.0.push(Issue::new(path, "custom", message));
    }

    /// Adds a prepared issue.
    pub fn add(&mut self, issue: Issue) {
        self.0.push(issue);
    }

    /// Checks that `text` has `min..=max` characters.
    pub fn length(&mut self, path: &str, text: &str, min: usize, max: usize) {
        let n = text.chars().count();
        if n < min || n > max {
            self.push(path, format!("must be {min} to {max} characters, got {n}"));
        }
    }

    /// An object field: absent or `null` is `{}`; anything else not an
    /// object is an issue.
    pub fn object(&mut self, path: &str, value: Option<Value>) -> Value {
        match value {
            None | Some(Value::Null) => Value::Object(Default::default()),
            Some(v @ Value::Object(_)) => v,
            Some(_) => {
                self.push(path, "must be an object");
                Value::Object(Default::default())
            }
        }
    }

    /// Checks an optional text's length (absent is fine).
    pub fn length_opt(&mut self, path: &str, text: Option<&str>, min: usize, max: usize) {
        if let Some(t) = text {
            self.length(path, t, min, max);
        }
    }

    /// Whether no issue was found so far.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok` when there is no issue, else `400 Invalid request body` with
    /// the issues in `shape`.
    pub fn into_result(self, shape: DetailsShape) -> Result<(), ApiError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ApiError::InvalidBody(shape.render(self.0)))
        }
    }
}

/// Parses a UUID path parameter; a malformed one is `400` with `message`
/// (`Invalid decision ID`, …).
pub fn path_uuid(raw: &str, message: &'static str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::InvalidPathId(message))
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

/// A rule id in the path: a malformed one is `400 Invalid rule ID`.
#[derive(Debug, Clone, Copy)]
pub struct RuleIdPath(pub crate::store::RuleId);

impl<S: Send + Sync> FromRequestParts<S> for RuleIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<RuleIdPath, ApiError> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::InvalidPathId("Invalid rule ID"))?;
        Uuid::parse_str(&raw)
            .map(|u| RuleIdPath(crate::store::RuleId(u)))
            .map_err(|_| ApiError::InvalidPathId("Invalid rule ID"))
    }
}

/// An agent's row id in the path: a malformed one is `400 Invalid agent ID`.
#[derive(Debug, Clone, Copy)]
pub struct AgentIdPath(pub Uuid);

impl<S: Send + Sync> FromRequestParts<S> for AgentIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<AgentIdPath, ApiError> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::InvalidPathId("Invalid agent ID"))?;
        Uuid::parse_str(&raw)
            .map(AgentIdPath)
            .map_err(|_| ApiError::InvalidPathId("Invalid agent ID"))
    }
}

/// `page` and `limit` (spec §8): default 50, at most `MAX`.
#[derive(Debug, Clone, Copy)]
pub struct Pagination<const MAX: u32>(pub Page);

impl<const MAX: u32, S: Send + Sync> FromRequestParts<S> for Pagination<MAX> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Pagination<MAX>, ApiError> {
        let query = parts.uri.query().unwrap_or("");
        let shape = DetailsShape::for_path(parts.uri.path());
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
                _ => issues.push(Issue::new(
                    name,
                    "invalid_value",
                    if name == "page" {
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
            Err(ApiError::InvalidQuery(shape.render(issues)))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[tokio::test]
    async fn a_response_is_the_value_as_json() {
        let response =
            ApiJson(json!({"decision": "permit", "reason": "a \"quoted\" word"})).into_response();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            HeaderValue::from_static("application/json")
        );
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["reason"], "a \"quoted\" word");
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Body {
        name: String,
        n: u32,
    }

    #[test]
    fn syntax_errors_and_shape_errors_are_told_apart() {
        let parse = |b: &[u8]| parse::<Body>(b, DetailsShape::RawIssues);
        assert!(matches!(
            parse(b"{\"name\": "),
            Err(ApiError::InvalidJson(_))
        ));
        assert!(matches!(
            parse(br#"{"name": "a", "n": 1} trailing"#),
            Err(ApiError::InvalidJson(_))
        ));
        match parse(br#"{"name": "a", "n": "x"}"#) {
            Err(ApiError::InvalidBody(d)) => assert_eq!(d[0]["path"], json!(["n"])),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn details_take_the_shape_of_their_surface() {
        let issues = || {
            vec![
                Issue::new("name", "too_small", "required"),
                Issue::new("items.0.id", "invalid_type", "expected a string"),
                Issue::new("", "custom", "empty body"),
            ]
        };
        assert_eq!(DetailsShape::for_path("/evaluate"), DetailsShape::Flattened);
        assert_eq!(
            DetailsShape::for_path("/orchestrate/grants"),
            DetailsShape::Flattened
        );
        assert_eq!(
            DetailsShape::for_path("/record/envelopes"),
            DetailsShape::Mapped
        );
        assert_eq!(DetailsShape::for_path("/rules"), DetailsShape::RawIssues);
        assert_eq!(
            DetailsShape::RawIssues.render(issues())[1],
            json!({"code": "invalid_type", "path": ["items", 0, "id"], "message": "expected a string"})
        );
        assert_eq!(
            DetailsShape::Mapped.render(issues())[1],
            json!({"field": "items.0.id", "message": "expected a string"})
        );
        assert_eq!(
            DetailsShape::Flattened.render(issues()),
            vec![json!({
                "formErrors": ["empty body"],
                "fieldErrors": {"name": ["required"], "items.0.id": ["expected a string"]}
            })]
        );
    }
}
