"""SQLite's words index: FTS5 over each chunk's `terms` (migration 0004, kept in step
with `chunks` by triggers), ranked by FTS5's own BM25, over candidates the words choose
in a large base; in a narrower scope, the same formula with the scope's own statistics
(from each revision's run of chunk ids, migration 0016).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

from kb_cli import queries
from kb_cli.db import Connection, Database
from kb_cli.lexical.phrases import candidate_filters
from kb_cli.permissions import Scope
from kb_cli.ranking import Corpus, Scored, best_scored, bm25, idf
from kb_cli.textsearch import TOKENIZER

if TYPE_CHECKING:
    import numpy as np


class Fts5Index:
    """The `LexicalIndex` of a SQLite knowledge base (kb_cli/lexical/__init__.py).

    BM25 counts every indexed chunk (drafts and earlier revisions too) of the bases in
    the scope, and nothing outside it: FTS5's own bm25() when the scope is every base,
    and the same formula over the scope's own statistics when it is not."""

    def kind(self, conn: Connection) -> str:
        return "fts5"

    def problems(self, conn: Connection) -> list[str]:
        return []  # kept in step with the chunks by triggers, in their transaction

    def rebuild(self, db: Database) -> bool:
        with db.write() as conn:
            conn.execute("INSERT INTO chunks_terms(chunks_terms) VALUES ('rebuild')")
        return True

    def ranking(
        self, conn: Connection, terms: list[str], phrases: list[str], limit: int, scope: Scope
    ) -> list[Scored]:
        scoped, scope_params = queries.scope_filter(scope, engine=conn.engine)
        if not scoped:
            return ranked_by_the_index(conn, terms, phrases, limit)
        return ranked_in_scope(conn, terms, phrases, limit, scoped, scope_params)


# Query words go through the index's tokenizer, so they are looked up as the index
# stores them (stemmed, accents dropped).
# Per connection, in its temp schema: the index's postings (term, chunk, position) and
# words (term, chunks holding it), and a scratch index that stems the query's words.
_VOCABULARY = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.kb_postings "
    "USING fts5vocab(main, chunks_terms, instance)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.kb_index_words "
    "USING fts5vocab(main, chunks_terms, row)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.kb_query_words "
    f"USING fts5(word, tokenize='{TOKENIZER}')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.kb_query_terms "
    "USING fts5vocab(temp, kb_query_words, row)",
    # Candidates of ranked_from_the_rarest, indexed again, and their postings.
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.kb_rescored "
    f"USING fts5(terms, tokenize='{TOKENIZER}')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.kb_rescored_postings "
    "USING fts5vocab(temp, kb_rescored, instance)",
)


# The index ranks its own matches first and only the best few are joined to their chunk
# and document (and their phrases checked): a common word matches a tenth of a large
# base, and joining every match before the sort cost three times the ranking itself.
# A window that keeps too few published chunks grows until it holds every match.
WINDOW_PER_RESULT = 4
WINDOW_GROWTH = 4
# bm25() scores every chunk that holds any of the question's words, about 2 µs each:
# 0.36 s p50 at 986k chunks, where an English question's words are in 50,000 chunks
# (median) and up to 500,000. Past this many (the words' chunks, summed), the words
# choose candidates and only those are scored (ranked_from_the_rarest) ...
EXACT_POSTINGS = 20_000
# ... from the words in at most this many chunks (the rarest word at least): listing a
# word's chunks costs about a tenth of scoring them, and in 986k chunks leaving out
# the words in more changed hit@3 by 0.01 or less (benchmarks/README.md) ...
COMMON_CHUNKS = 50_000
# ... this many per result sought, and as many chunks holding every word.
RESCORED_PER_RESULT = 2
# In a narrower scope (ranked_in_scope), while the scope's chunks holding any word are
# at most this many, every one is scored (about 60 µs each).
RESCORED_ALL = 2_000


