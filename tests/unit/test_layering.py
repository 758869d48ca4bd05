"""The layering contracts of ARCHITECTURE.md ("Layering"), run by `make lint`.

The repository must keep every contract, and each contract must be able to fail: a copy of
the packages with one violating module written into it breaks exactly the contract that
forbids that import, and the report names the module.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "pyproject.toml"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

PURE = "Pure folders (query index, ingest domain, reach policy) import no gRPC, SQLAlchemy, protobuf or generated code"  # noqa: E501
INDEPENDENT = "No service imports another service"
BRIDGE = "The bridge imports no service, the store or the embedder"
MCP = "The MCP server imports no service, the store, the embedder or the bridge"
SHARED = "Shared modules import no service and no command"
SDK = "The SDK imports nothing of the server"
CONTRACTS = (PURE, INDEPENDENT, BRIDGE, MCP, SHARED, SDK)


def _lint(packages: Path) -> tuple[int, str, dict[str, str]]:
    """Runs lint-imports on the packages under ``packages`` with the repository's contracts;
    returns the exit code, the report and each contract's verdict (KEPT or BROKEN)."""
    env = dict(os.environ, PYTHONPATH=str(packages))
    done = subprocess.run(
        [str(LINT_IMPORTS), "--config", str(CONFIG), "--no-cache"],
        cwd=packages,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = done.stdout + done.stderr
    # The report wraps long lines; verdicts are read from the report with its lines joined.
    flat = re.sub(r"\s+", " ", report)
    verdicts = {}
    for name in CONTRACTS:
        found = re.search(re.escape(name) + r" (KEPT|BROKEN)", flat)
        assert found, f"no verdict for contract {name!r} in:\n{report}"
        verdicts[name] = found.group(1)
    return done.returncode, report, verdicts


@pytest.fixture()
def packages(tmp_path: Path) -> Path:
    """A copy of the server's and the SDK's packages, found before the installed ones."""
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "reachstore_server", tmp_path / "reachstore_server", ignore=skip)
    shutil.copytree(ROOT / "clients/python/reachstore", tmp_path / "reachstore", ignore=skip)
    return tmp_path


def test_the_repository_keeps_every_contract() -> None:
    code, report, verdicts = _lint(ROOT)
    assert code == 0, report
    assert set(verdicts.values()) == {"KEPT"}, report


def test_an_unchanged_copy_keeps_every_contract(packages: Path) -> None:
    # Without this, a broken copy could make the attacks below pass for the wrong reason.
    code, report, verdicts = _lint(packages)
    assert code == 0, report
    assert set(verdicts.values()) == {"KEPT"}, report


VIOLATIONS = [
    # (module written into the copy, its import, the contract it breaks)
    ("reachstore_server/query/index/stray.py", "import sqlalchemy", PURE),
    ("reachstore_server/ingest/domain/stray.py", "import grpc", PURE),
    (
        "reachstore_server/reach/policy/stray.py",
        "from reachstore_server.storage import reach_models",
        PURE,
    ),
    (
        "reachstore_server/reach/policy/stray.py",
        "from reachstore.reach.v1 import reach_service_pb2",
        PURE,
    ),
    ("reachstore_server/query/index/stray.py", "from google.protobuf import struct_pb2", PURE),
    ("reachstore_server/reach/stray.py", "from reachstore_server.audit import store", INDEPENDENT),
    (
        "reachstore_server/query/stray.py",
        "from reachstore_server.ingest import worker",
        INDEPENDENT,
    ),
    # Only the ingest composition root may mount the key service.
    (
        "reachstore_server/ingest/stray.py",
        "from reachstore_server.admin.api import keys",
        INDEPENDENT,
    ),
    ("reachstore_server/bridge/stray.py", "from reachstore_server.storage import models", BRIDGE),
    (
        "reachstore_server/bridge/stray.py",
        "from reachstore_server.audit_client import outbox",
        BRIDGE,
    ),
    ("reachstore_server/mcp/stray.py", "from reachstore_server.reach import config", MCP),
    ("reachstore_server/mcp/stray.py", "from reachstore_server.bridge import routes", MCP),
    ("reachstore_server/common/stray.py", "from reachstore_server.mcp import server", SHARED),
    (
        "reachstore_server/audit_client/stray.py",
        "from reachstore_server.audit import chain",
        SHARED,
    ),
    ("reachstore_server/common/stray.py", "from reachstore_server.reach import config", SHARED),
    ("reachstore_server/storage/stray.py", "from reachstore_server import cli", SHARED),
    ("reachstore/stray.py", "from reachstore_server.common import errors", SDK),
]


@pytest.mark.parametrize(("where", "statement", "contract"), VIOLATIONS)
def test_a_violating_import_breaks_its_contract(
    packages: Path, where: str, statement: str, contract: str
) -> None:
    (packages / where).write_text(f"{statement}\n")
    code, report, verdicts = _lint(packages)
    assert code != 0, report
    assert verdicts[contract] == "BROKEN", report
    assert [name for name, v in verdicts.items() if v == "BROKEN"] == [contract], report
    module = where.removesuffix(".py").replace("/", ".")
    assert module in report, report
