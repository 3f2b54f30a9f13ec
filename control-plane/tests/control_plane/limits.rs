//! Rate limiting (spec §8): the headers, 429, and the Redis limiter's
//! outage and recovery against a Redis this test starts on its own port.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::Method;
use warden_control_plane::config::RawConfig;

use super::support::{Backend, TestServer, assert_envelope, both_backends, json};

async fn limit_and_headers(backend: Backend) {
    let srv = TestServer::start_with(
        backend,
        RawConfig {
            rate_limit_requests: Some(3),
            ..RawConfig::default()
        },
    )
    .await;
    let admin = srv.admin("acme").await;
    let other = srv.admin("other").await;
    for remaining in ["2", "1", "0"] {
        let r = srv.get("/api/keys", &admin).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-ratelimit-limit"], "3");
        assert_eq!(r.headers()["x-ratelimit-remaining"], remaining);
    }
    let r = srv.get("/api/keys", &admin).await;
    let retry = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    let (s, b) = json(r).await;
    assert_envelope(s, &b, 429, "rate_limited");
    assert_eq!(b["retryAfter"].as_u64(), Some(retry));
    assert!(b["detail"].is_string());
    // Another key has its own window.
    assert_eq!(srv.get("/api/keys", &other).await.status(), 200);
    srv.stop().await;
}

both_backends!(limit_and_headers);

/// A `redis-server` of this test's own, on a free loopback port.
struct OwnRedis {
    port: u16,
    child: Option<Child>,
    dir: std::path::PathBuf,
}

impl OwnRedis {
    fn start(port: u16, dir: &std::path::Path) -> OwnRedis {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/test installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        OwnRedis {
            port,
            child: Some(child),
            dir: dir.to_owned(),
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn restart(&mut self) {
        self.stop();
        *self = OwnRedis::start(self.port, &self.dir.clone());
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_fails_closed_then_recovers() {
    let dir = std::env::temp_dir().join(format!("warden-redis-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut redis = OwnRedis::start(free_port(), &dir);
    let srv = TestServer::start_with(
        Backend::Sqlite,
        RawConfig {
            redis_url: Some(format!("redis://127.0.0.1:{}", redis.port)),
            rate_limit_requests: Some(5),
            ..RawConfig::default()
        },
    )
    .await;
    let admin = srv.admin("acme").await;
    let r = srv.get("/api/keys", &admin).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ratelimit-remaining"], "4");

    redis.stop();
    let r = srv.get("/api/keys", &admin).await;
    assert!(r.headers().contains_key("retry-after"));
    let (s, b) = json(r).await;
    assert_envelope(s, &b, 503, "rate_limiter_unavailable");
    assert_eq!(
        srv.request(Method::GET, "/readyz", None)
            .send()
            .await
            .unwrap()
            .status(),
        503
    );

    // Service resumes without a restart once Redis is back (bounded wait).
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = srv.get("/api/keys", &admin).await.status();
        if status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {status} after Redis came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The window is shared state in Redis: a fresh Redis starts it over.
    srv.stop().await;
    drop(redis);
    let _ = std::fs::remove_dir_all(&dir);
}
