"""The archive of idempotency keys past their retention (``reach_archived_keys``).

Dedupe records were kept for ever; ``reachstore_server/reach/dedupe_archive.py`` now moves
a finished task's keys here after ``engine.dedupe_retention_days``, where a late duplicate
is still refused (docs/AT_MOST_ONCE.md, "Dedupe records").
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reach_archived_keys",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("scope", sa.String(length=8), nullable=False),
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("action_id", sa.String(length=32), nullable=False),
        sa.Column("channel", sa.String(length=64), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("archived_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant", "scope", "key", name="uq_reach_archived_keys_key"),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("reach_archived_keys", schema=None) as batch_op:
        batch_op.create_index("ix_reach_archived_keys_archived", ["archived_at"], unique=False)


def downgrade() -> None:
    # Roll forward instead (docs/OPERATIONS.md, "Schema migrations").
    raise NotImplementedError("reachstore's revisions are not reversed")
