//! What the sidecar reports, and when: every decision reaches the control
//! plane even when the key's rate window is small (execution outcomes, one
//! request each, give way to the decisions), and a sidecar stopped with
//! SIGTERM finishes the calls in flight and delivers its queue first.

use std::time::{Duration, Instant};

use reqwest::Method;
use warden_tests::{ControlPlane, SLOW_CALL, Sidecar, ToolApi, eventually, eventually_every};

fn config(control_plane: &str, upstream: &str, flush_ms: u64) -> String {
    format!(
        "
agent_id: crm-bot
control_plane:
  url: {control_plane}
admin:
  listen: 127.0.0.1:0
telemetry:
  flush_ms: {flush_ms}
routes:
  - name: crm
    kind: http
    listen: 127.0.0.1:0
    upstream: {upstream}
    actions:
      - match: GET /contacts/{{id}}
        action: get_contact
      - match: GET /slow/{{id}}
        action: get_slowly
"
    )
}

/// The agent's page of the audit log, of at most `limit` items.
async fn audit_log(cp: &ControlPlane, limit: u32) -> serde_json::Value {
    let path = format!("/v1/allow/audit-log?agent_id=crm-bot&limit={limit}");
    let (s, log) = cp.call(Method::GET, &path, None).await;
    assert_eq!(s, 200, "{log}");
    log
}

async fn metric(sidecar: &Sidecar, name: &str) -> f64 {
    let text = reqwest::get(format!("{}/metrics", sidecar.admin))
        .await
        .expect("admin answers")
        .text()
        .await
        .unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

// Regression: each execution outcome was sent as soon as its batch was
// accepted, so an agent making more than a few calls a second spent the
// key's window (spec §8: 600 per 60 s) on outcomes, and its decisions'
// batches were refused with 429 until the window slid or the queue
// dropped them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execution_outcomes_never_starve_the_decisions() {
    // A window of 130: outcomes may use what the reserve of 100 leaves
    // (about 25); sent unguarded, the first batch's 100 outcomes would
    // exhaust it, and the third batch would be refused for a minute.
    let cp = ControlPlane::start_with("rate_limit_requests = 130\n");
    let (_, key) = cp.agent("crm-bot", "enforce").await;
    let api = ToolApi::start().await;
    let sidecar = Sidecar::start(&config(&cp.base, &api.base, 500), &key, 1);
    sidecar.ready().await;
    let route = sidecar.route("crm").to_owned();
    let http = reqwest::Client::new();
    const CALLS: u64 = 250;
    for id in 0..CALLS {
        let resp = http
            .get(format!("{route}/contacts/{id}"))
            .send()
            .await
            .expect("the sidecar answers");
        assert_eq!(resp.status().as_u16(), 200);
    }
    // Polled once a second: the admin key has the same small window.
    let mut arrived = 0;
    eventually_every(
        Duration::from_secs(30),
        Duration::from_secs(1),
        async || {
            arrived = audit_log(&cp, 1).await["total"]
                .as_u64()
                .unwrap_or_default();
            arrived == CALLS
        },
    )
    .await;
    assert_eq!(
        arrived,
        CALLS,
        "every decision arrives within 30 s; sidecar log:\n{}",
        sidecar.process.logs()
    );
    let skipped = metric(&sidecar, "warden_proxy_execution_events_skipped_total").await;
    assert!(
        skipped > 0.0 && skipped < CALLS as f64,
        "outcomes go while the window has room, then are skipped: {skipped} of {CALLS} skipped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_calls_in_flight_and_delivers_the_queue() {
    let cp = ControlPlane::start();
    let (_, key) = cp.agent("crm-bot", "enforce").await;
    let api = ToolApi::start().await;
    // A flush interval longer than the test: only the shutdown delivers.
    let mut sidecar = Sidecar::start(&config(&cp.base, &api.base, 60_000), &key, 1);
    sidecar.ready().await;
    let route = sidecar.route("crm").to_owned();
    let http = reqwest::Client::new();
    for id in 0..3 {
        let s = http
            .get(format!("{route}/contacts/{id}"))
            .send()
            .await
            .expect("the sidecar answers")
            .status();
        assert_eq!(s.as_u16(), 200);
    }
    let slow = tokio::spawn({
        let http = http.clone();
        let url = format!("{route}/slow/1");
        async move { http.get(url).send().await.map(|r| r.status().as_u16()) }
    });
    // The slow call has reached the upstream: it is in flight.
    let in_flight = eventually(Duration::from_secs(10), async || {
        api.calls().iter().any(|c| c.path == "/slow/1")
    })
    .await;
    assert!(in_flight);
    let asked = Instant::now();
    let exited = tokio::task::spawn_blocking(move || {
        let ok = sidecar.process.terminate(Duration::from_secs(20));
        (ok, sidecar)
    })
    .await
    .unwrap();
    assert!(
        exited.0,
        "the sidecar exits cleanly; log:\n{}",
        exited.1.process.logs()
    );
    assert_eq!(
        slow.await.unwrap().ok(),
        Some(200),
        "the call in flight is answered, not cut"
    );
    assert!(asked.elapsed() < SLOW_CALL + Duration::from_secs(10));
    assert_eq!(
        audit_log(&cp, 100).await["data"]
            .as_array()
            .map_or(0, Vec::len),
        4,
        "the queue was delivered before exit; log:\n{}\ncontrol plane:\n{}",
        exited.1.process.logs(),
        cp.process.logs()
    );
}
