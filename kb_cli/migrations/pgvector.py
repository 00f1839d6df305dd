"""pgvector on PostgreSQL: what lets search ask an HNSW index for the nearest chunks
instead of reading every vector (kb_cli/vectors/pgvector.py).

Made where the server offers the `vector` extension (pgvector 0.8 or later), by
migration 0013 and again by every `kb db upgrade`, so that installing pgvector later
and running `kb db upgrade` enables it; without the extension nothing is made and
search keeps its exact scan. What is made is derived from `chunks.embedding` (the
source of truth, float16 on both engines):

- `chunks.embedding_hv`, the same float16 vector as a `halfvec` of any dimension,
  filled from the blobs here and written beside them by kb's chunk writes
  (kb_cli/embeddings/halfvec.py, in binary);
- a trigger that derives it in the database from a write that did not give it (a
  process started before the column existed), so it can never lag its blob;
- `distinct_vectors`: each distinct vector once per model (its key: the MD5 of the
  vector's bytes; the chunks find theirs by an index on the same expression), kept in
  step with the chunks by statement triggers in the writing transaction: a write adds
  the keys it brings, a delete or a changed vector drops the keys no chunk has any more
  (two writers of the same new keys in opposite orders, duplicate files processed side
  by side, can deadlock: the database's `busy`, which workers retry);
- one partial HNSW index (inner product: the vectors are unit length) per embedding
  model and dimension on `distinct_vectors`: `(hv::halfvec(DIM))` WHERE the model and
  dimension are that one's. A model without one is still searched exactly, by a scan.

Why distinct vectors: HNSW is not built for many equal vectors (pgvector #837, hnswlib
#341): a module kept in several versions gives hundreds of chunks one vector, their
graph nodes link mostly to each other, and the search's recall falls whatever
`ef_search` is. Indexing each vector once took recall@10 from 0.92 to 0.99 at 80,832
chunks of which only 2.3% repeat another's vector (`ef_search` 400; benchmarks/README.md).
"""

from __future__ import annotations

import hashlib
from typing import Any

COLUMN = "embedding_hv"
# The built-in model (kb_cli/embeddings/local.py) gets its index before its first
# chunk, so that a new knowledge base is indexed from its first document.
BUILT_IN_MODEL = ("wordllama-l2_supercat-256", 256)
FILL_BATCH = 2_000
# Building an HNSW graph in memory is several times faster than on disk.
BUILD_MEMORY = "512MB"
MIN_VERSION = (0, 8)  # iterative index scans (filtered queries still return k hits)

_HALFVEC_FROM_BLOB = r"""
CREATE OR REPLACE FUNCTION kb_halfvec(blob bytea) RETURNS halfvec
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT ARRAY(
  SELECT (1 - 2 * (b1 >> 7))
         * (CASE WHEN b1 & 124 = 0 THEN 0 ELSE 1024 END + (((b1 & 3) << 8) | b0))
         * power(2::float8, greatest((b1 >> 2) & 31, 1) - 25)
  FROM (SELECT get_byte(blob, 2 * i) AS b0, get_byte(blob, 2 * i + 1) AS b1
        FROM generate_series(0, length(blob) / 2 - 1) AS i) AS halves)::float8[]::halfvec
$$"""
# Slow (about half a millisecond a vector), so kb's own writes give the halfvec.
_DERIVE_ON_WRITE = """
CREATE OR REPLACE FUNCTION kb_chunks_halfvec() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.embedding IS NULL THEN
    NEW.embedding_hv := NULL;
  ELSIF NEW.embedding_hv IS NULL OR (TG_OP = 'UPDATE'
      AND NEW.embedding IS DISTINCT FROM OLD.embedding
      AND NEW.embedding_hv IS NOT DISTINCT FROM OLD.embedding_hv) THEN
    NEW.embedding_hv := kb_halfvec(NEW.embedding);
  END IF;
  RETURN NEW;
END $$"""
_TRIGGER = """CREATE TRIGGER kb_chunks_halfvec BEFORE INSERT OR UPDATE OF embedding
    ON chunks FOR EACH ROW EXECUTE FUNCTION kb_chunks_halfvec()"""

