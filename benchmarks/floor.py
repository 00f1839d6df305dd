"""The floor of bulk ingestion: what any tool must do to make files searchable by
words and by meaning, in one process and one SQLite file, nothing else.

It reads each file, parses it with kb's own text parser, cuts it with kb's chunker
(the same chunks, titles and headings as `kb work`), embeds each chunk with the same
built-in WordLlama model in the same batches, and writes text, vector and FTS5 rows in
one transaction. No queue, task, audit, lease or second process. benchmarks/scale.py
compares `kb work` against it (the issue's target: at most 1.2x this time).

    uv run --group bench python benchmarks/floor.py FILE... [--database PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def ingest(paths: list[Path], database: Path) -> dict[str, float]:
    from kb_cli.chunking import chunk_blocks, contextual_text, with_context
    from kb_cli.embeddings import to_blob
    from kb_cli.embeddings.local import LocalEmbedder
    from kb_cli.parsers import parse
    from kb_cli.parsers.detect import detect
    from kb_cli.textsearch import TOKENIZER, index_terms

    started = time.perf_counter()
    embedder = LocalEmbedder()
    embedder.embed(["warm up"])  # the model loaded, as a running worker has it
    loaded = time.perf_counter()
    conn = sqlite3.connect(database)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(
        "CREATE TABLE chunks (id INTEGER PRIMARY KEY, file TEXT, idx INTEGER, text TEXT, "
        "context TEXT, embedding BLOB)"
    )
    conn.execute(f"CREATE VIRTUAL TABLE chunks_terms USING fts5(terms, tokenize='{TOKENIZER}')")
    count = 0
    with conn:
        for path in paths:
            kind = detect(path, path.name)
            blocks = parse(path, kind.content_type, lambda done, total: None)
            chunks = with_context(chunk_blocks(blocks), path.name)
            texts = [contextual_text(chunk.context, chunk.text) for chunk in chunks]
            vectors = []
            for start in range(0, len(texts), embedder.batch_size):
                vectors.extend(embedder.embed(texts[start : start + embedder.batch_size]))
            rows = [
                (count + i, path.name, chunk.index, chunk.text, chunk.context, to_blob(vector))
                for i, (chunk, vector) in enumerate(zip(chunks, vectors, strict=True))
            ]
            conn.executemany("INSERT INTO chunks VALUES (?, ?, ?, ?, ?, ?)", rows)
            conn.executemany(
                "INSERT INTO chunks_terms (rowid, terms) VALUES (?, ?)",
                [(count + i, index_terms(text)) for i, text in enumerate(texts)],
            )
            count += len(chunks)
    conn.close()
    finished = time.perf_counter()
    return {
        "files": len(paths),
        "chunks": count,
        "seconds": finished - loaded,
        "seconds_with_start": finished - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--database", type=Path, help="write here (default: a temporary file)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kb-floor-") as scratch:
        database = args.database or Path(scratch) / "floor.sqlite3"
        result = ingest(args.files, database)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['chunks']} chunks from {result['files']} files in "
            f"{result['seconds']:.2f} s ({result['chunks'] / result['seconds']:.0f} chunks/s)"
        )


if __name__ == "__main__":
    main()
