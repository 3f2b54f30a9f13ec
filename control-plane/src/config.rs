//! Configuration in two stages: [`RawConfig`] mirrors the file and the
//! environment (every field optional), [`Config`] is validated, with real
//! types and defaults. Precedence: defaults < file < environment < flags.
//!
//! The environment is read through an injected lookup so tests never touch
//! the process environment.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// `WARDEN_LISTEN`: the API's address (default `127.0.0.1:8080`).
pub const ENV_LISTEN: &str = "WARDEN_LISTEN";
/// `WARDEN_DATABASE_URL`: `sqlite:PATH` or `postgres://…` (default: SQLite
/// `warden.db` in the data dir).
pub const ENV_DATABASE_URL: &str = "WARDEN_DATABASE_URL";
/// `WARDEN_DATA_DIR`: where the default SQLite file lives (default `./warden-data`).
pub const ENV_DATA_DIR: &str = "WARDEN_DATA_DIR";
/// `WARDEN_REDIS_URL`: a Redis shared by replicas for rate limiting (optional).
pub const ENV_REDIS_URL: &str = "WARDEN_REDIS_URL";
/// `WARDEN_LOG_FORMAT`: `json` (default) or `text`.
pub const ENV_LOG_FORMAT: &str = "WARDEN_LOG_FORMAT";

/// `WARDEN_INJECTOR_LISTEN`: the sidecar injector's HTTPS address (off when unset).
pub const ENV_INJECTOR_LISTEN: &str = "WARDEN_INJECTOR_LISTEN";
/// `WARDEN_INJECTOR_TLS_CERT` / `WARDEN_INJECTOR_TLS_KEY`: its PEM certificate chain and key.
pub const ENV_INJECTOR_TLS_CERT: &str = "WARDEN_INJECTOR_TLS_CERT";
pub const ENV_INJECTOR_TLS_KEY: &str = "WARDEN_INJECTOR_TLS_KEY";
/// `WARDEN_SIDECAR_IMAGE`: the image injected pods run the sidecar from.
pub const ENV_SIDECAR_IMAGE: &str = "WARDEN_SIDECAR_IMAGE";
/// `WARDEN_SIDECAR_CONTROL_PLANE_URL`: the control plane's URL as injected sidecars reach it.
pub const ENV_SIDECAR_CONTROL_PLANE_URL: &str = "WARDEN_SIDECAR_CONTROL_PLANE_URL";

/// `WARDEN_SIDECAR_KEY_SECRET`: the Secret holding an injected agent's key (default `warden-agent-key`).
pub const ENV_SIDECAR_KEY_SECRET: &str = "WARDEN_SIDECAR_KEY_SECRET";

/// The configuration file's shape (TOML) and the environment's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub listen: Option<String>,
    pub database_url: Option<String>,
    pub data_dir: Option<String>,
    pub redis_url: Option<String>,
    pub log_format: Option<String>,
    /// Requests per window per key (default 600).
    pub rate_limit_requests: Option<u32>,
    /// The sliding window in seconds (default 60).
    pub rate_limit_window_secs: Option<u64>,
    /// The largest request body accepted, in bytes (default 1 MiB).
    pub max_body_bytes: Option<usize>,
    /// Seconds between `ping` events on the mode stream (default 25).
    pub stream_ping_secs: Option<u64>,
    /// The sidecar injector (a Kubernetes mutating admission webhook) listens
    /// here with TLS; off when unset.
    pub injector_listen: Option<String>,
    pub injector_tls_cert: Option<String>,
    pub injector_tls_key: Option<String>,
    /// Seconds between looks at the certificate's files (default 30; file only).
    pub injector_tls_reload_secs: Option<u64>,
    /// Default `ghcr.io/warden-dev/warden-proxy:<version>`.
    pub sidecar_image: Option<String>,
    /// Default `http://warden-control-plane:8080`.
    pub sidecar_control_plane_url: Option<String>,
    /// The Secret (in the pod's namespace) holding the agent key under `key`,
    /// when the pod names none (default `warden-agent-key`).
    pub sidecar_key_secret: Option<String>,
}

