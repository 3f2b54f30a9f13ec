//! The mode stream (spec §6.1): snapshot on connect, changes at once
//! (including an organization default that moves inheriting agents),
//! pings, and, on PostgreSQL, changes made through another replica.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use warden_control_plane::config::RawConfig;

use super::support::{Backend, TestServer, both_backends, send};

/// Reads SSE events from a response, with a deadline per event.
struct Events {
    resp: reqwest::Response,
    buf: String,
}

impl Events {
    async fn open(srv: &TestServer, key: &str, agent_id: &str) -> Events {
        let resp = srv
            .request(
                Method::GET,
                &format!("/allow/agents/me/stream?agent_id={agent_id}"),
                Some(key),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert!(
            resp.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        Events {
            resp,
            buf: String::new(),
        }
    }

    /// The next event's name and data, within `within`.
    async fn next(&mut self, within: Duration) -> (String, Value) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut name = String::new();
                let mut data = Value::Null;
                for line in block.lines() {
                    if let Some(n) = line.strip_prefix("event:") {
                        name = n.trim().to_owned();
                    } else if let Some(d) = line.strip_prefix("data:") {
                        data = serde_json::from_str(d.trim()).unwrap_or(Value::Null);
                    }
                }
                return (name, data);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let chunk = tokio::time::timeout(left, self.resp.chunk())
                .await
                .expect("an event in time")
                .unwrap()
                .expect("stream open");
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// The next event that is not a ping.
    async fn next_change(&mut self, within: Duration) -> (String, Value) {
        loop {
            let ev = self.next(within).await;
            if ev.0 != "ping" {
                return ev;
            }
        }
    }
}

const SECOND: Duration = Duration::from_secs(1);

async fn snapshot_changes_and_pings(backend: Backend) {
    let srv = TestServer::start_with(
        backend,
        RawConfig {
            stream_ping_secs: Some(1),
            ..RawConfig::default()
        },
    )
    .await;
    let admin = srv.admin("acme").await;
    let (_, a) = send(
        &srv,
        Method::POST,
        "/allow/agents",
        &admin,
        Some(json!({"agent_id": "bot", "name": "bot"})),
    )
    .await;
    let (key, row) = (
        a["api_key"].as_str().unwrap().to_owned(),
        a["id"].as_str().unwrap().to_owned(),
    );

    let mut events = Events::open(&srv, &key, "bot").await;
    assert_eq!(
        events.next(SECOND).await,
        ("mode_snapshot".into(), json!({"agent_mode": "monitor"}))
    );
    let (name, _) = events.next(Duration::from_secs(3)).await;
    assert_eq!(name, "ping", "heartbeat at the configured period");

    // Monitor → enforce: seen on the stream within a second, and the next
    // decision enforces.
    send(&srv, Method::POST, "/allow/rules", &admin, Some(json!({"name": "no deletes", "rego_source": "package r\ndecision := \"deny\" if startswith(input.action, \"delete_\")"}))).await;
    let eval = json!({"agent_id": "bot", "target_app": "github", "action": "delete_repo"});
    let (_, before) = send(
        &srv,
        Method::POST,
        "/allow/evaluate",
        &key,
        Some(eval.clone()),
    )
    .await;
    assert_eq!(
        (before["decision"].as_str(), before["would_decide"].as_str()),
        (Some("permit"), Some("deny"))
    );
    send(
        &srv,
        Method::PUT,
        &format!("/allow/agents/{row}"),
        &admin,
        Some(json!({"mode": "enforce"})),
    )
    .await;
    assert_eq!(
        events.next_change(SECOND).await,
        ("mode_changed".into(), json!({"agent_mode": "enforce"}))
    );
    let (_, after) = send(&srv, Method::POST, "/allow/evaluate", &key, Some(eval)).await;
    assert_eq!(after["decision"], "deny");
    // Back to inheriting, then the organization default moves it.
    send(
        &srv,
        Method::PUT,
        &format!("/allow/agents/{row}"),
        &admin,
        Some(json!({"mode": null})),
    )
    .await;
    assert_eq!(
        events.next_change(SECOND).await.1,
        json!({"agent_mode": "monitor"})
    );
    send(
        &srv,
        Method::PUT,
        "/allow/settings",
        &admin,
        Some(json!({"default_agent_mode": "off"})),
    )
    .await;
    assert_eq!(
        events.next_change(SECOND).await,
        ("mode_changed".into(), json!({"agent_mode": "off"}))
    );
    // Shut down: enforce (the terminal bundle).
    send(
        &srv,
        Method::DELETE,
        &format!("/allow/agents/{row}"),
        &admin,
        None,
    )
    .await;
    assert_eq!(
        events.next_change(SECOND).await.1,
        json!({"agent_mode": "enforce"})
    );
    drop(events);

    let (s, _) = send(
        &srv,
        Method::GET,
        "/allow/agents/me/stream?agent_id=nobody",
        &admin,
        None,
    )
    .await;
    assert_eq!(s, 404);
    let (s, _) = send(
        &srv,
        Method::GET,
        "/allow/agents/me/stream?agent_id=someone",
        &key,
        None,
    )
    .await;
    assert_eq!(s, 403, "agent keys stream only their own agent");

    // Guards graceful shutdown against open streams: the server ends them
    // instead of waiting on them forever (a sidecar is always subscribed).
    let open = Events::open(&srv, &key, "bot").await;
    tokio::time::timeout(Duration::from_secs(5), srv.stop())
        .await
        .expect("the server stops although a stream is open");
    drop(open);
}

both_backends!(snapshot_changes_and_pings);

/// With PostgreSQL, a change made through one replica reaches a subscriber
/// of another (LISTEN/NOTIFY).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_cross_replicas_on_postgres() {
    let a = TestServer::start(Backend::Postgres).await;
    let b = a.replica(RawConfig::default()).await;
    let admin = a.admin("acme").await;
    let (_, agent) = send(
        &a,
        Method::POST,
        "/allow/agents",
        &admin,
        Some(json!({"agent_id": "bot", "name": "bot"})),
    )
    .await;
    let key = agent["api_key"].as_str().unwrap().to_owned();
    let mut events = Events::open(&b, &key, "bot").await;
    assert_eq!(
        events.next(SECOND).await.1,
        json!({"agent_mode": "monitor"})
    );
    send(
        &a,
        Method::PUT,
        &format!("/allow/agents/{}", agent["id"].as_str().unwrap()),
        &admin,
        Some(json!({"mode": "enforce"})),
    )
    .await;
    assert_eq!(
        events.next_change(SECOND).await,
        ("mode_changed".into(), json!({"agent_mode": "enforce"}))
    );
    drop(events);
    b.stop().await;
    a.stop().await;
}
