"""The Helm chart, rendered and linted with Helm's own Go SDK (helm-python-sdk,
no `helm` binary) and every manifest validated against the Kubernetes schemas
in strict mode (kubernetes-validate). Run by tests/tests/e2e/chart.rs; also
runnable alone: python charts/warden/tests/test_chart.py (with both packages).

Each test_* function renders one set of values and asserts on the output.
"""

from __future__ import annotations

import base64
import copy
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import traceback

import helm_python as helm
import kubernetes_validate
import yaml

CHART = pathlib.Path(__file__).resolve().parents[1]
ROOT = CHART.parents[1]
KUBE = "1.30.0"  # the oldest minor the chart targets that the schemas ship
NS = "warden"

# Kinds that are CRDs, whose schemas kubernetes-validate does not carry.
CRD_KINDS = {"ServiceMonitor"}


def render(values: dict | None = None, chart: pathlib.Path = CHART) -> list[dict]:
    """Renders the chart; returns every manifest, each validated strictly."""
    out = helm.Chart.load(str(chart)).render(values or {}, name="warden", namespace=NS, is_install=True)
    docs = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if not doc:
                continue
            if doc["kind"] not in CRD_KINDS:
                for version in (KUBE, "1.37.0"):
                    kubernetes_validate.validate(doc, version, strict=True)
            docs.append(doc)
    return docs


def notes(values: dict | None = None) -> str:
    out = helm.Chart.load(str(CHART)).render(values or {}, name="warden", namespace=NS, is_install=True)
    return next(v for k, v in out.items() if k.endswith("NOTES.txt"))


def one(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}s"
    return found[0]


def kinds(docs: list[dict]) -> set[str]:
    return {d["kind"] for d in docs}


def container(docs: list[dict]) -> dict:
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def env_names(c: dict) -> set[str]:
    return {e["name"] for e in c.get("env", [])}


def fails(values: dict, message: str) -> None:
    try:
        render(values)
    except helm.HelmError as e:
        assert message in str(e), str(e)
        return
    raise AssertionError(f"{values} rendered; expected a failure saying {message!r}")


POSTGRES = {"url": "postgres://warden:secret@pg.internal:5432/warden"}


def test_lint() -> None:
    report = helm.lint(str(CHART), strict=True, namespace=NS)
    serious = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not serious, report


def test_defaults() -> None:
    docs = render()
    assert kinds(docs) == {
        "ConfigMap", "Deployment", "Service", "ServiceAccount", "PersistentVolumeClaim",
        "Secret", "MutatingWebhookConfiguration",
    }, kinds(docs)
    dep = one(docs, "Deployment")
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"]["type"] == "Recreate", "one SQLite writer at a time"
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    c = container(docs)
    assert c["image"] == "ghcr.io/warden-dev/warden-control-plane:0.1.0"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"]["drop"] == ["ALL"]
    assert "env" not in c, "SQLite: no database URL"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == "warden-control-plane-data"
    cm = one(docs, "ConfigMap")["data"]
    assert cm["WARDEN_INJECTOR_LISTEN"] == "0.0.0.0:9443"
    assert cm["WARDEN_SIDECAR_IMAGE"] == "ghcr.io/warden-dev/warden-proxy:0.1.0"
    assert cm["WARDEN_SIDECAR_CONTROL_PLANE_URL"] == "http://warden-control-plane.warden.svc:8080"

    # The webhook trusts the CA that signed the injector's serving certificate.
    hook = one(docs, "MutatingWebhookConfiguration")
    assert [w["name"] for w in hook["webhooks"]] == ["namespace.inject.warden.dev", "pod.inject.warden.dev"]
    assert {w["failurePolicy"] for w in hook["webhooks"]} == {"Fail"}
    assert [w["clientConfig"]["service"]["path"] for w in hook["webhooks"]] == ["/inject/namespace", "/inject/pod"]
    secret = one(docs, "Secret")
    ca = secret["data"]["ca.crt"]
    assert {w["clientConfig"]["caBundle"] for w in hook["webhooks"]} == {ca}
    with tempfile.TemporaryDirectory() as d:
        (pathlib.Path(d) / "ca.pem").write_bytes(base64.b64decode(ca))
        (pathlib.Path(d) / "tls.pem").write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
        verified = subprocess.run(
            ["openssl", "verify", "-CAfile", f"{d}/ca.pem", f"{d}/tls.pem"], capture_output=True, text=True
        )
        assert verified.returncode == 0, verified.stderr
        names = subprocess.run(
            ["openssl", "x509", "-in", f"{d}/tls.pem", "-noout", "-ext", "subjectAltName"],
            capture_output=True, text=True,
        ).stdout
        assert "DNS:warden-control-plane.warden.svc" in names, names
    # The release's own namespace is never injected.
    pod_hook = hook["webhooks"][1]
    excluded = pod_hook["namespaceSelector"]["matchExpressions"][1]["values"]
    assert NS in excluded and "kube-system" in excluded, excluded
    assert "kubectl label namespace" in notes()