def ranked_by_the_index(
    conn: Connection, terms: list[str], phrases: list[str], limit: int
) -> list[Scored]:
    """The best `limit` published chunks (with every phrase) by the index's BM25,
    whose statistics cover the whole index: FTS5's own bm25() over every match when
    the question's words hold at most EXACT_POSTINGS chunks, else ranked_from_the_rarest."""
    stems = _stems(conn, terms)
    if not stems:
        return []
    frequency = _chunks_holding(conn, stems)
    if sum(frequency.values()) <= EXACT_POSTINGS:
        return ranked_by_bm25(conn, terms, phrases, limit)
    return ranked_from_the_rarest(conn, frequency, phrases, limit)


def ranked_by_bm25(
    conn: Connection, terms: list[str], phrases: list[str], limit: int
) -> list[Scored]:
    """FTS5's bm25() of every match: the best `limit` published chunks (with every
    phrase) of the index's best matches, in the order of (score, id) that a ranking of
    every match gives."""
    params: dict[str, object] = {"match": _any_of(terms), "limit": limit}
    filters = candidate_filters(phrases, "", params, conn.engine.caseless_like)
    sql = f"""
        WITH best AS (
            SELECT rowid AS id, -bm25(chunks_terms) AS score FROM chunks_terms
            WHERE chunks_terms MATCH :match
            ORDER BY score DESC, rowid
            LIMIT :window
        )
        SELECT c.id, best.score
        FROM best
        JOIN chunks AS c ON c.id = best.id
        JOIN documents AS d ON d.id = c.document_id AND c.revision = d.published_revision
        WHERE 1 = 1{filters}
        ORDER BY best.score DESC, c.id
        LIMIT :limit
    """
    window = WINDOW_PER_RESULT * max(limit, 1)
    while True:
        rows = [(row[0], float(row[1])) for row in conn.execute(sql, params | {"window": window})]
        if len(rows) >= limit or _matches(conn, params["match"], window) < window:
            return rows  # enough, or the window held every match
        window *= WINDOW_GROWTH


def ranked_from_the_rarest(
    conn: Connection, frequency: dict[str, int], phrases: list[str], limit: int
) -> list[Scored]:
    """BM25 with the index's own statistics, as bm25() computes it, of candidates the
    words choose: the chunks whose words in at most COMMON_CHUNKS chunks (and more
    common ones while those hold too few, _choosing) weigh most together (each word's
    IDF once, however often it occurs), and the first chunks
    holding every word. Each candidate is scored on every word from its own text,
    indexed again in a scratch table of this connection. A chunk whose score comes
    from common words, or from a word repeated, may be missed: the price of not
    scoring every match (benchmarks/README.md, "A company-sized knowledge base")."""
    chunks, mean_length = _index_totals(conn)
    corpus = Corpus(chunks, mean_length, frequency)
    window = RESCORED_PER_RESULT * max(limit, 1)
    weighing = _weighed(
        {
            stem: (_listed(conn, stem), idf(chunks, frequency[stem]))
            for stem in _choosing(frequency, window)
        }
    )
    while True:
        candidates = set(weighing[:window]) | _holding_all(conn, list(frequency), window)
        found = _best_published(conn, candidates, corpus, phrases, limit)
        if len(found) >= limit or len(candidates) < window:
            return found
        window *= WINDOW_GROWTH


def _choosing(frequency: dict[str, int], enough: int) -> list[str]:
    """The words that choose candidates: those in at most COMMON_CHUNKS chunks, and
    more common ones, rarest first, while the words chosen hold fewer than `enough`
    chunks (so that a rare word found in three chunks does not leave a question with
    three answers)."""
    chosen: list[str] = []
    for stem in sorted(frequency, key=lambda stem: (frequency[stem], stem)):
        if frequency[stem] <= COMMON_CHUNKS or sum(frequency[s] for s in chosen) < enough:
            chosen.append(stem)
    return chosen


def _listed(conn: Connection, stem: str) -> np.ndarray:
    """The ids of the chunks holding the word, ascending, as the index lists them
    (group_concat: about a tenth of a microsecond a chunk)."""

    listed = conn.execute(
        "SELECT group_concat(rowid) FROM chunks_terms WHERE chunks_terms MATCH :m",
        {"m": _any_of([stem])},
    ).scalar()
    return _id_array(listed)


