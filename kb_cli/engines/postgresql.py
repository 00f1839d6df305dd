"""PostgreSQL: the engine for teams whose workers run on many hosts.

Claiming uses FOR UPDATE SKIP LOCKED, so workers never queue behind each other's row
locks. A lock held past the busy timeout (lock_timeout) is `busy`, as on SQLite.
Lexical search: a GIN full-text index of the chunks' stored words, ranked by BM25
computed in SQL the way SQLite's FTS5 does, so both engines agree on the same data;
rarest words first, from the index, with per-base counts kept by triggers (migration
0015), so a question does not read every chunk it matches.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import threading
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kb_cli.engines import WATCH_SLICE_SECONDS, candidate_filters
from kb_cli.errors import UsageError
from kb_cli.ranking import BM25_B, BM25_K1, Scored, idf

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy import Connection as SAConnection
    from sqlalchemy import Engine

try:
    from psycopg import Error
except ModuleNotFoundError:  # only without the `postgres` extra: connect() explains

    class Error(Exception):  # type: ignore[no-redef]
        pass


LOCK_ROW = " FOR UPDATE"
SKIP_LOCKED = " FOR UPDATE SKIP LOCKED"
# to_regclass follows the search_path, as the queries that use the table do.
COUNT_TABLES = (
    "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()"
)
# The expression of the unique index ux_documents_path (migration 0012).
META_PATH = "({column} ->> 'path')"
VERSION_TABLE_EXISTS = "SELECT to_regclass('kb_schema_version') IS NOT NULL"
_MIGRATION_LOCK = 4_710_001  # any constant: one migrating process at a time


def conninfo(url: str) -> str:
    """libpq's URI from SQLAlchemy's `postgresql+psycopg://...` (the form kb documents)."""
    scheme, separator, rest = url.partition("://")
    if not separator or scheme not in ("postgresql", "postgresql+psycopg"):
        raise UsageError("the database URL is not valid: use postgresql+psycopg://...")
    return f"postgresql://{rest}"


def connect(url: str, busy_timeout_seconds: float) -> psycopg.Connection:
    try:
        import psycopg
        from psycopg.rows import namedtuple_row
    except ModuleNotFoundError:
        raise UsageError(
            "the PostgreSQL driver is not installed: install kb-cli[postgres]"
        ) from None
    timeout_ms = max(1, int(busy_timeout_seconds * 1000))
    try:
        return psycopg.connect(
            conninfo(url),
            autocommit=True,  # kb says BEGIN itself, as on SQLite
            row_factory=namedtuple_row,
            options=f"-c lock_timeout={timeout_ms}",
            connect_timeout=10,
        )
    except psycopg.ProgrammingError:
        raise UsageError("the database URL is not valid") from None


def set_lock_wait(raw: psycopg.Connection, seconds: float) -> None:
    raw.execute(f"SET lock_timeout = {max(1, int(seconds * 1000))}")


def begin(raw: psycopg.Connection, write: bool) -> None:
    raw.execute("BEGIN")


def commit(raw: psycopg.Connection) -> None:
    raw.execute("COMMIT")


def rollback(raw: psycopg.Connection) -> None:
    if not raw.closed:
        raw.execute("ROLLBACK")


def shrink_log(raw: psycopg.Connection) -> None:
    """Nothing to give back: the server manages its own log."""


def notify(raw: psycopg.Connection, channel: str) -> None:
    """Delivered at commit, and not at all on a rollback; one per channel per
    transaction however often it is said."""
    raw.execute(f"NOTIFY {channel}")


def watch(url: str, busy_timeout_seconds: float, channel: str) -> Listener:
    return Listener(url, channel)


# The listener's connection is checked this often while nothing arrives: a connection
# dropped without a word (a pooler, a firewall) would otherwise listen to nothing.
PING_SECONDS = 30.0
RECONNECT_CAP_SECONDS = 5.0


class Listener:
    """LISTEN on a dedicated connection, in a thread of its own; a notification only
    rings a bell, which the waiter's `wait` answers. A lost connection is reconnected
    with backoff, and the bell rings on every (re)connection: whatever was committed
    while nobody listened is looked at then."""

    def __init__(self, url: str, channel: str) -> None:
        self.url = url
        self.channel = channel
        self.bell = threading.Event()
        self.connected = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="kb-listen", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        import psycopg

        delay = 0.1
        while not self._closed.is_set():
            try:
                with psycopg.connect(
                    conninfo(self.url), autocommit=True, connect_timeout=10
                ) as raw:
                    raw.execute(f"LISTEN {self.channel}")
                    self.connected.set()
                    self.bell.set()
                    delay = 0.1
                    self._relay_notifications(raw)
            except psycopg.Error:
                self.connected.clear()
                self.bell.set()  # the waiter reads once; its fallback poll covers the rest
                self._closed.wait(delay)
                delay = min(delay * 2, RECONNECT_CAP_SECONDS)

    def _relay_notifications(self, raw: psycopg.Connection) -> None:
        last_ping = time.monotonic()
        while not self._closed.is_set():
            for _ in raw.notifies(timeout=1.0):
                self.bell.set()
            if time.monotonic() - last_ping >= PING_SECONDS:
                raw.execute("SELECT 1")
                last_ping = time.monotonic()

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        deadline = time.monotonic() + seconds
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self.bell.wait(min(remaining, WATCH_SLICE_SECONDS)):
                self.bell.clear()  # before the waiter reads: a later ring is not lost
                return True
        return False

    def close(self) -> None:
        """The thread ends within a second; as a daemon it never holds the process."""
        self._closed.set()
        with contextlib.suppress(RuntimeError):
            self._thread.join(timeout=2.0)


def is_clean(raw: psycopg.Connection) -> bool:
    """Fit for the next transaction: connected, and no transaction left open."""
    from psycopg.pq import TransactionStatus

    return not raw.broken and raw.info.transaction_status == TransactionStatus.IDLE


def execute(raw: psycopg.Connection, sql: str, params):
    return raw.execute(driver_sql(sql), params)


def executemany(raw: psycopg.Connection, sql: str, rows):
    cursor = raw.cursor()
    cursor.executemany(driver_sql(sql), rows)
    return cursor


_LITERAL = re.compile(r"('(?:[^']|'')*')")
_PARAMETER = re.compile(r"(?<![:\w]):(\w+)")


@functools.lru_cache(maxsize=1024)
def driver_sql(sql: str) -> str:
    """`:name` parameters as psycopg's `%(name)s`; string literals and casts left alone.

    Made for kb's own statements, which have no comments, quoted identifiers, dollar
    quotes or E'' strings: in those, a `:word` would be taken for a parameter."""
    parts = _LITERAL.split(sql.replace("%", "%%"))
    return "".join(
        part if index % 2 else _PARAMETER.sub(r"%(\1)s", part) for index, part in enumerate(parts)
    )


def is_lock_error(error: BaseException) -> bool:
    state = getattr(error, "sqlstate", None)
    return state in ("55P03", "40P01") or "lock timeout" in str(error).lower()


def is_unique_violation(error: BaseException) -> bool:
    return getattr(error, "sqlstate", None) == "23505"


def is_connection_error(error: BaseException) -> bool:
    """The connection is gone (not a query that failed on a live one): the client lost
    it (no SQLSTATE), or the server says so (class 08, or an admin shutdown 57P0x)."""
    from psycopg import OperationalError

    state = getattr(error, "sqlstate", None)
    if state is None:
        return isinstance(error, OperationalError)
    return state.startswith("08") or state in ("57P01", "57P02", "57P03")


def problem_message(error: BaseException) -> str | None:
    return None  # a damaged PostgreSQL database is the server's to report


def storage_message(error: BaseException) -> str | None:
    """kb's message for a server that cannot write now (disk full, read-only)."""
    state = getattr(error, "sqlstate", None) or ""
    if state == "53100":
        return "the database server has no space left on device: free some space, then run again"
    if state == "25006":
        return "the database server is read-only (a standby?): point kb at the primary"
    if state.startswith("53"):
        return "the database server is out of resources (memory, disk, connections)"
    return None


