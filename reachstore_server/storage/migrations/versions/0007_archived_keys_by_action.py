"""Archived dedupe keys found by action id, so that reading an archived action answers
"archived, and how it ended" instead of a plain not-found (docs/AT_MOST_ONCE.md, "Dedupe
records"), without scanning the archive.
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_reach_archived_keys_action", "reach_archived_keys", ["tenant", "action_id"])


def downgrade() -> None:
    # Roll forward instead (docs/OPERATIONS.md, "Schema migrations").
    raise NotImplementedError("reachstore's revisions are not reversed")
