"""The members of the query tier that share the namespaces between them (``query_members``).

Each query process started with ``REACHSTORE_QUERY_ADVERTISE`` registers here and renews its
heartbeat; the namespaces are placed over the live rows (docs/SHARDS.md).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "query_members",
        sa.Column("member_id", sa.String(length=64), nullable=False),
        sa.Column("address", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("hop_secret", sa.String(length=64), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("heartbeat_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("member_id"),
    )


def downgrade() -> None:
    # Roll forward instead (docs/OPERATIONS.md, "Schema migrations").
    raise NotImplementedError("reachstore's revisions are not reversed")
