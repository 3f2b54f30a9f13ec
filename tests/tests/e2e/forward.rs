//! The forward proxy: an HTTPS tool API reached through `CONNECT` is
//! intercepted (the client trusts the sidecar's CA), governed, and
//! re-encrypted to the real upstream; a host no route lists is tunnelled
//! untouched (the client still sees the upstream's own certificate).

use warden_tests::{ControlPlane, HttpsApi, Sidecar, TempDir, ToolApi, curl_via, localhost_cert};

const DENY_DELETES: &str =
    "package deny_deletes\ndecision := \"deny\" if startswith(input.action, \"delete_\")";

/// `curl_via` off the async runtime's threads.
async fn curl(
    proxy: &str,
    cacert: &std::path::Path,
    method: &'static str,
    url: String,
) -> (bool, u16, String) {
    let (proxy, cacert) = (proxy.to_owned(), cacert.to_owned());
    tokio::task::spawn_blocking(move || curl_via(&proxy, &cacert, method, &url))
        .await
        .expect("curl finishes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intercepts_governed_hosts_and_tunnels_the_rest() {
    let dir = TempDir::new();
    let (cert, key) = localhost_cert(&dir.0);
    let governed = HttpsApi::start(&dir.0, &cert, &key, "governed");
    let other = HttpsApi::start(&dir.0, &cert, &key, "other");
    let cp = ControlPlane::start();
    let (_, agent_key) = cp.agent("billing-bot", "enforce").await;
    cp.rule("no deletes", DENY_DELETES).await;
    let plain = ToolApi::start().await;
    let ca_dir = dir.0.join("sidecar-ca");
    let config = format!(
        "
agent_id: billing-bot
control_plane:
  url: {}
admin:
  listen: 127.0.0.1:0
forward_proxy:
  listen: 127.0.0.1:0
  ca_dir: {}
  upstream_ca_file: {}
routes:
  - name: billing
    kind: http
    hosts: [\"{}\"]
    actions:
      - match: GET /v1/customers/{{id}}
        action: get_customer
      - match: DELETE /v1/customers/{{id}}
        action: delete_customer
  - name: tools
    kind: http
    hosts: [\"{}\"]
    actions:
      - match: DELETE /v1/customers/{{id}}
        action: delete_customer
",
        cp.base,
        ca_dir.display(),
        cert.display(),
        governed.authority,
        plain.base.trim_start_matches("http://"),
    );
    let sidecar = Sidecar::start(&config, &agent_key, 0);
    sidecar.ready().await;
    let proxy = sidecar.forward.clone().expect("forward proxy address");
    let sidecar_ca = ca_dir.join("ca.pem");
    let url = |api: &HttpsApi, path: &str| format!("https://{}{path}", api.authority);

    let (cmd_ok, status, body) = curl(
        &proxy,
        &sidecar_ca,
        "GET",
        url(&governed, "/v1/customers/7"),
    )
    .await;
    assert!(
        cmd_ok && status == 200,
        "{status} {body}\n{}",
        sidecar.process.logs()
    );
    assert_eq!(
        governed.received().len(),
        1,
        "re-encrypted to the real upstream"
    );

    let (_, status, body) = curl(
        &proxy,
        &sidecar_ca,
        "DELETE",
        url(&governed, "/v1/customers/7"),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("policy_denied"), "{body}");
    assert_eq!(
        governed.received().len(),
        1,
        "the denied call never left the sidecar"
    );

    // Not governed: a tunnel. The upstream's own certificate reaches the client.
    let (ok, status, body) = curl(&proxy, &cert, "DELETE", url(&other, "/anything")).await;
    assert!(ok && status == 200, "{status} {body}");
    assert_eq!(other.received().len(), 1);
    let (ok, _, _) = curl(&proxy, &sidecar_ca, "GET", url(&other, "/anything")).await;
    assert!(
        !ok,
        "the tunnel is not intercepted: the sidecar's CA does not vouch for it"
    );

    // Plain HTTP through the proxy to a governed host: decided directly.
    let (_, status, body) = curl(
        &proxy,
        &cert,
        "DELETE",
        format!("{}/v1/customers/9", plain.base),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let (_, status, body) = curl(
        &proxy,
        &cert,
        "GET",
        format!("{}/v1/customers/9", plain.base),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let calls = plain.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].method, "GET");
}
