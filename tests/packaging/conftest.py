"""The two wheels, built from this checkout as `make wheels` builds them, once per session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SDK_DIR = REPO / "clients" / "python"
# The import name of the server distribution's top-level package.
SERVER_PACKAGE = "reachstore_server"


def build_wheel(source: Path, out: Path) -> Path:
    # As `make wheels`: the wheel is built from the sdist, so the sdist is checked too, and
    # nothing in a stale build/ folder can reach the wheel.
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="session")
def sdk_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(SDK_DIR, tmp_path_factory.mktemp("sdk-wheel"))


@pytest.fixture(scope="session")
def server_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(REPO, tmp_path_factory.mktemp("server-wheel"))