def connect_error_message(error: BaseException, url: str) -> str:
    """The server's own reason when it gave one (no such database, bad password)."""
    reason = re.search(r"FATAL:\s+(.+)", str(error))
    if reason:
        return f"the database server refused the connection: {reason.group(1).strip()[:200]}"
    return f"cannot reach the database server ({type(error).__name__})"


# --- schema changes (Alembic, through SQLAlchemy: imported only to migrate) ------------


def sqlalchemy_engine(url: str, busy_timeout_seconds: float) -> Engine:
    from sqlalchemy import create_engine, pool

    timeout_ms = max(1, int(busy_timeout_seconds * 1000))
    return create_engine(
        "postgresql+psycopg://" + url.partition("://")[2],
        poolclass=pool.NullPool,
        connect_args={"options": f"-c lock_timeout={timeout_ms}", "connect_timeout": 10},
    )


def lock_for_migration(conn: SAConnection) -> None:
    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")


def meta_condition(
    column: str, name: str, key: str, value: str, prefix: bool
) -> tuple[str, dict[str, Any]]:
    """Equality is jsonb containment, which the GIN index ix_documents_meta (migration
    0012) answers; a prefix reads the key's text."""
    if prefix:
        params = {f"{name}_key": key, f"{name}_value": value}
        return f"starts_with({column} ->> :{name}_key, :{name}_value)", params
    return f"{column} @> CAST(:{name} AS jsonb)", {name: json.dumps({key: value})}


