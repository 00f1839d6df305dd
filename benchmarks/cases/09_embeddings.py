"""Embeddings: the built-in model's throughput, and what the embedding stage adds to
`kb work`."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.harness import Context, Row, kb, median_of
from tests.docgen import VOCABULARY, make_pdf, paged_text

TITLE = "embeddings"


def run(ctx: Context) -> list[Row]:
    from kb_cli.embeddings.local import LocalEmbedder

    work, sizes = ctx.work, ctx.sizes
    embedder = LocalEmbedder()
    english = " ".join(VOCABULARY[i % len(VOCABULARY)] for i in range(400))[:800]
    count = 2000 if sizes.runs > 1 else 200
    texts = [f"{english} {i}" for i in range(count)]
    embedder.embed(texts[:64])  # load the model first

    def throughput() -> float:
        start = time.perf_counter()
        for i in range(0, count, embedder.batch_size):
            embedder.embed(texts[i : i + embedder.batch_size])
        return count / (time.perf_counter() - start)

    rate = median_of(sizes.runs, throughput)
    pdf = make_pdf(paged_text(sizes.big_pdf_pages))

    def work_with(provider: str) -> float:
        home = Path(tempfile.mkdtemp(dir=work)) / "home"
        path = home.parent / "big.pdf"
        path.write_bytes(pdf)
        kb(home, "upload", str(path), "--submit", KB_EMBEDDINGS=provider)
        start = time.perf_counter()
        kb(home, "work", KB_EMBEDDINGS=provider)
        return time.perf_counter() - start

    with_embeddings, without = [], []
    for _ in range(sizes.runs):  # interleaved, so both see the same machine
        with_embeddings.append(work_with("local"))
        without.append(work_with("none"))
    return [
        Row(
            "built-in model, 800-character English chunks, in process",
            rate,
            1000,
            "chunks/s",
            ">= 1,000 chunks/s (ratio >= 1)",
            "reference: the target itself",
        ),
        Row(
            f"kb work, {sizes.big_pdf_pages}-page PDF, with embeddings vs none",
            statistics.median(with_embeddings),
            statistics.median(without),
            "s",
            "<= 1.5x",
            "reference: the same run with KB_EMBEDDINGS=none",
        ),
    ]
