"""Stage artefacts: a retry after the embedding provider failed reuses the kept parse."""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.harness import Context, Row, kb
from tests.docgen import make_pdf, paged_text
from tests.loopback import FlakyEmbeddings, serving

TITLE = "stage artefacts"


def run(ctx: Context) -> list[Row]:
    """A big PDF whose embedding provider fails twice then recovers: the three `kb work`
    attempts with the parse kept between them, against the same attempts with the kept
    parse deleted before each (every attempt downloads and parses, as before)."""
    work, sizes = ctx.work, ctx.sizes
    pages = sizes.amplification_pages
    pdf_path = work / "retried.pdf"
    pdf_path.write_bytes(make_pdf(paged_text(pages, words_per_page=250)))
    totals: dict[str, list[float]] = {"kept": [], "parsed every attempt": []}
    stored: list[tuple[int, int]] = []  # (kept parse, chunk text) bytes
    with serving(FlakyEmbeddings) as port:
        extra = {
            "KB_EMBEDDINGS": "openai",
            "KB_EMBEDDING_URL": f"http://127.0.0.1:{port}/v1",
            "KB_EMBEDDING_MODEL": "flaky",
        }
        for _ in range(sizes.runs):  # interleaved, so both see the same machine
            for mode, runs in totals.items():
                home = Path(tempfile.mkdtemp(dir=work)) / "home"
                kb(home, "upload", str(pdf_path), "--submit", **extra)
                FlakyEmbeddings.failures_left = 2
                seconds, kept_bytes, text_bytes = _three_attempts(home, mode == "kept", extra)
                runs.append(seconds)
                stored += [(kept_bytes, text_bytes)] if mode == "kept" else []
    payload, text = stored[0]
    return [
        Row(
            f"{pages}-page PDF, provider fails twice then recovers: 3 kb work attempts, wall",
            statistics.median(totals["kept"]),
            statistics.median(totals["parsed every attempt"]),
            "s",
            "report",
            "reference: the same attempts, each downloading and parsing again (before)",
        ),
        Row(
            "the kept parse in the database (zlib JSON) vs the chunks' text",
            payload / 1024,
            text / 1024,
            "KiB",
            "report",
        ),
    ]


def _three_attempts(home: Path, keep: bool, extra: dict[str, str]) -> tuple[float, int, int]:
    """Seconds of the three attempts, the kept parse's bytes after the first (0 when
    not kept) and the bytes of the chunks' text at the end."""
    database = home / "kb.sqlite3"
    total, kept_bytes = 0.0, 0
    for attempt in range(3):
        if attempt and not keep:
            with sqlite3.connect(database) as conn:
                conn.execute("DELETE FROM parse_artefacts")
        started = time.perf_counter()
        done = kb(home, "work", "--backoff-seconds", "0", **extra)
        total += time.perf_counter() - started
        if attempt and ("reused parse" in done.stderr) != keep:
            raise RuntimeError(f"attempt {attempt + 1}: the parse was not reused as intended")
        if attempt == 0:
            with sqlite3.connect(database) as conn:
                sql = "SELECT length(payload) FROM parse_artefacts"
                [kept_bytes] = conn.execute(sql).fetchone()
    with sqlite3.connect(database) as conn:
        status, text_bytes = conn.execute(
            "SELECT status, (SELECT sum(length(text)) FROM chunks) FROM ingestion_tasks"
        ).fetchone()
    if status != "succeeded":
        raise RuntimeError(f"the third attempt ended {status}")
    return total, kept_bytes, text_bytes
