//! Configuration in two stages: [`RawConfig`] mirrors the YAML file (every
//! field optional where a default exists), [`Config`] is validated, with
//! real types: socket addresses, parsed URLs, compiled route patterns,
//! durations, the key itself. Precedence: defaults < file < environment.
//!
//! The environment is read through an injected lookup, so tests never touch
//! the process environment; `Debug` of [`Config`] never shows the key.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::route::{HttpRule, RuleError};

/// `WARDEN_PROXY_CONTROL_PLANE_URL` overrides `control_plane.url`.
pub const ENV_CONTROL_PLANE_URL: &str = "WARDEN_PROXY_CONTROL_PLANE_URL";
/// `WARDEN_PROXY_AGENT_ID` overrides `agent_id`.
pub const ENV_AGENT_ID: &str = "WARDEN_PROXY_AGENT_ID";
/// `WARDEN_PROXY_ADMIN_LISTEN` overrides `admin.listen`.
pub const ENV_ADMIN_LISTEN: &str = "WARDEN_PROXY_ADMIN_LISTEN";
/// `WARDEN_PROXY_WORKERS` overrides `workers`.
pub const ENV_WORKERS: &str = "WARDEN_PROXY_WORKERS";
/// The default variable the agent key is read from (`control_plane.key_env`).
pub const DEFAULT_KEY_ENV: &str = "WARDEN_AGENT_KEY";

/// The file's shape.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// The agent this sidecar governs.
    pub agent_id: Option<String>,
    /// Serving threads (default: one per CPU the process may use). Each
    /// has its own single-threaded runtime and upstream pool and serves
    /// whole connections, handed out in turn (README, Performance).
    pub workers: Option<usize>,
    pub control_plane: Option<RawControlPlane>,
    pub admin: Option<RawAdmin>,
    pub limits: Option<RawLimits>,
    pub telemetry: Option<RawTelemetry>,
    pub forward_proxy: Option<RawForwardProxy>,
    #[serde(default)]
    pub routes: Vec<RawRoute>,
}

/// The forward proxy (`HTTP_PROXY`/`HTTPS_PROXY`) for hosts routes list.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawForwardProxy {
    /// Where agents send proxied traffic (`127.0.0.1:9080`).
    pub listen: Option<String>,
    /// Holds `ca.pem` and `ca-key.pem`; generated there at first start
    /// (default `./warden-proxy-ca`).
    pub ca_dir: Option<PathBuf>,
    /// A PEM bundle trusted for upstreams besides the system roots.
    pub upstream_ca_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawControlPlane {
    /// Base URL, such as `http://warden-control-plane:8080`.
    pub url: Option<String>,
    /// The variable holding the agent key (default `WARDEN_AGENT_KEY`).
    pub key_env: Option<String>,
    /// A file holding the agent key (read at start; wins over `key_env`).
    pub key_file: Option<PathBuf>,
    /// Seconds between bundle pulls (default 5).
    pub bundle_interval_secs: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    /// `/healthz`, `/readyz`, `/metrics` (default `127.0.0.1:9901`).
    pub listen: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    /// The largest body judged, in bytes (default 1 MiB). A larger one is
    /// never forwarded unjudged: it is decided as uncovered.
    pub max_body_bytes: Option<usize>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    /// Decisions waiting to be reported; past it the oldest are dropped
    /// (default 10,000).
    pub queue: Option<usize>,
    /// Milliseconds between flushes (default 1,000).
    pub flush_ms: Option<u64>,
}

/// One governed upstream.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    /// The upstream's name: the `target_app` of its actions.
    pub name: String,
    /// `http` (an HTTP tool API) or `mcp` (an MCP server, Streamable HTTP).
    pub kind: String,
    /// Where the agent connects (`127.0.0.1:9100`); optional when the route
    /// is reached only through the forward proxy (`hosts`).
    pub listen: Option<String>,
    /// Where governed calls go: an HTTP API's base URL
    /// (`http://127.0.0.1:7000`; the request's path is appended), or an MCP
    /// server's endpoint (`http://127.0.0.1:7100/mcp`; every request goes
    /// there, whatever path the agent used). Required with `listen`.
    pub upstream: Option<String>,
    /// Hosts (`api.example.com` or `host:port`) the forward proxy governs
    /// with this route; requests go to the host the agent asked for.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Method and path patterns mapped to actions (`http` routes).
    #[serde(default)]
    pub actions: Vec<RawHttpAction>,
    /// Method and path patterns whose response bodies are retrievals
    /// (`http` routes): judged before the agent reads them.
    #[serde(default)]
    pub retrievals: Vec<RawHttpRetrieval>,
    /// What a request no pattern matches becomes: `govern` (default: an
    /// action named after its method and path), `forward` (passed untouched,
    /// unreported) or `deny`.
    pub unmatched: Option<String>,
}

