"""With no ``OTEL_*`` variable set, a service process installs no tracer provider and
imports no OpenTelemetry module: tracing off costs nothing but ``otel.enabled()``.

Run in a fresh interpreter, since this test process imports OpenTelemetry for other tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Builds what a service's composition root builds (a gRPC server with its interceptors, a
# bridge app, an instrumented engine, an outgoing channel), then reports.
_PROBE = """
import json, sys
from reachstore_server.common import otel
from reachstore_server.common.grpc_server import create_server
from reachstore_server.common.tls import secure_aio_channel, PLAIN
from reachstore_server.bridge.app import create_app
from reachstore_server.common.config import Settings
from sqlalchemy import create_engine

turned_on = otel.setup("query")
server, port, health = create_server([], [], "127.0.0.1:0")
create_app(Settings.from_env({"REACHSTORE_LISTEN": "127.0.0.1:0"}))
otel.instrument_engine(create_engine("sqlite://"))
from opentelemetry import trace  # only now, to ask which provider is installed
imported_before = sorted(m for m in PRE if m.startswith("opentelemetry"))
print(json.dumps({
    "setup": turned_on,
    "enabled": otel.enabled(),
    "imported": imported_before,
    "provider": type(trace.get_tracer_provider()).__name__,
}))
"""


def _run(extra: dict[str, str]) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(extra)
    # PRE: the modules loaded before the probe's own import of the API.
    script = _PROBE.replace(
        "from opentelemetry import trace",
        "PRE = list(sys.modules)\nfrom opentelemetry import trace",
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result


def test_with_otel_unset_no_provider_is_installed_and_no_opentelemetry_module_loaded() -> None:
    result = _run({})
    assert result == {
        "setup": False,
        "enabled": False,
        "imported": [],
        "provider": "ProxyTracerProvider",
    }


def test_the_probe_sees_tracing_when_it_is_configured() -> None:
    # The same probe with an exporter configured: proof it can tell the two apart.
    result = _run({"OTEL_TRACES_EXPORTER": "console"})
    assert result["setup"] is True and result["enabled"] is True
    assert result["provider"] == "TracerProvider"
    imported = result["imported"]
    assert isinstance(imported, list) and "opentelemetry.instrumentation.grpc" in imported
