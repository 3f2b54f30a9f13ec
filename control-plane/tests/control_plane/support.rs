//! Starting a real server for a test, on either backend.

use std::sync::Arc;

use chrono::Utc;
use reqwest::{Client, Method, RequestBuilder, Response};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use warden_control_plane::app::{self, AppState};
use warden_control_plane::auth::{Audience, Environment, Permission, Scope};
use warden_control_plane::config::{Config, RawConfig};
use warden_control_plane::keys::{self, Expiry, KeySpec};
use warden_control_plane::store::{OrgId, Store};

/// The two storage backends every server test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

/// A throw-away database: a temporary SQLite file, or a fresh PostgreSQL
/// database dropped when this is dropped.
pub(crate) struct TestDb {
    pub(crate) url: String,
    _dir: Option<tempdir::TempDir>,
    pg_drop: Option<(String, String)>,
}

mod tempdir {
    //! A directory removed on drop (std has none; this is all a test needs).
    pub(crate) struct TempDir(pub std::path::PathBuf);

    impl TempDir {
        pub(crate) fn new() -> TempDir {
            let path =
                std::env::temp_dir().join(format!("warden-test-{}", uuid::Uuid::new_v4().simple()));
            std::fs::create_dir_all(&path).expect("temp dir");
            TempDir(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub(crate) fn postgres_admin_url() -> String {
    std::env::var("WARDEN_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

impl TestDb {
    pub(crate) async fn new(backend: Backend) -> TestDb {
        match backend {
            Backend::Sqlite => {
                let dir = tempdir::TempDir::new();
                TestDb {
                    url: format!("sqlite://{}", dir.0.join("warden.db").display()),
                    _dir: Some(dir),
                    pg_drop: None,
                }
            }
            Backend::Postgres => {
                use sqlx::Connection;
                let admin = postgres_admin_url();
                let name = format!("warden_test_{}", uuid::Uuid::new_v4().simple());
                let mut conn = sqlx::PgConnection::connect(&admin)
                    .await
                    .unwrap_or_else(|e| {
                        panic!("PostgreSQL at {admin} is required (scripts/test starts it): {e}")
                    });
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut conn)
                    .await
                    .expect("create database");
                let (base, _) = admin.rsplit_once('/').expect("URL with a database");
                TestDb {
                    url: format!("{base}/{name}"),
                    _dir: None,
                    pg_drop: Some((admin, name)),
                }
            }
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some((admin, name)) = self.pg_drop.take() {
            // Drop runs outside any runtime guarantee: use a thread of its own.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .ok()?;
                rt.block_on(async {
                    use sqlx::Connection;
                    let mut conn = sqlx::PgConnection::connect(&admin).await.ok()?;
                    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut conn)
                        .await
                        .ok()
                })
            })
            .join();
        }
    }
}

/// A running server and what a test needs to talk to it.
pub(crate) struct TestServer {
    pub(crate) base: String,
    pub(crate) client: Client,
    pub(crate) store: Arc<dyn Store>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    pub(crate) db: TestDb,
}

impl TestServer {
    pub(crate) async fn start(backend: Backend) -> TestServer {
        TestServer::start_with(backend, RawConfig::default()).await
    }

    /// Starts a server with `raw` settings (its database is always a fresh one).
    pub(crate) async fn start_with(backend: Backend, raw: RawConfig) -> TestServer {
        let db = TestDb::new(backend).await;
        TestServer::start_on(db, raw).await
    }

    async fn start_on(db: TestDb, raw: RawConfig) -> TestServer {
        let config = Config::from_raw(RawConfig {
            database_url: Some(db.url.clone()),
            listen: Some("127.0.0.1:0".into()),
            ..raw
        })
        .expect("test config");
        let state = AppState::open(config).await.expect("state opens");
        let store = state.store.clone();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            app::serve(state, listener, async {
                let _ = stopped.await;
            })
            .await
            .expect("server runs");
        });
        let srv = TestServer {
            base,
            client: Client::new(),
            store,
            stop: Some(stop),
            task: Some(task),
            db,
        };
        srv.wait_ready().await;
        srv
    }

