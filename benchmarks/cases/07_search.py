"""Search latency: lexical search in process against the raw FTS5 query, one base and
every base, and whole `kb search` processes, hybrid against lexical."""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks.harness import DOCUMENT_ROWS, Context, Row, Sizes, kb, median_of
from tests.docgen import VOCABULARY

TITLE = "search latency"


def run(ctx: Context) -> list[Row]:
    from kb_cli.app import Kb
    from kb_cli.config import resolve_settings
    from kb_cli.ranking import SearchMode
    from kb_cli.services import search
    from kb_cli.textsearch import words

    work, sizes = ctx.work, ctx.sizes
    rows = []
    for count in sizes.search_chunks:
        home = Path(tempfile.mkdtemp(dir=work)) / "home"
        fill_chunks(home, count)
        service = Kb.open(resolve_settings(str(home), None, None), actor="bench")
        raw = sqlite3.connect(home / "kb.sqlite3")
        for label, query in (("English", "retention policy"), ("Chinese", "知识库入库")):
            terms = " OR ".join(f'"{w}"' for w in words(query))  # segmented, as kb does

            def ours(query: str = query, service: Kb = service) -> float:
                start = time.perf_counter()
                search.search(service, search.SearchRequest(query, 10, SearchMode.LEXICAL))
                return (time.perf_counter() - start) * 1000

            def in_scope(query: str = query, service: Kb = service) -> float:
                """--base: BM25 over one base's postings instead of FTS5's bm25()."""
                start = time.perf_counter()
                request = search.SearchRequest(query, 10, SearchMode.LEXICAL, base="default")
                search.search(service, request)
                return (time.perf_counter() - start) * 1000

            def reference(terms: str = terms, raw=raw) -> float:
                start = time.perf_counter()
                raw.execute(
                    "SELECT c.document_id, c.text, bm25(chunks_terms) AS s FROM chunks_terms "
                    "JOIN chunks c ON c.id = chunks_terms.rowid WHERE chunks_terms MATCH ? "
                    "ORDER BY s LIMIT 10",
                    (terms,),
                ).fetchall()
                return (time.perf_counter() - start) * 1000

            ours(), in_scope(), reference()  # warm the page cache for all
            n = 30 if sizes.runs > 1 else 5
            mine = median_of(n, ours)
            scoped = median_of(n, in_scope)
            ref = median_of(n, reference)
            rows.append(
                Row(
                    f"{count} published chunks, {label}, lexical (in process)",
                    mine,
                    ref,
                    "ms",
                    "<= 1.5x raw FTS5; well under 100 ms",
                    "reference: the same FTS5 query with sqlite3, no visibility join",
                )
            )
            rows.append(
                Row(
                    f"{count} published chunks, {label}, lexical, one base (--base)",
                    scoped,
                    ref,
                    "ms",
                    "report",
                    "BM25 counted over the base's postings; a reader of some bases pays this",
                )
            )
        raw.close()
        rows.append(hybrid_process(home, count, sizes))
    return rows


def hybrid_process(home: Path, count: int, sizes: Sizes) -> Row:
    """Whole `kb search` processes: hybrid (load the model, embed the query, read every
    published vector, fuse) against lexical-only on the same database, interleaved."""
    question = "How long is the retention policy for invoices?"

    def run(mode: str) -> float:
        start = time.perf_counter()
        kb(home, "search", question, "--mode", mode, "--json")
        return time.perf_counter() - start

    run("hybrid"), run("lexical")  # warm caches
    hybrid, lexical = [], []
    for _ in range(10 if sizes.runs > 1 else 2):
        hybrid.append(run("hybrid"))
        lexical.append(run("lexical"))
    return Row(
        f"{count} published chunks, whole `kb search` process, hybrid",
        statistics.median(hybrid),
        statistics.median(lexical),
        "s",
        "<= 2x lexical-only kb search" if count <= 10_000 else "report",
        "reference: the same process with --mode lexical; both include start-up",
    )


def fill_chunks(home: Path, count: int) -> None:
    """`count` published chunks with words in both scripts and 256-d float16 vectors of
    the built-in model's name (random unit vectors: search costs the same)."""
    import numpy as np

    from kb_cli.embeddings.local import MODEL_NAME
    from kb_cli.textsearch import count_words, index_terms

    kb(home, "db", "upgrade")  # creates the schema
    conn = sqlite3.connect(home / "kb.sqlite3")
    chinese = "知识库入库流程审核发布检索错误码文档上传草稿任务解析切分索引"
    per_doc = 50
    docs, chunks = [], []
    now = "2026-01-01T00:00:00.000000Z"
    vectors = np.random.default_rng(7).standard_normal((count, 256)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors.astype("<f2")
    for d in range(count // per_doc):
        doc_id = str(uuid.uuid4())
        docs.append(
            (
                doc_id,
                f"doc{d}.txt",
                "text/plain",
                1,
                "0" * 64,
                uuid.uuid4().hex,
                "published",
                1,
                1,
                1,
                None,
                now,
                now,
            )
        )
        for c in range(per_doc):
            n = d * per_doc + c
            words = " ".join(VOCABULARY[(n * 7 + i * 3) % len(VOCABULARY)] for i in range(60))
            zh = "".join(chinese[(n + i) % len(chinese)] for i in range(40))
            text = f"{words} {zh}"
            terms = index_terms(text)
            blob = vectors[n].tobytes()
            chunks.append(
                (doc_id, 1, c, "t", text, terms, count_words(terms), blob, MODEL_NAME, 256)
            )
    conn.executemany(DOCUMENT_ROWS, docs)
    conn.executemany(
        "INSERT INTO chunks (document_id, revision, chunk_index, task_id, text, terms, "
        "term_count, embedding, embedding_model, embedding_dim) VALUES (?,?,?,?,?,?,?,?,?,?)",
        chunks,
    )
    conn.commit()
    conn.close()
