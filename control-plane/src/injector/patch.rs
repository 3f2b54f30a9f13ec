//! The admission decision: which pods get the sidecar, and the JSON Patch
//! that adds it. Pure functions over the `AdmissionReview` JSON, so every
//! case is testable without a cluster.

use serde_json::{Value, json};

/// Pods opt in (`"true"`) or out (`"false"`) with this annotation; the
/// namespace label of the same name opts in a whole namespace.
pub const ANNOTATION_INJECT: &str = "warden.dev/inject";
/// The agent's id (default: the pod's `app.kubernetes.io/name` or `app`
/// label, else its name).
pub const ANNOTATION_AGENT_ID: &str = "warden.dev/agent-id";
/// The sidecar's routes: a JSON array in the sidecar's `routes` syntax.
pub const ANNOTATION_ROUTES: &str = "warden.dev/routes";
/// The Secret holding the agent key under `key` (default from the injector's
/// configuration).
pub const ANNOTATION_KEY_SECRET: &str = "warden.dev/agent-key-secret";
/// Set on injected pods; an injected pod is never patched twice.
pub const ANNOTATION_STATUS: &str = "warden.dev/status";
/// The injected container's name.
pub const CONTAINER: &str = "warden-proxy";
/// Where the sidecar's CA (and the trust bundle that includes it) lives in
/// every container.
pub const CA_DIR: &str = "/var/run/warden/ca";
/// The sidecar's admin port (probes, metrics) and forward-proxy port.
pub const ADMIN_PORT: u16 = 15000;
pub const PROXY_PORT: u16 = 15001;
const CA_VOLUME: &str = "warden-ca";

/// What the injected sidecar runs and where it reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidecarTemplate {
    pub image: String,
    pub control_plane_url: String,
    /// The default Secret name for agent keys.
    pub key_secret: String,
}

impl Default for SidecarTemplate {
    fn default() -> SidecarTemplate {
        SidecarTemplate {
            image: format!(
                "ghcr.io/warden-dev/warden-proxy:{}",
                env!("CARGO_PKG_VERSION")
            ),
            control_plane_url: "http://warden-control-plane:8080".into(),
            key_secret: "warden-agent-key".into(),
        }
    }
}

/// Which webhook of the chart's two called: the one for labelled namespaces
/// (inject unless the pod opts out) or the one for every other namespace
/// (inject only pods that opt in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Namespace,
    Pod,
}

/// A review the webhook cannot read: answered 400, never a crash.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MalformedReview(pub String);

/// Answers one `AdmissionReview` (admission.k8s.io/v1).
pub fn review(body: &[u8], scope: Scope, t: &SidecarTemplate) -> Result<Value, MalformedReview> {
    let review: Value =
        serde_json::from_slice(body).map_err(|e| MalformedReview(format!("not JSON: {e}")))?;
    if review["kind"] != "AdmissionReview" {
        return Err(MalformedReview("kind must be AdmissionReview".into()));
    }
    let request = &review["request"];
    let Some(uid) = request["uid"].as_str() else {
        return Err(MalformedReview("request.uid is missing".into()));
    };
    let api_version = review["apiVersion"]
        .as_str()
        .unwrap_or("admission.k8s.io/v1");
    let mut response = json!({"uid": uid, "allowed": true});
    let pod = &request["object"];
    if request["kind"]["kind"] == "Pod" && pod.is_object() {
        match patch(pod, scope, t) {
            Ok(Some(ops)) => {
                use base64::Engine as _;
                let encoded =
                    base64::engine::general_purpose::STANDARD.encode(Value::Array(ops).to_string());
                response["patchType"] = json!("JSONPatch");
                response["patch"] = json!(encoded);
            }
            Ok(None) => {}
            Err(message) => {
                response["allowed"] = json!(false);
                response["status"] = json!({"code": 400, "message": message});
            }
        }
    }
    Ok(json!({"apiVersion": api_version, "kind": "AdmissionReview", "response": response}))
}

fn annotation<'a>(pod: &'a Value, name: &str) -> Option<&'a str> {
    pod["metadata"]["annotations"][name].as_str()
}

/// Whether this pod asked for the sidecar in this scope.
fn wants(pod: &Value, scope: Scope) -> bool {
    match annotation(pod, ANNOTATION_INJECT).map(str::to_ascii_lowercase) {
        Some(v) if v == "false" || v == "disabled" => false,
        Some(v) if v == "true" || v == "enabled" => true,
        _ => scope == Scope::Namespace,
    }
}

fn already_injected(pod: &Value) -> bool {
    let named = |list: &Value| {
        list.as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["name"] == CONTAINER))
    };
    annotation(pod, ANNOTATION_STATUS) == Some("injected")
        || named(&pod["spec"]["initContainers"])
        || named(&pod["spec"]["containers"])
}

