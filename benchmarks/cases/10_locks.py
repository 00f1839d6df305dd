"""Write-lock hold: how long the worker holds SQLite's write lock while it indexes a huge
document, with uploads going on meanwhile."""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.harness import PY, Context, LockProbe, Row, env_for, kb

TITLE = "write lock"


# `kb work`, timing each of its write transactions from the moment BEGIN IMMEDIATE got
# the lock to the end of COMMIT (the database's `on_transaction` observer); prints the
# longest (and the count) on stderr last. The end of COMMIT includes SQLite's automatic
# checkpoint, which runs after the lock is released: the first argument "no-checkpoint"
# turns those off, to see the lock alone.
HOLDS_WRAPPER = """
import json, sys
from kb_cli.db import Database
from kb_cli.engines import sqlite
if sys.argv.pop(1) == "no-checkpoint":
    sqlite.WAL_CHECKPOINT_PAGES = 0
holds = []
def hold(kind, seconds):
    if kind == "write":
        holds.append(seconds)
Database.on_transaction = hold
from kb_cli.cli import main
try:
    main(sys.argv[1:])
except SystemExit as done:
    code = done.code
holds.sort()
p99 = holds[int(0.99 * (len(holds) - 1))]
print(json.dumps({"longest": holds[-1], "p99": p99, "writes": len(holds)}), file=sys.stderr)
sys.exit(code)
"""


def run(ctx: Context) -> list[Row]:
    """The longest write-lock hold of the worker while a document of `lock_chunks`
    chunks is indexed, with uploads going on; the reference is the same document with
    every chunk in the completion transaction (KB_CHUNK_BATCH above the chunk count:
    kb before batching). Context: the longest wait of another writer for the lock."""
    work, sizes = ctx.work, ctx.sizes
    document = work / "sections.md"
    document.write_text(
        "".join(f"# Section {i}\n\nledger{i} entry\n\n" for i in range(sizes.lock_chunks))
    )
    small = work / "small.txt"
    small.write_text("a small upload during the indexing")
    results = {}
    runs = (
        ("batched", "500", "checkpoint"),
        ("one transaction", str(10 * sizes.lock_chunks), "checkpoint"),
        ("batched, no automatic checkpoint", "500", "no-checkpoint"),
    )
    for label, batch, checkpoint in runs:
        home = Path(tempfile.mkdtemp(dir=work)) / "home"
        extra = {"KB_EMBEDDINGS": "none", "KB_CHUNK_BATCH": batch}
        kb(home, "upload", str(document), "--submit", **extra)
        probe = LockProbe(home / "kb.sqlite3")
        uploads = Uploader(home, small, extra)
        probe.start()
        uploads.start()
        started = time.perf_counter()
        done = subprocess.run(
            [PY, "-c", HOLDS_WRAPPER, checkpoint, "work"],
            env=env_for(home, **extra),
            capture_output=True,
            text=True,
            check=True,
        )
        wall = time.perf_counter() - started
        uploads.stop()
        holds = json.loads(done.stderr.strip().splitlines()[-1])
        probe.stop()
        results[label] = (holds, probe.worst_ms / 1000, wall, uploads)
    (holds, waited, wall, uploads), (old, old_waited, old_wall, old_uploads), bare = (
        results.values()
    )
    return [
        Row(
            f"longest write-lock hold of the worker, {sizes.lock_chunks}-chunk document",
            holds["longest"] * 1000,
            old["longest"] * 1000,
            "ms",
            "<= 100 ms",
            f"{holds['writes']} write transactions (one transaction: {old['writes']}), 99% "
            f"under {holds['p99'] * 1000:.0f} ms; worker "
            f"{wall:.1f} s ({old_wall:.1f} s); another writer waited at most "
            f"{waited:.2f} s ({old_waited:.2f} s); uploads meanwhile {uploads.summary()} "
            f"({old_uploads.summary()})",
            {"uploads_failed": uploads.failed, "reference_uploads_failed": old_uploads.failed},
        ),
        Row(
            "context: the same, SQLite's automatic checkpoint off (the lock alone)",
            bare[0]["longest"] * 1000,
            old["longest"] * 1000,
            "ms",
            "<= 100 ms",
            "a checkpoint runs after COMMIT has released the lock, but inside the timing; "
            f"99% under {bare[0]['p99'] * 1000:.0f} ms",
        ),
    ]


class Uploader(threading.Thread):
    """`kb upload --submit` every 0.3 s (busy timeout 30 s): counts, slowest latency."""

    def __init__(self, home: Path, path: Path, extra: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.home, self.path, self.extra = home, path, extra
        self.latencies: list[float] = []
        self.failed = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.3):
            started = time.perf_counter()
            done = subprocess.run(
                [PY, "-m", "kb_cli", "upload", str(self.path), "--submit"],
                env=env_for(self.home, **self.extra),
                capture_output=True,
            )
            self.latencies.append(time.perf_counter() - started)
            self.failed += done.returncode != 0

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def summary(self) -> str:
        slowest = max(self.latencies, default=0.0)
        return (
            f"{len(self.latencies) - self.failed}/{len(self.latencies)} ok, slowest {slowest:.2f} s"
        )
