"""The SDK wheel installed alone into a fresh virtual environment (its dependencies from the
package index) talks to a real `reachstore up` started from the development environment, over
gRPC and over REST, without the server or its libraries being importable there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.system import RunningSystem
from tests.packaging.conftest import SERVER_PACKAGE

pytestmark = pytest.mark.e2e

# What the SDK plus its dependencies may add to a virtual environment. The server's
# libraries (faiss, numpy, SQLAlchemy, psycopg, the embedding model) are several times this.
MAX_SDK_BYTES = 3 * 1024 * 1024
MAX_INSTALLED_BYTES = 40 * 1024 * 1024
# The server's package under its import name and under its former one, and its libraries.
NOT_IMPORTABLE = sorted(
    {SERVER_PACKAGE, "reachstore_server", "serv" + "ices", "faiss", "sqlalchemy", "psycopg"}
    | {"uvicorn", "starlette", "numpy"}
)

PROBE = """
import importlib.util, json, sys
import reachstore
from reachstore import Client

grpc_base, rest_url = int(sys.argv[1]), sys.argv[2]
absent = [name for name in sys.argv[3:] if importlib.util.find_spec(name) is not None]
answers = {}
with Client.local("127.0.0.1", grpc_base) as client:
    answers["grpc"] = client.search(["demo", "nope"], "semantic storage", top_k=2)
with Client.rest(rest_url) as client:
    answers["rest"] = client.search(["demo", "nope"], "semantic storage", top_k=2)
print(json.dumps({
    "module": reachstore.__file__,
    "importable": absent,
    **{
        transport: {
            "coverage": reply.meta.coverage_ratio,
            "succeeded": list(reply.meta.namespaces_succeeded),
            "results": len(reply.results),
        }
        for transport, reply in answers.items()
    },
}))
"""


def _tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _clean_env() -> dict[str, str]:
    # Nothing of the development environment may leak into the fresh one.
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP"}
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.fixture(scope="module")
def sdk_venv(sdk_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    venv = tmp_path_factory.mktemp("sdk-venv")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, env=_clean_env(), timeout=120)
    yield venv


def test_sdk_wheel_alone_talks_to_a_real_server(
    sdk_venv: Path, sdk_wheel: Path, tmp_path: Path
) -> None:
    python = sdk_venv / "bin" / "python"
    (site,) = (sdk_venv / "lib").glob("python3*/site-packages")
    before = _tree_bytes(site)
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(sdk_wheel)],
        capture_output=True,
        text=True,
        env=_clean_env(),
        cwd=tmp_path,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    added = _tree_bytes(site) - before
    sdk_bytes = _tree_bytes(site / "reachstore")
    print(
        f"SDK alone: reachstore {sdk_bytes / 1e6:.1f} MB, "
        f"with its dependencies {added / 1e6:.1f} MB"
    )
    assert sdk_bytes < MAX_SDK_BYTES, sdk_bytes
    assert added < MAX_INSTALLED_BYTES, added

    system = RunningSystem(tmp_path / "system")
    system.start()
    try:
        probe = subprocess.run(
            [
                str(python),
                "-c",
                PROBE,
                str(system.grpc_port_base),
                system.http_url,
                *NOT_IMPORTABLE,
            ],
            capture_output=True,
            text=True,
            env=_clean_env(),
            cwd=tmp_path,
            timeout=120,
        )
    finally:
        assert system.stop() == 0, "".join(system.output[-40:])
    assert probe.returncode == 0, probe.stderr[-3000:]
    seen = json.loads(probe.stdout)
    assert Path(seen["module"]).is_relative_to(site), seen["module"]
    assert seen["importable"] == [], f"server-side modules importable: {seen['importable']}"
    for transport in ("grpc", "rest"):
        answer = seen[transport]
        assert answer["succeeded"] == ["demo"], answer
        assert answer["coverage"] == 0.5, answer
        assert answer["results"] >= 1, answer