    /// Waits for `/readyz` (a replica is ready once it hears the others),
    /// with a deadline; never a fixed sleep.
    async fn wait_ready(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let ready = self
                .request(Method::GET, "/readyz", None)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200);
            if ready {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the server never became ready"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Makes every audit-log insert fail from now on (a database trigger),
    /// to prove that key operations never go unaudited.
    pub(crate) async fn break_audit_log(&self) {
        let statements: &[&str] = match self.backend() {
            Backend::Sqlite => &[
                "CREATE TRIGGER audit_down BEFORE INSERT ON audit_log BEGIN SELECT RAISE(ABORT, 'audit log unavailable'); END",
            ],
            Backend::Postgres => &[
                "CREATE FUNCTION audit_down() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'audit log unavailable'; END $$ LANGUAGE plpgsql",
                "CREATE TRIGGER audit_down BEFORE INSERT ON audit_log FOR EACH ROW EXECUTE FUNCTION audit_down()",
            ],
        };
        self.execute(statements).await;
    }

    /// Runs `statements` on the server's database behind its back (fault
    /// injection).
    pub(crate) async fn execute(&self, statements: &[&str]) {
        use sqlx::Connection;
        match self.backend() {
            Backend::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.db.url)
                    .await
                    .expect("connect");
                for sql in statements {
                    sqlx::query(sql).execute(&mut c).await.expect("statement");
                }
            }
            Backend::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.db.url)
                    .await
                    .expect("connect");
                for sql in statements {
                    sqlx::query(sql).execute(&mut c).await.expect("statement");
                }
            }
        }
    }

    fn backend(&self) -> Backend {
        if self.db.url.starts_with("sqlite") {
            Backend::Sqlite
        } else {
            Backend::Postgres
        }
    }

    /// A second server (another replica) on this server's database.
    pub(crate) async fn replica(&self, raw: RawConfig) -> TestServer {
        let db = TestDb {
            url: self.db.url.clone(),
            _dir: None,
            pg_drop: None,
        };
        TestServer::start_on(db, raw).await
    }

    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    pub(crate) fn request(&self, method: Method, path: &str, key: Option<&str>) -> RequestBuilder {
        let req = self.client.request(method, format!("{}{path}", self.base));
        match key {
            Some(k) => req.bearer_auth(k),
            None => req,
        }
    }

    pub(crate) async fn get(&self, path: &str, key: &str) -> Response {
        self.request(Method::GET, path, Some(key))
            .send()
            .await
            .expect("request")
    }

    pub(crate) async fn post(&self, path: &str, key: &str, body: Value) -> Response {
        self.request(Method::POST, path, Some(key))
            .json(&body)
            .send()
            .await
            .expect("request")
    }

    /// Creates a key directly (as the CLI does) in organization `org`.
    pub(crate) async fn key(&self, org: &str, spec: KeySpec) -> (OrgId, String, uuid::Uuid) {
        let now = Utc::now();
        let org = self.store.ensure_org(org, now).await.expect("org");
        let issued = keys::create(self.store.as_ref(), org.id, None, spec, now)
            .await
            .expect("key");
        (org.id, issued.plaintext, issued.key.id.0)
    }

    /// A management key with every permission and `full_access`.
    pub(crate) async fn admin(&self, org: &str) -> String {
        self.key(
            org,
            management("admin", Permission::ALL, &[Scope::FullAccess]),
        )
        .await
        .1
    }
}

pub(crate) fn management(name: &str, permissions: &[Permission], scopes: &[Scope]) -> KeySpec {
    KeySpec {
        name: name.into(),
        audience: Audience::Management,
        environment: Environment::Production,
        permissions: permissions.to_vec(),
        scopes: scopes.to_vec(),
        expiry: Expiry::default(),
        agent_id: None,
        plaintext: None,
    }
}

pub(crate) fn harness(name: &str) -> KeySpec {
    KeySpec {
        audience: Audience::Harness,
        ..management(name, &[], &[Scope::FullAccess])
    }
}

/// Sends `body` (if any) as JSON with `key`: the status and JSON body.
pub(crate) async fn send(
    srv: &TestServer,
    method: Method,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let req = srv.request(method, path, Some(key));
    let req = match body {
        Some(b) => req.json(&b),
        None => req,
    };
    json(req.send().await.expect("request")).await
}

/// The status and JSON body of a response.
pub(crate) async fn json(resp: Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

/// Asserts the spec's error envelope with `status` and `code`.
pub(crate) fn assert_envelope(status: u16, body: &Value, want_status: u16, want_code: &str) {
    assert_eq!(status, want_status, "{body}");
    assert_eq!(body["code"], want_code, "{body}");
    assert!(body["error"].is_string(), "{body}");
    let code = body["code"].as_str().unwrap_or_default();
    assert!(
        code.starts_with(|c: char| c.is_ascii_lowercase())
            && code
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
        "{body}"
    );
}

/// Defines one `#[tokio::test]` per backend for an `async fn(Backend)`.
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::control_plane::support::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::control_plane::support::Backend::Postgres).await
                }
            )*
        }
    };
}
pub(crate) use both_backends;