def test_three_replicas_on_postgres_with_redis_hpa_and_pdb() -> None:
    values = {
        "controlPlane": {
            "replicas": 3,
            "database": {"existingSecret": "warden-db"},
            "redis": {"url": "redis://redis.internal:6379"},
        },
        "autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 9},
        "podDisruptionBudget": {"enabled": True, "minAvailable": 2},
    }
    docs = render(values)
    assert "PersistentVolumeClaim" not in kinds(docs)
    dep = one(docs, "Deployment")
    assert "replicas" not in dep["spec"], "the HPA owns the replica count"
    assert "strategy" not in dep["spec"], "rolling updates with PostgreSQL"
    hpa = one(docs, "HorizontalPodAutoscaler")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 9)
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 2
    env = {e["name"]: e for e in container(docs)["env"]}
    assert env["WARDEN_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "warden-db", "key": "database-url"}
    assert env["WARDEN_REDIS_URL"]["valueFrom"]["secretKeyRef"]["name"] == "warden-control-plane-urls"
    urls = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "warden-control-plane-urls"]
    assert urls and "redis-url" in urls[0]["stringData"] and "database-url" not in urls[0]["stringData"]
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes["data"]

    # Three replicas without the HPA: the count is in the Deployment.
    fixed = copy.deepcopy(values)
    fixed["autoscaling"]["enabled"] = False
    assert one(render(fixed), "Deployment")["spec"]["replicas"] == 3


def test_sqlite_refuses_several_replicas() -> None:
    fails({"controlPlane": {"replicas": 3}}, "SQLite")
    fails({"autoscaling": {"enabled": True}}, "SQLite")
    render({"controlPlane": {"replicas": 3, "database": POSTGRES}})


def test_injection_disabled() -> None:
    docs = render({"injector": {"enabled": False}})
    assert "MutatingWebhookConfiguration" not in kinds(docs)
    assert "Secret" not in kinds(docs)
    cm = one(docs, "ConfigMap")["data"]
    assert not any(k.startswith("WARDEN_INJECTOR") for k in cm), cm
    ports = [p["name"] for p in container(docs)["ports"]]
    assert ports == ["http"], ports
    assert [p["name"] for p in one(docs, "Service")["spec"]["ports"]] == ["http"]
    assert "warden.sidecar" in notes({"injector": {"enabled": False}})


