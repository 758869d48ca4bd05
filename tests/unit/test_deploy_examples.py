"""The deployment examples match the code: every component they run exists, every
setting they pass is one reachstore reads, listen ports agree with the ports exposed and
with the addresses other components are given, and readiness asks the right service."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from reachstore_server.bridge.backends import DEFAULT_SERVICES
from reachstore_server.cli import METRICS_PORT_OFFSETS
from reachstore_server.cli_serve import COMPONENTS
from reachstore_server.common.config import ENVIRONMENT
from reachstore_server.common.limits import ENVIRONMENT as LIMIT_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = set(ENVIRONMENT) | set(LIMIT_SETTINGS)
SERVICE_NAMES = {s.full_name for s in DEFAULT_SERVICES}
# The address setting that names each gRPC component.
ADDRESS_SETTING = {
    "query": "REACHSTORE_QUERY_ADDR",
    "ingest": "REACHSTORE_INGEST_ADDR",
    "reach": "REACHSTORE_REACH_ADDR",
    "audit": "REACHSTORE_AUDIT_ADDR",
}


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def _kubernetes() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((ROOT / "deploy" / "k8s" / "reachstore.yaml").read_text()))


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def _check_settings(env: dict[str, Any], where: str) -> None:
    for name in env:
        if name.startswith("REACHSTORE_"):
            assert name in SETTINGS, f"{where}: {name} is not a reachstore setting"


def test_compose_runs_every_component_with_settings_the_code_reads() -> None:
    services = _compose()["services"]
    components = {name: s for name, s in services.items() if name not in ("postgres", "migrate")}
    assert set(components) == set(COMPONENTS)
    for name, service in components.items():
        assert service["command"] == [name], name
        env = service["environment"]
        _check_settings(env, name)
        listen = _port(env["REACHSTORE_LISTEN"])
        exposed = {int(p) for p in service.get("expose", [])} | {
            int(str(p).split(":")[-1]) for p in service.get("ports", [])
        }
        assert listen in exposed, f"{name} listens on {listen}, exposes {exposed}"
        for other, setting in ADDRESS_SETTING.items():
            host, _, port = env[setting].rpartition(":")
            assert host == other, f"{name}: {setting} names {host}"
            target_listen = _port(services[other]["environment"]["REACHSTORE_LISTEN"])
            assert int(port) == target_listen, f"{name}: {setting} port {port}"


def test_kubernetes_has_a_deployment_and_service_per_component_that_agree() -> None:
    documents = _kubernetes()
    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for doc in documents:
        by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = doc
    assert set(by_kind["Deployment"]) == set(COMPONENTS)
    assert set(by_kind["Service"]) == set(COMPONENTS)
    shared = by_kind["ConfigMap"]["reachstore"]["data"]
    _check_settings(shared, "ConfigMap reachstore")
    for name, deployment in by_kind["Deployment"].items():
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert container["args"] == [name]
        env = {e["name"]: e["value"] for e in container.get("env", [])}
        _check_settings(env, name)
        listen = _port(env["REACHSTORE_LISTEN"])
        # The service's own port first; the metrics port is checked below.
        assert [p["containerPort"] for p in container["ports"] if p.get("name") != "metrics"] == [
            listen
        ]
        [service_port] = by_kind["Service"][name]["spec"]["ports"]
        assert service_port["port"] == service_port["targetPort"] == listen
        probe = container["readinessProbe"]
        if "exec" in probe:
            # The kubelet's own gRPC probe cannot speak TLS: reachstore_server/probe.py does.
            command = probe["exec"]["command"]
            assert command[:3] == ["python", "-m", "reachstore_server.probe"]
            port, service, cert_name = command[3:]
            assert int(port) == listen
            assert service in SERVICE_NAMES and service.split(".")[1] == name
            assert cert_name == name  # the Service name the certificate carries
        else:
            assert probe["httpGet"] == {"path": "/readyz", "port": listen, "scheme": "HTTPS"}
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert shared["REACHSTORE_TLS_CERT_FILE"].startswith(mounts["tls"] + "/")
        if name in ADDRESS_SETTING:
            host, _, port = shared[ADDRESS_SETTING[name]].rpartition(":")
            assert (host, int(port)) == (name, listen)


# The components that open the database, and so refuse to start on a schema not at head.
DATABASE_COMPONENTS = set(ADDRESS_SETTING)


def test_compose_migrates_once_postgres_answers_and_before_every_component() -> None:
    services = _compose()["services"]
    migrate = services["migrate"]
    assert migrate["entrypoint"] == ["reachstore", "migrate"] and migrate["command"] == []
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert "pg_isready" in services["postgres"]["healthcheck"]["test"]
    database = migrate["environment"]["REACHSTORE_DATABASE_URL"]
    for name in DATABASE_COMPONENTS:
        service = services[name]
        assert service["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }, name
        assert service["environment"]["REACHSTORE_DATABASE_URL"] == database, name


def test_kubernetes_pods_that_use_the_database_migrate_first() -> None:
    deployments = {d["metadata"]["name"]: d for d in _kubernetes() if d["kind"] == "Deployment"}
    for name, deployment in deployments.items():
        spec = deployment["spec"]["template"]["spec"]
        if name not in DATABASE_COMPONENTS:
            assert "initContainers" not in spec, name
            continue
        [init] = spec["initContainers"]
        [container] = spec["containers"]
        assert init["command"] == ["reachstore", "migrate"], name
        assert init["image"] == container["image"], name
        # The same database as the component: the same ConfigMap and Secret.
        assert init["envFrom"] == container["envFrom"], name


@pytest.mark.parametrize("path", ["deploy/docker-compose.yml", "deploy/k8s/reachstore.yaml"])
def test_examples_mount_a_reach_config_that_exists(path: str) -> None:
    text = (ROOT / path).read_text()
    assert "REACHSTORE_REACH_CONFIG" in text and (ROOT / "examples" / "reach.toml").exists()


def _metrics_port(component: str) -> int:
    """The documented metrics port: `reachstore up`'s on its default base (50051)."""
    return 50051 + METRICS_PORT_OFFSETS[component]


def test_compose_serves_and_labels_every_components_metrics_port() -> None:
    services = _compose()["services"]
    for name in COMPONENTS:
        service = services[name]
        port = _metrics_port(name)
        assert service["environment"].get("REACHSTORE_METRICS_LISTEN") == f"0.0.0.0:{port}", name
        assert str(port) in service.get("expose", []), f"{name} does not expose {port}"
        labels = service.get("labels", {})
        assert labels.get("prometheus.io/scrape") == "true", name
        assert labels.get("prometheus.io/port") == str(port), name
        # Every component serves TLS, its metrics port too
        # (reachstore_server/common/metrics_http.py).
        assert labels.get("prometheus.io/scheme") == "https", name


def test_kubernetes_annotates_and_opens_every_components_metrics_port() -> None:
    for doc in _kubernetes():
        if doc["kind"] != "Deployment":
            continue
        name = doc["metadata"]["name"]
        port = _metrics_port(name)
        template = doc["spec"]["template"]
        annotations = template["metadata"].get("annotations", {})
        assert annotations.get("prometheus.io/scrape") == "true", name
        assert annotations.get("prometheus.io/port") == str(port), name
        assert annotations.get("prometheus.io/scheme") == "https", name
        [container] = template["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert env.get("REACHSTORE_METRICS_LISTEN") == f"0.0.0.0:{port}", name
        ports = {p["containerPort"]: p.get("name") for p in container["ports"]}
        assert ports.get(port) == "metrics", f"{name}: {ports}"
