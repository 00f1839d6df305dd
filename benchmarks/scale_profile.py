"""Where a search's time goes in a scale home (benchmarks/scale.py), and what the
worker's fold of the SQLite vector index costs there.

    uv run --group bench python benchmarks/scale_profile.py HOME [HOME ...]

A PostgreSQL home (benchmarks/pg_home.py) is profiled on its database of the server
KB_BENCH_POSTGRES_URL names (its fold is SQLite's: not measured there).

Per home, in process, over the retrieval questions (spread as scale.py spreads them):
p50/p95 of each stage of a hybrid search on its own (the words ranking, the query's
embedding, the index's nearest chunks, the index's Hamming pass alone, the chunk details
of the fused candidates), how many chunks the words ranking's terms match, and the
seconds of a fold with nothing to add (what every fold pays to rewrite the file, beside
its size) and of a fold of the chunks past the watermark, if any.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.homes import database_url
from benchmarks.scale import open_kb, questions, spread


def _p(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50_ms": statistics.median(ordered) * 1000, "p95_ms": p95 * 1000}


def stages(kb, asked: list[str]) -> dict:
    from kb_cli import queries
    from kb_cli.lexical.fts5 import _any_of
    from kb_cli.services.search import CANDIDATES
    from kb_cli.textsearch import parse_query
    from kb_cli.vectors.signfile import ROUGH_MIN, ROUGH_PER_RESULT, ROUGH_SHARE

    embedder, scope = kb.embedder, kb.actor.scope(None)
    timed: dict[str, list[float]] = {
        k: [] for k in ("words", "embed", "nearest", "hamming", "details")
    }
    matches = []
    depth = CANDIDATES
    with kb.db.read() as conn:
        index = kb.vectors.open(embedder.model, 256) if hasattr(kb.vectors, "open") else None
        for text in asked:
            query = parse_query(text)
            started = time.perf_counter()
            words = kb.lexical.ranking(conn, query.terms, query.phrases, depth, scope)
            timed["words"].append(time.perf_counter() - started)
            if query.terms and kb.db.is_sqlite:
                sql = "SELECT count(*) FROM chunks_terms WHERE chunks_terms MATCH :m"
                matches.append(conn.execute(sql, {"m": _any_of(query.terms)}).scalar())
            started = time.perf_counter()
            vector = embedder.embed_query(text)
            timed["embed"].append(time.perf_counter() - started)
            started = time.perf_counter()
            near = kb.vectors.nearest(
                conn, embedder.model, vector, depth, scope, kb.settings.vector_floor
            )
            timed["nearest"].append(time.perf_counter() - started)
            if index is not None:
                rough = max(ROUGH_MIN, ROUGH_PER_RESULT * depth, index.header.count // ROUGH_SHARE)
                started = time.perf_counter()
                index.approximate(vector, rough)
                timed["hamming"].append(time.perf_counter() - started)
            ids = [chunk for chunk, _s in words] + [chunk for chunk, _s in near]
            started = time.perf_counter()
            queries.chunk_details(conn, ids)
            timed["details"].append(time.perf_counter() - started)
    result = {name: _p(values) for name, values in timed.items() if values}
    if matches:
        result["words_matches"] = {"median": statistics.median(matches), "max": max(matches)}
    return result


def fold_seconds(kb) -> dict:
    """A fold with an empty delta (the whole file rewritten: the fixed cost of every
    fold), then `kb reindex --vectors`' full build, in process."""
    from kb_cli.vectors import stored
    from kb_cli.vectors.signfile import build, directory_for, writing

    model = kb.embedder.model
    with kb.db.read() as conn:
        dim = stored.newest_dim(conn, model)
    directory = directory_for(kb.settings)
    timings = {}
    with writing(directory, wait=True):
        for name, incremental in (("full build", False), ("fold, nothing new", True)):
            started = time.perf_counter()
            report = build(kb.db, directory, model, dim, incremental)
            timings[name] = time.perf_counter() - started
    timings["index MB"] = report.bytes / 1e6
    timings["vectors"] = report.chunks
    return timings


def _database_of(home: Path) -> str | None:
    """A PostgreSQL home's database (benchmarks/pg_home.py) on KB_BENCH_POSTGRES_URL's
    server; None for a SQLite home."""
    manifest = json.loads((home / "scale-manifest.json").read_text())
    if manifest.get("engine") != "postgresql":
        return None
    return database_url("postgresql", manifest["size"], os.environ["KB_BENCH_POSTGRES_URL"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("homes", nargs="+", type=Path)
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--skip-fold", action="store_true")
    args = parser.parse_args()
    asked = spread([q["question"] for _c, q in questions()], args.questions)
    report = {}
    for home in args.homes:
        kb = open_kb(home, _database_of(home))
        report[str(home)] = {}
        # First: the stages then read the index it leaves (SQLite's file).
        if not args.skip_fold and kb.db.is_sqlite:
            report[str(home)]["fold"] = fold_seconds(kb)
        kb.embedder.embed_query(asked[0])  # the model loaded
        report[str(home)]["stages"] = stages(kb, asked)
        kb.db.close()
        print(json.dumps({str(home): report[str(home)]}, indent=1), flush=True)


if __name__ == "__main__":
    main()
