"""Objects a command has stored but not yet committed, or has to delete
(`pending_objects`).

A command records an object's key here, committed, before it writes the object, and
removes the row in the transaction that commits the document naming it; a replace
records the superseded file's key in the transaction that stops naming it, and removes
the row once the object is deleted. Each row names the process (host, pid, start time)
that owns it. So an object that no document names is either in this table, with the
process that will settle it or, when that process is gone, leftover work the next
command on that host (or `kb doctor --repair`) finishes; or it is an orphan.

Revision ID: 0014_pending_objects
Revises: 0012_document_meta
"""

import sqlalchemy as sa
from alembic import op

revision = "0014_pending_objects"
down_revision = "0013_pgvector"


def upgrade() -> None:
    op.create_table(
        "pending_objects",
        sa.Column("object_key", sa.String(64), primary_key=True),
        sa.Column("process", sa.String(300), nullable=False),
        sa.Column("created_at", sa.String(27), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pending_objects")
