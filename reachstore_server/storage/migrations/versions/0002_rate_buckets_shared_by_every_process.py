"""The call-rate buckets every process of a deployment shares (``rate_buckets``).

Per-key, per-tenant and per-namespace call rates were counted in each process's memory;
``reachstore_server/storage/rate_buckets.py`` keeps them in this table instead, so N replicas admit
what one would (docs/LIMITS.md).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rate_buckets",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("tokens", sa.Float(), nullable=False),
        sa.Column("stamp", sa.Float(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    # Roll forward instead (docs/OPERATIONS.md, "Schema migrations").
    raise NotImplementedError("reachstore's revisions are not reversed")
