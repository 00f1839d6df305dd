"""Answers that sink (issue 48): each retrieval question's rank alone and inside a big home.

For every question of benchmarks/corpora, in `--mode lexical`, `--mode vector` and the
default (hybrid), the rank of its expected page (and of a passage holding its answer)
in the corpora's own homes (retrieval.py's, one per corpus) and inside a home that
holds the corpora among other text (benchmarks/scale.py's, whose manifest maps each
page to its document). For the home it also records what stands above the page, and
where the page's best chunk sits in each ranking before the fusion:

  lex       the words ranking kb asks for (kb.lexical.ranking, COPIES_DEPTH x 50 deep)
  lex_all   FTS5's own bm25() over every match (no candidate choice), same depth
  vec       the meaning ranking (exact nearest chunks), same depth

so a sinking page can be told apart: not a candidate (lex None, lex_all a rank),
outranked by BM25 itself (both low), or lost in the fusion (one ranking high).

    uv run --group bench python benchmarks/sink.py --home HOME --alone DIR --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.retrieval import folded, load_corpora, request, score

MODES = {"lexical": {"mode": "lexical"}, "vector": {"mode": "vector"}, "hybrid": {}}
DIAG_DEPTH = 200


def open_home(home: Path):
    import os

    from kb_cli.app import Kb
    from kb_cli.config import resolve_settings

    os.environ["KB_EMBEDDINGS"] = "local"
    return Kb.open(resolve_settings(str(home)), actor="bench")


def _first(hits, wanted) -> int | None:
    return next((rank for rank, hit in enumerate(hits, 1) if wanted(hit)), None)


def ranks_of(kb, question: dict, is_page, label, timings: dict | None = None) -> dict:
    """Per mode: page rank, passage rank, the first three hits (labelled), and the
    expected hit's ranks in each ranking (as the fused hits carry them)."""
    from kb_cli.services.search import search

    answers = question.get("answer", [])
    answers = [folded(a) for a in ([answers] if isinstance(answers, str) else answers)]
    out = {}
    for mode, config in MODES.items():
        started = time.perf_counter()
        hits = search(kb, request(question["question"], config)).hits
        if timings is not None:
            timings.setdefault(mode, []).append(time.perf_counter() - started)
        page = _first(hits, is_page)
        passage = (
            _first(hits, lambda hit: any(a in folded(hit.text) for a in answers))
            if answers
            else None
        )
        found = hits[page - 1] if page else None
        out[mode] = {
            "page": page,
            "passage": passage,
            "top": [[label(hit), hit.lexical_rank, hit.vector_rank] for hit in hits[:3]],
            "at": [found.lexical_rank, found.vector_rank] if found else None,
        }
    return out