/// `match: "POST /v1/charges"` → `action: create_charge`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttpAction {
    #[serde(rename = "match")]
    pub pattern: String,
    /// The action name; `{name}` inserts a path parameter.
    pub action: String,
}

/// `match: "GET /v1/customers/{id}"` → `resource_type: customer`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttpRetrieval {
    #[serde(rename = "match")]
    pub pattern: String,
    /// The retrieval's `resource_type`; `{name}` inserts a path parameter.
    pub resource_type: String,
}

impl RawConfig {
    /// Parses a YAML file's text.
    pub fn from_yaml(text: &str) -> Result<RawConfig, ConfigError> {
        yaml_serde::from_str(text).map_err(|e| ConfigError(format!("config file: {e}")))
    }

    /// Applies the environment's overrides, read through `env`.
    pub fn with_env(mut self, env: &dyn Fn(&str) -> Option<String>) -> RawConfig {
        if let Some(v) = env(ENV_AGENT_ID) {
            self.agent_id = Some(v);
        }
        if let Some(v) = env(ENV_CONTROL_PLANE_URL) {
            self.control_plane.get_or_insert_default().url = Some(v);
        }
        if let Some(v) = env(ENV_WORKERS).and_then(|v| v.parse().ok()) {
            self.workers = Some(v);
        }
        if let Some(v) = env(ENV_ADMIN_LISTEN) {
            self.admin.get_or_insert_default().listen = Some(v);
        }
        self
    }
}

/// The validated configuration.
#[derive(Clone)]
pub struct Config {
    pub agent_id: String,
    /// Serving threads; `None`: one per CPU the process may use.
    pub workers: Option<usize>,
    /// Without a trailing slash.
    pub control_plane: String,
    pub key: String,
    pub bundle_interval: Duration,
    pub admin_listen: SocketAddr,
    pub max_body_bytes: usize,
    pub telemetry_queue: usize,
    pub telemetry_flush: Duration,
    pub forward: Option<ForwardConfig>,
    pub routes: Vec<Route>,
}

/// The validated forward proxy.
#[derive(Debug, Clone)]
pub struct ForwardConfig {
    pub listen: SocketAddr,
    pub ca_dir: PathBuf,
    pub upstream_ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("agent_id", &self.agent_id)
            .field("control_plane", &self.control_plane)
            .field("key", &"[redacted]")
            .field("admin_listen", &self.admin_listen)
            .field("routes", &self.routes)
            .finish_non_exhaustive()
    }
}

/// What a route's upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Http,
    Mcp,
}

/// A validated route.
#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    pub kind: Kind,
    /// With `upstream`: a reverse-proxy listener.
    pub listen: Option<SocketAddr>,
    /// Scheme and authority, plus a base path (no trailing slash).
    pub upstream: Option<hyper::Uri>,
    /// Governed through the forward proxy.
    pub hosts: Vec<String>,
    pub rules: Vec<HttpRule>,
    /// Patterns whose responses are judged as retrievals; the rule's
    /// "action" is the `resource_type` template.
    pub retrievals: Vec<HttpRule>,
    pub unmatched: Unmatched,
}

/// What an HTTP request no pattern matches becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmatched {
    Govern,
    Forward,
    Deny,
}

/// A configuration error, with what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn invalid(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

fn addr(field: &str, value: &str) -> Result<SocketAddr, ConfigError> {
    value.parse().map_err(|_| {
        invalid(format!(
            "{field}: `{value}` is not an address such as 127.0.0.1:9100"
        ))
    })
}

fn http_url(field: &str, value: &str) -> Result<hyper::Uri, ConfigError> {
    let uri: hyper::Uri = value
        .trim_end_matches('/')
        .parse()
        .map_err(|_| invalid(format!("{field}: `{value}` is not a URL")))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http" | "https"), Some(_)) => Ok(uri),
        _ => Err(invalid(format!(
            "{field}: `{value}` must be an http:// or https:// URL"
        ))),
    }
}

