"""Chunks across page ends, or cut at them: the retrieval questions asked of PDFs.

The English corpora of `retrieval.py` (httpx, flask: Markdown and reStructuredText
nobody here wrote) are rendered as PDFs, 50 lines of at most 95 characters a page, and
ingested twice through the real pipeline: once as kb chunks them (a chunk runs on
across a page end and records the pages it covers, `page` and `page_end`), once with
every chunk cut at a page end (each page's blocks packed on their own). The same
questions are asked of both: document and passage hit rates of the default search, as
`retrieval.py` counts them, and how many chunks each way made.

    uv run python benchmarks/pdf_pages.py            # ~20 s
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import retrieval

from tests.docgen import make_pdf

LINES_PER_PAGE, LINE_CHARS = 50, 95
WAYS = ("across pages", "cut at page ends")


def as_pdf(text: str) -> bytes:
    lines = [part for line in text.splitlines() for part in textwrap.wrap(line, LINE_CHARS) or [""]]
    pages = range(0, max(len(lines), 1), LINES_PER_PAGE)
    return make_pdf(["\n".join(lines[start : start + LINES_PER_PAGE]) for start in pages])


def cut_at_page_ends(chunk_blocks):
    """`chunk_blocks`, packing each page's blocks on their own."""

    def chunked(blocks, *args, **kwargs):
        chunks = []
        for _page, run in itertools.groupby(blocks, key=lambda block: block.page):
            for chunk in chunk_blocks(list(run), *args, **kwargs):
                chunks.append(dataclasses.replace(chunk, index=len(chunks)))
        return chunks

    return chunked


def as_pdfs(corpus: retrieval.Corpus, folder: Path) -> retrieval.Corpus:
    pages = []
    for path in corpus.pages:
        target = folder / f"{path.name}.pdf"
        target.write_bytes(as_pdf(path.read_text(encoding="utf-8")))
        pages.append(target)
    questions = [
        {**question, "expected": [f"{name}.pdf" for name in question["expected"]]}
        for question in corpus.questions
    ]
    return retrieval.Corpus(corpus.name, corpus.language, pages, questions)


def measure(corpus: retrieval.Corpus, home: Path) -> dict:
    kb = retrieval.ingest(corpus, home)
    ranks = retrieval.evaluate(kb, corpus)
    with kb.db.read() as conn:
        chunks, spanning = conn.execute("SELECT count(*), count(page_end) FROM chunks").one()
    return {
        "documents": retrieval.score(ranks["default"]),
        "passages": retrieval.score(ranks["default:passage"]),
        "chunks": chunks,
        "chunks spanning pages": spanning,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", help="only this corpus (repeatable)")
    args = parser.parse_args()
    from kb_cli.worker import pipeline

    built = pipeline.chunk_blocks
    for corpus in retrieval.load_corpora(args.corpus or ["httpx", "flask"]):
        with tempfile.TemporaryDirectory() as scratch:
            pdfs = as_pdfs(corpus, Path(scratch))
            for way in WAYS:
                pipeline.chunk_blocks = built if way == WAYS[0] else cut_at_page_ends(built)
                row = measure(pdfs, Path(scratch) / way.replace(" ", "-"))
                print(json.dumps({"corpus": corpus.name, "way": way, **row}), flush=True)
    pipeline.chunk_blocks = built


if __name__ == "__main__":
    main()
