"""The SQLite vector index (kb_cli/vectors/signfile.py) against the exact scan, on a home
of N chunks of real text with real vectors (benchmarks/README.md, "A vector index on
SQLite").

    uv run python benchmarks/vector_index.py VECTORS.npy TEXTS.jsonl N [WORK_DIR [QUESTIONS]]

VECTORS.npy: float16 rows made by kb's built-in model from TEXTS.jsonl's `context` and
`text` (one JSON object a line, same order), e.g. Python sources cut by kb's chunker.
The home gets 100 published documents through the real CLI; their chunks are then
written in bulk by SQL (the worker's columns, lexical terms left empty: only vector
search is measured). Reports in-process p50/p95 of both, recall@10 of the index against
the exact ranking, the build, the file, and whole `kb search --mode vector` processes.
"""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = 100


def main() -> None:
    vectors_file, texts_file, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    work = Path(sys.argv[4]) if len(sys.argv) > 4 else Path(tempfile.mkdtemp())
    home = work / f"home-{n}"
    env = {**os.environ, "KB_HOME": str(home)}
    env.pop("DATABASE_URL", None)
    if not (home / "kb.sqlite3").exists():
        _make_home(home, env, vectors_file, texts_file, n)
    os.environ.update({"KB_HOME": str(home)})
    from kb_cli.app import Kb
    from kb_cli.config import resolve_settings
    from kb_cli.permissions import Scope
    from kb_cli.vectors.signfile import SignFileIndex, build, directory_for, writing
    from kb_cli.vectors.stored import exact_nearest

    kb = Kb.open(resolve_settings(), create=False)
    assert kb.embedder is not None
    model = kb.embedder.model
    directory = directory_for(kb.settings)
    started = time.perf_counter()
    with writing(directory, wait=True):
        report = build(kb.db, directory, model, 256, incremental=False)
    build_seconds = time.perf_counter() - started
    questions = _questions(texts_file, n)[: int(sys.argv[5]) if len(sys.argv) > 5 else None]
    queries = [kb.embedder.embed_query(question) for question in questions]
    index = SignFileIndex(directory, 0, _no_fallback)
    timings: dict[str, list[float]] = {"exact": [], "index": []}
    recalls = []
    for query in queries:
        results = {}
        for name, nearest in (("exact", exact_nearest), ("index", index.nearest)):
            with kb.db.read() as conn:
                began = time.perf_counter()
                results[name] = nearest(conn, model, query, 50, Scope(None), 0.2)
                timings[name].append(time.perf_counter() - began)
        truth = {chunk for chunk, _ in results["exact"][:10]}
        if truth:
            recalls.append(len(truth & {c for c, _ in results["index"][:10]}) / len(truth))
    out = {
        "chunks": n,
        "queries": len(queries),
        "build_seconds": round(build_seconds, 2),
        "index_mib": round(report.bytes / 2**20, 1),
        "recall_at_10": round(float(np.mean(recalls)), 4),
    }
    for name, values in timings.items():
        ms = sorted(1000 * value for value in values)
        out[f"{name}_p50_ms"] = round(statistics.median(ms), 1)
        out[f"{name}_p95_ms"] = round(ms[int(0.95 * (len(ms) - 1))], 1)
    out |= _processes(env, questions[:5], directory)
    print(json.dumps(out, indent=1))


def _no_fallback(*args):
    raise AssertionError("the index fell back to the exact scan")


def _questions(texts_file: str, n: int) -> list[str]:
    """The retrieval benchmark's English questions, and first lines of chunks outside
    the home (texts the home does not hold word for word)."""
    found = []
    for corpus in ("flask", "httpx"):
        path = ROOT / "benchmarks" / "corpora" / corpus / "questions.jsonl"
        found += [json.loads(line)["question"] for line in path.read_text().splitlines()]
    with open(texts_file) as lines:
        rest = [json.loads(line)["text"] for i, line in enumerate(lines) if i >= n]
    rng = np.random.default_rng(0)
    picks = rng.choice(len(rest), min(60, len(rest)), replace=False) if rest else []
    found += [rest[i].strip().split("\n")[0][:120] for i in picks]
    return [question for question in found if question.strip()]


def _make_home(home: Path, env: dict[str, str], vectors_file: str, texts_file: str, n: int):
    seeds = Path(tempfile.mkdtemp())
    names = []
    for i in range(DOCUMENTS):
        path = seeds / f"part-{i:03d}.txt"
        path.write_text(f"Part {i} of the bulk corpus.\n")
        names.append(str(path))
    kb = [sys.executable, "-m", "kb_cli"]
    for step in (
        ["upload", *names, "--submit"],
        ["work", "--drain"],
        ["publish", "--all-reviewed"],
    ):
        subprocess.run([*kb, *step, "--json"], env=env, check=True, capture_output=True)
    vectors = np.load(vectors_file, mmap_mode="r")
    db = sqlite3.connect(home / "kb.sqlite3")
    owners = db.execute(
        "SELECT c.document_id, c.revision, c.task_id, c.embedding_model FROM chunks AS c "
        "JOIN documents AS d ON d.id = c.document_id AND c.revision = d.published_revision"
    ).fetchall()
    assert len(owners) == DOCUMENTS
    with open(texts_file) as lines:
        rows = []
        for i, line in zip(range(n), lines, strict=False):
            document, revision, task, model = owners[i % DOCUMENTS]
            record = json.loads(line)
            blob = vectors[i].astype("<f2").tobytes()
            rows.append(
                (document, revision, 1 + i // DOCUMENTS, task, record["text"], "", 0, blob,
                 model, 256, record["context"])
            )  # fmt: skip
    db.executemany(
        "INSERT INTO chunks (document_id, revision, chunk_index, task_id, text, terms,"
        " term_count, embedding, embedding_model, embedding_dim, context)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    db.commit()
    db.close()


def _high_water_mib(pid: int) -> float:
    """The peak resident memory of a running process's own image (VmHWM: reset at exec,
    unlike a child's ru_maxrss, which starts from its parent's)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _processes(env: dict[str, str], questions: list[str], directory: Path) -> dict[str, float]:
    """Whole `kb search --mode vector` processes, with the index and without it: median
    wall time, and the peak resident memory of the process."""
    out: dict[str, float] = {}
    hidden = directory.with_name(directory.name + "-hidden")
    for name in ("index", "exact"):
        if name == "exact":
            directory.rename(hidden)
        walls, peaks = [], []
        try:
            for question in questions:
                began = time.perf_counter()
                child = subprocess.Popen(
                    [sys.executable, "-m", "kb_cli", "search", question, "--mode", "vector",
                     "--json"], env=env, stdout=subprocess.DEVNULL,
                )  # fmt: skip
                peak = 0.0
                while child.poll() is None:
                    peak = max(peak, _high_water_mib(child.pid))
                    time.sleep(0.005)
                walls.append(time.perf_counter() - began)
                peaks.append(peak)
                assert child.returncode == 0
        finally:
            if name == "exact":
                hidden.rename(directory)
        out[f"process_{name}_median_s"] = round(statistics.median(walls), 3)
        out[f"process_{name}_peak_mib"] = round(max(peaks), 1)
    out["this_process_peak_mib"] = round(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
    )
    return out


if __name__ == "__main__":
    main()
