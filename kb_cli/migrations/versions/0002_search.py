"""The search indexes over chunk text (engine-specific), filled from existing chunks.

Frozen as released: revision 0004 replaced these indexes.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"

# Two FTS5 indexes over the chunk text: words (Porter-stemmed English, any language
# with spaces) and trigrams (substrings, for Chinese and other unspaced scripts).
SQLITE = [
    "CREATE VIRTUAL TABLE chunks_words USING fts5(text, content='chunks', "
    "content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')",
    "CREATE VIRTUAL TABLE chunks_trigrams USING fts5(text, content='chunks', "
    "content_rowid='id', tokenize='trigram')",
    """CREATE TRIGGER chunks_indexed AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_words(rowid, text) VALUES (new.id, new.text);
        INSERT INTO chunks_trigrams(rowid, text) VALUES (new.id, new.text);
    END""",
    """CREATE TRIGGER chunks_unindexed AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_words(chunks_words, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO chunks_trigrams(chunks_trigrams, rowid, text)
            VALUES ('delete', old.id, old.text);
    END""",
    # Index whatever chunks an older schema already holds.
    "INSERT INTO chunks_words(chunks_words) VALUES ('rebuild')",
    "INSERT INTO chunks_trigrams(chunks_trigrams) VALUES ('rebuild')",
]


# Words as SQLite's FTS5 index sees them: punctuation splits words (example.com is
# "example" and "com"), accents are dropped, English is stemmed, no stopwords.
WORDS = "to_tsvector('kb_english', regexp_replace({text}, '[^[:alnum:]]+', ' ', 'g'))"
POSTGRESQL = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE EXTENSION IF NOT EXISTS unaccent",
    "CREATE TEXT SEARCH DICTIONARY kb_english_stem (TEMPLATE = snowball, Language = english)",
    "CREATE TEXT SEARCH CONFIGURATION kb_english (COPY = simple)",
    "ALTER TEXT SEARCH CONFIGURATION kb_english ALTER MAPPING FOR asciiword, asciihword, "
    "hword_asciipart, word, hword, hword_part WITH unaccent, kb_english_stem",
    f"CREATE INDEX ix_chunks_words ON chunks USING gin ({WORDS.format(text='text')})",
    "CREATE INDEX ix_chunks_trigrams ON chunks USING gin (text gin_trgm_ops)",
]


def upgrade() -> None:
    for statement in SQLITE if op.get_bind().dialect.name == "sqlite" else POSTGRESQL:
        op.execute(statement)


def downgrade() -> None:
    raise NotImplementedError("the search index is needed by every kb version")
