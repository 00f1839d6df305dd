"""PostgreSQL's words index: a GIN full-text index of the chunks' stored words
(`chunks.words`, migration 0015), ranked by BM25 computed in SQL the way SQLite's FTS5
does, so both engines agree on the same data; rarest words first, from the index, with
per-base counts kept by triggers (migration 0015), so a question does not read every
chunk it matches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kb_cli import queries
from kb_cli.db import Connection, Database
from kb_cli.engines.postgresql import driver_sql
from kb_cli.lexical.phrases import candidate_filters
from kb_cli.migrations import bm25
from kb_cli.permissions import Scope
from kb_cli.ranking import BM25_B, BM25_K1, Scored, idf

# Words as SQLite's FTS5 index sees them: punctuation splits words (example.com is
# "example" and "com"), accents are dropped, English is stemmed, no stopwords. Each
# chunk's are stored in `chunks.words` (migration 0015), under the GIN index
# ix_chunks_terms.
WORDS = "to_tsvector('kb_english', regexp_replace({text}, '[^[:alnum:]]+', ' ', 'g'))"
_IN_BASE = "JOIN documents AS d ON d.id = c.document_id"
_PUBLISHED = _IN_BASE + " AND c.revision = d.published_revision"
# Candidates: at most this many chunks are scored from the rarest words' postings
# before the words left must either be unable to change the top (exact) or rank only
# their first chunks (see `ranked`).
CANDIDATES = 1_000
# A word's chunks are counted up to this many; past it, its frequency is the share of
# chunks ANALYZE found it in (pg_stats) times the chunk count when the scope is every
# base, and this + 1 otherwise (or when ANALYZE does not list it): a scoped score never
# depends on chunks outside the scope (docs/access.md).
COUNTED = 5_000


class TsvectorIndex:
    """The `LexicalIndex` of a PostgreSQL knowledge base (kb_cli/lexical/__init__.py)."""

    def kind(self, conn: Connection) -> str:
        return "pg_textsearch" if conn.execute(_HAS_BM25_INDEX).scalar() else "gin"

    def problems(self, conn: Connection) -> list[str]:
        """Chunks the BM25 index lost count of: pg_textsearch 1.0 keeps the rows written
        since the last checkpoint out of its index after a crash of the server, and may
        count none of what it held only in memory after a restart; search would not
        propose them."""
        if not bm25.enabled(conn.raw):
            return []
        indexed = bm25.indexed_chunks(conn.raw)
        if indexed is None:
            return [
                "the BM25 index exists but the server does not load pg_textsearch, which "
                "every chunk write and words search needs: add it to "
                "shared_preload_libraries and restart, or DROP INDEX ix_chunks_bm25"
            ]
        # Chunks with a word PostgreSQL's parser keeps (the index's tokens, as the
        # stored words' are): a chunk of symbols only is in neither.
        chunks = conn.execute("SELECT count(*) FROM chunks WHERE length(words) > 0").scalar()
        if indexed >= chunks:
            return []
        return [
            f"the BM25 index counts {indexed} of {chunks} chunks (pg_textsearch loses count "
            "of some after a crash or a restart of the server): search ranks words from the "
            "GIN index when it proposes too few, and may miss others; repair rebuilds it"
        ]

    def rebuild(self, db: Database) -> bool:
        with db.write() as conn:
            if bm25.indexed_chunks(conn.raw) is None:  # not loaded: nothing can build it
                return False
            conn.execute(f"REINDEX INDEX {bm25.INDEX}")
        return True

    def ranking(
        self, conn: Connection, terms: list[str], phrases: list[str], limit: int, scope: Scope
    ) -> list[Scored]:
        scoped, scope_params = queries.scope_filter(scope, engine=conn.engine)
        # The BM25 index's statistics count every base: it proposes only for a caller
        # who reads every base, with no --where (its statistics are then the scope's);
        # any narrower scope is ranked from the GIN index, whose every count is the
        # scope's own (docs/access.md).
        if not scoped and conn.execute(_HAS_BM25_INDEX).scalar():
            found = ranked_from_bm25(conn, terms, phrases, limit, scoped, scope_params)
            if found is not None:
                return found
        return ranked(conn, terms, phrases, limit, scoped, scope_params)


# pg_textsearch's index (kb_cli/migrations/bm25.py), where the server has the extension.
_HAS_BM25_INDEX = f"SELECT to_regclass('{bm25.INDEX}') IS NOT NULL"
# The BM25 index's best chunks re-scored, for each chunk asked of the ranking: its
# scores count every base, so it proposes and kb's own scoped BM25 decides.
BM25_CANDIDATES_PER_HIT = 4
BM25_MIN_CANDIDATES = 200


def ranked_from_bm25(
    conn: Connection,
    terms: list[str],
    phrases: list[str],
    limit: int,
    scope: str,
    scope_params: dict[str, Any],
) -> list[Scored] | None:
    """As `ranked`, with the candidates proposed by pg_textsearch's BM25 index: its
    best published chunks holding every phrase (Block-Max WAND: it never reads every
    chunk of a common word), scored by kb's BM25. None when it proposes fewer than
    `limit` (few chunks hold the words, which the GIN ranking scores exactly and fast;
    or the index lost its count of what it holds, as pg_textsearch 1.0 can across a
    restart of the server, when it proposes nothing): `ranked` answers then."""
    lexemes = _lexemes(conn, terms)
    if not lexemes:
        return []
    ranking = _scoped_bm25(conn, lexemes, phrases, limit, scope, scope_params)
    params: dict[str, object] = dict(scope_params)
    filters = candidate_filters(phrases, scope, params, conn.engine.caseless_like)
    sql = f"""SELECT c.id FROM chunks AS c {_PUBLISHED} WHERE 1 = 1{filters}
              ORDER BY c.terms <@> to_bm25query(:query, '{bm25.INDEX}') LIMIT :proposed"""
    params |= {
        "query": " ".join(terms),
        "proposed": max(BM25_MIN_CANDIDATES, BM25_CANDIDATES_PER_HIT * limit),
    }
    # Never as a prepared statement (psycopg prepares one it has run five times): so
    # prepared, pg_textsearch answered in 25 ms p50 what it answers in 1.2 ms as a new
    # statement (80,832 chunks, benchmarks/pg_lexical.py).
    proposed = [row[0] for row in conn.raw.execute(driver_sql(sql), params, prepare=False)]
    if len(proposed) < limit:
        return None
    return ranking.of(lexemes, " | ", only=proposed)


def ranked(
    conn: Connection,
    terms: list[str],
    phrases: list[str],
    limit: int,
    scope: str,
    scope_params: dict[str, Any],
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
    lexemes = _lexemes(conn, terms)
    if not lexemes:
        return []
    ranking = _scoped_bm25(conn, lexemes, phrases, limit, scope, scope_params)
    chunks, frequency, weights = ranking.chunks, ranking.frequency, ranking.idf
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


def _lexemes(conn: Connection, terms: list[str]) -> list[str]:
    return conn.execute(
        "SELECT DISTINCT lexeme FROM unnest(tsvector_to_array("
        + WORDS.format(text=":query")
        + ")) AS q(lexeme) ORDER BY lexeme",
        {"query": " ".join(terms)},
    ).scalars()


def _scoped_bm25(
    conn: Connection,
    lexemes: list[str],
    phrases: list[str],
    limit: int,
    scope: str,
    scope_params: dict[str, Any],
) -> Bm25Query:
    """BM25 with the statistics of the bases in `scope` alone."""
    chunks, mean_length = _corpus(conn, scope, scope_params)
    frequency = _frequencies(conn, lexemes, chunks, scope, scope_params)
    weights = {lexeme: idf(chunks, df) for lexeme, df in frequency.items()}
    ranking = Bm25Query(conn, weights, mean_length, phrases, limit, scope, scope_params)
    ranking.chunks, ranking.frequency = chunks, frequency
    return ranking


def _best(found: list[Scored], limit: int) -> list[Scored]:
    return sorted(found, key=lambda hit: (-hit[1], hit[0]))[:limit]


def _corpus(conn: Connection, scope: str, scope_params: dict[str, Any]) -> tuple[int, float]:
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
    chunks, words = conn.execute(sql + (f" WHERE {scope}" if scope else ""), scope_params).one()
    chunks = int(chunks)
    return chunks, max(float(words) / chunks, 1.0) if chunks else 1.0


def _frequencies(
    conn: Connection, lexemes: list[str], chunks: int, scope: str, scope_params: dict[str, Any]
) -> dict[str, float]:
    """Each lexeme's document frequency in `scope`: counted up to COUNTED + 1, or, for
    a word ANALYZE found in more, estimated from its share."""
    share: dict[str, float] = {}
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


class Bm25Query:
    """BM25 of the published chunks in scope that match a query of some lexemes, each
    scored on every lexeme of the question."""

    def __init__(
        self,
        conn: Connection,
        idf: dict[str, float],
        mean_length: float,
        phrases: list[str],
        limit: int,
        scope: str,
        scope_params: dict[str, Any],
    ) -> None:
        self.conn, self.idf, self.mean_length, self.limit = conn, idf, mean_length, limit
        self.chunks, self.frequency = 0, dict[str, float]()  # the scope's, when known
        self.params: dict[str, object] = dict(scope_params)
        self.filters = candidate_filters(phrases, scope, self.params, conn.engine.caseless_like)

    def of(
        self,
        lexemes: list[str],
        operator: str,
        scored: Sequence[str] = (),
        cap: int | None = None,
        only: Sequence[int] = (),
    ) -> list[Scored]:
        """The top of the chunks holding any (" | ") or every (" & ") lexeme and none of
        the `scored` ones (already ranked), the first `cap` of them if capped, of the
        chunks `only` if given."""
        capped = "" if cap is None else f" LIMIT {int(cap)}"
        among = " AND c.id = ANY(CAST(:only AS bigint[]))" if only else ""
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
                  {self.filters}{among}
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
            "only": list(only),
            "avgdl": self.mean_length,
            "limit": self.limit,
        }
        return [(row[0], float(row[1])) for row in self.conn.execute(sql, params)]