_HALFVEC_COLUMN = (
    "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('chunks')"
    " AND attname = 'embedding_hv' AND NOT attisdropped"
)
_indexes_vectors: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def indexes_vectors(raw: psycopg.Connection) -> bool:
    """Looked up once per connection (kb keeps its connections), in the caller's
    transaction; such a connection can then send HalfVec parameters. A connection
    opened before `kb db upgrade` made the column writes without it: the database's
    trigger derives it then."""
    ready = _indexes_vectors.get(raw)
    if ready is None:
        ready = raw.execute(_HALFVEC_COLUMN).fetchone() is not None
        if ready:
            from kb_cli.embeddings.halfvec import register

            register(raw)
        _indexes_vectors[raw] = ready
    return ready


def caseless_like(column: str, parameter: str) -> str:
    """PostgreSQL's LIKE is case-sensitive, and its default escape is the backslash."""
    return f"{column} ILIKE :{parameter}"


# Words as SQLite's FTS5 index sees them: punctuation splits words (example.com is
# "example" and "com"), accents are dropped, English is stemmed, no stopwords. Each
# chunk's are stored in `chunks.words` (migration 0015), under the GIN index
# ix_chunks_terms.
WORDS = "to_tsvector('kb_english', regexp_replace({text}, '[^[:alnum:]]+', ' ', 'g'))"
_IN_BASE = "JOIN documents AS d ON d.id = c.document_id"
_PUBLISHED = _IN_BASE + " AND c.revision = d.published_revision"
# Candidates: at most this many chunks are scored from the rarest words' postings
# before the words left must either be unable to change the top (exact) or rank only
# their first chunks (see lexical_ranking).
CANDIDATES = 1_000
# A word's chunks are counted up to this many; past it, its frequency is the share of
# chunks ANALYZE found it in (pg_stats) times the chunk count when the scope is every
# base, and this + 1 otherwise (or when ANALYZE does not list it): a scoped score never
# depends on chunks outside the scope (docs/access.md).
COUNTED = 5_000