impl Config {
    /// Validates `raw`; `env` supplies the key when `key_env` names it and
    /// `key_file` is absent.
    pub fn from_raw(
        raw: RawConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let agent_id = raw
            .agent_id
            .filter(|a| !a.is_empty())
            .ok_or_else(|| invalid("agent_id: required"))?;
        if agent_id.len() > 255 {
            return Err(invalid("agent_id: at most 255 characters"));
        }
        let cp = raw.control_plane.unwrap_or_default();
        let url = cp
            .url
            .ok_or_else(|| invalid("control_plane.url: required"))?;
        http_url("control_plane.url", &url)?;
        let key = match (
            &cp.key_file,
            cp.key_env.as_deref().unwrap_or(DEFAULT_KEY_ENV),
        ) {
            (Some(path), _) => std::fs::read_to_string(path)
                .map_err(|e| invalid(format!("control_plane.key_file {}: {e}", path.display())))?
                .trim()
                .to_owned(),
            (None, var) => env(var).ok_or_else(|| {
                invalid(format!(
                    "the agent key: set {var} or control_plane.key_file"
                ))
            })?,
        };
        if key.is_empty() {
            return Err(invalid("the agent key is empty"));
        }
        let interval = cp.bundle_interval_secs.unwrap_or(5);
        if !(1..=3600).contains(&interval) {
            return Err(invalid("control_plane.bundle_interval_secs: 1-3600"));
        }
        let admin_listen = addr(
            "admin.listen",
            raw.admin
                .and_then(|a| a.listen)
                .as_deref()
                .unwrap_or("127.0.0.1:9901"),
        )?;
        let max_body_bytes = raw
            .limits
            .and_then(|l| l.max_body_bytes)
            .unwrap_or(1024 * 1024);
        if max_body_bytes == 0 {
            return Err(invalid("limits.max_body_bytes: at least 1"));
        }
        let t = raw.telemetry.unwrap_or_default();
        let telemetry_queue = t.queue.unwrap_or(10_000);
        if telemetry_queue == 0 {
            return Err(invalid("telemetry.queue: at least 1"));
        }
        let flush_ms = t.flush_ms.unwrap_or(1_000);
        if !(10..=60_000).contains(&flush_ms) {
            return Err(invalid("telemetry.flush_ms: 10-60000"));
        }
        if raw.routes.is_empty() {
            return Err(invalid("routes: at least one route is required"));
        }
        let mut routes = Vec::new();
        for (i, r) in raw.routes.into_iter().enumerate() {
            routes.push(route(i, r)?);
        }
        for (i, r) in routes.iter().enumerate() {
            if routes[..i].iter().any(|o| o.name == r.name) {
                return Err(invalid(format!(
                    "routes[{i}].name: `{}` is used twice",
                    r.name
                )));
            }
            // Port 0 (tests) is a fresh port each time, never a clash.
            let clashes =
                |a: Option<SocketAddr>| a.is_some_and(|a| Some(a) == r.listen && a.port() != 0);
            if routes[..i].iter().any(|o| clashes(o.listen)) || clashes(Some(admin_listen)) {
                return Err(invalid(format!(
                    "routes[{i}].listen: {:?} is used twice",
                    r.listen
                )));
            }
        }
        let forward = match raw.forward_proxy {
            None => None,
            Some(f) => Some(ForwardConfig {
                listen: addr(
                    "forward_proxy.listen",
                    f.listen.as_deref().unwrap_or("127.0.0.1:9080"),
                )?,
                ca_dir: f.ca_dir.unwrap_or_else(|| PathBuf::from("warden-proxy-ca")),
                upstream_ca_file: f.upstream_ca_file,
            }),
        };
        if forward.is_none()
            && let Some(i) = routes.iter().position(|r| !r.hosts.is_empty())
        {
            return Err(invalid(format!(
                "routes[{i}].hosts: needs forward_proxy (its listen address and CA)"
            )));
        }
        if let Some(w) = raw.workers
            && !(1..=256).contains(&w)
        {
            return Err(invalid("workers: 1-256"));
        }
        Ok(Config {
            workers: raw.workers,
            agent_id,
            control_plane: url.trim_end_matches('/').to_owned(),
            key,
            bundle_interval: Duration::from_secs(interval),
            admin_listen,
            max_body_bytes,
            telemetry_queue,
            telemetry_flush: Duration::from_millis(flush_ms),
            forward,
            routes,
        })
    }
}