def _id_array(listed: str | None) -> np.ndarray:
    """Ids that group_concat joined with commas, as an array (one row back instead of
    a row each, many times faster for long lists)."""
    import numpy as np

    return np.fromstring(listed or "", dtype=np.int64, sep=",")


def _weighed(lists: dict[str, tuple[np.ndarray, float]]) -> list[int]:
    """Every chunk in the words' lists, heaviest first by the sum of the weights of
    the words it holds (ties by id)."""
    import numpy as np

    held = [(ids, np.full(len(ids), weight)) for ids, weight in lists.values() if len(ids)]
    if not held:
        return []
    # Each list is in id order: a stable sort (timsort) merges them as runs.
    merged = np.argsort(np.concatenate([ids for ids, _ in held]), kind="stable")
    ids = np.concatenate([ids for ids, _ in held])[merged]
    weights = np.concatenate([weights for _, weights in held])[merged]
    firsts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    order = np.argsort(-np.add.reduceat(weights, firsts), kind="stable")
    ranked: list[int] = ids[firsts][order].tolist()
    return ranked


def _few(lists: list[np.ndarray], most: int) -> list[int] | None:
    """The ids in any of the lists when they are at most `most`, else None (found
    without merging a list longer than that)."""
    import numpy as np

    if not lists or max(map(len, lists)) > most:
        return None if lists else []
    union: list[int] = np.unique(np.concatenate(lists)).tolist()
    return union if len(union) <= most else None


def _holding_every(lists: list[np.ndarray]) -> list[int]:
    """The ids in every list, ascending."""
    import numpy as np

    common = lists[0]
    for ids in lists[1:]:
        common = np.intersect1d(common, ids, assume_unique=True)
    return list(common.tolist())


def _chunks_holding(conn: Connection, stems: list[str]) -> dict[str, int]:
    """How many chunks hold each word, from the index's vocabulary (it reads each
    word's list of chunks, about ten times faster than bm25() scores them)."""
    params = {f"t{i}": stem for i, stem in enumerate(stems)}
    placeholders = ", ".join(":" + name for name in params)
    sql = f"SELECT term, doc FROM temp.kb_index_words WHERE term IN ({placeholders})"
    held: dict[str, int] = dict(conn.execute(sql, params).all())
    return {stem: int(held.get(stem, 0)) for stem in stems}


def _index_totals(conn: Connection) -> tuple[int, float]:
    """(chunks, mean length in words) of the whole index, as bm25() reads them: FTS5's
    averages record (row 1 of its data table), the chunk count then each column's
    token count, as SQLite varints."""
    block = conn.execute("SELECT block FROM chunks_terms_data WHERE id = 1").scalar()
    values = _varints(block or b"")
    chunks, tokens = [*values, 0, 0][:2]
    return chunks, max(tokens / chunks, 1.0) if chunks else 1.0


def _varints(data: bytes) -> list[int]:
    """SQLite's variable-length integers: 7 bits a byte, high bit set while more
    follow, the ninth byte whole."""
    values, at = [], 0
    while at < len(data):
        value = 0
        for position in range(9):
            byte = data[at]
            at += 1
            if position == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        values.append(value)
    return values


def _holding_all(conn: Connection, stems: list[str], window: int) -> set[int]:
    """The first `window` chunks holding every word."""
    match = " AND ".join('"' + stem.replace('"', '""') + '"' for stem in stems)
    sql = "SELECT rowid FROM chunks_terms WHERE chunks_terms MATCH :m LIMIT :n"
    return set(conn.execute(sql, {"m": match, "n": window}).scalars())


