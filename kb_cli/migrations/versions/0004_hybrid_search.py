"""Ranked search: segmented `terms` in one full-text index, and stored embeddings.

Chunks gain `terms` (the text with Chinese runs segmented into words, see
kb_cli/textsearch.py), `term_count` (its length in words, for BM25 on PostgreSQL)
and an embedding (float16 vector, model name, dimension). The full-text index moves
from the raw text to `terms`; the trigram index goes, since words now find Chinese.
Existing chunks are segmented here; they get vectors from `kb reindex --embeddings`.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

from kb_cli.textsearch import count_words, index_terms

revision = "0004"
down_revision = "0003"

SQLITE = [
    "DROP TRIGGER chunks_indexed",
    "DROP TRIGGER chunks_unindexed",
    "DROP TABLE chunks_words",
    "DROP TABLE chunks_trigrams",
    "CREATE VIRTUAL TABLE chunks_terms USING fts5(terms, content='chunks', "
    "content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')",
    """CREATE TRIGGER chunks_indexed AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_terms(rowid, terms) VALUES (new.id, new.terms);
    END""",
    """CREATE TRIGGER chunks_unindexed AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_terms(chunks_terms, rowid, terms) VALUES ('delete', old.id, old.terms);
    END""",
    "INSERT INTO chunks_terms(chunks_terms) VALUES ('rebuild')",
]
# Words as SQLite's FTS5 index sees them (kb_cli/lexical/tsvector.py, WORDS).
POSTGRESQL = [
    "DROP INDEX ix_chunks_words",
    "DROP INDEX ix_chunks_trigrams",
    "CREATE INDEX ix_chunks_terms ON chunks USING gin "
    "(to_tsvector('kb_english', regexp_replace(terms, '[^[:alnum:]]+', ' ', 'g')))",
]


def upgrade() -> None:
    op.add_column("chunks", sa.Column("terms", sa.Text, nullable=False, server_default=""))
    op.add_column("chunks", sa.Column("term_count", sa.Integer, nullable=False, server_default="0"))
    op.add_column("chunks", sa.Column("embedding", sa.LargeBinary))
    op.add_column("chunks", sa.Column("embedding_model", sa.String(200)))
    op.add_column("chunks", sa.Column("embedding_dim", sa.Integer))
    bind = op.get_bind()
    rows = bind.execute(sa.text("SELECT id, text FROM chunks")).all()
    update = sa.text("UPDATE chunks SET terms = :terms, term_count = :count WHERE id = :id")
    for chunk_id, text in rows:
        terms = index_terms(text)
        bind.execute(update, {"terms": terms, "count": count_words(terms), "id": chunk_id})
    for statement in SQLITE if bind.dialect.name == "sqlite" else POSTGRESQL:
        op.execute(statement)


def downgrade() -> None:
    raise NotImplementedError("the search index is needed by every kb version")