/// The pod's agent id.
fn agent_id(pod: &Value) -> Option<String> {
    let labels = &pod["metadata"]["labels"];
    let generated = pod["metadata"]["generateName"]
        .as_str()
        .map(|g| g.trim_end_matches('-'));
    annotation(pod, ANNOTATION_AGENT_ID)
        .or_else(|| labels["app.kubernetes.io/name"].as_str())
        .or_else(|| labels["app"].as_str())
        .or_else(|| pod["metadata"]["name"].as_str())
        .or(generated)
        .filter(|id| (1..=255).contains(&id.chars().count()))
        .map(str::to_owned)
}

/// The patch for `pod`, `None` when it is not to be touched, or why it is
/// refused (a pod that asked for governance but cannot get it).
fn patch(pod: &Value, scope: Scope, t: &SidecarTemplate) -> Result<Option<Vec<Value>>, String> {
    if !wants(pod, scope) || already_injected(pod) {
        return Ok(None);
    }
    let Some(agent_id) = agent_id(pod) else {
        return Err(format!(
            "Warden cannot name this agent: set the {ANNOTATION_AGENT_ID} annotation"
        ));
    };
    let routes = match annotation(pod, ANNOTATION_ROUTES) {
        None => {
            return Err(format!(
                "Warden injection needs the {ANNOTATION_ROUTES} annotation (a JSON array of \
                 sidecar routes); set {ANNOTATION_INJECT}: \"false\" to opt this pod out"
            ));
        }
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(routes))
                if !routes.is_empty() && routes.iter().all(Value::is_object) =>
            {
                routes
            }
            _ => {
                return Err(format!(
                    "{ANNOTATION_ROUTES} must be a non-empty JSON array of route objects"
                ));
            }
        },
    };
    let secret = annotation(pod, ANNOTATION_KEY_SECRET).unwrap_or(&t.key_secret);
    let spec = &pod["spec"];
    let mut ops = Vec::new();
    let mut add =
        |path: String, value: Value| ops.push(json!({"op": "add", "path": path, "value": value}));

    if pod["metadata"]["annotations"].is_object() {
        add(
            format!(
                "/metadata/annotations/{}",
                pointer_escape(ANNOTATION_STATUS)
            ),
            json!("injected"),
        );
    } else {
        add(
            "/metadata/annotations".into(),
            json!({ANNOTATION_STATUS: "injected"}),
        );
    }
    let volume = json!({"name": CA_VOLUME, "emptyDir": {}});
    append(&mut add, spec, "/spec", "volumes", volume);
    let sidecar = sidecar(t, &agent_id, Value::Array(routes), secret);
    if spec["initContainers"].is_array() {
        // First, so that it is up before the other init containers run.
        add("/spec/initContainers/0".into(), sidecar);
    } else {
        add("/spec/initContainers".into(), json!([sidecar]));
    }
    let containers = spec["containers"].as_array().map_or(&[][..], Vec::as_slice);
    for (i, c) in containers.iter().enumerate() {
        let base = format!("/spec/containers/{i}");
        let present: Vec<&str> = c["env"]
            .as_array()
            .map(|e| e.iter().filter_map(|v| v["name"].as_str()).collect())
            .unwrap_or_default();
        // Variables the pod set itself win: they are not overridden.
        let vars: Vec<Value> = agent_env()
            .into_iter()
            .filter(|(name, _)| !present.contains(name))
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect();
        if c["env"].is_array() {
            for v in vars {
                add(format!("{base}/env/-"), v);
            }
        } else if !vars.is_empty() {
            add(format!("{base}/env"), Value::Array(vars));
        }
        let mount = json!({"name": CA_VOLUME, "mountPath": CA_DIR, "readOnly": true});
        append(&mut add, c, &base, "volumeMounts", mount);
    }
    Ok(Some(ops))
}

/// Adds `value` to the array `field` of `parent`, creating the array when
/// it is missing.
fn append(
    add: &mut impl FnMut(String, Value),
    parent: &Value,
    base: &str,
    field: &str,
    value: Value,
) {
    if parent[field].is_array() {
        add(format!("{base}/{field}/-"), value);
    } else {
        add(format!("{base}/{field}"), json!([value]));
    }
}

