"""Chunks know the last page they cover: `page_end`, when a chunk's text runs from one
page (its `page`) onto another, so that a passage is cited by the pages it spans ("pages
1-2") instead of the one it starts on. Chunks made before have none: they are cited by
their first page, as they were.

Revision ID: 0017_chunk_page_end
Revises: 0016_chunk_runs
"""

import sqlalchemy as sa
from alembic import op

revision = "0017_chunk_page_end"
down_revision = "0016_chunk_runs"


def upgrade() -> None:
    op.add_column("chunks", sa.Column("page_end", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("chunks", "page_end")
