"""`reachstore migrate`: brings the configured database's schema to the newest revision.

The database is REACHSTORE_DATABASE_URL (or --database-url), else the SQLite file of the data
folder, exactly as the services find it. Several of these may run at once against one
database (every replica's init container, say): they take turns under one lock, and all but
the first find nothing to do.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from reachstore_server.cli_serve import read_env_file
from reachstore_server.common.config import ConfigError, Settings
from reachstore_server.storage.engine import make_engine
from reachstore_server.storage.schema import Migrated, migrate_to_head, new_revision


def _fail(message: str) -> None:
    print(f"reachstore: {message}", file=sys.stderr, flush=True)


def database_url(data_dir: str | None, given: str | None, env_file: str | None = None) -> str:
    """The database the services would use: --database-url, else the environment (an env
    file's values below the environment's, as for `reachstore serve`), else the data folder."""
    env = {**os.environ}
    if env_file:
        env = {**read_env_file(Path(env_file)), **env}
    if data_dir:
        env["REACHSTORE_DATA_DIR"] = str(Path(data_dir).resolve())
    if given:
        env["REACHSTORE_DATABASE_URL"] = given
    # Only the two settings that name the database: a migration needs no TLS files, ports
    # or keys, so an init container need not mount them.
    wanted = ("REACHSTORE_DATABASE_URL", "REACHSTORE_DATA_DIR")
    return Settings.from_env({k: env[k] for k in wanted if k in env}).database_url


def describe(result: Migrated) -> str:
    before = "empty database" if result.before is None else f"revision {result.before}"
    if result.adopted:
        before = "schema of a release before migrations (adopted)"
    if result.before == result.after:
        return f"schema already at revision {result.after}"
    return f"schema migrated: {before} -> revision {result.after}"


def cmd_migrate(args: argparse.Namespace) -> int:
    try:
        url = database_url(args.data_dir, args.database_url, args.env_file)
    except ConfigError as exc:
        _fail(f"bad setting: {exc}")
        return 2
    engine = make_engine(url)
    try:
        if args.new_revision:
            path = new_revision(engine, args.new_revision)
            print(f"new revision written: {path}", flush=True)
            return 0
        print(describe(migrate_to_head(engine)), flush=True)
    except SQLAlchemyError as exc:
        _fail(f"migration failed, nothing was changed: {exc.__class__.__name__}: {exc}")
        return 1
    except RuntimeError as exc:  # SchemaNotAtHead, or no revision to start from
        _fail(str(exc))
        return 1
    finally:
        engine.dispose()
    return 0


def add_migrate_parser(commands: argparse._SubParsersAction) -> None:
    migrate = commands.add_parser(
        "migrate", help="bring the database's schema to the newest revision"
    )
    migrate.add_argument(
        "--data-dir",
        default=None,
        help="the data folder `up` uses; default: REACHSTORE_DATA_DIR, or ./data",
    )
    migrate.add_argument(
        "--database-url",
        default=None,
        help="the database to migrate; default: REACHSTORE_DATABASE_URL, or SQLite in the "
        "data folder",
    )
    migrate.add_argument(
        "--env-file",
        default=None,
        help="KEY=VALUE settings, as `reachstore serve` reads them (the environment wins)",
    )
    migrate.add_argument(
        "--new-revision",
        metavar="MESSAGE",
        default=None,
        help="for developers: write a revision, generated from the models' difference to the "
        "database (which must be at the newest revision), into "
        "reachstore_server/storage/migrations",
    )
    migrate.set_defaults(func=cmd_migrate)
