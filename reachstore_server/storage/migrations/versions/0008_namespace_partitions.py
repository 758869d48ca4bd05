"""Namespaces record into how many partitions the query tier splits them
(docs/SHARDS.md, "Partitions").

``partitions``: the count searches are routed by. ``partitions_next``: the count the
members are loading; it is ahead of ``partitions`` only while a split warms, and becomes
``partitions`` once every new partition has an owner serving it. Both 1 for a namespace
that was never split, which is every namespace of a tier that is not sharded.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("namespaces", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("partitions", sa.Integer(), server_default="1", nullable=False)
        )
        batch_op.add_column(
            sa.Column("partitions_next", sa.Integer(), server_default="1", nullable=False)
        )


def downgrade() -> None:
    # Roll forward instead (docs/OPERATIONS.md, "Schema migrations").
    raise NotImplementedError("reachstore's revisions are not reversed")
