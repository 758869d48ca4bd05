"""Each alert carries the kind of its failure (``reach_alerts.failure_kind``).

Business failures go to the business and technical ones to operations, each through its
own channel (``engine.alert_channels``, README "Reach"). Alerts already stored take the kind
of the action that failed their task; the rest (reviews, alerts without an action) are
technical.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("reach_alerts", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "failure_kind", sa.String(length=16), server_default="technical", nullable=False
            )
        )
    op.execute(
        "UPDATE reach_alerts SET failure_kind = 'business' WHERE kind = 'task_failed' "
        "AND action_id IN (SELECT action_id FROM reach_actions WHERE failure_kind = 'business')"
    )


def downgrade() -> None:
    # Roll forward instead (docs/OPERATIONS.md, "Schema migrations").
    raise NotImplementedError("reachstore's revisions are not reversed")