impl RawConfig {
    /// Parses a TOML file's text.
    pub fn from_toml(text: &str) -> Result<RawConfig, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError(format!("config file: {e}")))
    }

    /// Reads the `WARDEN_*` variables through `env`.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> RawConfig {
        RawConfig {
            listen: env(ENV_LISTEN),
            database_url: env(ENV_DATABASE_URL),
            data_dir: env(ENV_DATA_DIR),
            redis_url: env(ENV_REDIS_URL),
            log_format: env(ENV_LOG_FORMAT),
            injector_listen: env(ENV_INJECTOR_LISTEN),
            injector_tls_cert: env(ENV_INJECTOR_TLS_CERT),
            injector_tls_key: env(ENV_INJECTOR_TLS_KEY),
            sidecar_image: env(ENV_SIDECAR_IMAGE),
            sidecar_control_plane_url: env(ENV_SIDECAR_CONTROL_PLANE_URL),
            sidecar_key_secret: env(ENV_SIDECAR_KEY_SECRET),
            ..RawConfig::default()
        }
    }

    /// `self` with every field `over` sets replaced.
    pub fn overlay(self, over: RawConfig) -> RawConfig {
        RawConfig {
            listen: over.listen.or(self.listen),
            database_url: over.database_url.or(self.database_url),
            data_dir: over.data_dir.or(self.data_dir),
            redis_url: over.redis_url.or(self.redis_url),
            log_format: over.log_format.or(self.log_format),
            rate_limit_requests: over.rate_limit_requests.or(self.rate_limit_requests),
            rate_limit_window_secs: over.rate_limit_window_secs.or(self.rate_limit_window_secs),
            max_body_bytes: over.max_body_bytes.or(self.max_body_bytes),
            stream_ping_secs: over.stream_ping_secs.or(self.stream_ping_secs),
            injector_listen: over.injector_listen.or(self.injector_listen),
            injector_tls_cert: over.injector_tls_cert.or(self.injector_tls_cert),
            injector_tls_key: over.injector_tls_key.or(self.injector_tls_key),
            injector_tls_reload_secs: over
                .injector_tls_reload_secs
                .or(self.injector_tls_reload_secs),
            sidecar_image: over.sidecar_image.or(self.sidecar_image),
            sidecar_control_plane_url: over
                .sidecar_control_plane_url
                .or(self.sidecar_control_plane_url),
            sidecar_key_secret: over.sidecar_key_secret.or(self.sidecar_key_secret),
        }
    }
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

/// A configuration problem, said plainly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The validated configuration.
#[derive(Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub database_url: String,
    pub data_dir: PathBuf,
    pub redis_url: Option<String>,
    pub log_format: LogFormat,
    pub rate_limit: RateLimit,
    pub max_body_bytes: usize,
    /// The mode stream's heartbeat (spec §8: 25 s).
    pub stream_ping: Duration,
    /// The sidecar injector, when enabled.
    pub injector: Option<InjectorConfig>,
}

/// The sidecar injector's listener and what it injects.
#[derive(Debug, Clone)]
pub struct InjectorConfig {
    pub listen: SocketAddr,
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    /// How often the certificate's files are looked at.
    pub tls_reload: Duration,
    pub sidecar: crate::injector::SidecarTemplate,
}

/// The per-key sliding window (spec §8: 600 requests per 60 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub requests: u32,
    pub window: Duration,
}

impl Default for RateLimit {
    fn default() -> RateLimit {
        RateLimit {
            requests: 600,
            window: Duration::from_secs(60),
        }
    }
}

/// Default request body limit: 1 MiB (a rule's source is at most 100,000
/// characters; telemetry batches are at most 100 items of 32 KB context,
/// which the telemetry route raises its own limit for).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

impl std::fmt::Debug for Config {
    /// Database and Redis URLs may carry passwords: only their scheme shows.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("database_url", &redact_url(&self.database_url))
            .field("data_dir", &self.data_dir)
            .field("redis_url", &self.redis_url.as_deref().map(redact_url))
            .field("log_format", &self.log_format)
            .field("rate_limit", &self.rate_limit)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("stream_ping", &self.stream_ping)
            .field("injector", &self.injector)
            .finish()
    }
}