/// RFC 6901: `~` → `~0`, `/` → `~1`.
fn pointer_escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The variables that send an agent's HTTP(S) through the sidecar and make
/// it trust the sidecar's CA. Lower-case copies too: curl and others read
/// only those.
fn agent_env() -> Vec<(&'static str, String)> {
    let proxy = format!("http://127.0.0.1:{PROXY_PORT}");
    let no_proxy = "localhost,127.0.0.1,::1,.svc,.cluster.local".to_owned();
    let bundle = format!("{CA_DIR}/ca-bundle.pem");
    vec![
        ("HTTP_PROXY", proxy.clone()),
        ("HTTPS_PROXY", proxy.clone()),
        ("NO_PROXY", no_proxy.clone()),
        ("http_proxy", proxy.clone()),
        ("https_proxy", proxy),
        ("no_proxy", no_proxy),
        // These replace the system roots, so they name the bundle (system
        // roots + the sidecar's CA) the sidecar writes at start.
        ("SSL_CERT_FILE", bundle.clone()),
        ("REQUESTS_CA_BUNDLE", bundle),
        // Node adds this one to its roots.
        ("NODE_EXTRA_CA_CERTS", format!("{CA_DIR}/ca.pem")),
    ]
}

/// The sidecar container: a native sidecar (an init container that keeps
/// running), so it starts before the agent and stops after it.
fn sidecar(t: &SidecarTemplate, agent_id: &str, routes: Value, secret: &str) -> Value {
    let config = json!({
        "agent_id": agent_id,
        "control_plane": {"url": t.control_plane_url, "key_env": "WARDEN_AGENT_KEY"},
        "admin": {"listen": format!("0.0.0.0:{ADMIN_PORT}")},
        "forward_proxy": {"listen": format!("127.0.0.1:{PROXY_PORT}"), "ca_dir": CA_DIR},
        "routes": routes,
    });
    let probe =
        |path: &str| json!({"httpGet": {"path": path, "port": ADMIN_PORT}, "periodSeconds": 5});
    json!({
        "name": CONTAINER,
        "image": t.image,
        "restartPolicy": "Always",
        "env": [
            // JSON is YAML: the sidecar reads its configuration from here.
            {"name": "WARDEN_PROXY_CONFIG_YAML", "value": config.to_string()},
            {"name": "WARDEN_AGENT_KEY", "valueFrom": {"secretKeyRef": {"name": secret, "key": "key"}}},
        ],
        "ports": [{"name": "warden-admin", "containerPort": ADMIN_PORT}],
        // Started (bundle loaded or fail-closed decided) before the agent starts.
        "startupProbe": {"httpGet": {"path": "/readyz", "port": ADMIN_PORT}, "periodSeconds": 1, "failureThreshold": 60},
        "readinessProbe": probe("/readyz"),
        "livenessProbe": probe("/healthz"),
        "volumeMounts": [{"name": CA_VOLUME, "mountPath": CA_DIR}],
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"memory": "256Mi"}
        },
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": 65532,
            "readOnlyRootFilesystem": true,
            "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(annotations: Value) -> Value {
        json!({
            "metadata": {"name": "agent-0", "annotations": annotations},
            "spec": {"containers": [{"name": "agent", "image": "agent:1"}]}
        })
    }

    const ROUTES: &str = r#"[{"name":"github","kind":"http","hosts":["api.github.com"]}]"#;

    #[test]
    fn opt_in_and_opt_out_by_scope() {
        let t = SidecarTemplate::default();
        let plain = pod(json!({ANNOTATION_ROUTES: ROUTES}));
        assert!(patch(&plain, Scope::Namespace, &t).unwrap().is_some());
        assert!(patch(&plain, Scope::Pod, &t).unwrap().is_none());
        let opted_in = pod(json!({ANNOTATION_ROUTES: ROUTES, ANNOTATION_INJECT: "true"}));
        assert!(patch(&opted_in, Scope::Pod, &t).unwrap().is_some());
        let opted_out = pod(json!({ANNOTATION_INJECT: "false"}));
        assert!(patch(&opted_out, Scope::Namespace, &t).unwrap().is_none());
    }

    #[test]
    fn a_pod_without_routes_is_refused_with_the_fix() {
        let err = patch(
            &pod(json!({})),
            Scope::Namespace,
            &SidecarTemplate::default(),
        )
        .unwrap_err();
        assert!(
            err.contains(ANNOTATION_ROUTES) && err.contains("\"false\""),
            "{err}"
        );
        let bad = pod(json!({ANNOTATION_ROUTES: "{\"name\":1}"}));
        assert!(patch(&bad, Scope::Namespace, &SidecarTemplate::default()).is_err());
    }

    #[test]
    fn the_agent_id_comes_from_the_annotation_then_labels() {
        let mut p = pod(json!({}));
        assert_eq!(agent_id(&p).as_deref(), Some("agent-0"));
        p["metadata"]["labels"] = json!({"app": "billing-bot"});
        assert_eq!(agent_id(&p).as_deref(), Some("billing-bot"));
        p["metadata"]["annotations"][ANNOTATION_AGENT_ID] = json!("payments");
        assert_eq!(agent_id(&p).as_deref(), Some("payments"));
    }

    #[test]
    fn pointers_escape_slashes() {
        assert_eq!(pointer_escape("warden.dev/status"), "warden.dev~1status");
    }
}
