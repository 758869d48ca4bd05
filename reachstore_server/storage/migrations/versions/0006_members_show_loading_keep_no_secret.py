"""Query members say which placed namespaces they are still loading, and no longer keep a
signing secret in their row (docs/SHARDS.md).

``loading``: until a member has loaded a namespace placed on it, the others list it as a
warming owner, not as one taking searches, and ask it last.

``hop_secret`` goes: anyone who could read the table could sign forwarded searches that no
member charges to a key's call rate or audits; members now share a secret from their
environment (``REACHSTORE_QUERY_HOP_SECRET``), which never reaches the database.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("query_members", schema=None) as batch_op:
        batch_op.drop_column("hop_secret")
        batch_op.add_column(sa.Column("loading", sa.Text(), server_default="[]", nullable=False))


def downgrade() -> None:
    # Roll forward instead (docs/OPERATIONS.md, "Schema migrations").
    raise NotImplementedError("reachstore's revisions are not reversed")