/// The scheme of a URL, the rest hidden (URLs may carry credentials).
pub fn redact_url(url: &str) -> String {
    match url.split_once(':') {
        Some((scheme, _)) => format!("{scheme}:…"),
        None => "…".to_owned(),
    }
}

/// The injector's part of `raw`: all or nothing.
fn injector(raw: &RawConfig) -> Result<Option<InjectorConfig>, ConfigError> {
    let Some(listen) = raw.injector_listen.as_deref().filter(|l| !l.is_empty()) else {
        return Ok(None);
    };
    let listen: SocketAddr = listen.parse().map_err(|_| {
        ConfigError(format!(
            "injector listen address `{listen}` is not HOST:PORT"
        ))
    })?;
    let (Some(cert), Some(key)) = (&raw.injector_tls_cert, &raw.injector_tls_key) else {
        return Err(ConfigError(format!(
            "the injector serves HTTPS only: set {ENV_INJECTOR_TLS_CERT} and {ENV_INJECTOR_TLS_KEY}"
        )));
    };
    let reload = raw.injector_tls_reload_secs.unwrap_or(30);
    if !(1..=86_400).contains(&reload) {
        return Err(ConfigError(
            "injector_tls_reload_secs must be 1 to 86400".into(),
        ));
    }
    let defaults = crate::injector::SidecarTemplate::default();
    let control_plane_url = raw
        .sidecar_control_plane_url
        .clone()
        .unwrap_or(defaults.control_plane_url);
    if !control_plane_url.starts_with("http://") && !control_plane_url.starts_with("https://") {
        return Err(ConfigError(format!(
            "{ENV_SIDECAR_CONTROL_PLANE_URL} must be an http:// or https:// URL"
        )));
    }
    Ok(Some(InjectorConfig {
        listen,
        tls_cert: PathBuf::from(cert),
        tls_key: PathBuf::from(key),
        tls_reload: Duration::from_secs(reload),
        sidecar: crate::injector::SidecarTemplate {
            image: raw.sidecar_image.clone().unwrap_or(defaults.image),
            control_plane_url,
            key_secret: raw
                .sidecar_key_secret
                .clone()
                .unwrap_or(defaults.key_secret),
        },
    }))
}

