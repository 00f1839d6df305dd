"""pgvector on PostgreSQL, where the server offers the extension: the halfvec copy of
each chunk's vector and an HNSW index per embedding model (kb_cli/migrations/pgvector.py).
Nothing on SQLite, nor on a server without pgvector: search keeps its exact scan, and
`kb db upgrade` makes all this once pgvector is installed.

Revision ID: 0013_pgvector
Revises: 0012_document_meta
"""

from alembic import op

from kb_cli.migrations import pgvector

revision = "0013_pgvector"
down_revision = "0012_document_meta"


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        pgvector.enable(pgvector.driver(bind))


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        pgvector.disable(pgvector.driver(bind))
