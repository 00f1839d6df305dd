"""pg_textsearch on PostgreSQL, where the server offers the extension: a BM25 index of
the chunks' words that the words ranking asks for its candidates
(kb_cli/migrations/bm25.py). Nothing on SQLite, nor on a server without it: the words
ranking reads the GIN index as before, and `kb db upgrade` makes the index once the
extension is installed and preloaded.

Revision ID: 0020_bm25_index
Revises: 0019_base_models
"""

from alembic import op

from kb_cli.migrations import bm25, pgvector

revision = "0020_bm25_index"
down_revision = "0019_base_models"


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        bm25.enable(pgvector.driver(bind))


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        bm25.disable(pgvector.driver(bind))
