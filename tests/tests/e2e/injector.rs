//! The sidecar injector over HTTPS with real `AdmissionReview` JSON: an
//! opted-in pod is patched (the patch applied as the API server would, and
//! the injected sidecar's configuration accepted by the real sidecar), a pod
//! that did not opt in and an injected pod are untouched, a pod that cannot
//! be governed is refused, and a malformed review is a 400, not a crash.

use std::process::Command;

use base64::Engine as _;
use serde_json::{Value, json};
use warden_tests::{Process, TempDir, bin_dir, chart_python, localhost_cert};

struct Injector {
    _process: Process,
    url: String,
    /// The API's `http://addr` (its `/metrics` counts the reviews).
    api: String,
    http: reqwest::Client,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
    dir: TempDir,
}

/// A client that trusts only the certificate in `pem`.
fn client_trusting(pem: &std::path::Path) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(pem).unwrap()).unwrap();
    reqwest::Client::builder()
        .add_root_certificate(ca)
        .tls_built_in_root_certs(false)
        .no_proxy()
        .build()
        .unwrap()
}

impl Injector {
    fn start() -> Injector {
        Injector::start_with(
            "registry.example/warden-proxy:test",
            "http://warden.warden.svc:8080",
        )
    }

    /// With this sidecar image and control plane URL.
    fn start_with(image: &str, control_plane: &str) -> Injector {
        let dir = TempDir::new();
        let (cert, key) = localhost_cert(&dir.0);
        let config = dir.0.join("config.toml");
        std::fs::write(&config, "injector_tls_reload_secs = 1\n").unwrap();
        let mut cmd = Command::new(bin_dir().join("warden-control-plane"));
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .arg("--config")
            .arg(&config)
            .args(["--injector-listen", "127.0.0.1:0"])
            .arg("--injector-tls-cert")
            .arg(&cert)
            .arg("--injector-tls-key")
            .arg(&key)
            .env(
                "WARDEN_DATABASE_URL",
                format!("sqlite://{}", dir.0.join("w.db").display()),
            )
            .env("WARDEN_SIDECAR_IMAGE", image)
            .env("WARDEN_SIDECAR_CONTROL_PLANE_URL", control_plane);
        let process = Process::spawn(cmd);
        // Both servers announce themselves; the order is not fixed.
        let (mut api, mut injector) = (None, None);
        while api.is_none() || injector.is_none() {
            let (is_injector, addr) = process.wait_for("the listening lines", |line| {
                let rest = line.split("listening on ").nth(1)?;
                let addr = rest.split('"').next().unwrap_or_default().to_owned();
                Some((line.contains("injector listening on "), addr))
            });
            if is_injector {
                injector = Some(addr);
            } else {
                api = Some(addr);
            }
        }
        let addr = injector.unwrap_or_default();
        Injector {
            _process: process,
            url: format!("https://{addr}"),
            api: format!("http://{}", api.unwrap_or_default()),
            http: client_trusting(&cert),
            cert,
            key,
            dir,
        }
    }

    async fn review(&self, scope: &str, body: String) -> (u16, Value) {
        let resp = self
            .http
            .post(format!("{}/inject/{scope}", self.url))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("the injector answers over TLS");
        (
            resp.status().as_u16(),
            resp.json().await.unwrap_or(Value::Null),
        )
    }
}

fn admission(pod: &Value) -> String {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "agents",
            "operation": "CREATE",
            "object": pod
        }
    })
    .to_string()
}

fn agent_pod(annotations: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "billing-bot-7d9f8-",
            "namespace": "agents",
            "labels": {"app": "billing-bot"},
            "annotations": annotations
        },
        "spec": {
            "containers": [{
                "name": "agent",
                "image": "agent:1",
                "env": [{"name": "NO_PROXY", "value": "internal.example"}]
            }]
        }
    })
}

const ROUTES: &str = r#"[{"name":"stripe","kind":"http","hosts":["api.stripe.com"],"actions":[{"match":"POST /v1/refunds","action":"create_refund"}]}]"#;