def test_pod_opt_in_off_and_failure_policy() -> None:
    docs = render({"injector": {"podOptIn": False, "failurePolicy": "Ignore"}})
    hooks = one(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert [(w["name"], w["failurePolicy"]) for w in hooks] == [("namespace.inject.warden.dev", "Ignore")]


def test_supplied_certificate() -> None:
    fails({"injector": {"tls": {"generate": False}}}, "existingSecret")
    docs = render({"injector": {"tls": {"generate": False, "existingSecret": "my-tls", "caBundle": "Q0E="}}})
    hooks = one(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert {w["clientConfig"]["caBundle"] for w in hooks} == {"Q0E="}
    volumes = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["injector-tls"]["secret"]["secretName"] == "my-tls"


def test_network_policy_and_service_monitor() -> None:
    docs = render({"networkPolicy": {"enabled": True, "allowNamespaces": ["ops"]}, "serviceMonitor": {"enabled": True}})
    policy = one(docs, "NetworkPolicy")["spec"]
    sources = policy["ingress"][0]["from"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}} in sources
    assert one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["path"] == "/metrics"


def test_schema_rejects_bad_values() -> None:
    for bad in (
        {"injector": {"failurePolicy": "Sometimes"}},
        {"controlPlane": {"replicas": 0}},
        {"controlPlane": {"database": {"url": "mysql://x"}}},
        {"controlPlane": {"unknownKey": True}},
    ):
        try:
            render(bad)
        except helm.HelmError:
            continue
        raise AssertionError(f"accepted {bad}")


def test_example_values() -> None:
    for name in ("dev-values.yaml", "prod-values.yaml"):
        values = yaml.safe_load((ROOT / "examples" / "helm" / name).read_text())
        docs = render(values)
        assert "Deployment" in kinds(docs), name
    prod = render(yaml.safe_load((ROOT / "examples" / "helm" / "prod-values.yaml").read_text()))
    assert one(prod, "HorizontalPodAutoscaler")["spec"]["minReplicas"] == 3


def static_agent_pod() -> dict:
    """A Pod using `warden.sidecar` and `warden.agentEnv`, rendered with the defaults."""
    with tempfile.TemporaryDirectory() as d:
        chart = pathlib.Path(d) / "warden"
        shutil.copytree(CHART, chart, ignore=shutil.ignore_patterns("tests"))
        (chart / "templates" / "zz-static-agent.yaml").write_text(
            """apiVersion: v1
kind: Pod
metadata:
  name: static-agent
spec:
  initContainers:
    {{- include "warden.sidecar" (dict "root" . "agentId" "billing-bot" "routes" (list (dict "name" "stripe" "kind" "http" "hosts" (list "api.stripe.com")))) | nindent 4 }}
  containers:
    - name: agent
      image: agent:1
      env:
        {{- include "warden.agentEnv" . | nindent 8 }}
      volumeMounts:
        - {name: warden-ca, mountPath: /var/run/warden/ca, readOnly: true}
  volumes:
    - {name: warden-ca, emptyDir: {}}
"""
        )
        docs = render(chart=chart)
    return next(d for d in docs if d["kind"] == "Pod")


def test_sidecar_named_template() -> None:
    """`warden.sidecar` renders the injector's container into a static Pod."""
    pod = static_agent_pod()
    sidecar = pod["spec"]["initContainers"][0]
    assert sidecar["name"] == "warden-proxy" and sidecar["restartPolicy"] == "Always"
    config = json.loads(next(e["value"] for e in sidecar["env"] if e["name"] == "WARDEN_PROXY_CONFIG_YAML"))
    assert config["agent_id"] == "billing-bot"
    assert config["routes"][0]["hosts"] == ["api.stripe.com"]
    assert "HTTPS_PROXY" in env_names(pod["spec"]["containers"][0])


def test_dockerfiles_reference_real_paths() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    members = re.findall(r'"([^"]+)"', re.search(r"members = \[(.*?)\]", (ROOT / "Cargo.toml").read_text(), re.S)[1])
    for crate, image_key in (("control-plane", "controlPlane"), ("proxy", "proxy")):
        text = (ROOT / crate / "Dockerfile").read_text()
        # The image the file documents is the chart's default.
        assert f"# Image: {values['image'][image_key]['repository']}" in text, crate
        for line in text.splitlines():
            if line.startswith("COPY") and "--from" not in line:
                for src in line.split()[1:-1]:
                    assert (ROOT / src).exists(), f"{crate}/Dockerfile copies {src}, which does not exist"
        # Every workspace member is copied (cargo needs them all to resolve).
        for member in members:
            assert f"COPY {member} {member}" in text, f"{crate}/Dockerfile misses workspace member {member}"
        package = re.search(r"-p (\S+)", text)[1]
        manifest = (ROOT / crate / "Cargo.toml").read_text()
        assert f'name = "{package}"' in manifest, package
        binary = re.search(r"target/release/(\S+)", text)[1]
        assert f'name = "{binary}"' in manifest, binary


def main() -> int:
    if sys.argv[1:] == ["--static-sidecar"]:
        # For tests/tests/e2e/injector.rs, which compares it with what the
        # injector adds (ARCHITECTURE: the two describe the same sidecar).
        print(json.dumps(static_agent_pod()["spec"]["initContainers"][0]))
        return 0
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_") and callable(f)]
    failed = 0
    for name, test in tests:
        try:
            test()
            print(f"ok     {name}")
        except Exception:  # noqa: BLE001 - report every failure, then exit non-zero
            failed += 1
            print(f"FAILED {name}\n{traceback.format_exc()}")
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