def _rescored(conn: Connection, candidates: set[int], corpus: Corpus) -> dict[int, float]:
    """BM25 of each candidate on every word, from its own text indexed again with the
    index's tokenizer (term frequencies and lengths as the index counts them)."""
    ids = json.dumps(sorted(candidates))
    conn.execute("DELETE FROM temp.kb_rescored")
    conn.execute(
        "INSERT INTO temp.kb_rescored (rowid, terms) "
        "SELECT id, terms FROM chunks WHERE id IN (SELECT value FROM json_each(:ids))",
        {"ids": ids},
    )
    stems = list(corpus.frequency)
    params = {f"t{i}": stem for i, stem in enumerate(stems)}
    placeholders = ", ".join(":" + name for name in params)
    lengths = {
        row[0]: _varints(row[1])[0]
        for row in conn.execute("SELECT id, sz FROM temp.kb_rescored_docsize", {})
    }
    postings = conn.execute(
        f"SELECT doc, term, count(*) FROM temp.kb_rescored_postings "
        f"WHERE term IN ({placeholders}) GROUP BY doc, term",
        params,
    )
    return bm25(corpus, ((doc, term, tf, lengths[doc]) for doc, term, tf in postings))


def _best_published(
    conn: Connection,
    candidates: set[int],
    corpus: Corpus,
    phrases: list[str],
    limit: int,
    scope: str = "",
    scope_params: dict[str, Any] | None = None,
) -> list[Scored]:
    """The best `limit` candidates by BM25 (_rescored) of published revisions (in
    `scope`) that hold every phrase."""
    scores = _rescored(conn, candidates, corpus)
    params: dict[str, object] = {"ids": json.dumps(list(scores)), **(scope_params or {})}
    filters = candidate_filters(phrases, scope, params, conn.engine.caseless_like)
    sql = f"""
        SELECT c.id FROM chunks AS c
        JOIN documents AS d ON d.id = c.document_id AND c.revision = d.published_revision
        WHERE c.id IN (SELECT value FROM json_each(:ids)){filters}
    """
    kept = conn.execute(sql, params).scalars()
    return best_scored({chunk: scores[chunk] for chunk in kept}, limit)


def _matches(conn: Connection, match: object, most: int) -> int:
    """How many chunks match, counted up to `most`."""
    sql = "SELECT count(*) FROM (SELECT 1 FROM chunks_terms WHERE chunks_terms MATCH :m LIMIT :n)"
    return int(conn.execute(sql, {"m": match, "n": most}).one()[0])


def _any_of(terms: list[str]) -> str:
    """Any of the terms, each a quoted FTS5 string: operators in input stay plain text."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def ranked_in_scope(
    conn: Connection,
    terms: list[str],
    phrases: list[str],
    limit: int,
    scope: str,
    scope_params: dict[str, Any],
) -> list[Scored]:
    """ranking.bm25 of the published chunks in `scope` with the statistics of `scope`
    only (when some base is out of it): the scope's chunks, mean length and chunks
    holding each word, from its revisions' runs of chunk ids (chunk_runs, migration
    0016) and the index's list of each word's chunks. While the scope's chunks holding
    any word are at most RESCORED_ALL, every one is scored; past it, candidates as in
    ranked_from_the_rarest, chosen from the scope's chunks alone, so that nothing
    outside the scope changes a score or which chunks are scored. From the postings
    (ranked_from_postings) when a run is not consecutive."""
    stems = _stems(conn, terms)
    if not stems:
        return []
    runs = ScopeRuns.of(conn, scope, scope_params)
    if runs is None:
        return ranked_from_postings(conn, stems, phrases, limit, scope, scope_params)
    held = {stem: runs.among(_listed(conn, stem)) for stem in stems}
    frequency = {stem: len(ids) for stem, ids in held.items()}
    corpus = Corpus(runs.chunks, runs.mean_length, frequency)
    matching = _few(list(held.values()), RESCORED_ALL)
    if matching is not None:
        return _best_published(conn, set(matching), corpus, phrases, limit, scope, scope_params)
    window = RESCORED_PER_RESULT * max(limit, 1)
    weighing = _weighed(
        {
            stem: (held[stem], idf(runs.chunks, frequency[stem]))
            for stem in _choosing(frequency, window)
        }
    )
    every_word = _holding_every(list(held.values()))
    while True:
        candidates = set(weighing[:window]) | set(every_word[:window])
        found = _best_published(conn, candidates, corpus, phrases, limit, scope, scope_params)
        if len(found) >= limit or window >= max(len(weighing), len(every_word)):
            return found
        window *= WINDOW_GROWTH


class ScopeRuns:
    """The runs of chunk ids of a scope's revisions, in id order, and their totals."""

    def __init__(self, firsts: np.ndarray, lasts: np.ndarray, chunks: int, words: int) -> None:
        order = firsts.argsort(kind="stable")
        self.firsts, self.lasts = firsts[order], lasts[order]
        self.chunks = chunks
        self.mean_length = words / chunks if chunks else 0.0

    @classmethod
    def of(cls, conn: Connection, scope: str, scope_params: dict[str, Any]) -> ScopeRuns | None:
        """The scope's runs; None when one of them is not consecutive (it holds ids of
        other chunks). One row back, the ids as text: a large base has a run per
        revision, 172,000 at 986k chunks, and a row each took 0.4 s."""

        firsts, lasts, chunks, words, gaps = conn.execute(
            "SELECT group_concat(r.first_id), group_concat(r.last_id), coalesce(sum(r.chunks), 0),"
            " coalesce(sum(r.words), 0), coalesce(sum(r.last_id - r.first_id + 1 != r.chunks), 0)"
            f" FROM chunk_runs AS r JOIN documents AS d ON d.id = r.document_id WHERE {scope}",
            scope_params,
        ).one()
        if gaps:
            return None
        return cls(_id_array(firsts), _id_array(lasts), int(chunks), int(words))

    def among(self, ids: np.ndarray) -> np.ndarray:
        """The ids (ascending) that fall in one of the runs."""
        import numpy as np

        if not len(self.firsts) or not len(ids):
            return ids[:0]
        run = np.searchsorted(self.firsts, ids, side="right") - 1
        inside = (run >= 0) & (ids <= self.lasts[np.maximum(run, 0)])
        return ids[inside]