impl Config {
    /// Validates `raw`, filling defaults.
    pub fn from_raw(raw: RawConfig) -> Result<Config, ConfigError> {
        let injector = injector(&raw)?;
        let listen = raw.listen.as_deref().unwrap_or("127.0.0.1:8080");
        let listen: SocketAddr = listen
            .parse()
            .map_err(|_| ConfigError(format!("listen address `{listen}` is not HOST:PORT")))?;
        let data_dir = PathBuf::from(raw.data_dir.as_deref().unwrap_or("./warden-data"));
        let database_url = match raw.database_url {
            Some(url)
                if url.starts_with("sqlite:")
                    || url.starts_with("postgres://")
                    || url.starts_with("postgresql://") =>
            {
                url
            }
            Some(url) => {
                return Err(ConfigError(format!(
                    "database URL must start with sqlite: or postgres://, got {}",
                    redact_url(&url)
                )));
            }
            None => format!("sqlite://{}", data_dir.join("warden.db").display()),
        };
        let redis_url = match raw.redis_url.filter(|u| !u.is_empty()) {
            Some(url) if url.starts_with("redis://") || url.starts_with("rediss://") => Some(url),
            Some(url) => {
                return Err(ConfigError(format!(
                    "Redis URL must start with redis:// or rediss://, got {}",
                    redact_url(&url)
                )));
            }
            None => None,
        };
        let log_format = match raw.log_format.as_deref().unwrap_or("json") {
            "json" => LogFormat::Json,
            "text" => LogFormat::Text,
            other => {
                return Err(ConfigError(format!(
                    "log format must be json or text, got `{other}`"
                )));
            }
        };
        let requests = raw.rate_limit_requests.unwrap_or(600);
        let window_secs = raw.rate_limit_window_secs.unwrap_or(60);
        if requests == 0 || window_secs == 0 {
            return Err(ConfigError(
                "rate limit requests and window must be positive".into(),
            ));
        }
        let max_body_bytes = raw.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES);
        if max_body_bytes < 1024 {
            return Err(ConfigError("max_body_bytes must be at least 1024".into()));
        }
        let ping = raw.stream_ping_secs.unwrap_or(25);
        if ping == 0 {
            return Err(ConfigError("stream_ping_secs must be positive".into()));
        }
        Ok(Config {
            injector,
            stream_ping: Duration::from_secs(ping),
            listen,
            database_url,
            data_dir,
            redis_url,
            log_format,
            rate_limit: RateLimit {
                requests,
                window: Duration::from_secs(window_secs),
            },
            max_body_bytes,
        })
    }

    /// Whether the database is the default-style SQLite file (whose
    /// directory must exist before it is opened).
    pub fn sqlite_path(&self) -> Option<PathBuf> {
        let path = self
            .database_url
            .strip_prefix("sqlite://")
            .or_else(|| self.database_url.strip_prefix("sqlite:"))?;
        let path = path.split('?').next().unwrap_or(path);
        (!path.is_empty() && path != ":memory:").then(|| PathBuf::from(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn the_injector_is_off_by_default_and_needs_its_certificate() {
        assert!(
            Config::from_raw(RawConfig::default())
                .unwrap()
                .injector
                .is_none()
        );
        let listen = RawConfig::from_env(&env(&[(ENV_INJECTOR_LISTEN, "0.0.0.0:9443")]));
        let err = Config::from_raw(listen.clone()).err().unwrap();
        assert!(err.0.contains(ENV_INJECTOR_TLS_CERT), "{err}");
        let full = listen.overlay(RawConfig::from_env(&env(&[
            (ENV_INJECTOR_TLS_CERT, "/tls/tls.crt"),
            (ENV_INJECTOR_TLS_KEY, "/tls/tls.key"),
            (ENV_SIDECAR_IMAGE, "warden-proxy:dev"),
        ])));
        let inj = Config::from_raw(full).unwrap().injector.unwrap();
        assert_eq!(inj.listen.port(), 9443);
        assert_eq!(inj.sidecar.image, "warden-proxy:dev");
        assert_eq!(inj.sidecar.key_secret, "warden-agent-key");
    }

    #[test]
    fn defaults_are_the_embedded_setup() {
        let c = Config::from_raw(RawConfig::default()).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.database_url, "sqlite://./warden-data/warden.db");
        assert_eq!(c.rate_limit, RateLimit::default());
        assert!(c.redis_url.is_none());
    }

    #[test]
    fn environment_overrides_the_file_and_flags_override_both() {
        let file =
            RawConfig::from_toml("listen = \"127.0.0.1:1\"\nrate_limit_requests = 5").unwrap();
        let from_env = RawConfig::from_env(&env(&[
            (ENV_LISTEN, "127.0.0.1:2"),
            (ENV_DATA_DIR, "/tmp/w"),
        ]));
        let flags = RawConfig {
            listen: Some("127.0.0.1:0".into()),
            ..RawConfig::default()
        };
        let c = Config::from_raw(file.overlay(from_env).overlay(flags)).unwrap();
        assert_eq!(c.listen.port(), 0);
        assert_eq!(c.rate_limit.requests, 5);
        assert_eq!(c.database_url, "sqlite:///tmp/w/warden.db");
    }

    #[test]
    fn bad_values_are_refused_plainly() {
        let bad = |raw: RawConfig| Config::from_raw(raw).unwrap_err().0;
        assert!(
            bad(RawConfig {
                listen: Some("nope".into()),
                ..Default::default()
            })
            .contains("HOST:PORT")
        );
        let msg = bad(RawConfig {
            database_url: Some("mysql://u:secret@h/db".into()),
            ..Default::default()
        });
        assert!(!msg.contains("secret"), "{msg}");
        assert!(RawConfig::from_toml("unknown_field = 1").is_err());
    }

    #[test]
    fn debug_hides_credentials() {
        let c = Config::from_raw(RawConfig {
            database_url: Some("postgres://warden:s3cret@db/warden".into()),
            redis_url: Some("redis://:pw@cache".into()),
            ..Default::default()
        })
        .unwrap();
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains(":pw@"),
            "{shown}"
        );
    }
}