fn route(i: usize, r: RawRoute) -> Result<Route, ConfigError> {
    let at = |f: &str| format!("routes[{i}].{f}");
    if r.name.is_empty() || r.name.len() > 255 {
        return Err(invalid(format!("{}: 1-255 characters", at("name"))));
    }
    let kind = match r.kind.as_str() {
        "http" => Kind::Http,
        "mcp" => Kind::Mcp,
        other => {
            return Err(invalid(format!(
                "{}: `{other}` must be http or mcp",
                at("kind")
            )));
        }
    };
    if kind == Kind::Mcp && !r.actions.is_empty() {
        return Err(invalid(format!(
            "{}: MCP routes take their actions from the tool names",
            at("actions")
        )));
    }
    // MCP methods the adapter does not govern pass by default; HTTP requests
    // no pattern matches are governed by default.
    let default = if kind == Kind::Mcp {
        "forward"
    } else {
        "govern"
    };
    let unmatched = match r.unmatched.as_deref().unwrap_or(default) {
        "govern" => Unmatched::Govern,
        "forward" => Unmatched::Forward,
        "deny" => Unmatched::Deny,
        other => {
            return Err(invalid(format!(
                "{}: `{other}` must be govern, forward or deny",
                at("unmatched")
            )));
        }
    };
    let rules = r
        .actions
        .iter()
        .enumerate()
        .map(|(j, a)| {
            HttpRule::parse(&a.pattern, &a.action)
                .map_err(|e: RuleError| invalid(format!("{}: {e}", at(&format!("actions[{j}]")))))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if kind == Kind::Mcp && !r.retrievals.is_empty() {
        return Err(invalid(format!(
            "{}: MCP routes judge every result, resource and prompt already",
            at("retrievals")
        )));
    }
    let retrievals = r
        .retrievals
        .iter()
        .enumerate()
        .map(|(j, a)| {
            HttpRule::parse(&a.pattern, &a.resource_type).map_err(|e: RuleError| {
                invalid(format!("{}: {e}", at(&format!("retrievals[{j}]"))))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let listen = r
        .listen
        .as_deref()
        .map(|l| addr(&at("listen"), l))
        .transpose()?;
    let upstream = r
        .upstream
        .as_deref()
        .map(|u| http_url(&at("upstream"), u))
        .transpose()?;
    match (&listen, &upstream) {
        (Some(_), None) => {
            return Err(invalid(format!("{}: required with listen", at("upstream"))));
        }
        (None, _) if r.hosts.is_empty() => {
            return Err(invalid(format!(
                "{}: give listen and upstream, or hosts for the forward proxy",
                at("listen")
            )));
        }
        _ => {}
    }
    Ok(Route {
        listen,
        upstream,
        hosts: r.hosts,
        name: r.name,
        kind,
        rules,
        retrievals,
        unmatched,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "
agent_id: bot
control_plane:
  url: http://127.0.0.1:8080
routes:
  - name: billing
    kind: http
    listen: 127.0.0.1:9100
    upstream: http://127.0.0.1:7000/
    actions:
      - match: POST /v1/charges
        action: create_charge
";

    fn env_with_key(name: &str) -> Option<String> {
        (name == DEFAULT_KEY_ENV).then(|| "allow_secret".to_owned())
    }

    #[test]
    fn a_minimal_file_gets_the_defaults() {
        let c = Config::from_raw(RawConfig::from_yaml(MINIMAL).unwrap(), &env_with_key).unwrap();
        assert_eq!(c.bundle_interval, Duration::from_secs(5));
        assert_eq!(c.admin_listen.to_string(), "127.0.0.1:9901");
        assert_eq!(c.max_body_bytes, 1024 * 1024);
        assert_eq!(c.routes[0].unmatched, Unmatched::Govern);
        assert_eq!(
            c.routes[0]
                .upstream
                .as_ref()
                .map(ToString::to_string)
                .as_deref(),
            Some("http://127.0.0.1:7000/")
        );
        assert!(
            !format!("{c:?}").contains("allow_secret"),
            "Debug hides the key"
        );
    }

    #[test]
    fn the_environment_overrides_the_file() {
        let env = |name: &str| match name {
            ENV_AGENT_ID => Some("other".to_owned()),
            DEFAULT_KEY_ENV => Some("k".to_owned()),
            _ => None,
        };
        let raw = RawConfig::from_yaml(MINIMAL).unwrap().with_env(&env);
        assert_eq!(Config::from_raw(raw, &env).unwrap().agent_id, "other");
    }

    #[test]
    fn errors_name_the_field_to_fix() {
        let cases = [
            (MINIMAL.replace("agent_id: bot", ""), "agent_id"),
            (
                MINIMAL.replace("127.0.0.1:9100", "nowhere"),
                "routes[0].listen",
            ),
            (
                MINIMAL.replace("kind: http", "kind: smtp"),
                "routes[0].kind",
            ),
            (
                MINIMAL.replace("POST /v1/charges", "/v1/charges"),
                "routes[0].actions[0]",
            ),
            (format!("{MINIMAL}    unknown: 1\n"), "unknown field"),
        ];
        for (yaml, want) in cases {
            let err = RawConfig::from_yaml(&yaml)
                .and_then(|raw| Config::from_raw(raw, &env_with_key))
                .unwrap_err();
            assert!(err.0.contains(want), "{want}: {err}");
        }
        let no_key = Config::from_raw(RawConfig::from_yaml(MINIMAL).unwrap(), &|_| None);
        assert!(no_key.unwrap_err().0.contains(DEFAULT_KEY_ENV));
    }
}
