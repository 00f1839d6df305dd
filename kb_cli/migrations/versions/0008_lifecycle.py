"""Taking things out, and people over time.

- `documents.rejected_revision` / `rejected_reason`: the revision a reviewer turned
  down (`kb reject`) and why; cleared when the document is submitted again.
- `documents.archived_revision`: the revision `kb unpublish` stopped serving; its
  chunks are kept, so `kb publish` can serve it again without reprocessing.
- `deleted_documents`: what remains of a deleted document (its base, file name, task
  ids, who and when), so that `kb history ID` still shows its trail and only to those
  who could read its base.
- `users.disabled_at` / `last_used_at`: a disabled user's token is refused; when a
  token was last accepted (written at most once a minute).

Revision ID: 0008_lifecycle
Revises: 0007_chunk_context
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_lifecycle"
down_revision = "0007_chunk_context"

ID, STAMP, NAME = sa.String(36), sa.String(27), sa.String(100)


def upgrade() -> None:
    op.add_column("documents", sa.Column("rejected_revision", sa.Integer, nullable=True))
    op.add_column("documents", sa.Column("rejected_reason", sa.String(500), nullable=True))
    op.add_column("documents", sa.Column("archived_revision", sa.Integer, nullable=True))
    op.create_table(
        "deleted_documents",
        sa.Column("id", ID, primary_key=True),
        sa.Column("base", NAME, nullable=False, index=True),
        sa.Column("filename", sa.String(512), nullable=False),
        sa.Column("task_ids", sa.Text, nullable=False),  # a JSON list
        sa.Column("deleted_at", STAMP, nullable=False),
        sa.Column("deleted_by", sa.String(200), nullable=False),
    )
    op.add_column("users", sa.Column("disabled_at", STAMP, nullable=True))
    op.add_column("users", sa.Column("last_used_at", STAMP, nullable=True))


def downgrade() -> None:
    raise NotImplementedError("deleted documents cannot come back")
