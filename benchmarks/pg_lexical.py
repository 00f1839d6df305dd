"""BM25 on PostgreSQL at scale: kb's index-driven lexical ranking beside the plan it
replaced (every chunk that matches any word scored, the corpus and each word's
frequency counted per question), on a home of benchmarks/pg_home.py. Where the server
has pg_textsearch (migration 0020), kb's ranking takes its candidates from its BM25
index; `--gin` times the GIN index's ranking instead, as a server without it runs.

Per question (the retrieval benchmark's, and a few of common words only): the time
of each, and how much of the full plan's top 10 and top 50 kb's ranking returns, i.e.
where its estimates for common words change the answer.

    uv run --group bench python benchmarks/pg_lexical.py --size 100k [--full]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.homes import home_of
from benchmarks.scale import open_kb, percentiles, questions, spread

# Words in most chunks of this text (stopwords such as "the" are no words at all).
COMMON_ONLY = [
    "self return none",
    "use the value of this function",
    "return the name of the file",
    "if not self: return default value",
]


def full_plan(conn, terms: list[str], limit: int, words: str) -> list[tuple[int, float]]:
    """The plan before migration 0015 (kb 2026-12-05), on `words`: every chunk that
    matches any word is scored; corpus and frequencies counted per question."""
    from kb_cli.lexical.tsvector import WORDS
    from kb_cli.ranking import BM25_B, BM25_K1

    sql = f"""
        WITH lexemes AS (
            SELECT DISTINCT lexeme
            FROM unnest(tsvector_to_array({WORDS.format(text=":query")})) AS q(lexeme)
        ),
        corpus AS (
            SELECT count(*) AS n, greatest(avg(c.term_count), 1) AS avgdl FROM chunks AS c
        ),
        weights AS (
            SELECT l.lexeme, greatest(ln((corpus.n - hits.df + 0.5) / (hits.df + 0.5)), 1e-6)
                   AS idf
            FROM lexemes AS l CROSS JOIN corpus
            CROSS JOIN LATERAL (
                SELECT count(*) AS df FROM chunks AS c
                WHERE {words} @@ to_tsquery('simple', quote_literal(l.lexeme))
            ) AS hits
        ),
        matches AS MATERIALIZED (
            SELECT c.id, c.term_count, u.lexeme, cardinality(u.positions) AS tf
            FROM chunks AS c
            JOIN documents AS d ON d.id = c.document_id AND c.revision = d.published_revision
            CROSS JOIN LATERAL unnest({words}) AS u
            WHERE {words} @@ (SELECT to_tsquery('simple', string_agg(quote_literal(lexeme), ' | '))
                              FROM lexemes)
              AND u.lexeme IN (SELECT lexeme FROM lexemes)
        )
        SELECT m.id,
               sum(w.idf * m.tf * {BM25_K1 + 1}
                   / (m.tf + {BM25_K1} * ({1 - BM25_B} + {BM25_B} * m.term_count / corpus.avgdl)))
                   AS score
        FROM matches AS m JOIN weights AS w USING (lexeme) CROSS JOIN corpus
        GROUP BY m.id
        ORDER BY score DESC, m.id
        LIMIT :limit
    """
    rows = conn.execute(sql, {"query": " ".join(terms), "limit": limit})
    return [(row[0], float(row[1])) for row in rows]


def main() -> None:
    from kb_cli.permissions import Scope
    from kb_cli.textsearch import parse_query

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="100k")
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--depth", type=int, default=50, help="the ranking's length")
    parser.add_argument("--full", action="store_true", help="also time the full plan")
    parser.add_argument("--candidates", type=int, help="tsvector.CANDIDATES for this run")
    parser.add_argument("--old", action="store_true", help="the schema before migration 0015")
    parser.add_argument(
        "--gin", action="store_true", help="the GIN index's ranking where pg_textsearch's is"
    )
    args = parser.parse_args()
    url = os.environ["KB_BENCH_POSTGRES_URL"].rsplit("/", 1)[0] + f"/kbscale_{args.size}"
    kb = open_kb(home_of("postgresql", args.size), url)
    from kb_cli.lexical import tsvector

    if args.candidates:
        tsvector.CANDIDATES = args.candidates
    if args.gin:
        tsvector._HAS_BM25_INDEX = "SELECT false"  # as a server without pg_textsearch
    words = tsvector.WORDS.format(text="c.terms") if args.old else "c.words"
    asked = spread([q["question"] for _c, q in questions()], args.questions) + COMMON_ONLY
    everything, own = Scope(), Scope(reader="nobody")
    timed: dict[str, list[float]] = {"kb": [], "kb, one reader's bases": [], "full plan": []}
    overlap10, overlap50 = [], []
    for text in asked:
        query = parse_query(text)
        with kb.db.read() as conn:
            started = time.perf_counter()
            if not args.old:
                ranked = kb.lexical.ranking(conn, query.terms, [], args.depth, everything)
                timed["kb"].append(time.perf_counter() - started)
                started = time.perf_counter()
                kb.lexical.ranking(conn, query.terms, [], args.depth, own)
                timed["kb, one reader's bases"].append(time.perf_counter() - started)
            if args.full or args.old:
                started = time.perf_counter()
                exact = full_plan(conn, query.terms, args.depth, words)
                timed["full plan"].append(time.perf_counter() - started)
                if not args.old:
                    found = [chunk for chunk, _ in ranked]
                    truth = [chunk for chunk, _ in exact]
                    shared = len(set(found[:10]) & set(truth[:10]))
                    overlap10.append(shared / max(1, len(truth[:10])))
                    overlap50.append(len(set(found) & set(truth)) / max(1, len(truth)))
                    if overlap10[-1] < 1:
                        print(f"  differs ({overlap10[-1]:.1f} of the top 10): {text[:60]!r}")
    for name, seconds in timed.items():
        if seconds:
            figures = percentiles(seconds)
            print(
                f"{name}: p50 {figures['p50_ms']:.1f} ms, p95 {figures['p95_ms']:.1f} ms,"
                f" max {max(seconds) * 1000:.0f} ms ({len(seconds)} questions)"
            )
    if overlap10:
        print(
            f"top 10 shared with the full plan: {sum(overlap10) / len(overlap10):.3f};"
            f" top {args.depth}: {sum(overlap50) / len(overlap50):.3f}"
        )
    kb.db.close()


if __name__ == "__main__":
    main()