def diagnose(kb, question: dict, is_chunk_of_page) -> dict:
    """Where the page's best chunk ranks in each ranking before the fusion."""
    from kb_cli.lexical import fts5
    from kb_cli.queries import chunk_details
    from kb_cli.services.search import parse_query
    from kb_cli.textsearch import script_of
    from kb_cli.vectors.stored import exact_nearest

    query = parse_query(question["question"])
    scope = kb.actor.scope(None)
    result = {}
    with kb.db.read() as conn:
        lex = kb.lexical.ranking(conn, query.terms, query.phrases, DIAG_DEPTH, scope)
        terms = query.terms
        try:
            from kb_cli.textsearch import query_words

            terms = query_words(terms)
        except ImportError:
            pass
        lex_all = fts5.ranked_by_bm25(conn, terms, query.phrases, DIAG_DEPTH)
        vec = exact_nearest(
            conn,
            kb.embedder.model,
            kb.embedder.embed_query(question["question"]),
            DIAG_DEPTH,
            scope,
            kb.settings.vector_floor,
        )
        ids = {chunk for chunk, _ in lex + lex_all + vec}
        details = chunk_details(conn, list(ids))
    for name, ranking in (("lex", lex), ("lex_all", lex_all), ("vec", vec)):
        result[name] = next(
            (
                rank
                for rank, (chunk, _s) in enumerate(ranking, 1)
                if chunk in details and is_chunk_of_page(details[chunk])
            ),
            None,
        )
    result["script"] = script_of(question["question"])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--manifest", type=Path)
    parser.add_argument("--alone", type=Path, help="retrieval.py --keep folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--corpus", action="append")
    parser.add_argument("--no-diagnose", action="store_true")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), help="only these modes")
    parser.add_argument(
        "--set", action="append", default=[], help="module.NAME=value (a constant to try)"
    )
    parser.add_argument("--rrf-k", type=int, help="fuse with this RRF constant")
    args = parser.parse_args()
    for assignment in args.set:
        import importlib

        target, value = assignment.split("=", 1)
        module, name = target.rsplit(".", 1)
        setattr(importlib.import_module(module), name, json.loads(value))
    if args.rrf_k is not None:
        from kb_cli import ranking

        ranking.fuse.__defaults__ = (args.rrf_k,)
    if args.modes:
        for mode in list(MODES):
            if mode not in args.modes:
                del MODES[mode]
    manifest = json.loads((args.manifest or args.home / "scale-manifest.json").read_text())
    name_of = {doc: page for page, doc in manifest["pages"].items()}
    home = open_home(args.home)
    records, timings = [], {}
    for corpus in load_corpora(args.corpus):
        alone = open_home(args.alone / corpus.name) if args.alone else None
        for number, question in enumerate(corpus.questions):
            expected_ids = {manifest["pages"][f"{corpus.name}/{p}"] for p in question["expected"]}
            record = {
                "corpus": corpus.name,
                "n": number,
                "question": question["question"],
                "expected": question["expected"],
                "has_answer": bool(question.get("answer")),
                "home": ranks_of(
                    home,
                    question,
                    lambda hit, ids=expected_ids: hit.document_id in ids,
                    lambda hit: name_of.get(hit.document_id, "~" + hit.filename),
                    timings,
                ),
            }
            if alone is not None:
                record["alone"] = ranks_of(
                    alone,
                    question,
                    lambda hit, q=question: hit.filename in q["expected"],
                    lambda hit: hit.filename,
                )
            if not args.no_diagnose:
                record["home_diag"] = diagnose(
                    home, question, lambda row, ids=expected_ids: row.document_id in ids
                )
                if alone is not None:
                    record["alone_diag"] = diagnose(
                        alone, question, lambda row, q=question: row.filename in q["expected"]
                    )
            records.append(record)
            print(
                corpus.name,
                number,
                {m: record["home"][m]["page"] for m in MODES},
                {m: record["alone"][m]["page"] for m in MODES} if alone else "",
                file=sys.stderr,
                flush=True,
            )
        if alone is not None:
            alone.db.close()
    summary = summarise(records)
    latency = {
        mode: {
            "p50_ms": statistics.median(values) * 1000,
            "p95_ms": sorted(values)[round(0.95 * (len(values) - 1))] * 1000,
        }
        for mode, values in timings.items()
    }
    args.out.write_text(
        json.dumps({"records": records, "summary": summary, "latency": latency}, indent=1)
    )
    print(json.dumps(summary, indent=1))
    print(json.dumps(latency))


def summarise(records: list[dict]) -> dict:
    """hit@1/hit@3/MRR per setting, language, mode and level."""
    out: dict = {}
    for setting in ("home", "alone"):
        for language in ("en", "zh"):
            chosen = [
                r
                for r in records
                if setting in r and r["corpus"].endswith("-zh") == (language == "zh")
            ]
            if not chosen:
                continue
            for mode in MODES:
                pages = [r[setting][mode]["page"] for r in chosen]
                passages = [r[setting][mode]["passage"] for r in chosen if _answered(r)]
                out[f"{setting} {language} {mode}"] = {
                    k: round(v, 3) for k, v in score(pages).items()
                } | {"n": len(pages)}
                out[f"{setting} {language} {mode} passage"] = {
                    k: round(v, 3) for k, v in score(passages).items()
                } | {"n": len(passages)}
    return out


def _answered(record: dict) -> bool:
    return record["has_answer"]


if __name__ == "__main__":
    main()