DISTINCT = "distinct_vectors"


def vector_key(alias: str = "") -> str:
    """The key of a chunk's vector: the table's and the chunks' index's expression."""
    return f"decode(md5({alias}embedding), 'hex')"


_DISTINCT_TABLE = f"""CREATE TABLE {DISTINCT} (
    model varchar(200) NOT NULL, dim integer NOT NULL, key bytea NOT NULL,
    hv halfvec NOT NULL, PRIMARY KEY (model, key))"""
_CHUNKS_BY_KEY = (
    f"CREATE INDEX ix_chunks_vector_key ON chunks (embedding_model, ({vector_key()}))"
    " WHERE embedding IS NOT NULL"
)


def _keys_of(rows: str) -> str:
    """The distinct (model, dim, key, halfvec) of `rows` that have a vector, in key
    order: two writers of the same new keys then wait on each other in one order."""
    return f"""SELECT DISTINCT ON (embedding_model, {vector_key()})
        embedding_model, embedding_dim, {vector_key()}, embedding_hv FROM {rows}
      WHERE embedding IS NOT NULL AND embedding_hv IS NOT NULL ORDER BY 1, 3"""


# One advisory lock of the database guards the keys: a transaction adding keys holds it
# shared, one dropping keys holds it alone. An advisory lock, not a lock of the table:
# every table lock that waits for writers would also cancel autovacuum on it.
KEYS_LOCK = 0x6B62_6476  # "kbdv"


def _insert_keys(rows: str) -> str:
    return f"""INSERT INTO {DISTINCT} (model, dim, key, hv) {_keys_of(rows)}
    ON CONFLICT DO NOTHING"""


def _add_keys(rows: str) -> str:
    return f"""PERFORM pg_advisory_xact_lock_shared({KEYS_LOCK});
    {_insert_keys(rows)};"""


def _dropping(rows: str) -> str:
    """Whether this statement's trigger drops keys: `rows` had vectors, and the
    transaction reads committed rows statement by statement (under REPEATABLE READ the
    DELETE's snapshot would predate the wait, and a key a chunk committed meanwhile has
    could go; there the keys are left, unused rows a search passes over)."""
    return f"""current_setting('transaction_isolation') = 'read committed'
    AND EXISTS (SELECT 1 FROM {rows} WHERE embedding IS NOT NULL)"""


def _drop_keys(rows: str) -> str:
    """Drop the keys of `rows` that no chunk has any more. The exclusive lock waits for
    every transaction that is adding keys and holds off new ones until this one commits;
    the DELETE, a later statement, then sees every chunk they wrote, so no key goes that
    a chunk committed meanwhile has (a deadlock this rarely makes is the database's
    `busy`, which kb retries). The trigger's name sorts before kb_chunks_added/_removed,
    so writers and deleters take this lock before their chunk_totals row."""
    return f"""IF {_dropping(rows)} THEN
    PERFORM pg_advisory_xact_lock({KEYS_LOCK});
    DELETE FROM {DISTINCT} AS v
      USING (SELECT DISTINCT embedding_model AS model, {vector_key()} AS key FROM {rows}
             WHERE embedding IS NOT NULL) AS r
      WHERE v.model = r.model AND v.key = r.key AND NOT EXISTS (
        SELECT 1 FROM chunks AS c WHERE c.embedding IS NOT NULL
          AND c.embedding_model = v.model AND {vector_key("c.")} = v.key);
  END IF;"""


def _changed(rows: str, other: str) -> str:
    """The rows of one transition table whose vector the UPDATE changed (an UPDATE of
    any other column fires the trigger too)."""
    return f"""(SELECT x.* FROM {rows} AS x JOIN {other} AS y ON y.id = x.id
      WHERE x.embedding IS DISTINCT FROM y.embedding
         OR x.embedding_model IS DISTINCT FROM y.embedding_model) AS changed"""


