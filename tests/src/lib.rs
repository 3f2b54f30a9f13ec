//! Helpers for the end-to-end tests: the real `warden-control-plane` and
//! `warden-proxy` binaries started on port 0 (their addresses read from
//! their logs, never guessed), and a recording upstream tool API.
//!
//! Every process is killed when its handle drops; every wait has a deadline.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long a process gets to announce itself.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// Builds the binaries once per test run (a no-op when they are fresh) and
/// returns the directory holding them.
pub fn bin_dir() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let mut cargo = Command::new(env!("CARGO"));
            cargo.args(["build", "--workspace", "--bins"]);
            // The variables cargo sets for a test would make build scripts
            // that watch the environment (ring's) rebuild every run.
            for (name, _) in std::env::vars_os() {
                if name.to_str().is_some_and(|n| {
                    n.starts_with("CARGO_") && n != "CARGO_HOME" && n != "CARGO_TARGET_DIR"
                }) {
                    cargo.env_remove(name);
                }
            }
            let status = cargo.status().expect("cargo runs");
            assert!(status.success(), "building the binaries failed");
            // target/<profile>/deps/e2e-… → target/<profile>
            let exe = std::env::current_exe().expect("test executable");
            exe.parent()
                .and_then(Path::parent)
                .expect("target dir")
                .to_path_buf()
        })
        .clone()
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        let dir = std::env::temp_dir().join(format!("warden-e2e-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Default for TempDir {
    fn default() -> TempDir {
        TempDir::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process whose stderr lines are collected; killed on drop.
pub struct Process {
    child: Child,
    lines: Receiver<String>,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Process {
    pub fn spawn(mut cmd: Command) -> Process {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("process starts");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let keep = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                keep.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        Process { child, lines, log }
    }

    /// Waits for a log line `pick` accepts, returning what it picked.
    pub fn wait_for<T>(&self, what: &str, mut pick: impl FnMut(&str) -> Option<T>) -> T {
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(v) = pick(&line) {
                        return v;
                    }
                }
                Err(_) => panic!(
                    "no {what} within {START_DEADLINE:?}; log:\n{}",
                    self.log.lock().unwrap().join("\n")
                ),
            }
        }
    }

    /// Sends SIGTERM and waits (at most `deadline`) for the process to exit
    /// on its own: whether it did, successfully.
    pub fn terminate(&mut self, deadline: Duration) -> bool {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        if !sent.is_ok_and(|s| s.success()) {
            return false;
        }
        let end = Instant::now() + deadline;
        while Instant::now() < end {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Kills the process (SIGKILL) and waits.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn logs(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The real control plane on SQLite in a temporary directory.
pub struct ControlPlane {
    pub process: Process,
    pub base: String,
    db: String,
    /// A management key with every permission.
    pub admin: String,
    pub http: reqwest::Client,
    dir: TempDir,
}

impl ControlPlane {
    pub fn start() -> ControlPlane {
        ControlPlane::start_with("")
    }

    /// Starts it with `config` (TOML, such as `rate_limit_requests = 10`).
    pub fn start_with(config: &str) -> ControlPlane {
        let dir = TempDir::new();
        let config_path = dir.0.join("config.toml");
        std::fs::write(&config_path, config).expect("config written");
        let db = format!("sqlite://{}", dir.0.join("warden.db").display());
        let bin = bin_dir().join("warden-control-plane");
        let out = Command::new(&bin)
            .args([
                "keys",
                "create",
                "--org",
                "acme",
                "--name",
                "admin",
                "--audience",
                "management",
            ])
            .env("WARDEN_DATABASE_URL", &db)
            .output()
            .expect("keys create runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let admin = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        let (process, addr) = ControlPlane::serve(&db, "127.0.0.1:0", &config_path);
        ControlPlane {
            process,
            base: format!("http://{addr}"),
            db,
            admin,
            http: reqwest::Client::new(),
            dir,
        }
    }

    fn serve(db: &str, listen: &str, config: &Path) -> (Process, String) {
        let mut cmd = Command::new(bin_dir().join("warden-control-plane"));
        cmd.args(["serve", "--listen", listen])
            .arg("--config")
            .arg(config)
            .env("WARDEN_DATABASE_URL", db);
        let process = Process::spawn(cmd);
        let addr = process.wait_for("`listening on` line", |line| {
            line.split("listening on ")
                .nth(1)
                .map(|rest| rest.split('"').next().unwrap_or_default().to_owned())
        });
        (process, addr)
    }

    /// Kills the server (the database stays).
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the server again on the same address and database.
    pub fn restart(&mut self) {
        self.process.kill();
        let listen = self.base.trim_start_matches("http://").to_owned();
        let config = self.dir.0.join("config.toml");
        let (process, _) = ControlPlane::serve(&self.db, &listen, &config);
        self.process = process;
    }

    /// Sends `body` as the admin: status and JSON.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.admin);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("control plane answers");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Creates an agent; returns its row id and its `allow_` key.
    pub async fn agent(&self, agent_id: &str, mode: &str) -> (String, String) {
        let (s, a) = self
            .call(
                reqwest::Method::POST,
                "/allow/agents",
                Some(json!({"agent_id": agent_id, "name": agent_id, "mode": mode})),
            )
            .await;
        assert_eq!(s, 201, "{a}");
        (
            a["id"].as_str().unwrap().to_owned(),
            a["api_key"].as_str().unwrap().to_owned(),
        )
    }

    /// Creates an action rule.
    pub async fn rule(&self, name: &str, rego: &str) {
        let (s, r) = self
            .call(
                reqwest::Method::POST,
                "/allow/rules",
                Some(json!({"name": name, "rego_source": rego})),
            )
            .await;
        assert_eq!(s, 201, "{r}");
    }
}

/// A sidecar started from `config` (YAML) with the agent key in its
/// environment; its route and admin addresses come from its logs.
pub struct Sidecar {
    pub process: Process,
    /// Route name → `http://addr`.
    pub routes: Vec<(String, String)>,
    pub admin: String,
    /// `http://addr` of the forward proxy, when configured.
    pub forward: Option<String>,
    _dir: TempDir,
}

impl Sidecar {
    pub fn start(config: &str, key: &str, routes: usize) -> Sidecar {
        let dir = TempDir::new();
        let path = dir.0.join("sidecar.yaml");
        std::fs::write(&path, config).expect("config written");
        let mut cmd = Command::new(bin_dir().join("warden-proxy"));
        cmd.arg("--config").arg(&path).env("WARDEN_AGENT_KEY", key);
        let process = Process::spawn(cmd);
        let mut found = Vec::new();
        let mut admin = None;
        let mut forward = None;
        let wants_forward = config.contains("forward_proxy:");
        while found.len() < routes || admin.is_none() || (wants_forward && forward.is_none()) {
            let (message, fields) = process.wait_for("listening lines", |line| {
                let v: Value = serde_json::from_str(line).ok()?;
                let f = v.get("fields")?.clone();
                Some((f.get("message")?.as_str()?.to_owned(), f))
            });
            let listen = fields["listen"].as_str().unwrap_or_default().to_owned();
            match message.as_str() {
                "route listening" => found.push((
                    fields["route"].as_str().unwrap_or_default().to_owned(),
                    format!("http://{listen}"),
                )),
                "admin listening" => admin = Some(format!("http://{listen}")),
                "forward proxy listening" => forward = Some(format!("http://{listen}")),
                _ => {}
            }
        }
        Sidecar {
            process,
            routes: found,
            admin: admin.unwrap_or_default(),
            forward,
            _dir: dir,
        }
    }

    pub fn route(&self, name: &str) -> &str {
        &self
            .routes
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no route {name}"))
            .1
    }

    /// Waits until `/readyz` answers 200.
    pub async fn ready(&self) -> Value {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Ok(resp) = http.get(format!("{}/readyz", self.admin)).send().await
                && resp.status().as_u16() == 200
            {
                return resp.json().await.unwrap_or(Value::Null);
            }
            assert!(
                Instant::now() < deadline,
                "sidecar not ready; log:\n{}",
                self.process.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// What the upstream tool API received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub body: String,
}

/// How long the tool API takes to answer a path under `/slow/`.
pub const SLOW_CALL: Duration = Duration::from_millis(1500);

/// A small HTTP tool API on 127.0.0.1:0 that records every request and
/// answers `{"ok": true, "path": …}` (after [`SLOW_CALL`] under `/slow/`).
pub struct ToolApi {
    pub base: String,
    pub received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ToolApi {
    pub async fn start() -> ToolApi {
        let received = Arc::new(Mutex::new(Vec::new()));
        let keep = received.clone();
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let keep = keep.clone();
            async move {
                let (parts, body) = req.into_parts();
                let bytes = axum::body::to_bytes(body, 1 << 20)
                    .await
                    .unwrap_or_default();
                keep.lock().unwrap().push(Received {
                    method: parts.method.to_string(),
                    path: parts.uri.path().to_owned(),
                    query: parts.uri.query().map(str::to_owned),
                    body: String::from_utf8_lossy(&bytes).into_owned(),
                });
                if parts.uri.path().starts_with("/slow/") {
                    // Recorded, then answered late: a call still in flight
                    // when a test stops the sidecar.
                    tokio::time::sleep(SLOW_CALL).await;
                }
                axum::Json(json!({"ok": true, "path": parts.uri.path()}))
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ToolApi {
            base,
            received,
            task,
        }
    }

    pub fn calls(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

impl Drop for ToolApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Polls `probe` every 50 ms until it holds or `deadline` passes.
pub async fn eventually(deadline: Duration, probe: impl AsyncFnMut() -> bool) -> bool {
    eventually_every(deadline, Duration::from_millis(50), probe).await
}

/// Polls `probe` every `interval` until it holds or `deadline` passes (a
/// slower poll for a probe that spends a small rate window).
pub async fn eventually_every(
    deadline: Duration,
    interval: Duration,
    mut probe: impl AsyncFnMut() -> bool,
) -> bool {
    let start = Instant::now();
    loop {
        if probe().await {
            return true;
        }
        if start.elapsed() > deadline {
            return false;
        }
        tokio::time::sleep(interval).await;
    }
}

/// The MCP Python SDK's version the tests run against.
pub const MCP_SDK: &str = "mcp==2.3.0";

/// A Python virtual environment with the official MCP SDK, made once under
/// the target directory; returns its interpreter.
pub fn mcp_python() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| venv("mcp-venv", &[MCP_SDK])).clone()
}

/// The chart's test tools: Helm's Go SDK behind a C interface (lint and
/// render without a `helm` binary) and the Kubernetes schemas.
pub const CHART_TOOLS: [&str; 2] = ["helm-python-sdk==0.2.2", "kubernetes-validate==1.37.0"];

/// A Python virtual environment with the chart's test tools.
pub fn chart_python() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON
        .get_or_init(|| venv("chart-venv", &CHART_TOOLS))
        .clone()
}

/// A virtual environment `name` under the target directory with `packages`
/// (pinned), made once and reused while the pins stay the same.
fn venv(name: &str, packages: &[&str]) -> PathBuf {
    let venv = bin_dir().join(name);
    let python = venv.join("bin").join("python");
    let ready = venv.join(format!(".{}", packages.join("+")));
    if !ready.exists() {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 runs");
        assert!(made.success(), "python3 -m venv failed");
        let installed = Command::new(&python)
            .args(["-m", "pip", "install", "-q"])
            .args(packages)
            .status()
            .expect("pip runs");
        assert!(installed.success(), "pip install {packages:?} failed");
        std::fs::write(&ready, b"").expect("marker");
    }
    python
}

/// `tests/mcp/<name>`.
pub fn mcp_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp").join(name)
}

/// The MCP tool server of `tests/mcp/tool_server.py` (Streamable HTTP).
pub struct McpServer {
    pub process: Process,
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    received: PathBuf,
    _dir: TempDir,
}

impl McpServer {
    /// `json_response`: answer with JSON bodies instead of SSE streams.
    pub fn start(json_response: bool) -> McpServer {
        let dir = TempDir::new();
        let received = dir.0.join("received.jsonl");
        let mut cmd = Command::new(mcp_python());
        cmd.arg(mcp_script("tool_server.py"))
            .env("RECEIVED_LOG", &received)
            .env("JSON_RESPONSE", if json_response { "1" } else { "0" });
        let process = Process::spawn(cmd);
        let addr = process.wait_for("`listening on` line", |line| {
            line.strip_prefix("listening on ").map(str::to_owned)
        });
        McpServer {
            process,
            url: format!("http://{addr}/mcp"),
            received,
            _dir: dir,
        }
    }

    /// The tool calls that reached the server: `{"tool", "arguments"}`.
    pub fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.received)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// Runs `tests/mcp/client.py` against `url` in `mode` (`legacy` or a modern
/// protocol version): one JSON value per step.
pub fn mcp_client(url: &str, mode: &str, steps: &Value) -> Vec<Value> {
    let out = Command::new(mcp_python())
        .arg(mcp_script("client.py"))
        .args([url, mode, &steps.to_string()])
        .output()
        .expect("the MCP client runs");
    assert!(
        out.status.success(),
        "MCP client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A self-signed certificate for 127.0.0.1 made with `openssl`: (cert, key).
pub fn localhost_cert(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
        ])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        // An end-entity certificate (openssl marks self-signed ones as CAs,
        // which TLS verifiers refuse as a server certificate).
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

/// The HTTPS tool API of `tests/fixtures/https_api.py`.
pub struct HttpsApi {
    pub process: Process,
    /// `127.0.0.1:PORT`.
    pub authority: String,
    log: PathBuf,
}

impl HttpsApi {
    pub fn start(dir: &Path, cert: &Path, key: &Path, name: &str) -> HttpsApi {
        let log = dir.join(format!("{name}.jsonl"));
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join("https_api.py");
        let mut cmd = Command::new("python3");
        cmd.arg(script).arg(cert).arg(key).arg(&log);
        let process = Process::spawn(cmd);
        let authority = process.wait_for("`listening on` line", |line| {
            line.strip_prefix("listening on ").map(str::to_owned)
        });
        HttpsApi {
            process,
            authority,
            log,
        }
    }

    /// The requests it received: `{"method", "path", "body"}`.
    pub fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// `curl` through `proxy`, trusting `cacert`: (exit success, status, body).
pub fn curl_via(proxy: &str, cacert: &Path, method: &str, url: &str) -> (bool, u16, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-S",
            "--max-time",
            "20",
            "-w",
            "\n%{http_code}",
            "-X",
            method,
            "--proxy",
            proxy,
        ])
        .arg("--cacert")
        .arg(cacert)
        .arg(url)
        // Loopback through the proxy, whatever the environment says.
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        out.status.success(),
        code.trim().parse().unwrap_or(0),
        body.to_owned(),
    )
}
