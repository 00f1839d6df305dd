"""Each document revision's run of chunk ids, chunks and words, on SQLite (`chunk_runs`).

BM25 over a scope narrower than every base counts the chunks of the readable bases,
their mean length, and how many of them hold each word. Counted from `chunks`, that
read every chunk row (2.4 s at 986k chunks) and every posting of every word with its
chunk's document (4-5 s for an English question), in every search of a caller who may
not read every base. A revision's chunks are written in one transaction, by the one
writer SQLite allows, so their ids are consecutive: the runs of a scope's revisions
tell which chunk ids it holds (kb_cli/lexical/fts5.py, ranked_in_scope), and their
counts its size. A run whose ids are not all its own (`last_id - first_id + 1` is not
`chunks`: a chunk deleted from its middle) is never used for that.

The triggers keep the rows in step with `chunks` in the writing transaction (every
revision, as the full-text index holds them); a run's row goes with its last chunk.

Nothing on PostgreSQL, whose `chunk_totals` (0015) counts per base.

Revision ID: 0016_chunk_runs
Revises: 0015_lexical_index
"""

from alembic import op

revision = "0016_chunk_runs"
down_revision = "0015_lexical_index"

_ADD = """
    INSERT INTO chunk_runs (document_id, revision, first_id, last_id, chunks, words)
    VALUES (new.document_id, new.revision, new.id, new.id, 1, new.term_count)
    ON CONFLICT (document_id, revision) DO UPDATE SET
        first_id = min(first_id, excluded.first_id),
        last_id = max(last_id, excluded.last_id),
        chunks = chunks + 1,
        words = words + excluded.words;"""
_REMOVE = """
    UPDATE chunk_runs SET chunks = chunks - 1, words = words - old.term_count
    WHERE document_id = old.document_id AND revision = old.revision;
    DELETE FROM chunk_runs
    WHERE document_id = old.document_id AND revision = old.revision AND chunks = 0;"""
SQLITE = [
    """CREATE TABLE chunk_runs (
        document_id VARCHAR(36) NOT NULL,
        revision INTEGER NOT NULL,
        first_id INTEGER NOT NULL,
        last_id INTEGER NOT NULL,
        chunks INTEGER NOT NULL,
        words INTEGER NOT NULL,
        PRIMARY KEY (document_id, revision)
    )""",
    """INSERT INTO chunk_runs (document_id, revision, first_id, last_id, chunks, words)
    SELECT document_id, revision, min(id), max(id), count(*), sum(term_count)
    FROM chunks GROUP BY document_id, revision""",
    f"CREATE TRIGGER chunk_runs_added AFTER INSERT ON chunks BEGIN{_ADD}\nEND",
    f"CREATE TRIGGER chunk_runs_removed AFTER DELETE ON chunks BEGIN{_REMOVE}\nEND",
    # kb never moves a chunk or rewrites its words after 0004's backfill; kept right
    # all the same (a run that lost one from its middle is no longer consecutive).
    "CREATE TRIGGER chunk_runs_changed AFTER UPDATE OF document_id, revision, term_count "
    f"ON chunks BEGIN{_REMOVE}{_ADD}\nEND",
]
SQLITE_DOWN = [
    "DROP TRIGGER chunk_runs_changed",
    "DROP TRIGGER chunk_runs_removed",
    "DROP TRIGGER chunk_runs_added",
    "DROP TABLE chunk_runs",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in SQLITE:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in SQLITE_DOWN:
            op.execute(statement)