# A changed vector both adds and drops keys: the exclusive lock is taken first, as a
# shared one held while waiting for the exclusive would deadlock two such UPDATEs.
_KEEP_DISTINCT = f"""
CREATE OR REPLACE FUNCTION kb_distinct_vectors() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    {_add_keys("added")}
  ELSIF TG_OP = 'DELETE' THEN
    {_drop_keys("removed")}
  ELSE
    IF {_dropping(_changed("removed", "added"))} THEN
      PERFORM pg_advisory_xact_lock({KEYS_LOCK});
    END IF;
    {_add_keys(_changed("added", "removed"))}
    {_drop_keys(_changed("removed", "added"))}
  END IF;
  RETURN NULL;
END $$"""
_DISTINCT_TRIGGERS = [
    """CREATE TRIGGER kb_chunks_0_vectors_added AFTER INSERT ON chunks
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION kb_distinct_vectors()""",
    """CREATE TRIGGER kb_chunks_0_vectors_removed AFTER DELETE ON chunks
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION kb_distinct_vectors()""",
    """CREATE TRIGGER kb_chunks_0_vectors_changed AFTER UPDATE ON chunks
    REFERENCING OLD TABLE AS removed NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION kb_distinct_vectors()""",
]


def driver(conn: Any) -> Any:
    """The psycopg connection of a SQLAlchemy connection or of a kb Connection."""
    if hasattr(conn, "raw"):
        return conn.raw
    return conn.connection.driver_connection


def available(raw: Any) -> bool:
    """The server offers pgvector 0.8 or later (installed here or installable)."""
    row = raw.execute(
        "SELECT coalesce(installed_version, default_version) FROM pg_available_extensions"
        " WHERE name = 'vector'"
    ).fetchone()
    return row is not None and _version(row[0]) >= MIN_VERSION


def enabled(raw: Any) -> bool:
    """The halfvec column exists (search and the chunk writes use it)."""
    sql = (
        "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('chunks')"
        " AND attname = %s AND NOT attisdropped"
    )
    return raw.execute(sql, (COLUMN,)).fetchone() is not None


def enable(raw: Any) -> bool:
    """Make what the index needs, in the caller's transaction, when the server offers
    pgvector (creating the extension needs the right to: a failure to is no error,
    `kb doctor` says what to ask for); index every model already in use. True when
    enabled."""
    if not enabled(raw):
        if not available(raw) or not _create_extension(raw):
            return False
        raw.execute(f"ALTER TABLE chunks ADD COLUMN {COLUMN} halfvec")
        for statement in (_HALFVEC_FROM_BLOB, _DERIVE_ON_WRITE, _TRIGGER):
            raw.execute(statement)
        fill(raw)
    if not keeps_distinct(raw):
        keep_distinct(raw)
    for model, dim in sorted(set(models_in_use(raw)) | {BUILT_IN_MODEL}):
        ensure_index(raw, model, dim)
    return True


def keeps_distinct(raw: Any) -> bool:
    return raw.execute("SELECT to_regclass(%s)", (DISTINCT,)).fetchone()[0] is not None


def keep_distinct(raw: Any) -> None:
    """Make `distinct_vectors` and what keeps it, fill it from the chunks, and drop the
    HNSW indexes on the chunks themselves (before migration 0020) that it replaces."""
    for statement in (_DISTINCT_TABLE, _CHUNKS_BY_KEY, _KEEP_DISTINCT, *_DISTINCT_TRIGGERS):
        raw.execute(statement)
    raw.execute(_insert_keys("chunks"))
    before = "SELECT indexname FROM pg_indexes WHERE tablename = 'chunks' AND indexname LIKE %s"
    for (name,) in raw.execute(before, ("ix\\_chunks\\_hv\\_%",)).fetchall():
        raw.execute(f'DROP INDEX "{name}"')


def drop_distinct(raw: Any) -> None:
    """Undo `keep_distinct` (its indexes go with the table)."""
    for trigger in ("added", "removed", "changed"):
        raw.execute(f"DROP TRIGGER IF EXISTS kb_chunks_0_vectors_{trigger} ON chunks")
    raw.execute("DROP FUNCTION IF EXISTS kb_distinct_vectors()")
    raw.execute("DROP INDEX IF EXISTS ix_chunks_vector_key")
    raw.execute(f"DROP TABLE IF EXISTS {DISTINCT}")


