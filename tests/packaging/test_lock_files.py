"""The lock files agree with the pyproject files they were compiled from.

Re-resolving needs the package index, so this checks what can be checked offline: every
direct dependency of the server, its test extra and the SDK is locked, with hashes, at a
version its pin or range admits; the two lock files agree on every package they share; and
the local distributions are left out (they are installed with --no-deps after the lock)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.packaging.conftest import REPO, SDK_DIR

SERVER_LOCK = REPO / "requirements" / "server.txt"
TEST_LOCK = REPO / "requirements" / "test.txt"
LOCAL = {"reachstore", "reachstore-server"}

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def read_lock(path: Path) -> dict[str, Version]:
    """Package name -> locked version; fails on a requirement the lock does not pin to one
    version with at least one hash (pip --require-hashes would refuse it at install)."""
    pins: dict[str, Version] = {}
    text = path.read_text().replace("\\\n", " ")
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        match = _PIN.match(line)
        assert match, f"{path.name}: entry {number} is not pinned with ==: {line[:80]}"
        assert "--hash=sha256:" in line, f"{path.name}: {match.group(1)} has no hash"
        pins[canonicalize_name(match.group(1))] = Version(match.group(2))
    return pins


def _project(path: Path) -> dict:  # type: ignore[type-arg]
    return tomllib.loads(path.read_text())["project"]  # type: ignore[no-any-return]


SERVER = _project(REPO / "pyproject.toml")
SDK = _project(SDK_DIR / "pyproject.toml")


def _requirements(*groups: list[str]) -> list[Requirement]:
    found = [Requirement(r) for group in groups for r in group]
    return [r for r in found if canonicalize_name(r.name) not in LOCAL]


RUNTIME = _requirements(SERVER["dependencies"], SDK["dependencies"])
TESTING = _requirements(SERVER["optional-dependencies"]["test"])


def check_admitted(lock: dict[str, Version], requirements: list[Requirement], name: str) -> None:
    problems = []
    for requirement in requirements:
        locked = lock.get(canonicalize_name(requirement.name))
        if locked is None:
            problems.append(f"{requirement} is not in {name}")
        elif not requirement.specifier.contains(locked, prereleases=True):
            problems.append(f"{requirement} does not admit the locked {locked} in {name}")
    assert not problems, "run `make lock`: " + "; ".join(problems)


@pytest.mark.parametrize("lock_path", [SERVER_LOCK, TEST_LOCK], ids=["server", "test"])
def test_every_runtime_dependency_is_locked_at_an_admitted_version(lock_path: Path) -> None:
    check_admitted(read_lock(lock_path), RUNTIME, lock_path.name)


def test_every_test_dependency_is_locked_at_an_admitted_version() -> None:
    check_admitted(read_lock(TEST_LOCK), TESTING, TEST_LOCK.name)


def test_the_two_locks_agree_on_every_shared_package() -> None:
    server, test = read_lock(SERVER_LOCK), read_lock(TEST_LOCK)
    assert set(server) <= set(test), sorted(set(server) - set(test))
    differing = {n: (server[n], test[n]) for n in server if server[n] != test[n]}
    assert not differing, differing


def test_the_local_distributions_are_not_locked() -> None:
    for lock_path in (SERVER_LOCK, TEST_LOCK):
        assert not LOCAL & set(read_lock(lock_path)), lock_path.name


def test_the_server_pins_the_sdk_at_the_same_version() -> None:
    (sdk_pin,) = [
        Requirement(r) for r in SERVER["dependencies"] if Requirement(r).name == "reachstore"
    ]
    assert str(sdk_pin.specifier) == f"=={SDK['version']}"
    assert SERVER["version"] == SDK["version"]


def test_a_dependency_the_lock_does_not_admit_is_reported(tmp_path: Path) -> None:
    # The check itself, against a lock that has drifted from pyproject.toml.
    drifted = tmp_path / "server.txt"
    text = SERVER_LOCK.read_text()
    assert "\nfaiss-cpu==1.15.1 " in text
    drifted.write_text(text.replace("\nfaiss-cpu==1.15.1 ", "\nfaiss-cpu==1.14.0 "))
    with pytest.raises(AssertionError, match=r"faiss-cpu==1\.15\.1 does not admit"):
        check_admitted(read_lock(drifted), RUNTIME, drifted.name)
    unhashed = tmp_path / "unhashed.txt"
    unhashed.write_text("grpcio==1.85.1\n")
    with pytest.raises(AssertionError, match="grpcio has no hash"):
        read_lock(unhashed)
