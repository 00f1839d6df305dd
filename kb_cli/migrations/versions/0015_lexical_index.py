"""Lexical search on PostgreSQL from its index, not from every chunk it matches.

- `chunks.words`: each chunk's words as a stored tsvector (generated from `terms`, the
  expression ix_chunks_terms was on); ix_chunks_terms is now on the column, so ranking
  reads the words from the row instead of parsing the text of every chunk it looks at.
- `chunk_totals`: how many chunks and words each base holds (all revisions, as BM25
  counts them), kept in step with `chunks` by triggers in the writing transaction, so
  a search reads a few rows instead of counting the corpus, and sums them. Rows per
  (base, stripe): a transaction adds to (or takes from) the stripe of its own
  connection, so that workers writing one base seldom wait for the same row and never
  for each other's in turn (a stripe of the document's id had every batch of small
  documents touch most stripes, and eight workers deadlock and wait on each other).
  One stripe's row may fall below zero where another connection deleted what this
  one added: only the sum over a base's stripes means anything.

Nothing on SQLite, whose FTS5 index keeps its own statistics.

Revision ID: 0015_lexical_index
Revises: 0014_pending_objects
"""

from alembic import op

revision = "0015_lexical_index"
down_revision = "0014_pending_objects"

WORDS = "to_tsvector('kb_english', regexp_replace(terms, '[^[:alnum:]]+', ' ', 'g'))"
STRIPES = 16
STRIPE = f"(pg_backend_pid() & {STRIPES - 1})"


def _add_to_totals(rows: str) -> str:
    """Add `rows` (base, stripe, chunks, words) to chunk_totals."""
    return f"""
    INSERT INTO chunk_totals AS t (base, stripe, chunks, words)
    {rows}
    ON CONFLICT (base, stripe) DO UPDATE
      SET chunks = t.chunks + excluded.chunks, words = t.words + excluded.words;"""


_ADDED = _add_to_totals(
    f"""SELECT d.base, {STRIPE}, count(*), sum(n.term_count)
    FROM added AS n JOIN documents AS d ON d.id = n.document_id
    GROUP BY 1 ORDER BY 1"""
)
_REMOVED = _add_to_totals(
    f"""SELECT d.base, {STRIPE}, -count(*), -sum(r.term_count)
    FROM removed AS r JOIN documents AS d ON d.id = r.document_id
    GROUP BY 1 ORDER BY 1"""
)
_COUNT = f"""
CREATE FUNCTION kb_chunk_totals() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN{_ADDED}
  ELSE{_REMOVED}
  END IF;
  RETURN NULL;
END $$"""
# A document moved to another base takes its chunks' counts with it.
_MOVED = _add_to_totals(
    f"""VALUES (OLD.base, {STRIPE}, -moved_chunks, -moved_words),
           (NEW.base, {STRIPE}, moved_chunks, moved_words)"""
)
_MOVE = f"""
CREATE FUNCTION kb_chunk_totals_moved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  moved_chunks bigint;
  moved_words bigint;
BEGIN
  SELECT count(*), coalesce(sum(term_count), 0) INTO moved_chunks, moved_words
  FROM chunks WHERE document_id = NEW.id;
  IF moved_chunks > 0 THEN{_MOVED}
  END IF;
  RETURN NULL;
END $$"""

POSTGRESQL = [
    "DROP INDEX ix_chunks_terms",
    f"ALTER TABLE chunks ADD COLUMN words tsvector GENERATED ALWAYS AS ({WORDS}) STORED",
    "CREATE INDEX ix_chunks_terms ON chunks USING gin (words)",
    """CREATE TABLE chunk_totals (
        base varchar(100) NOT NULL, stripe integer NOT NULL,
        chunks bigint NOT NULL, words bigint NOT NULL, PRIMARY KEY (base, stripe))""",
    """INSERT INTO chunk_totals (base, stripe, chunks, words)
        SELECT d.base, 0, count(*), sum(c.term_count)
        FROM chunks AS c JOIN documents AS d ON d.id = c.document_id GROUP BY 1""",
    _COUNT,
    _MOVE,
    """CREATE TRIGGER kb_chunks_added AFTER INSERT ON chunks REFERENCING NEW TABLE AS added
        FOR EACH STATEMENT EXECUTE FUNCTION kb_chunk_totals()""",
    """CREATE TRIGGER kb_chunks_removed AFTER DELETE ON chunks
        REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION kb_chunk_totals()""",
    """CREATE TRIGGER kb_documents_moved AFTER UPDATE OF base ON documents FOR EACH ROW
        WHEN (OLD.base IS DISTINCT FROM NEW.base) EXECUTE FUNCTION kb_chunk_totals_moved()""",
]
POSTGRESQL_DOWN = [
    "DROP TRIGGER kb_documents_moved ON documents",
    "DROP TRIGGER kb_chunks_removed ON chunks",
    "DROP TRIGGER kb_chunks_added ON chunks",
    "DROP FUNCTION kb_chunk_totals_moved()",
    "DROP FUNCTION kb_chunk_totals()",
    "DROP TABLE chunk_totals",
    "DROP INDEX ix_chunks_terms",
    "ALTER TABLE chunks DROP COLUMN words",
    f"CREATE INDEX ix_chunks_terms ON chunks USING gin ({WORDS})",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in POSTGRESQL:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in POSTGRESQL_DOWN:
            op.execute(statement)