def disable(raw: Any) -> None:
    """Undo `enable` (the extension stays: other schemas may use it)."""
    drop_distinct(raw)
    raw.execute("DROP TRIGGER IF EXISTS kb_chunks_halfvec ON chunks")
    raw.execute("DROP FUNCTION IF EXISTS kb_chunks_halfvec()")
    raw.execute(f"ALTER TABLE chunks DROP COLUMN IF EXISTS {COLUMN}")  # and its indexes
    raw.execute("DROP FUNCTION IF EXISTS kb_halfvec(bytea)")


def _create_extension(raw: Any) -> bool:
    import psycopg

    if raw.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
        return True
    raw.execute("SAVEPOINT kb_vector")
    try:
        raw.execute("CREATE EXTENSION vector")
    except psycopg.Error:  # not allowed to (an administrator's privilege)
        raw.execute("ROLLBACK TO SAVEPOINT kb_vector")
        return False
    raw.execute("RELEASE SAVEPOINT kb_vector")
    return True


def fill(raw: Any) -> int:
    """Derive the halfvec of every embedded chunk that lacks one, in batches of ids."""
    from kb_cli.embeddings.halfvec import HalfVec, register

    register(raw)
    done, after = 0, 0
    select = (
        f"SELECT id, embedding FROM chunks WHERE {COLUMN} IS NULL AND embedding IS NOT NULL"
        " AND id > %s ORDER BY id LIMIT %s"
    )
    update = f"UPDATE chunks SET {COLUMN} = %s WHERE id = %s"
    while rows := raw.execute(select, (after, FILL_BATCH)).fetchall():
        with raw.cursor() as cursor:
            cursor.executemany(update, [(HalfVec(bytes(row[1])), row[0]) for row in rows])
        done += len(rows)
        after = rows[-1][0]
    return done


def models_in_use(raw: Any) -> list[tuple[str, int]]:
    sql = (
        "SELECT DISTINCT embedding_model, embedding_dim FROM chunks"
        " WHERE embedding_model IS NOT NULL AND embedding_dim IS NOT NULL"
    )
    return [(row[0], row[1]) for row in raw.execute(sql).fetchall()]


def index_name(model: str, dim: int) -> str:
    return f"ix_distinct_vectors_{dim}_{hashlib.sha256(model.encode()).hexdigest()[:10]}"


def model_condition(model: str, dim: int, alias: str = "") -> str:
    """The partial index's predicate (on `distinct_vectors`); a query uses the index only
    when it names the model and dimension the same way (as literals: a parameter hides
    them from the planner of a generic plan)."""
    literal = "'" + model.replace("'", "''") + "'"
    return f"{alias}model = {literal} AND {alias}dim = {int(dim)}"


def indexed_expression(dim: int, alias: str = "") -> str:
    return f"({alias}hv::halfvec({int(dim)}))"


def ensure_index(raw: Any, model: str, dim: int) -> bool:
    """The HNSW index of `model`'s distinct vectors of `dim` dimensions; True when it was
    made now. It takes a write lock on the table for as long as it builds."""
    name = index_name(model, dim)
    if raw.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is not None:
        return False
    raw.execute(f"SET LOCAL maintenance_work_mem = '{BUILD_MEMORY}'")
    raw.execute(
        f"CREATE INDEX IF NOT EXISTS {name} ON {DISTINCT} USING hnsw"
        f" ({indexed_expression(dim)} halfvec_ip_ops) WHERE {model_condition(model, dim)}"
    )
    return True


def missing_indexes(raw: Any) -> list[tuple[str, int]]:
    """Models in use whose vectors have no index (searched by a scan)."""
    return [
        (model, dim)
        for model, dim in models_in_use(raw)
        if raw.execute("SELECT to_regclass(%s)", (index_name(model, dim),)).fetchone()[0] is None
    ]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())
