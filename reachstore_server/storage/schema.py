"""The schema's revision: bringing a database to the newest one, and checking it is there.

Revisions live in ``reachstore_server/storage/migrations/versions``. ``migrate_to_head`` is the only
code that changes the schema; services only call ``check_at_head`` and refuse to start on
anything else, so no two processes ever race to create or alter tables.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import Script, ScriptDirectory
from sqlalchemy import Connection, Engine, inspect

from reachstore_server.common.config_errors import refuse_to_start

MIGRATIONS = Path(__file__).with_name("migrations")
VERSION_TABLE = "alembic_version"
# The key of the PostgreSQL advisory lock every `reachstore migrate` takes (any constant
# that nothing else locks; these are the bytes of "rsmigrat").
LOCK_KEY = 0x72736D6967726174

# Alembic says at info level which dialect it found on every look at the revision: noise in
# each service's start-up log.
logging.getLogger("alembic.runtime.migration").setLevel(logging.WARNING)


def _unquoted(default: str) -> str:
    return default.strip().strip("()").strip("'")


def server_default_differs(
    _context: object,
    _inspected_column: object,
    _metadata_column: object,
    inspected: str | None,
    _metadata_default: object,
    rendered: str | None,
) -> bool | None:
    """Alembic's comparison of server defaults, except that SQLite's reflected ``('')``
    equals the models' ``''`` (None: Alembic's own comparison decides)."""
    if inspected is not None and rendered is not None:
        return None if _unquoted(inspected) != _unquoted(rendered) else False
    return None


# What autogenerate compares (env.py passes the same) for the test that a database at head
# matches the models.
COMPARE: dict[str, Any] = {"compare_type": True, "compare_server_default": server_default_differs}


class SchemaNotAtHead(RuntimeError):
    """The database's schema is not the one this code expects."""


@dataclass(frozen=True)
class Migrated:
    before: str | None  # None: an empty database
    after: str
    adopted: bool  # made by a release before migrations, stamped at the baseline


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    if head is None:
        raise RuntimeError("reachstore_server/storage/migrations/versions holds no revision")
    return head


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


@contextmanager
def _migration_lock(connection: Connection) -> Iterator[None]:
    """Holds off every other migrating process until this one has committed.

    PostgreSQL: a session advisory lock, so the second process waits, then finds the schema
    at head and does nothing. SQLite: ``BEGIN IMMEDIATE`` takes the file's write lock before
    the revision is read (busy_timeout makes the others wait for it)."""
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_lock({LOCK_KEY})")
        connection.commit()
        try:
            yield
        finally:
            connection.rollback()
            connection.exec_driver_sql(f"SELECT pg_advisory_unlock({LOCK_KEY})")
            connection.commit()
        return
    connection.exec_driver_sql("BEGIN IMMEDIATE")
    yield


def migrate_to_head(engine: Engine) -> Migrated:
    """Upgrades the database to the newest revision in one transaction, under the lock."""
    with engine.connect() as connection, _migration_lock(connection):
        before = current_revision(connection)
        adopted = False
        script = ScriptDirectory.from_config(_config())
        if before is not None and not _known(script, before):
            raise SchemaNotAtHead(_newer(before))
        if before is None:
            baseline = _baseline(script)
            if _made_before_migrations(connection, set(baseline.module.BASELINE.tables)):
                baseline.module.adopt(connection)
                command.stamp(_config(connection), baseline.revision)
                adopted = True
        command.upgrade(_config(connection), "head")
        after = current_revision(connection)
        connection.commit()
    assert after is not None
    return Migrated(before=before, after=after, adopted=adopted)


def _known(script: ScriptDirectory, revision: str) -> bool:
    return revision in {r.revision for r in script.walk_revisions()}


def _newer(revision: str) -> str:
    return (
        f"the database is at revision {revision}, which this reachstore does not know (its "
        f"newest is {head_revision()}): a newer release migrated it; run that release"
    )


def _baseline(script: ScriptDirectory) -> Script:
    base = script.get_base()
    found = script.get_revision(base) if base else None
    if found is None:
        raise RuntimeError(
            "reachstore_server/storage/migrations/versions holds no baseline revision"
        )
    return found


def _made_before_migrations(connection: Connection | Engine, baseline_tables: set[str]) -> bool:
    """Any of the baseline's tables without a version table: a database made by a release
    before migrations, adopted at the baseline rather than created again."""
    tables = set(inspect(connection).get_table_names())
    return VERSION_TABLE not in tables and bool(tables & baseline_tables)


def check_at_head(engine: Engine) -> None:
    """Raises ``SchemaNotAtHead``, saying what to run, unless the schema is the newest."""
    script = ScriptDirectory.from_config(_config())
    head = head_revision()
    with engine.connect() as connection:
        found = current_revision(connection)
    if found == head:
        return
    if found is not None and not _known(script, found):
        raise SchemaNotAtHead(_newer(found))
    if found is not None:
        where = f"is at revision {found}"
    elif _made_before_migrations(engine, set(_baseline(script).module.BASELINE.tables)):
        where = "was made by a release before migrations"
    else:
        where = "has no reachstore schema"
    raise SchemaNotAtHead(
        f"the database {where}; this reachstore needs revision {head}. "
        "Run `reachstore migrate` (with the same REACHSTORE_DATABASE_URL) first."
    )


def new_revision(engine: Engine, message: str) -> str:
    """Writes the next revision, generated from what the models declare beyond the
    database's schema (which must be at head); returns its file's path."""
    check_at_head(engine)
    number = f"{int(head_revision()) + 1:04d}"
    with engine.connect() as connection:
        script = command.revision(
            _config(connection), message=message, autogenerate=True, rev_id=number
        )
    assert script is not None and not isinstance(script, list)
    return str(script.path)


def refuse_unless_at_head(database_url: str, component: str) -> None:
    """A service's first step: exits (status 2, one line on stderr, no traceback) when the
    schema is not at head, instead of serving on tables it does not expect. The engine is
    closed again before the caller forks or opens its own."""
    from reachstore_server.storage.engine import make_engine  # engine imports every model module

    engine = make_engine(database_url)
    try:
        check_at_head(engine)
    except SchemaNotAtHead as exc:
        refuse_to_start(component, exc)
    finally:
        engine.dispose()
