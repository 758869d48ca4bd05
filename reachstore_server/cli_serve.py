"""`reachstore serve COMPONENT`: one component in this process, for deployments that run
each service on its own (several replicas, several machines) instead of `up`.

Settings come from the environment (``reachstore_server/common/config.py`` lists them), optionally
from an env file first: ``KEY=VALUE`` lines, ``#`` comments; a variable already set in the
environment wins over the file, so one file can serve many replicas that differ only in,
say, ``REACHSTORE_LISTEN``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from reachstore_server.common.config import ENVIRONMENT, ConfigError
from reachstore_server.common.limits import ENVIRONMENT as LIMIT_SETTINGS

# Component -> its composition root.
COMPONENTS = {
    "query": "reachstore_server.query.main",
    "ingest": "reachstore_server.ingest.main",
    "reach": "reachstore_server.reach.main",
    "audit": "reachstore_server.audit.main",
    "bridge": "reachstore_server.bridge.main",
}


def read_env_file(path: Path) -> dict[str, str]:
    """The settings of an env file; a line that is not ``KEY=VALUE`` or names a setting
    reachstore does not have is a ``ConfigError`` naming the line."""
    values: dict[str, str] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"--env-file {path}: {exc.strerror}") from None
    known = set(ENVIRONMENT) | set(LIMIT_SETTINGS)
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{path}:{number}: expected KEY=VALUE")
        if key.startswith("REACHSTORE_") and key not in known:
            raise ConfigError(f"{path}:{number}: {key} is not a reachstore setting")
        values[key] = value.strip().strip('"').strip("'")
    return values


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        if args.env_file:
            for key, value in read_env_file(Path(args.env_file)).items():
                os.environ.setdefault(key, value)
        main = importlib.import_module(COMPONENTS[args.component]).main
        main()
    except ConfigError as exc:
        print(f"reachstore serve {args.component}: bad setting: {exc}", file=sys.stderr)
        return 2
    return 0


def add_serve_parser(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser(
        "serve",
        help="run one component (query, ingest, reach, audit or bridge) in this process",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    serve.add_argument("component", choices=sorted(COMPONENTS))
    serve.add_argument(
        "--env-file", default=None, help="KEY=VALUE settings, read before the environment"
    )
    serve.set_defaults(func=cmd_serve)
