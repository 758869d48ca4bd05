"""Baseline: the schema as the releases before migrations made it with ``create_all``.

Every table, index and constraint, and the triggers that keep ``audit_events`` and
``audit_checkpoints`` append-only. The tables are a frozen copy, not the models: later
revisions change the models, never this file.

``adopt`` brings a database made by those releases (no ``alembic_version`` table) to this
revision's shape before it is stamped: tables, columns and indexes those releases added
after the database was made, the columns they widened, and the append-only triggers, which
``create_all`` only made when their table was created after them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.engine import Connection

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Constraints are listed in the order create_all wrote them, so that a new database and an
# adopted one have the same CREATE TABLE text.
BASELINE = sa.MetaData()

sa.Table(
    "api_keys",
    BASELINE,
    sa.Column("key_id", sa.String(length=32), nullable=False),
    sa.Column("tenant", sa.String(length=64), nullable=False),
    sa.Column("name", sa.String(length=128), nullable=False),
    sa.Column("secret_sha256", sa.String(length=64), nullable=False),
    sa.Column("scopes_json", sa.Text(), nullable=False),
    sa.Column("namespaces_json", sa.Text(), nullable=False),
    sa.Column("channels_json", sa.Text(), server_default="[]", nullable=False),
    sa.Column("groups_json", sa.Text(), server_default="[]", nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint("key_id"),
)
sa.Index(
    "ix_api_keys_tenant", *(BASELINE.tables["api_keys"].c[n] for n in ["tenant"]), unique=False
)
sa.Table(
    "audit_checkpoints",
    BASELINE,
    sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        autoincrement=True,
        nullable=False,
    ),
    sa.Column("tenant", sa.String(length=64), nullable=False),
    sa.Column("seq", sa.BigInteger(), nullable=False),
    sa.Column("head_hash", sa.String(length=64), nullable=False),
    sa.Column("signed_at", sa.String(length=32), nullable=False),
    sa.Column("key_id", sa.String(length=64), nullable=False),
    sa.Column("signature", sa.String(length=128), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sqlite_autoincrement=True,
)
sa.Index(
    "ix_audit_checkpoints_tenant",
    *(BASELINE.tables["audit_checkpoints"].c[n] for n in ["tenant", "seq"]),
    unique=False,
)
sa.Table(
    "audit_events",
    BASELINE,
    sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        autoincrement=True,
        nullable=False,
    ),
    sa.Column("tenant", sa.String(length=64), nullable=False),
    sa.Column("seq", sa.BigInteger(), nullable=False),
    sa.Column("event_id", sa.String(length=64), nullable=False),
    sa.Column("time", sa.String(length=32), nullable=False),
    sa.Column("caller_key_id", sa.String(length=32), nullable=False),
    sa.Column("service", sa.String(length=32), nullable=False),
    sa.Column("method", sa.String(length=64), nullable=False),
    sa.Column("idempotency_key", sa.String(length=512), nullable=False),
    sa.Column("params_json", sa.Text(), nullable=False),
    sa.Column("result_status", sa.String(length=32), nullable=False),
    sa.Column("error_code", sa.String(length=64), nullable=False),
    sa.Column("category", sa.String(length=16), nullable=False),
    sa.Column("duration_ms", sa.BigInteger(), nullable=False),
    sa.Column("trace_id", sa.String(length=32), nullable=False),
    sa.Column("prev_hash", sa.String(length=64), nullable=False),
    sa.Column("hash", sa.String(length=64), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("tenant", "seq", name="uq_audit_events_seq"),
    sa.UniqueConstraint("event_id", name="uq_audit_events_event_id"),
    sqlite_autoincrement=True,
)
sa.Index(
    "ix_audit_events_hash",
    *(BASELINE.tables["audit_events"].c[n] for n in ["tenant", "hash"]),
    unique=False,
)
sa.Index(
    "ix_audit_events_time",
    *(BASELINE.tables["audit_events"].c[n] for n in ["tenant", "time"]),
    unique=False,
)
sa.Table(
    "audit_heads",
    BASELINE,
    sa.Column("tenant", sa.String(length=64), nullable=False),
    sa.Column("seq", sa.BigInteger(), nullable=False),
    sa.Column("hash", sa.String(length=64), nullable=False),
    sa.PrimaryKeyConstraint("tenant"),
)
sa.Table(
    "audit_outbox",
    BASELINE,
    sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        autoincrement=True,
        nullable=False,
    ),
    sa.Column("service", sa.String(length=32), nullable=False),
    sa.Column("event_json", sa.Text(), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.Column("attempts", sa.Integer(), nullable=False),
    sa.Column("quarantined_at", sa.Float(), nullable=True),
    sa.Column("refusal", sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint("id"),
    sqlite_autoincrement=True,
)
sa.Index(
    "ix_audit_outbox_service",
    *(BASELINE.tables["audit_outbox"].c[n] for n in ["service", "id"]),
    unique=False,
)
sa.Table(
    "ingest_tasks",
    BASELINE,
    sa.Column("task_id", sa.String(length=32), nullable=False),
    sa.Column("tenant", sa.String(length=64), nullable=False),
    sa.Column("namespace", sa.String(length=256), nullable=False),
    sa.Column("document_id", sa.String(length=128), nullable=False),
    sa.Column("text", sa.Text(), nullable=True),
    sa.Column("text_bytes", sa.BigInteger(), nullable=False),
    sa.Column("metadata_json", sa.Text(), nullable=False),
    sa.Column("on_duplicate", sa.String(length=16), nullable=False),
    sa.Column("submitted_by", sa.String(length=32), nullable=False),
    sa.Column("state", sa.String(length=16), nullable=False),
    sa.Column("phase", sa.String(length=16), nullable=False),
    sa.Column("percent", sa.Integer(), nullable=False),
    sa.Column("error_code", sa.String(length=64), nullable=False),
    sa.Column("error_message", sa.Text(), nullable=False),
    sa.Column("error_data_json", sa.Text(), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("lease_owner", sa.String(length=64), server_default="", nullable=False),
    sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint("task_id"),
)
sa.Index(
    "ix_tasks_state_created",
    *(BASELINE.tables["ingest_tasks"].c[n] for n in ["state", "created_at"]),
    unique=False,
)
sa.Table(
    "namespaces",
    BASELINE,
    sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        autoincrement=True,
        nullable=False,
    ),
    sa.Column("tenant", sa.String(length=64), nullable=False),
    sa.Column("name", sa.String(length=64), nullable=False),
    sa.Column("embedding_model", sa.String(length=128), nullable=False),
    sa.Column("dimension", sa.Integer(), nullable=False),
    sa.Column("change_seq", sa.BigInteger(), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("tenant", "name", name="uq_namespaces_tenant_name"),
    sqlite_autoincrement=True,
)
sa.Table(
    "reach_alerts",
    BASELINE,
    sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        autoincrement=True,
        nullable=False,
    ),
    sa.Column("tenant", sa.String(length=64), nullable=False),
    sa.Column("task_id", sa.String(length=32), nullable=False),
    sa.Column("action_id", sa.String(length=32), nullable=False),
    sa.Column("kind", sa.String(length=32), nullable=False),
    sa.Column("message", sa.Text(), nullable=False),
    sa.Column("delivered", sa.Boolean(), nullable=False),
    sa.Column("delivery_attempts", sa.Integer(), nullable=False),
    sa.Column("delivery_error", sa.Text(), nullable=False),
    sa.Column("claim_owner", sa.String(length=64), server_default="", nullable=False),
    sa.Column("claimed_until", sa.Float(), nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sqlite_autoincrement=True,
)
sa.Index(
    "ix_reach_alerts_undelivered",
    *(BASELINE.tables["reach_alerts"].c[n] for n in ["delivered", "id"]),
    unique=False,
)
sa.Table(
    "reach_channel_buckets",
    BASELINE,
    sa.Column("channel", sa.String(length=128), nullable=False),
    sa.Column("tokens", sa.Float(), nullable=False),
    sa.Column("stamp", sa.Float(), nullable=False),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint("channel"),
)
sa.Table(
    "reach_tasks",
    BASELINE,
    sa.Column("task_id", sa.String(length=32), nullable=False),
    sa.Column("tenant", sa.String(length=64), nullable=False),
    sa.Column("entity_id", sa.String(length=128), nullable=False),
    sa.Column("caller_key", sa.String(length=128), nullable=True),
    sa.Column("request_digest", sa.String(length=64), nullable=False),
    sa.Column("logical_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("trace_id", sa.String(length=32), nullable=False),
    sa.Column("submitted_by", sa.String(length=32), nullable=False),
    sa.Column("state", sa.String(length=16), nullable=False),
    sa.Column("version", sa.BigInteger(), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint("task_id"),
    sa.UniqueConstraint("tenant", "caller_key", name="uq_reach_tasks_caller_key"),
)
sa.Index(
    "ix_reach_tasks_tenant_created",
    *(BASELINE.tables["reach_tasks"].c[n] for n in ["tenant", "created_at"]),
    unique=False,
)
sa.Table(
    "documents",
    BASELINE,
    sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        autoincrement=True,
        nullable=False,
    ),
    sa.Column("tenant", sa.String(length=64), nullable=False),
    sa.Column("namespace_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
    sa.Column("document_id", sa.String(length=128), nullable=False),
    sa.Column("text", sa.Text(), nullable=False),
    sa.Column("metadata_json", sa.Text(), nullable=False),
    sa.Column("content_sha256", sa.String(length=64), nullable=False),
    sa.Column("text_bytes", sa.BigInteger(), nullable=False),
    sa.Column("chunk_count", sa.Integer(), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("namespace_id", "document_id", name="uq_documents_namespace_doc"),
    sa.ForeignKeyConstraint(["namespace_id"], ["namespaces.id"], ondelete="CASCADE"),
    sqlite_autoincrement=True,
)
sa.Table(
    "namespace_changes",
    BASELINE,
    sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        autoincrement=True,
        nullable=False,
    ),
    sa.Column("tenant", sa.String(length=64), nullable=False),
    sa.Column("namespace_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
    sa.Column("seq", sa.BigInteger(), nullable=False),
    sa.Column("document_id", sa.String(length=128), nullable=False),
    sa.Column("kind", sa.String(length=16), nullable=False),
    sa.ForeignKeyConstraint(["namespace_id"], ["namespaces.id"], ondelete="CASCADE"),
    sa.PrimaryKeyConstraint("id"),
    sqlite_autoincrement=True,
)
sa.Index(
    "ix_changes_namespace_seq",
    *(BASELINE.tables["namespace_changes"].c[n] for n in ["namespace_id", "seq"]),
    unique=False,
)
sa.Table(
    "reach_actions",
    BASELINE,
    sa.Column("action_id", sa.String(length=32), nullable=False),
    sa.Column("task_id", sa.String(length=32), nullable=False),
    sa.Column("tenant", sa.String(length=64), nullable=False),
    sa.Column("position", sa.Integer(), nullable=False),
    sa.Column("name", sa.String(length=64), nullable=False),
    sa.Column("channel", sa.String(length=64), nullable=False),
    sa.Column("action_type", sa.String(length=64), nullable=False),
    sa.Column("params_json", sa.Text(), nullable=False),
    sa.Column("depends_on_json", sa.Text(), nullable=False),
    sa.Column("required", sa.Boolean(), nullable=False),
    sa.Column("idem_key", sa.String(length=512), nullable=False),
    sa.Column("window", sa.String(length=16), nullable=False),
    sa.Column("state", sa.String(length=16), nullable=False),
    sa.Column("attempts", sa.Integer(), nullable=False),
    sa.Column("rate_limited", sa.Integer(), nullable=False),
    sa.Column("polls", sa.Integer(), nullable=False),
    sa.Column("unknown_polls", sa.Integer(), nullable=False),
    sa.Column("ambiguous_sends", sa.Integer(), server_default="0", nullable=False),
    sa.Column("next_at", sa.Float(), nullable=True),
    sa.Column("lease_owner", sa.String(length=64), nullable=False),
    sa.Column("first_sent_at", sa.Float(), nullable=True),
    sa.Column("accepted_at", sa.Float(), nullable=True),
    sa.Column("external_id", sa.String(length=256), nullable=False),
    sa.Column("failure_json", sa.Text(), nullable=False),
    sa.Column("failure_kind", sa.String(length=16), nullable=False),
    sa.Column("resolution_json", sa.Text(), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint("action_id"),
    sa.UniqueConstraint("tenant", "idem_key", name="uq_reach_actions_idem_key"),
    sa.ForeignKeyConstraint(["task_id"], ["reach_tasks.task_id"], ondelete="CASCADE"),
)
sa.Index(
    "ix_reach_actions_due",
    *(BASELINE.tables["reach_actions"].c[n] for n in ["state", "next_at"]),
    unique=False,
)
sa.Index(
    "ix_reach_actions_task",
    *(BASELINE.tables["reach_actions"].c[n] for n in ["task_id", "position"]),
    unique=False,
)
sa.Table(
    "chunks",
    BASELINE,
    sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        autoincrement=True,
        nullable=False,
    ),
    sa.Column("tenant", sa.String(length=64), nullable=False),
    sa.Column("namespace_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
    sa.Column(
        "document_row_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
    ),
    sa.Column("document_id", sa.String(length=128), nullable=False),
    sa.Column("chunk_index", sa.Integer(), nullable=False),
    sa.Column("text", sa.Text(), nullable=False),
    sa.Column("content_hash", sa.String(length=64), nullable=False),
    sa.Column("embedding", sa.LargeBinary(), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sa.ForeignKeyConstraint(["namespace_id"], ["namespaces.id"], ondelete="CASCADE"),
    sa.ForeignKeyConstraint(["document_row_id"], ["documents.id"], ondelete="CASCADE"),
    sqlite_autoincrement=True,
)
sa.Index(
    "ix_chunks_namespace_doc",
    *(BASELINE.tables["chunks"].c[n] for n in ["namespace_id", "document_id"]),
    unique=False,
)
sa.Table(
    "reach_history",
    BASELINE,
    sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        autoincrement=True,
        nullable=False,
    ),
    sa.Column("tenant", sa.String(length=64), nullable=False),
    sa.Column("action_id", sa.String(length=32), nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("from_state", sa.String(length=16), nullable=False),
    sa.Column("to_state", sa.String(length=16), nullable=False),
    sa.Column("reason", sa.String(length=48), nullable=False),
    sa.Column("details_json", sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(["action_id"], ["reach_actions.action_id"], ondelete="CASCADE"),
    sa.PrimaryKeyConstraint("id"),
    sqlite_autoincrement=True,
)
sa.Index(
    "ix_reach_history_action",
    *(BASELINE.tables["reach_history"].c[n] for n in ["action_id", "id"]),
    unique=False,
)
sa.Table(
    "reach_receipts",
    BASELINE,
    sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        autoincrement=True,
        nullable=False,
    ),
    sa.Column("tenant", sa.String(length=64), nullable=False),
    sa.Column("action_id", sa.String(length=32), nullable=False),
    sa.Column("attempt", sa.Integer(), nullable=False),
    sa.Column("operation", sa.String(length=16), nullable=False),
    sa.Column("external_id", sa.String(length=256), nullable=False),
    sa.Column("status_code", sa.Integer(), nullable=False),
    sa.Column("snippet", sa.Text(), nullable=False),
    sa.Column("duration_ms", sa.BigInteger(), nullable=False),
    sa.Column("outcome", sa.String(length=16), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(["action_id"], ["reach_actions.action_id"], ondelete="CASCADE"),
    sa.PrimaryKeyConstraint("id"),
    sqlite_autoincrement=True,
)
sa.Index(
    "ix_reach_receipts_action",
    *(BASELINE.tables["reach_receipts"].c[n] for n in ["action_id", "id"]),
    unique=False,
)

APPEND_ONLY = ("audit_events", "audit_checkpoints")
PG_FUNCTION = (
    "CREATE OR REPLACE FUNCTION reachstore_append_only() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION '% is append-only', TG_TABLE_NAME; END $$"
)


def _trigger_statements(dialect: str) -> dict[str, str]:
    """Each append-only trigger by name, with the statement that creates it."""
    made: dict[str, str] = {}
    for table in APPEND_ONLY:
        if dialect == "postgresql":
            made[f"{table}_append_only"] = (
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION reachstore_append_only()"
            )
            continue
        for verb in ("UPDATE", "DELETE"):
            made[f"{table}_no_{verb.lower()}"] = (
                f"CREATE TRIGGER {table}_no_{verb.lower()} BEFORE {verb} ON {table} "
                f"BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END"
            )
    return made


def _present_triggers(connection: Connection) -> set[str]:
    if connection.dialect.name == "postgresql":
        query = "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"
    else:
        query = "SELECT name FROM sqlite_master WHERE type = 'trigger'"
    return {row[0] for row in connection.exec_driver_sql(query)}


def _make_triggers(connection: Connection) -> None:
    dialect = connection.dialect.name
    if dialect == "postgresql":
        connection.execute(sa.text(PG_FUNCTION))  # text(): the driver sees % escaped
    present = _present_triggers(connection)
    for name, statement in _trigger_statements(dialect).items():
        if name not in present:
            connection.exec_driver_sql(statement)


def upgrade() -> None:
    connection = op.get_bind()
    BASELINE.create_all(connection)
    _make_triggers(connection)


def downgrade() -> None:
    # Roll forward instead (docs/OPERATIONS.md, "Schema migrations").
    raise NotImplementedError("reachstore's revisions are not reversed")


def adopt(connection: Connection) -> None:
    """Brings a database made by ``create_all`` to this revision; changes nothing a current
    one already has, so a half-adopted database is finished by running it again."""
    BASELINE.create_all(connection, checkfirst=True)
    present = sa.inspect(connection)
    for table in BASELINE.sorted_tables:
        have = {c["name"]: c["type"] for c in present.get_columns(table.name)}
        for column in table.columns:
            if column.name not in have:
                _add_column(connection, table.name, column)
            elif connection.dialect.name == "postgresql":
                _widen(connection, table.name, column, have[column.name])
        indexes = {i["name"] for i in present.get_indexes(table.name)}
        for index in table.indexes:
            if index.name not in indexes:
                index.create(connection)
    _make_triggers(connection)


def _add_column(connection: Connection, table: str, column: sa.Column) -> None:
    # Those releases only added columns that are nullable or have a server default, so
    # existing rows get a value.
    kind = column.type.compile(dialect=connection.dialect)
    default = column.server_default
    clause = ""
    if isinstance(default, sa.DefaultClause) and isinstance(default.arg, str):
        clause = " DEFAULT '" + default.arg.replace("'", "''") + "'"
    connection.exec_driver_sql(f'ALTER TABLE {table} ADD COLUMN "{column.name}" {kind}{clause}')


def _widen(connection: Connection, table: str, column: sa.Column, found: object) -> None:
    """A VARCHAR declared longer than the database has it (``audit_checkpoints.signature``
    for Ed25519 signatures) is widened: no stored value changes."""
    want = column.type
    if not isinstance(want, sa.String) or not isinstance(found, sa.String):
        return
    if want.length and found.length and found.length < want.length:
        connection.exec_driver_sql(
            f'ALTER TABLE {table} ALTER COLUMN "{column.name}" TYPE VARCHAR({want.length})'
        )
