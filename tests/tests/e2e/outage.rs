//! The control plane goes away (spec §9): the sidecar keeps deciding with its
//! last good bundle, queues its telemetry, and delivers all of it once the
//! control plane is back; a sidecar that never reached it runs as monitor.

use std::time::Duration;

use reqwest::Method;
use warden_tests::{ControlPlane, Sidecar, ToolApi, eventually};

const DENY_DELETES: &str =
    "package deny_deletes\ndecision := \"deny\" if startswith(input.action, \"delete_\")";

fn config(control_plane: &str, upstream: &str) -> String {
    format!(
        "
agent_id: crm-bot
control_plane:
  url: {control_plane}
  bundle_interval_secs: 1
admin:
  listen: 127.0.0.1:0
telemetry:
  flush_ms: 100
routes:
  - name: crm
    kind: http
    listen: 127.0.0.1:0
    upstream: {upstream}
    actions:
      - match: GET /contacts/{{id}}
        action: get_contact
      - match: DELETE /contacts/{{id}}
        action: delete_contact
"
    )
}

async fn status(http: &reqwest::Client, method: Method, url: String) -> u16 {
    http.request(method, url)
        .send()
        .await
        .expect("the sidecar answers")
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeps_governing_and_delivers_telemetry_after_an_outage() {
    let mut cp = ControlPlane::start();
    let (_, key) = cp.agent("crm-bot", "enforce").await;
    cp.rule("no deletes", DENY_DELETES).await;
    let api = ToolApi::start().await;
    let sidecar = Sidecar::start(&config(&cp.base, &api.base), &key, 1);
    sidecar.ready().await;
    let route = sidecar.route("crm").to_owned();
    let http = reqwest::Client::new();

    cp.kill();
    for id in 0..5 {
        let s = status(&http, Method::GET, format!("{route}/contacts/{id}")).await;
        assert_eq!(s, 200, "reads still pass with the last good bundle");
    }
    let s = status(&http, Method::DELETE, format!("{route}/contacts/1")).await;
    assert_eq!(s, 403, "enforcement does not lapse with the control plane");
    assert_eq!(api.calls().len(), 5);

    cp.restart();
    let delivered = eventually(Duration::from_secs(45), async || {
        let (_, log) = cp
            .call(Method::GET, "/v1/allow/audit-log?agent_id=crm-bot", None)
            .await;
        log["total"].as_u64() == Some(6)
    })
    .await;
    assert!(
        delivered,
        "all six decisions arrive after the outage; sidecar log:\n{}",
        sidecar.process.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_confirmed_runs_as_monitor() {
    // A port nobody listens on: the control plane is unreachable from the start.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let api = ToolApi::start().await;
    let sidecar = Sidecar::start(&config(&url, &api.base), "allow_unused_key_0000", 1);
    let ready = sidecar.ready().await;
    assert!(ready["bundle_version"].is_null(), "{ready}");
    let http = reqwest::Client::new();
    let s = status(
        &http,
        Method::DELETE,
        format!("{}/contacts/1", sidecar.route("crm")),
    )
    .await;
    assert_eq!(s, 200, "never confirmed: observed as monitor, not blocked");
    assert_eq!(api.calls().len(), 1);
}