def lexical_ranking(
    conn, terms: list[str], phrases: list[str], limit: int, scope: str, scope_params: dict[str, Any]
) -> list[Scored]:
    """(chunk id, BM25 score) of published chunks in `scope` matching any term, best
    first; a chunk must contain every phrase verbatim (ILIKE).

    BM25 as SQLite's FTS5 computes it (ranking.bm25): term frequency from the lexeme's
    positions, length in words; the chunk count, mean length and document frequencies
    count every chunk (drafts and earlier revisions too) of the bases in `scope`, and
    nothing outside it.

    Driven by the index, rarest word first (MaxScore): each word's chunks are scored on
    every word of the question, until no chunk holding only the words left could enter
    the top `limit` (its best possible score is below the `limit`th found): then the
    ranking is exact. It is always exact in a scope of at most CANDIDATES chunks. When
    the words left hold more chunks than the CANDIDATES budget still allows, only the
    first CANDIDATES chunks holding all of them are scored, not every one; and a word
    in more than COUNTED chunks has an estimated frequency (see COUNTED)."""
    lexemes = conn.execute(
        "SELECT DISTINCT lexeme FROM unnest(tsvector_to_array("
        + WORDS.format(text=":query")
        + ")) AS q(lexeme) ORDER BY lexeme",
        {"query": " ".join(terms)},
    ).scalars()
    if not lexemes:
        return []
    chunks, mean_length = _corpus(conn, scope, scope_params)
    frequency = _frequencies(conn, lexemes, chunks, scope, scope_params)
    weights = {lexeme: idf(chunks, df) for lexeme, df in frequency.items()}
    ranking = Ranking(conn, weights, mean_length, phrases, limit, scope, scope_params)
    if chunks <= CANDIDATES:
        return ranking.of(lexemes, " | ")
    found: list[Scored] = []
    budget = CANDIDATES
    rarest_first = sorted(lexemes, key=lambda lexeme: (frequency[lexeme], lexeme))
    for done, lexeme in enumerate(rarest_first):
        left, scored = rarest_first[done:], rarest_first[:done]
        best_of_the_rest = sum(weights[word] for word in left) * (BM25_K1 + 1)
        if len(found) >= limit and found[limit - 1][1] >= best_of_the_rest:
            break
        if frequency[lexeme] > budget:
            found += ranking.of(left, " & ", scored, CANDIDATES)
            if len(left) > 1:  # and when few hold all of them, some of the next word's
                found += ranking.of([lexeme], " | ", scored, CANDIDATES)
            found = _best(list(set(found)), limit)
            break
        found = _best(found + ranking.of([lexeme], " | ", scored), limit)
        budget -= int(frequency[lexeme])
    return found


def _best(found: list[Scored], limit: int) -> list[Scored]:
    return sorted(found, key=lambda hit: (-hit[1], hit[0]))[:limit]


def _corpus(conn, scope: str, scope_params: dict[str, Any]) -> tuple[int, float]:
    """(chunks, mean length in words) of the bases in `scope`: the per-base counts the
    database keeps in step (chunk_totals), unless metadata filters (`--where`, whose
    parameters scope_filter names _where*) narrow it to some documents."""
    if any(name.startswith("_where") for name in scope_params):
        sql = (
            f"SELECT count(*), coalesce(sum(c.term_count), 0) AS words FROM chunks AS c {_IN_BASE}"
        )
    else:
        sql = (
            "SELECT coalesce(sum(d.chunks), 0) AS chunks, coalesce(sum(d.words), 0) AS words"
            " FROM chunk_totals AS d"
        )
    chunks, words = conn.execute(sql + (f" WHERE {scope}" if scope else ""), scope_params).first()
    chunks = int(chunks)
    return chunks, max(float(words) / chunks, 1.0) if chunks else 1.0


