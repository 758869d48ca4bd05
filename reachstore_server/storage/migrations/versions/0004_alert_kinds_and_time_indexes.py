"""Each alert carries the kind of its failure (``reach_alerts.failure_kind``); baseline
alerts are raised once (``reach_alerts.dedupe_key``); the history and finished actions are
indexed by time for the alert baselines and the weekly UNKNOWN review.

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
    with op.batch_alter_table("reach_alerts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("dedupe_key", sa.String(length=200), nullable=True))
        batch_op.create_unique_constraint("uq_reach_alerts_dedupe_key", ["tenant", "dedupe_key"])
    op.create_index("ix_reach_actions_finished", "reach_actions", ["finished_at"])
    op.create_index("ix_reach_history_at", "reach_history", ["at"])
    op.execute(
        "UPDATE reach_alerts SET failure_kind = 'business' WHERE kind = 'task_failed' "
        "AND action_id IN (SELECT action_id FROM reach_actions WHERE failure_kind = 'business')"
    )


def downgrade() -> None:
    # Roll forward instead (docs/OPERATIONS.md, "Schema migrations").
    raise NotImplementedError("reachstore's revisions are not reversed")
