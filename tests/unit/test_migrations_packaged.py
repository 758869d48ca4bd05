"""The migration environment ships in the wheel: `reachstore migrate` runs from an installed
package, with no alembic.ini and no checkout. Python files come with their packages; the
other files must be named in pyproject.toml's package data."""

from __future__ import annotations

import tomllib
from pathlib import Path

from reachstore_server.storage.schema import MIGRATIONS

ROOT = Path(__file__).resolve().parents[2]


def test_every_file_of_the_migration_environment_is_packaged() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["reachstore_server"]
    services = ROOT / "reachstore_server"
    files = [p for p in MIGRATIONS.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert any(p.name == "env.py" for p in files) and any(p.suffix == ".mako" for p in files)
    for path in files:
        if path.suffix == ".py":
            assert (path.parent / "__init__.py").exists(), f"{path} is not in a package"
            continue
        relative = path.relative_to(services)
        assert any(relative.match(pattern) for pattern in patterns), (
            f"{relative} is not in [tool.setuptools.package-data] services"
        )
    assert not (ROOT / "alembic.ini").exists()
