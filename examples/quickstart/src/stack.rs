//! Starts Warden for the quickstart: the real control plane (SQLite in the
//! data directory) and the real sidecar, in this process, on loopback
//! ports, configured through the same paths their binaries use. The
//! organization and the first management key come from the bootstrap path
//! (`warden-control-plane keys create` does the same); everything after
//! that goes through the HTTP API.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::Utc;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use warden_control_plane::app::{self, AppState};
use warden_control_plane::auth::{Audience, Environment, Permission, Scope};
use warden_control_plane::config::{Config as PlaneConfig, RawConfig as RawPlaneConfig};
use warden_control_plane::keys::{self, Expiry, KeySpec};
use warden_proxy::config::{Config as SidecarConfig, RawConfig as RawSidecarConfig};
use warden_proxy::server::Listeners;

/// The organization the quickstart creates.
pub(crate) const ORG: &str = "quickstart";
/// The agent the scripted client runs as.
pub(crate) const AGENT: &str = "support-bot";

/// The servers' tasks: awaited at exit, so that the sidecar has flushed its
/// telemetry and both have stopped before the process ends.
pub(crate) type Servers = tokio::task::JoinSet<anyhow::Result<()>>;

/// The running control plane.
pub(crate) struct Plane {
    pub(crate) base: String,
    /// A management key with every permission.
    pub(crate) admin_key: String,
    pub(crate) http: reqwest::Client,
}

impl Plane {
    /// Starts the control plane on `data_dir/warden.db`.
    pub(crate) async fn start(
        data_dir: &Path,
        stop: watch::Receiver<bool>,
        tasks: &mut Servers,
    ) -> anyhow::Result<Plane> {
        let config = PlaneConfig::from_raw(RawPlaneConfig {
            listen: Some("127.0.0.1:0".into()),
            data_dir: Some(data_dir.display().to_string()),
            database_url: Some(format!("sqlite://{}", data_dir.join("warden.db").display())),
            ..RawPlaneConfig::default()
        })?;
        let listener = TcpListener::bind(config.listen).await?;
        let state = AppState::open(config).await.context("opening SQLite")?;
        let now = Utc::now();
        let org = state.store.ensure_org(ORG, now).await?;
        let issued = keys::create(
            state.store.as_ref(),
            org.id,
            None,
            KeySpec {
                name: "quickstart admin".into(),
                audience: Audience::Management,
                environment: Environment::Test,
                permissions: Permission::ALL.to_vec(),
                scopes: vec![Scope::FullAccess],
                expiry: Expiry::parse("30d").context("expiry")?,
                agent_id: None,
                plaintext: None,
            },
            now,
        )
        .await
        .map_err(|e| anyhow::anyhow!("creating the management key: {e}"))?;
        let base = format!("http://{}", listener.local_addr()?);
        tasks.spawn(app::serve(state, listener, stopped(stop)));
        Ok(Plane {
            base,
            admin_key: issued.plaintext,
            http: reqwest::Client::builder().no_proxy().build()?,
        })
    }

    /// One API call as the operator: status and JSON body.
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.admin_key);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.context("the control plane answers")?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        Ok((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    /// A call that must answer `want`; returns the body.
    pub(crate) async fn expect(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        want: u16,
    ) -> anyhow::Result<Value> {
        let shown = format!("{method} {path}");
        let (status, body) = self.call(method, path, body).await?;
        if status != want {
            bail!("{shown} answered {status}, expected {want}: {body}");
        }
        Ok(body)
    }

    /// Creates a rule on the unified collection; returns its `rule_code`.
    pub(crate) async fn rule(&self, mut meta: Value, rego: &str) -> anyhow::Result<String> {
        meta["rego_source"] = json!(rego);
        let rule = self
            .expect(reqwest::Method::POST, "/rules", Some(meta), 201)
            .await?;
        Ok(rule["rule_code"].as_str().unwrap_or_default().to_owned())
    }
}

/// The running sidecar's addresses.
pub(crate) struct Sidecar {
    pub(crate) admin: String,
    pub(crate) crm: String,
    pub(crate) billing: String,
    /// The configuration it runs with, as an operator would write it.
    pub(crate) yaml: String,
}

impl Sidecar {
    /// Starts the sidecar in front of the demo tools, as `agent_key`.
    pub(crate) async fn start(
        plane: &Plane,
        agent_key: &str,
        crm_upstream: &str,
        billing_upstream: &str,
        stop: watch::Receiver<bool>,
        tasks: &mut Servers,
    ) -> anyhow::Result<Sidecar> {
        let yaml = format!(
            "agent_id: {AGENT}
control_plane:
  url: {}
  key_env: WARDEN_AGENT_KEY
admin:
  listen: 127.0.0.1:0
telemetry:
  flush_ms: 100
routes:
  - name: crm                  # target_app of every tool call on this route
    kind: mcp
    listen: 127.0.0.1:0        # the agent's MCP server URL points here
    upstream: {crm_upstream}
  - name: billing
    kind: http
    listen: 127.0.0.1:0
    upstream: {billing_upstream}
    actions:
      - match: GET /v1/customers/{{id}}
        action: get_customer
      - match: DELETE /v1/customers/{{id}}
        action: delete_customer
",
            plane.base
        );
        let key = agent_key.to_owned();
        let env = move |name: &str| (name == "WARDEN_AGENT_KEY").then(|| key.clone());
        let raw = RawSidecarConfig::from_yaml(&yaml)?.with_env(&env);
        let config = SidecarConfig::from_raw(raw, &env)?;
        let listeners = Listeners::bind(&config).await?;
        let admin = format!("http://{}", listeners.admin.local_addr()?);
        let crm = format!("http://{}/mcp", listeners.routes[0].local_addr()?);
        let billing = format!("http://{}", listeners.routes[1].local_addr()?);
        tasks.spawn(warden_proxy::server::serve(
            config,
            listeners,
            stopped(stop),
        ));
        Ok(Sidecar {
            admin,
            crm,
            billing,
            yaml,
        })
    }

    /// Waits until the sidecar has its bundle and runs in `mode`.
    pub(crate) async fn wait_for_mode(
        &self,
        http: &reqwest::Client,
        mode: &str,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(resp) = http.get(format!("{}/readyz", self.admin)).send().await
                && resp.status().is_success()
                && resp
                    .json::<Value>()
                    .await
                    .ok()
                    .and_then(|v| v["agent_mode"].as_str().map(|m| m == mode))
                    == Some(true)
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the sidecar did not report mode {mode} within 15 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A directory for the quickstart's SQLite file: `--data-dir`, or a new one
/// under the system's temporary directory.
pub(crate) fn data_dir(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let dir = given.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("warden-quickstart-{}", uuid::Uuid::new_v4()))
    });
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
