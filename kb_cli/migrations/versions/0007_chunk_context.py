"""Chunks know where they stand: `context` holds the document's title and the heading
path of the chunk's section ("Guide › Clients › Timeouts"). It is part of what is
embedded and of the chunk's indexed `terms`, never of the `text` a hit shows; `kb
reindex --embeddings` embeds it with the text. Chunks made before have none.

Revision ID: 0007_chunk_context
Revises: 0006_bases
"""

import sqlalchemy as sa
from alembic import op

revision = "0007_chunk_context"
down_revision = "0006_bases"


def upgrade() -> None:
    op.add_column("chunks", sa.Column("context", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("chunks", "context")