def _frequencies(
    conn, lexemes: list[str], chunks: int, scope: str, scope_params: dict[str, Any]
) -> dict[str, float]:
    """Each lexeme's document frequency in `scope`: counted up to COUNTED + 1, or, for
    a word ANALYZE found in more, estimated from its share."""
    share = {}
    if chunks > COUNTED and not scope:  # ANALYZE's shares count every base's chunks
        share = dict(conn.execute(_SHARES, {"lexemes": lexemes}).all())
    estimated = {lexeme: share[lexeme] * chunks for lexeme in lexemes if lexeme in share}
    counted = [lexeme for lexeme in lexemes if estimated.get(lexeme, 0) <= COUNTED]
    frequency: dict[str, float] = {lexeme: df for lexeme, df in estimated.items()}
    if counted:
        counted_in = f"chunks AS c {_IN_BASE}" if scope else "chunks AS c"
        in_scope = f" AND {scope}" if scope else ""
        rows = conn.execute(
            f"""SELECT l.lexeme, (
                    SELECT count(*) FROM (
                        SELECT 1 FROM {counted_in}
                        WHERE c.words @@ to_tsquery('simple', quote_literal(l.lexeme)){in_scope}
                        LIMIT :cap) AS found)
                FROM unnest(CAST(:lexemes AS text[])) AS l(lexeme)""",
            {"lexemes": counted, "cap": COUNTED + 1, **scope_params},
        )
        for lexeme, df in rows:
            frequency[lexeme] = max(df, estimated.get(lexeme, 0))
    return frequency


# The share of chunks holding each lexeme, in ANALYZE's sample of the table.
_SHARES = """
    SELECT e.lexeme, e.share
    FROM pg_stats AS s,
         unnest(CAST(CAST(s.most_common_elems AS text) AS text[]),
                s.most_common_elem_freqs) AS e(lexeme, share)
    WHERE s.schemaname = current_schema() AND s.tablename = 'chunks' AND s.attname = 'words'
      AND e.lexeme = ANY(CAST(:lexemes AS text[]))
"""


class Ranking:
    """BM25 of the published chunks in scope that match a query of some lexemes, each
    scored on every lexeme of the question."""

    def __init__(
        self,
        conn,
        idf: dict[str, float],
        mean_length: float,
        phrases: list[str],
        limit: int,
        scope: str,
        scope_params: dict[str, Any],
    ) -> None:
        self.conn, self.idf, self.mean_length, self.limit = conn, idf, mean_length, limit
        self.params: dict[str, object] = dict(scope_params)
        self.filters = candidate_filters(phrases, scope, self.params, caseless_like)

    def of(
        self, lexemes: list[str], operator: str, scored: Sequence[str] = (), cap: int | None = None
    ) -> list[Scored]:
        """The top of the chunks holding any (" | ") or every (" & ") lexeme and none of
        the `scored` ones (already ranked), the first `cap` of them if capped."""
        capped = "" if cap is None else f" LIMIT {int(cap)}"
        unscored = ""
        if scored:
            unscored = """ && !! (SELECT to_tsquery('simple', string_agg(quote_literal(s), ' | '))
                                 FROM unnest(CAST(:scored AS text[])) AS s)"""
        sql = f"""
            WITH weights AS (
                SELECT * FROM unnest(CAST(:lexemes AS text[]), CAST(:idf AS float8[]))
                    AS w(lexeme, idf)
            ),
            candidates AS MATERIALIZED (
                SELECT c.id, c.term_count,
                       ts_filter(setweight(c.words, 'A', CAST(:lexemes AS text[])), '{{a}}')
                           AS asked
                FROM chunks AS c {_PUBLISHED}
                WHERE c.words @@ ((SELECT to_tsquery('simple',
                                       string_agg(quote_literal(q.lexeme), '{operator}'))
                                   FROM unnest(CAST(:matched AS text[])) AS q(lexeme)){unscored})
                  {self.filters}
                {capped}
            )
            SELECT m.id,
                   sum(w.idf * cardinality(u.positions) * {BM25_K1 + 1}
                       / (cardinality(u.positions)
                          + {BM25_K1} * ({1 - BM25_B} + {BM25_B} * m.term_count / :avgdl)))
                       AS score
            FROM candidates AS m CROSS JOIN LATERAL unnest(m.asked) AS u
            JOIN weights AS w ON w.lexeme = u.lexeme
            GROUP BY m.id
            ORDER BY score DESC, m.id
            LIMIT :limit
        """
        params = {
            **self.params,
            "lexemes": list(self.idf),
            "idf": list(self.idf.values()),
            "matched": lexemes,
            "scored": list(scored),
            "avgdl": self.mean_length,
            "limit": self.limit,
        }
        return [(row[0], float(row[1])) for row in self.conn.execute(sql, params)]
