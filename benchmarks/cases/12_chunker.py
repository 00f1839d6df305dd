"""Chunker on unpunctuated text: chunking time grows linearly with the text."""

from __future__ import annotations

import time

from benchmarks.harness import Context, Row, median_of

TITLE = "chunker"


def run(ctx: Context) -> list[Row]:
    """Chunking time of N MB of text without sentence punctuation, against 4x the time
    of N/4 MB: about 1.0 when linear (the old chunker was quadratic here)."""
    from kb_cli.chunking import chunk_blocks
    from kb_cli.parsers import Block

    sizes = ctx.sizes
    rows = []
    for label, unit in (("words, no punctuation", "ledger entry "), ("no spaces", "x")):
        full = (unit * (sizes.chunker_mb * 2**20 // len(unit) + 1))[: sizes.chunker_mb * 2**20]
        quarter = full[: len(full) // 4]

        def timed(text: str) -> float:
            started = time.perf_counter()
            chunk_blocks([Block(text)])
            return time.perf_counter() - started

        whole = median_of(sizes.runs, lambda text=full: timed(text))
        part = median_of(sizes.runs, lambda text=quarter: timed(text))
        rows.append(
            Row(
                f"{sizes.chunker_mb} MB text, {label}",
                whole,
                4 * part,
                "s",
                "<= 1.3x (linear)",
                "reference: 4 x the time of a quarter of the text",
            )
        )
    return rows