def ranked_from_postings(
    conn: Connection,
    stems: list[str],
    phrases: list[str],
    limit: int,
    scope: str,
    scope_params: dict[str, Any],
) -> list[Scored]:
    """ranking.bm25 over the index's postings of every chunk in `scope` holding a
    word: about 4 times slower than bm25() (benchmark case 7), and seconds for common
    words in a large base."""
    params: dict[str, object] = {f"t{i}": stem for i, stem in enumerate(stems)}
    placeholders = ", ".join(":" + name for name in params)
    wanted = candidate_filters(phrases, "", params, conn.engine.caseless_like)
    rows = conn.execute(
        f"""
        WITH hits AS (
            SELECT doc, term, count(*) AS tf FROM temp.kb_postings
            WHERE term IN ({placeholders})
            GROUP BY doc, term
        )
        SELECT h.doc, h.term, h.tf, c.term_count,
               (c.revision = d.published_revision{wanted}) AS wanted
        FROM hits AS h
        JOIN chunks AS c ON c.id = h.doc
        JOIN documents AS d ON d.id = c.document_id
        WHERE {scope}
        """,
        {**params, **scope_params},
    ).all()
    chunks, mean_length = conn.execute(
        "SELECT count(*), coalesce(avg(c.term_count), 0) FROM chunks AS c "
        f"JOIN documents AS d ON d.id = c.document_id WHERE {scope}",
        scope_params,
    ).one()
    frequency = Counter(row[1] for row in rows)
    scores = bm25(Corpus(chunks, mean_length, dict(frequency)), (row[:4] for row in rows))
    keep = {row[0] for row in rows if row[4]}
    return best_scored({chunk: score for chunk, score in scores.items() if chunk in keep}, limit)


def _stems(conn: Connection, terms: list[str]) -> list[str]:
    """The query's words as the index stores them, each once."""
    for statement in _VOCABULARY:
        conn.execute(statement)
    conn.execute("DELETE FROM temp.kb_query_words")
    conn.executemany(
        "INSERT INTO temp.kb_query_words (word) VALUES (:word)", [{"word": t} for t in terms]
    )
    return list(conn.execute("SELECT term FROM temp.kb_query_terms ORDER BY term").scalars())
