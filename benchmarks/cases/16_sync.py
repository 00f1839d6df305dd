"""`kb sync` of a tree of small files: unchanged (no write transaction) against
`rsync -an --delete` over the same tree, and with some files changed (hashed and
stored) against hashing those files alone."""

from __future__ import annotations

import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.harness import PY, Context, Row, env_for, kb

TITLE = "sync"

PER_FOLDER = 100

HASH_FILES = """
import hashlib, sys
for name in sys.stdin.read().split("\\n"):
    if name:
        with open(name, "rb") as f:
            hashlib.sha256(f.read()).hexdigest()
"""


def run(ctx: Context) -> list[Row]:
    sizes = ctx.sizes
    root = Path(tempfile.mkdtemp(dir=ctx.work))
    source = make_tree(root / "src", sizes.sync_files)
    home = root / "home"
    env = env_for(home)
    kb(home, "sync", str(source))  # the first sync: every file added
    rows = [unchanged_row(ctx, root, source, home, env)]
    rows.append(changed_row(root, source, env, sizes.sync_changed))
    return rows


def make_tree(source: Path, count: int) -> Path:
    for i in range(count):
        folder = source / f"dir{i // PER_FOLDER:03}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"note{i:05}.md").write_text(f"# Note {i}\n\nThe text of note {i}.\n")
    return source


def unchanged_row(ctx: Context, root: Path, source: Path, home: Path, env: dict) -> Row:
    mirror = root / "mirror"
    shutil.copytree(source, mirror)  # what rsync compares against: nothing to do
    rsync = shutil.which("rsync")
    writes_before = database_writes(home)
    sync_times, rsync_times = [], []
    for _ in range(max(ctx.sizes.runs, 3)):  # interleaved, so noise falls on both
        sync_times.append(wall([PY, "-m", "kb_cli", "sync", str(source), "--json"], env))
        if rsync:
            rsync_times.append(wall([rsync, "-an", "--delete", f"{source}/", f"{mirror}/"], env))
    writes = database_writes(home) - writes_before
    return Row(
        f"kb sync, unchanged tree of {ctx.sizes.sync_files} files",
        statistics.median(sync_times),
        statistics.median(rsync_times) if rsync else None,
        "s",
        "<= 3x rsync -an --delete; no write",
        f"database changes during the unchanged syncs: {writes}"
        + ("" if rsync else "; rsync is not installed: no reference"),
        {"writes": writes},
    )


def changed_row(root: Path, source: Path, env: dict, changed: int) -> Row:
    settle(root / "home")
    files = sorted(source.rglob("*.md"))[:changed]
    for path in files:
        path.write_text(path.read_text() + "An edit.\n")
    start = time.perf_counter()
    done = subprocess.run(
        [PY, "-m", "kb_cli", "sync", str(source), "--json"], env=env, capture_output=True
    )
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-500:]
    actions = done.stdout.decode().count('"action": "changed"')
    assert actions == changed, f"{actions} of {changed} files were synced as changed"
    listing = "\n".join(str(path) for path in files)
    start = time.perf_counter()
    subprocess.run([PY, "-c", HASH_FILES], input=listing.encode(), check=True)
    hashing = time.perf_counter() - start
    return Row(
        f"kb sync, {changed} of the files changed",
        seconds,
        hashing,
        "s",
        "reported",
        "reference: reading and hashing the changed files alone; kb also stores each "
        "file and writes its revision and task",
    )


def settle(home: Path) -> None:
    """The first sync's tasks cancelled, as `kb cancel` leaves them (task cancelled,
    document draft): a changed file then becomes a new revision, as it would of a
    published document, without processing 10,000 tasks first."""
    conn = sqlite3.connect(home / "kb.sqlite3")
    with conn:
        conn.execute("UPDATE ingestion_tasks SET status = 'cancelled'")
        conn.execute("UPDATE documents SET status = 'draft'")
    conn.close()


def wall(command: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, capture_output=True, check=True)
    return time.perf_counter() - start


def database_writes(home: Path) -> int:
    """Rows the audit trail gained plus the sum of document versions: any write of a
    sync shows in one of them."""
    conn = sqlite3.connect(home / "kb.sqlite3")
    try:
        audit = conn.execute("SELECT count(*) FROM audit_events").fetchone()[0]
        versions = conn.execute("SELECT coalesce(sum(version), 0) FROM documents").fetchone()[0]
    finally:
        conn.close()
    return int(audit) + int(versions)
