"""What the benchmark cases share: the sizes, the row a case reports, and running kb
and reference processes on data built in a scratch directory."""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PY = sys.executable


@dataclass
class Sizes:
    tiny_docs: int = 2000
    batch_pdfs: int = 40
    batch_pages: int = 50
    contention_workers: int = 8
    big_pdf_pages: int = 200
    status_docs: int = 10_000
    search_chunks: tuple[int, ...] = (10_000, 100_000)
    amplification_pages: int = 500
    lock_chunks: int = 300_000
    parse_cost_docs: int = 200
    chunker_mb: int = 50
    sync_files: int = 10_000
    sync_changed: int = 1_000
    runs: int = 3


QUICK = Sizes(
    tiny_docs=40,
    batch_pdfs=4,
    batch_pages=5,
    contention_workers=4,
    big_pdf_pages=10,
    status_docs=200,
    search_chunks=(500,),
    amplification_pages=20,
    lock_chunks=2_000,
    parse_cost_docs=10,
    chunker_mb=2,
    sync_files=200,
    sync_changed=20,
    runs=1,
)


@dataclass
class Row:
    """One measurement of a case against its reference; the runner fills in `case`."""

    metric: str
    kb: float
    reference: float | None
    unit: str
    target: str
    note: str = ""
    extra: dict = field(default_factory=dict)
    case: str = ""

    @property
    def ratio(self) -> float | None:
        if self.reference in (None, 0):
            return None
        return self.kb / self.reference


@dataclass(frozen=True)
class Context:
    """What a case's `run` receives: a scratch directory of its own and the sizes."""

    work: Path
    sizes: Sizes


# Bytecode as an installed tool has it (pip compiles on install): without a cache, every
# kb process would compile its own modules from source, which no reference script pays.
PYCACHE = Path(tempfile.gettempdir()) / "kb-bench-pycache"


def env_for(home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in ("DATABASE_URL", "OBJECT_STORE_ROOT", "KB_TOKEN", "CI", "PYTHONDONTWRITEBYTECODE")
    }
    env.update(KB_HOME=str(home), NO_COLOR="1", PYTHONPYCACHEPREFIX=str(PYCACHE), **extra)
    return env


def kb(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [PY, "-m", "kb_cli", *args], env=env_for(home, **extra), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"kb {' '.join(args[:3])} failed: {done.stderr[-500:]}")
    return done


def peak_rss_of(command: list[str], env: dict[str, str]) -> tuple[float, float, str, str]:
    """Wall seconds and peak RSS (MiB) of one child, measured by a wrapper process so the
    peak belongs to that child alone."""
    done = subprocess.run(
        [PY, "-c", _RSS_WRAPPER, *command], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{command[2:5]} failed: {done.stderr[-500:]}")
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["wall"], report["rss_mib"], done.stdout, done.stderr


_RSS_WRAPPER = """
import json, os, resource, subprocess, sys, time
start = time.perf_counter()
child = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
sys.stdout.write(child.stdout)
sys.stderr.write(child.stderr)
report = {"wall": wall, "rss_mib": rss, "code": child.returncode}
sys.stderr.write("\\n" + json.dumps(report) + "\\n")
sys.exit(child.returncode)
"""


def median_of(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


def upload_tiny(home: Path, count: int) -> list[str]:
    folder = home.parent / f"tiny-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    paths = []
    for i in range(count):
        path = folder / f"t{i}.txt"
        path.write_text(f"Tiny document {i} about ledgers and invoices.\n")
        paths.append(str(path))
    records = []
    for start in range(0, len(paths), 500):
        out = kb(home, "upload", *paths[start : start + 500], "--submit", "--json").stdout
        records += [json.loads(line)["task_id"] for line in out.splitlines()]
    return records


class LockProbe(threading.Thread):
    """Takes the write lock every few ms (as a claim does) and records the longest wait."""

    def __init__(self, database: Path) -> None:
        super().__init__(daemon=True)
        self.database = database
        self.worst_ms = 0.0
        self._halt = threading.Event()

    def run(self) -> None:
        conn = sqlite3.connect(self.database, isolation_level=None, timeout=30)
        while not self._halt.wait(0.005):
            start = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            self.worst_ms = max(self.worst_ms, (time.perf_counter() - start) * 1000)
            conn.execute("ROLLBACK")
        conn.close()

    def stop(self) -> None:
        self._halt.set()
        self.join()


def backends() -> list[str]:
    from kb_cli.parsers.pdf import pdfium_available

    return ["pypdf", "pdfium"] if pdfium_available() else ["pypdf"]


# Documents as the benchmarks write them directly: 13 columns of 0001, the base of 0006,
# then 0008's rejected_revision, rejected_reason and archived_revision (none set), and
# 0012's metadata (none).
DOCUMENT_ROWS = (
    "INSERT INTO documents VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,'default',NULL,NULL,NULL,'{}')"
)


def fill_queue(home: Path, count: int, extra: dict[str, str], base: str = "default") -> None:
    folder = home.parent / f"q-{base}"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        (folder / f"q{i}.txt").write_text(f"queued {i} of {base}")
        paths.append(str(folder / f"q{i}.txt"))
    for start in range(0, count, 500):
        kb(home, "upload", *paths[start : start + 500], "--submit", "--base", base, **extra)


def fresh_database(admin_url: str) -> str:
    from sqlalchemy import create_engine, text

    name = f"kbbench_{uuid.uuid4().hex[:10]}"
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return admin_url.rsplit("/", 1)[0] + f"/{name}"


def bench_engines() -> list[tuple[str, str | None]]:
    engines: list[tuple[str, str | None]] = [("sqlite", None)]
    if os.environ.get("KB_BENCH_POSTGRES_URL"):
        engines.append(("postgresql", os.environ["KB_BENCH_POSTGRES_URL"]))
    return engines


def fresh_home(work: Path, admin_url: str | None) -> tuple[Path, str]:
    home = Path(tempfile.mkdtemp(dir=work)) / "home"
    url = fresh_database(admin_url) if admin_url else f"sqlite:///{home}/kb.sqlite3"
    return home, url
