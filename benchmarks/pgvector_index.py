"""pgvector's HNSW index against the exact scan on PostgreSQL, at about 100k chunks
of real text (Python sources of this machine, uploaded as .txt through `kb upload`
+ `kb work`, 10% of the files in a second base for a selective filter).

    eval "$(bash .ci/postgres.sh start /tmp/kb-pgv)"   # PostgreSQL 18 with pgvector
    uv run python benchmarks/pgvector_index.py build --url "$KB_TEST_POSTGRES_URL" --mb 70
    # stop it with Ctrl-C once it is too slow, then process the rest in bulk:
    uv run python benchmarks/pgvector_index.py bulk --url "$KB_TEST_POSTGRES_URL" --part 0/2 &
    uv run python benchmarks/pgvector_index.py bulk --url "$KB_TEST_POSTGRES_URL" --part 1/2
    uv run python benchmarks/pgvector_index.py measure --url "$KB_TEST_POSTGRES_URL"

`build` makes a database `kb_pgvector_bench` on that server (once; again with
--rebuild); `measure` reports, in process: exact scan and index latency p50/p95,
recall@10 of the index against the exact ranking for several `ef_search`, the same
with a base filter that keeps 10% of the chunks, the index build time, and BM25's
latency with its plan. Results: benchmarks/README.md, "pgvector on PostgreSQL".
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATABASE = "kb_pgvector_bench"
SOURCES = [
    Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}",
    *sorted(Path("/root/.pyenv/versions").glob("3.12*/lib/python3.12")),
]
SMALL_BASE = "tenth"
QUERIES = 200


def database_url(server_url: str) -> str:
    return server_url.rsplit("/", 1)[0] + f"/{DATABASE}"


def text_files(limit_bytes: int) -> list[Path]:
    """Distinct UTF-8 Python sources of 3-400 kB, in a fixed order, up to the limit."""
    seen, chosen, total = set(), [], 0
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            data = path.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            if not 3_000 <= len(data) <= 400_000 or digest in seen:
                continue
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            seen.add(digest)
            chosen.append(path)
            total += len(data)
            if total >= limit_bytes:
                return chosen
    return chosen


def kb(*args: str, env: dict[str, str]) -> None:
    subprocess.run(["kb", *args], env=env, check=True, stdout=subprocess.DEVNULL)


def build(server_url: str, megabytes: int, rebuild: bool) -> None:
    import psycopg

    admin = psycopg.connect(server_url.replace("+psycopg", ""), autocommit=True)
    exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone()
    if exists and not rebuild:
        print(f"{DATABASE} exists (--rebuild to make it again)")
        return
    admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    admin.execute(f"CREATE DATABASE {DATABASE}")
    files = text_files(megabytes * 1_000_000)
    work = Path(tempfile.mkdtemp(prefix="kb-pgv-"))
    env = {**os.environ, "DATABASE_URL": database_url(server_url), "KB_HOME": str(work / "home")}
    started = time.monotonic()
    try:
        copies: dict[str, list[str]] = {"default": [], SMALL_BASE: []}
        for index, path in enumerate(files):
            copy = work / "files" / f"{index:05d}_{path.stem}.txt"
            copy.parent.mkdir(exist_ok=True)
            shutil.copyfile(path, copy)
            copies[SMALL_BASE if index % 10 == 0 else "default"].append(str(copy))
        kb("upload", copies[SMALL_BASE].pop(), "--base", "default", env=env)  # makes the home
        kb("base", "create", SMALL_BASE, env=env)
        for base, names in copies.items():
            for start in range(0, len(names), 500):
                kb("upload", *names[start : start + 500], "--submit", "--base", base, env=env)
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        workers = [subprocess.Popen(["kb", "work", "--drain"], env=env, **quiet) for _ in "12"]
        for worker in workers:
            worker.wait()
        kb("publish", "--all-reviewed", env=env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"built {len(files)} files in {time.monotonic() - started:.0f} s")


def bulk(server_url: str, megabytes: int, part: int, parts: int) -> None:
    """The documents `build` uploaded that no worker has processed yet, processed here
    in one process with the worker's own steps (parse, chunk, embed with the built-in
    model, the chunk rows and kb's chunk write) and published: the pipeline's 30
    chunks/s on this shared machine would take an hour for 100k."""
    from kb_cli import parsers, queries
    from kb_cli.app import Kb
    from kb_cli.chunking import chunk_blocks, contextual_text, with_context
    from kb_cli.config import resolve_settings
    from kb_cli.embeddings import to_blob
    from kb_cli.worker.pipeline import chunk_row

    os.environ["DATABASE_URL"] = database_url(server_url)
    home = Kb.open(resolve_settings(), actor="bench", create=False)
    embedder, settings = home.embedder, home.settings
    assert embedder is not None
    files = text_files(megabytes * 1_000_000)
    with home.db.read() as conn:
        waiting = conn.execute(
            "SELECT id, filename, revision, latest_task_id FROM documents AS d WHERE NOT"
            " EXISTS (SELECT 1 FROM chunks AS c WHERE c.document_id = d.id)"
            " AND latest_task_id IS NOT NULL ORDER BY filename"
        ).all()
    started, written = time.monotonic(), 0
    waiting = waiting[part::parts]  # side by side, each process its share
    for document_id, filename, revision, task_id in waiting:
        blocks = parsers.parse(
            files[int(filename[:5])], "text/plain", lambda *_: None, settings.limits, lambda: None
        )
        chunks = with_context(chunk_blocks(blocks, settings.chunk_chars), filename)
        vectors = embedder.embed([contextual_text(c.context, c.text) for c in chunks])
        rows = [
            chunk_row(chunk, to_blob(vector), embedder.model, len(vector))
            for chunk, vector in zip(chunks, vectors, strict=True)
        ]
        with home.db.write() as conn:
            beside = home.vectors.beside(conn, [row.embedding for row in rows])
            queries.insert_chunks(conn, document_id, revision, task_id, rows, beside)
            conn.execute(
                "UPDATE ingestion_tasks SET status = 'succeeded' WHERE id = :id", {"id": task_id}
            )
            conn.execute(
                "UPDATE documents SET status = 'published', published_revision = revision"
                " WHERE id = :id",
                {"id": document_id},
            )
        written += len(rows)
    print(f"{len(waiting)} documents, {written} chunks in {time.monotonic() - started:.0f} s")


def percentiles(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"p50 {statistics.median(ordered) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms"


def measure(server_url: str, ef_values: list[int], depth: int) -> None:
    import dataclasses

    from kb_cli.app import Kb
    from kb_cli.config import resolve_settings
    from kb_cli.migrations import pgvector
    from kb_cli.permissions import Scope
    from kb_cli.textsearch import parse_query
    from kb_cli.vectors import pgvector as index
    from kb_cli.vectors.stored import exact_nearest

    os.environ["DATABASE_URL"] = database_url(server_url)
    home = Kb.open(resolve_settings(), actor="bench", create=False)
    embedder = home.embedder
    assert embedder is not None
    with home.db.read() as conn:
        chunks = conn.execute("SELECT count(*) FROM chunks").scalar()
        texts = conn.execute("SELECT text FROM chunks ORDER BY id").scalars()
    random.seed(7)
    # Questions from the corpus's own words: a line of a random chunk (its comments,
    # docstrings and names), never a whole chunk.
    questions = []
    for text in random.sample(texts, QUERIES * 3):
        lines = [line.strip(" #\"'") for line in text.splitlines() if len(line.strip()) > 25]
        if lines:
            questions.append(random.choice(lines)[:120])
        if len(questions) == QUERIES:
            break
    vectors = [embedder.embed_query(question) for question in questions]
    print(f"{chunks} chunks, {len(questions)} questions, depth {depth}")
    raw = home.db.engine.connect(home.settings.database_url, 30)
    model, dim = embedder.model, 256
    with raw.transaction():
        raw.execute(f"DROP INDEX IF EXISTS {pgvector.index_name(model, dim)}")
        started = time.perf_counter()
        pgvector.ensure_index(raw, model, dim)
    print(f"HNSW index build ({model}, {dim}): {time.perf_counter() - started:.1f} s")
    with raw.transaction():
        explain = raw.execute(
            f"EXPLAIN SELECT c.id FROM {pgvector.DISTINCT} v JOIN chunks c"
            f" ON c.embedding_model = v.model AND {pgvector.vector_key('c.')} = v.key"
            " JOIN documents d ON d.id = c.document_id"
            " AND c.revision = d.published_revision WHERE "
            + pgvector.model_condition(model, dim, "v.")
            + f" AND d.base = '{SMALL_BASE}' ORDER BY "
            + pgvector.indexed_expression(dim, "v.")
            + " <#> (SELECT embedding_hv FROM chunks LIMIT 1)::halfvec(256) LIMIT 50"
        ).fetchall()
    print("plan, base-filtered:", " | ".join(row[0].strip() for row in explain[:8]))
    raw.close()

    everything = Scope()
    tenth = dataclasses.replace(Scope(), base=SMALL_BASE)
    hnsw = index.PgVectorIndex()

    def run(nearest, scope: Scope) -> tuple[list[list[tuple[int, float]]], list[float]]:
        answers, seconds = [], []
        for vector in vectors:
            with home.db.read() as conn:
                started = time.perf_counter()
                ranked = nearest(conn, embedder.model, vector, depth, scope, -1.0)
                seconds.append(time.perf_counter() - started)
            answers.append(ranked)
        return answers, seconds

    for label, scope in (("every base", everything), (f"base {SMALL_BASE} (10%)", tenth)):
        truth, seconds = run(exact_nearest, scope)
        print(f"exact scan, {label}: {percentiles(seconds)}")
        for ef in ef_values:
            index.EF_SEARCH = ef
            found, seconds = run(hnsw.nearest, scope)
            pairs = list(zip(found, truth, strict=True))
            recall = statistics.mean(
                len({c for c, _ in f[:10]} & {c for c, _ in t[:10]}) / max(1, len(t[:10]))
                for f, t in pairs
            )
            # Copies of one text (a module vendored twice) have equal vectors: either
            # copy is as near. This one counts a hit at least as near as the 10th.
            tied = statistics.mean(
                sum(score >= t[:10][-1][1] - 1e-6 for _, score in f[:10]) / max(1, len(t[:10]))
                for f, t in pairs
                if t
            )
            print(
                f"hnsw ef_search={ef}, {label}: {percentiles(seconds)}, recall@10 {recall:.3f}"
                f" (ties counted: {tied:.3f})"
            )

    seconds = []
    for question in questions[:50]:
        query = parse_query(question)
        with home.db.read() as conn:
            started = time.perf_counter()
            home.lexical.ranking(conn, query.terms, query.phrases, depth, everything)
            seconds.append(time.perf_counter() - started)
    print(f"BM25 (kb.lexical), every base: {percentiles(seconds)}")
    with home.db.read() as conn:
        matching = conn.execute(
            "SELECT count(*) FROM chunks WHERE to_tsvector('kb_english', regexp_replace("
            "terms, '[^[:alnum:]]+', ' ', 'g')) @@ to_tsquery('simple', 'return')"
        ).scalar()
    print(f"chunks holding the word 'return': {matching} of {chunks}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("build", "bulk", "measure"))
    parser.add_argument("--url", required=True, help="the server's URL (any database)")
    parser.add_argument("--mb", type=int, default=70, help="megabytes of text to upload")
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--part", default="0/1", help="bulk: this process's share, K/N")
    parser.add_argument("--ef", type=int, nargs="*", default=[50, 100, 200])
    parser.add_argument("--depth", type=int, default=50)
    args = parser.parse_args()
    if args.action == "build":
        build(args.url, args.mb, args.rebuild)
    elif args.action == "bulk":
        part, parts = map(int, args.part.split("/"))
        bulk(args.url, args.mb, part, parts)
    else:
        measure(args.url, args.ef, args.depth)


if __name__ == "__main__":
    main()
