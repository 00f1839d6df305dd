"""The 1M-chunk home of benchmarks/scale.py, built in bulk through the product's own
pipeline steps: at the real pipeline's ~100 chunks/s on a shared 2-core machine, 1M
chunks would take days.

Every document is a real upload (`kb upload --submit`, in batches of files) and its
task is claimed, completed and published by kb's own code: `claim.take` claims the
task (its attempt and lease), the worker's `Pipeline` parses, chunks and embeds it with
the built-in model (in the worker's own batches), `chunk_row` makes its rows, and
`Claim.complete` writes them with the task's and the document's new status in one
transaction; `kb publish --all-reviewed` publishes. What is bulk: two processes parse
and embed documents side by side while this one claims and writes, no progress rows,
no stage delays, no heartbeat thread (the lease is long instead), and the vector
index is built once at the end (`kb reindex --vectors`) instead of folded as it grows.

The text: scale.py's staged files (DATA/texts: Python's sources of every installed
version, /usr/share/doc, package documentation, Rust's documentation; 671M characters),
then more real text of this machine staged under DATA/texts-extra (package sources and
documentation in uv's cache and in every Python's site-packages, C headers, Perl and Vim
documentation, manual pages): never random vectors, never copies of one text (an exact
copy of a staged file is skipped). The retrieval benchmark's corpora go first, in the
same base, so that scale.py measures their questions among 1M chunks.

Resumable: run it again and it goes on where it stopped (bulk-progress.json; a task a
killed run had claimed is taken over once its lease ends). When the home is complete
it holds scale-manifest.json (what scale.py reads) and READY (its chunk count):

    nohup nice -n 10 uv run --group bench python benchmarks/bulk_home.py \
        > /work/bench-data/scale/build-1m-bulk.log 2>&1 &
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.homes import DATA, ONE_THREAD, kb_env, kb_run, log
from benchmarks.scale import _readable, corpus_pages, published_chunks

UPLOAD_BATCH = 500
CLAIM_GROUP = 48  # documents claimed before they are handed to the parsing processes
LEASE_SECONDS = 300.0  # no heartbeat here: a group is written well within it


# ---------------------------------------------------------------------------- more text
def _extra_sources() -> list[tuple[str, Path, tuple[str, ...]]]:
    """Real text scale.py's staging does not take (it ran out at 671M characters)."""
    sources: list[tuple[str, Path, tuple[str, ...]]] = []
    sources.append(("uv", Path("/root/.cache/uv/archive-v0"), (".py", ".md", ".rst", ".txt")))
    for lib in sorted(Path("/root/.pyenv/versions").glob("*/lib/python*/site-packages")):
        sources.append((f"site-{lib.parts[4]}", lib, (".py",)))
    sources.append(("debian-py", Path("/usr/lib/python3"), (".py",)))
    sources.append(("include", Path("/usr/include"), (".h",)))
    sources.append(("perl", Path("/usr/share/perl"), (".pm", ".pod")))
    sources.append(("perl-lib", Path("/usr/lib/x86_64-linux-gnu/perl"), (".pm", ".pod")))
    sources.append(("vim", Path("/usr/share/vim"), (".txt", ".vim")))
    sources.append(("man", Path("/usr/share/man"), (".gz",)))
    return [(label, root, suffixes) for label, root, suffixes in sources if root.is_dir()]


def _walk(root: Path, suffixes: tuple[str, ...]):
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            if path.suffix in suffixes and not path.is_symlink():
                yield path


def _text_of(path: Path) -> str | None:
    if path.suffix != ".gz":
        return _readable(path)
    try:  # a manual page: its troff source
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None
    return text if 1_500 <= len(text) <= 300_000 and "\x00" not in text else None