/// The patched pod, after checking the answer's envelope.
fn patched(pod: &Value, answer: &Value) -> Value {
    let r = &answer["response"];
    assert_eq!(answer["kind"], "AdmissionReview", "{answer}");
    assert_eq!(r["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(r["allowed"], true, "{answer}");
    assert_eq!(r["patchType"], "JSONPatch", "{answer}");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(r["patch"].as_str().unwrap())
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let mut pod = pod.clone();
    json_patch::patch(&mut pod, &patch).expect("the patch applies to the pod");
    pod
}

fn env<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injects_opted_in_pods_and_only_those() {
    let inj = Injector::start();

    // Opted in by annotation, in a namespace that is not labelled.
    let pod = agent_pod(json!({"warden.dev/inject": "true", "warden.dev/routes": ROUTES}));
    let (status, answer) = inj.review("pod", admission(&pod)).await;
    assert_eq!(status, 200, "{answer}");
    let pod = patched(&pod, &answer);

    let sidecar = &pod["spec"]["initContainers"][0];
    assert_eq!(sidecar["name"], "warden-proxy");
    assert_eq!(sidecar["restartPolicy"], "Always", "a native sidecar");
    assert_eq!(sidecar["image"], "registry.example/warden-proxy:test");
    assert_eq!(sidecar["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        sidecar["env"][1]["valueFrom"]["secretKeyRef"]["name"],
        "warden-agent-key"
    );
    assert_eq!(
        pod["metadata"]["annotations"]["warden.dev/status"],
        "injected"
    );
    assert_eq!(pod["spec"]["volumes"][0]["name"], "warden-ca");

    let agent = &pod["spec"]["containers"][0];
    assert_eq!(env(agent, "HTTPS_PROXY"), Some("http://127.0.0.1:15001"));
    assert_eq!(env(agent, "HTTP_PROXY"), Some("http://127.0.0.1:15001"));
    assert_eq!(
        env(agent, "SSL_CERT_FILE"),
        Some("/var/run/warden/ca/ca-bundle.pem")
    );
    assert_eq!(
        env(agent, "REQUESTS_CA_BUNDLE"),
        Some("/var/run/warden/ca/ca-bundle.pem")
    );
    assert_eq!(
        env(agent, "NODE_EXTRA_CA_CERTS"),
        Some("/var/run/warden/ca/ca.pem")
    );
    assert_eq!(
        env(agent, "NO_PROXY"),
        Some("internal.example"),
        "the pod's own variables win"
    );
    assert_eq!(agent["volumeMounts"][0]["mountPath"], "/var/run/warden/ca");

    // The injected configuration is one the real sidecar accepts.
    let config = env(sidecar, "WARDEN_PROXY_CONFIG_YAML").expect("inline config");
    let parsed: Value = serde_json::from_str(config).unwrap();
    assert_eq!(parsed["agent_id"], "billing-bot");
    assert_eq!(
        parsed["control_plane"]["url"],
        "http://warden.warden.svc:8080"
    );
    let dir = TempDir::new();
    let file = dir.0.join("injected.yaml");
    std::fs::write(&file, config).unwrap();
    let check = Command::new(bin_dir().join("warden-proxy"))
        .arg("--check-config")
        .arg(&file)
        .env("WARDEN_AGENT_KEY", "allow_test")
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );

    // Injection is idempotent: the injected pod is not patched again.
    let (_, again) = inj.review("namespace", admission(&pod)).await;
    assert_eq!(again["response"]["allowed"], true);
    assert!(again["response"].get("patch").is_none(), "{again}");

    // A pod that did not opt in, in a namespace that did not either.
    let plain = agent_pod(json!({}));
    let (_, untouched) = inj.review("pod", admission(&plain)).await;
    assert_eq!(untouched["response"]["allowed"], true);
    assert!(untouched["response"].get("patch").is_none(), "{untouched}");

    // A pod that opted out of a labelled namespace.
    let out = agent_pod(json!({"warden.dev/inject": "false"}));
    let (_, untouched) = inj.review("namespace", admission(&out)).await;
    assert!(untouched["response"].get("patch").is_none(), "{untouched}");

    // A labelled namespace's pod without routes: refused, saying how to fix it.
    let (_, refused) = inj.review("namespace", admission(&plain)).await;
    assert_eq!(refused["response"]["allowed"], false, "{refused}");
    let message = refused["response"]["status"]["message"].as_str().unwrap();
    assert!(message.contains("warden.dev/routes"), "{message}");

    // Every answer is counted on the API's /metrics.
    let metrics = reqwest::get(format!("{}/metrics", inj.api))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (scope, outcome, n) in [
        ("pod", "injected", 1),
        ("pod", "skipped", 1),
        ("namespace", "skipped", 2),
        ("namespace", "refused", 1),
    ] {
        let line = format!(
            "warden_injector_admission_reviews_total{{scope=\"{scope}\",outcome=\"{outcome}\"}} {n}"
        );
        assert!(metrics.contains(&line), "{line} in:\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_reviews_are_errors_not_crashes() {
    let inj = Injector::start();
    for body in [
        "not json".to_owned(),
        json!({"kind": "Pod"}).to_string(),
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}})
            .to_string(),
    ] {
        let (status, answer) = inj.review("namespace", body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["code"], "invalid_request", "{answer}");
    }
    let (status, _) = inj
        .review("everywhere", admission(&agent_pod(json!({}))))
        .await;
    assert_eq!(status, 400);
    // Still serving.
    let health = inj
        .http
        .get(format!("{}/healthz", inj.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
}

/// A renewed certificate (a Secret updated in place) is served without a
/// restart; the old one stops being served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_is_served_without_a_restart() {
    let inj = Injector::start();
    let renewed = inj.dir.0.join("renewed");
    std::fs::create_dir_all(&renewed).unwrap();
    let (new_cert, new_key) = localhost_cert(&renewed);
    // The key first, then the certificate: a half-written pair is skipped.
    std::fs::copy(&new_key, &inj.key).unwrap();
    std::fs::copy(&new_cert, &inj.cert).unwrap();
    let fresh = client_trusting(&new_cert);
    let served = warden_tests::eventually(std::time::Duration::from_secs(10), async || {
        fresh
            .get(format!("{}/healthz", inj.url))
            .send()
            .await
            .is_ok()
    })
    .await;
    assert!(served, "the renewed certificate is served within 10 s");
    assert!(
        inj.http
            .get(format!("{}/healthz", inj.url))
            .send()
            .await
            .is_err(),
        "the old certificate is no longer served"
    );
}

/// The chart's `warden.sidecar` template (for static manifests) and the
/// injector describe the same container, given the same agent, routes,
/// image and control plane URL (the chart's defaults).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_template_and_the_injector_agree() {
    let inj = Injector::start_with(
        "ghcr.io/warden-dev/warden-proxy:0.1.0",
        "http://warden-control-plane.warden.svc:8080",
    );
    let pod = agent_pod(json!({
        "warden.dev/inject": "true",
        "warden.dev/agent-id": "billing-bot",
        "warden.dev/routes": r#"[{"name":"stripe","kind":"http","hosts":["api.stripe.com"]}]"#,
    }));
    let (_, answer) = inj.review("pod", admission(&pod)).await;
    let mut injected = patched(&pod, &answer)["spec"]["initContainers"][0].clone();

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(chart_python())
        .arg(root.join("charts/warden/tests/test_chart.py"))
        .arg("--static-sidecar")
        .output()
        .expect("the chart renders");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut templated: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The chart also sets the pull policy from its values; the injector
    // leaves Kubernetes's default.
    templated.as_object_mut().unwrap().remove("imagePullPolicy");
    // The inline configuration is compared as JSON, not as text.
    for c in [&mut injected, &mut templated] {
        let config = &mut c["env"][0]["value"];
        *config = serde_json::from_str(config.as_str().unwrap()).unwrap();
    }
    assert_eq!(injected, templated);
}