def extra_texts(budget_chars: int) -> list[Path]:
    """More staged files, about budget_chars in all, round robin over the sources, each
    distinct by content from every file staged before (scale.py's included); the list
    is kept (DATA/texts-extra.jsonl), so a rerun takes the same files in the same order."""
    folder = DATA / "texts-extra"
    folder.mkdir(parents=True, exist_ok=True)
    manifest = DATA / "texts-extra.jsonl"
    listed = []
    if manifest.exists():
        listed = [json.loads(line) for line in manifest.read_text().splitlines() if line]
    total = sum(entry["chars"] for entry in listed)
    if total < budget_chars:
        seen = {entry["sha256"] for entry in listed}
        staged = [json.loads(line) for line in (DATA / "texts.jsonl").read_text().splitlines()]
        seen |= {_digest((DATA / "texts" / e["file"]).read_bytes()) for e in staged}
        sources = {entry["source"] for entry in listed}
        walkers = [
            (label, root, _walk(root, suffixes)) for label, root, suffixes in _extra_sources()
        ]
        with manifest.open("a") as out:
            while total < budget_chars and walkers:
                for walker in list(walkers):
                    label, root, files = walker
                    path = next(files, None)
                    if path is None:
                        walkers.remove(walker)
                        continue
                    if str(path) in sources:
                        continue
                    text = _text_of(path)
                    if text is None:
                        continue
                    digest = _digest(text.encode("utf-8"))
                    if digest in seen:
                        continue
                    seen.add(digest)
                    flat = "__".join(path.relative_to(root).parts).removesuffix(".gz")
                    name = f"x{len(listed):07d}-{label}__{flat}"[:180] + ".txt"
                    (folder / name).write_text(text, encoding="utf-8")
                    entry = {"file": name, "source": str(path), "chars": len(text)}
                    entry["sha256"] = digest
                    listed.append(entry)
                    out.write(json.dumps(entry) + "\n")
                    total += len(text)
                    if total >= budget_chars:
                        break
    return [folder / entry["file"] for entry in listed]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def staged_texts() -> list[Path]:
    """scale.py's staged files, in their order."""
    staged = [json.loads(line) for line in (DATA / "texts.jsonl").read_text().splitlines()]
    return [DATA / "texts" / e["file"] for e in staged]


# ---------------------------------------------------------------------------- parsing
class _Quiet:
    """The pipeline's reporter, silent: no progress rows in bulk."""

    def report(self, stage, done: int, total: int) -> None:
        pass

    def checkpoint(self) -> None:
        pass

    def reused(self, chunks: int) -> None:
        pass

    def read_by_ocr(self, pages: int) -> None:
        pass


_KB = None


def _open_for_parsing(home: str) -> None:
    global _KB
    from kb_cli.app import Kb
    from kb_cli.config import resolve_settings

    os.environ.update(ONE_THREAD)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread each: the pool is the parallelism
    _KB = Kb.open(resolve_settings(home), actor="bench")


def _rows_of(job: tuple[str, str, str]):
    """The worker's steps for one stored object: parse and chunk, context, embed in the
    worker's batches, chunk rows. ("ok", rows) or ("fail", code, detail)."""
    from kb_cli.chunking import with_context
    from kb_cli.errors import TaskFailure
    from kb_cli.worker.pipeline import Pipeline, chunk_row

    path, content_type, filename = job
    pipeline = Pipeline(_KB, _Quiet(), None)  # type: ignore[arg-type]
    try:
        chunks = with_context(pipeline.parse(Path(path), content_type), filename)
        vectors = pipeline.embed(chunks)
    except TaskFailure as failure:
        return ("fail", str(failure.code), failure.detail)
    rows = [
        chunk_row(chunk, vector, pipeline.model, pipeline.dim)
        for chunk, vector in zip(chunks, vectors, strict=True)
    ]
    return ("ok", rows)


# ---------------------------------------------------------------------------- the build
def claim_group(claimant, size: int) -> list:
    from kb_cli.worker.claim import BATCH_TASKS, take

    claims: list = []
    while len(claims) < size:
        taken = take(claimant, None, limit=BATCH_TASKS)
        if not taken.claims:
            break
        claims += taken.claims
    return claims


def process_queue(kb, pool) -> tuple[int, int]:
    """Claim every claimable task, in groups; parse and embed them in the pool; write
    each one's rows with its completion. (documents, chunks) written."""
    from kb_cli.config import WorkerOptions
    from kb_cli.lifecycle import ErrorCode
    from kb_cli.worker.claim import Claimant

    options = WorkerOptions(worker_id="bulk", lease_seconds=LEASE_SECONDS)
    claimant = Claimant(kb, options, threading.Event())
    documents = chunks = 0
    while claims := claim_group(claimant, CLAIM_GROUP):
        jobs = []
        for claim in claims:
            path = kb.store.local_path(claim.document.object_key)
            jobs.append((str(path), claim.document.content_type, claim.document.filename))
        for claim, result in zip(claims, pool.imap(_rows_of, jobs), strict=True):
            if result[0] == "ok":
                claim.complete(result[1])
                chunks += len(result[1])
            else:
                claim.fail(ErrorCode(result[1]), result[2])
            documents += 1
    return documents, chunks


def uploaded_names(kb) -> set[str]:
    with kb.db.read() as conn:
        return set(conn.execute("SELECT filename FROM documents").scalars())


def build(home: Path, target: int, extra_chars: int, processes: int) -> dict:
    from benchmarks.scale import open_kb

    home.mkdir(parents=True, exist_ok=True)
    env = kb_env(home, None)
    progress_path = home / "bulk-progress.json"
    stop = home / "STOP"  # a file that ends the build early: what is done is published
    progress = json.loads(progress_path.read_text()) if progress_path.exists() else {}
    started = time.perf_counter() - progress.get("seconds", 0.0)

    def save() -> None:
        progress["seconds"] = round(time.perf_counter() - started, 1)
        progress_path.write_text(json.dumps(progress))

    if "pages" not in progress:
        pages = corpus_pages()
        out = kb_run(env, "upload", *(str(page) for _n, page in pages), "--submit", "--json")
        ids = [json.loads(line).get("document_id") for line in out.splitlines() if line.strip()]
        progress["pages"] = {f"{n}/{p.name}": d for (n, p), d in zip(pages, ids, strict=True)}
        progress["uploaded"], progress["chunks"] = 0, 0
        save()
    texts = staged_texts()
    if progress.get("extra"):
        texts += extra_texts(extra_chars)
    kb = open_kb(home, None)
    with kb.db.read() as conn:  # what a stopped run wrote, counted again
        progress["chunks"] = conn.execute("SELECT count(*) FROM chunks").scalar()
    context = multiprocessing.get_context("fork")
    with context.Pool(processes, initializer=_open_for_parsing, initargs=(str(home),)) as pool:
        while True:
            documents, chunks = process_queue(kb, pool)
            progress["chunks"] += chunks
            save()
            log(f"bulk: {documents} documents, {chunks} chunks; {progress['chunks']} in all")
            first = progress["uploaded"]
            if first >= len(texts) and not progress.get("extra"):
                texts += extra_texts(extra_chars)  # staged once, when first needed
                progress["extra"] = True
                log(f"bulk: {len(texts)} files of text in all")
            if progress["chunks"] >= target or first >= len(texts) or stop.exists():
                break
            batch = texts[first : first + UPLOAD_BATCH]
            # kb stores a file uploaded twice twice: a batch a stopped run uploaded
            # before it could say so is not uploaded again.
            names = uploaded_names(kb)
            fresh = [path for path in batch if path.name not in names]
            if fresh:
                kb_run(env, "upload", *map(str, fresh), "--submit", "--json")
            progress["uploaded"] = first + len(batch)
            save()
    kb.db.close()
    kb_run(env, "publish", "--all-reviewed")
    chunks = published_chunks(env)
    manifest = {
        "engine": "sqlite",
        "size": "1m",
        "files": progress["uploaded"] + len(progress["pages"]),
        "chunks": chunks,
        "pages": progress["pages"],
        "build_seconds": {"bulk": progress["seconds"]},
        "built": "bulk",
    }
    (home / "scale-manifest.json").write_text(json.dumps(manifest, indent=1))
    # READY only for a complete home; one stopped early says PARTIAL (run again to go on).
    marker = "READY" if progress["chunks"] >= target else "PARTIAL"
    (home / ("PARTIAL" if marker == "READY" else "READY")).unlink(missing_ok=True)
    (home / marker).write_text(f"{chunks}\n")
    log(f"bulk: {chunks} published chunks in {progress['seconds']:.0f} s; {marker}")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=DATA / "sqlite-1m-bulk")
    parser.add_argument("--chunks", type=int, default=1_000_000, help="stop past this many")
    parser.add_argument(
        "--extra-chars", type=int, default=400_000_000, help="more text to stage, at most"
    )
    parser.add_argument("--processes", type=int, default=2, help="parsing processes")
    args = parser.parse_args()
    os.environ.update(ONE_THREAD)
    build(args.home, args.chunks, args.extra_chars, args.processes)


if __name__ == "__main__":
    main()
