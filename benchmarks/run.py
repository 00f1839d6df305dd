"""The kb benchmark suite: every case against a reference measured in the same run.

    uv run --group bench python benchmarks/run.py            # full sizes, 3 runs each
    uv run --group bench python benchmarks/run.py --quick    # tiny sizes, 1 run (smoke)

Builds all of its data (text, PDF, DOCX) itself, prints a table of medians and ratios
and writes benchmarks/results/latest.json. Times are never asserted anywhere: these
machines are shared and noisy, so only ratios from one run are compared.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.docgen import VOCABULARY, make_docx, make_pdf, paged_text  # noqa: E402
from tests.loopback import FlakyEmbeddings, serving  # noqa: E402

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
    runs=1,
)


@dataclass
class Row:
    case: str
    metric: str
    kb: float
    reference: float | None
    unit: str
    target: str
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.reference in (None, 0):
            return None
        return self.kb / self.reference


# --- helpers -------------------------------------------------------------------------


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


# --- 1. queue overhead -----------------------------------------------------------------


def queue_overhead(work: Path, sizes: Sizes) -> list[Row]:
    def kb_drain() -> float:
        home = Path(tempfile.mkdtemp(dir=work)) / "home"
        upload_tiny(home, sizes.tiny_docs)
        start = time.perf_counter()
        kb(home, "work", "--drain", "--json")
        return sizes.tiny_docs / (time.perf_counter() - start)

    def huey_noop() -> float:
        from huey import SqliteHuey

        huey = SqliteHuey(filename=str(Path(tempfile.mkdtemp(dir=work)) / "huey.db"))

        @huey.task()
        def noop() -> None:
            return None

        for _ in range(sizes.tiny_docs):
            noop()
        start = time.perf_counter()
        done = 0
        while (task := huey.dequeue()) is not None:
            huey.execute(task)
            done += 1
        return done / (time.perf_counter() - start)

    def sql_floor() -> float:
        home = Path(tempfile.mkdtemp(dir=work)) / "home"
        upload_tiny(home, sizes.tiny_docs)
        start = time.perf_counter()
        done = raw_sqlite_tasks(home)
        return done / (time.perf_counter() - start)

    kb_rate = median_of(sizes.runs, kb_drain)
    huey_rate = median_of(sizes.runs, huey_noop)
    floor_rate = median_of(sizes.runs, sql_floor)
    return [
        Row(
            "1 queue overhead",
            f"{sizes.tiny_docs} tiny .txt, 1 worker",
            kb_rate,
            huey_rate,
            "tasks/s",
            ">= 0.5x Huey no-op",
            "kb parses, chunks and indexes each file; Huey runs a no-op "
            "(its dequeue/execute loop, in process)",
        ),
        Row(
            "1 queue overhead",
            "context: kb's statements for the same tasks, raw sqlite3, no Python logic",
            floor_rate,
            huey_rate,
            "tasks/s",
            "context",
            "the floor for kb's work per task: claim, audit, chunk into the FTS5 "
            "index, completion, in two transactions",
        ),
    ]


def raw_sqlite_tasks(home: Path) -> int:
    """What a tiny task costs the database alone: kb's statements in kb's transactions,
    on kb's own database and settings, with nothing around them but reading the file."""
    conn = sqlite3.connect(home / "kb.sqlite3", isolation_level=None)
    for pragma in ("journal_mode = WAL", "synchronous = NORMAL", "wal_autocheckpoint = 10000"):
        conn.execute(f"PRAGMA {pragma}")
    audit = (
        "INSERT INTO audit_events (at, actor, action, entity_id, from_status, to_status)"
        " VALUES (?, 'floor', ?, ?, ?, ?)"
    )
    done = 0
    while True:
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        conn.execute("BEGIN IMMEDIATE")
        task = conn.execute(
            "SELECT id, document_id, revision FROM ingestion_tasks"
            " WHERE status IN ('queued', 'retry_wait', 'running') AND status = 'queued'"
            " ORDER BY created_at, id LIMIT 1"
        ).fetchone()
        if task is None:
            conn.execute("COMMIT")
            return done
        task_id, document_id, revision = task
        conn.execute(
            "UPDATE ingestion_tasks SET status = 'running', worker_id = 'floor',"
            " attempt = attempt + 1, lease_expires_at = ?, updated_at = ?"
            " WHERE id = ? AND status = 'queued' RETURNING *",
            (now, now, task_id),
        ).fetchall()
        conn.execute(audit, (now, "claim", task_id, "queued", "running"))
        key = conn.execute("SELECT * FROM documents WHERE id = ?", (document_id,)).fetchone()[5]
        conn.execute("COMMIT")
        text = (home / "objects" / key[:2] / key).read_text()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE ingestion_tasks SET status = 'succeeded', stage = 'finalizing',"
            " completed = 1, total = 1, lease_expires_at = NULL, updated_at = ?"
            " WHERE id = ? AND status = 'running' AND worker_id = 'floor' RETURNING *",
            (now, task_id),
        ).fetchall()
        conn.execute(audit, (now, "complete", task_id, "running", "succeeded"))
        conn.execute(
            "DELETE FROM chunks WHERE document_id = ? AND revision = ?", (document_id, revision)
        )
        conn.execute(
            "INSERT INTO chunks (document_id, revision, task_id, chunk_index, text, terms)"
            " VALUES (?, ?, ?, 0, ?, ?)",
            (document_id, revision, task_id, text, text),
        )
        conn.execute(
            "UPDATE documents SET status = 'review_pending', version = version + 1,"
            " updated_at = ? WHERE id = ? AND status = 'processing' RETURNING *",
            (now, document_id),
        ).fetchall()
        conn.execute(audit, (now, "complete", document_id, "processing", "review_pending"))
        conn.execute("COMMIT")
        done += 1


# --- 2. scaling ---------------------------------------------------------------------------


def scaling(work: Path, sizes: Sizes) -> list[Row]:
    pdf = make_pdf(paged_text(sizes.batch_pages))
    rows = []
    for backend in backends():

        def drain(workers: int, backend: str = backend) -> float:
            home = Path(tempfile.mkdtemp(dir=work)) / "home"
            folder = home.parent / "pdfs"
            folder.mkdir(parents=True)
            paths = []
            for i in range(sizes.batch_pdfs):
                (folder / f"p{i}.pdf").write_bytes(pdf)
                paths.append(str(folder / f"p{i}.pdf"))
            kb(home, "upload", *paths, "--submit")
            start = time.perf_counter()
            procs = [
                subprocess.Popen(
                    [PY, "-m", "kb_cli", "work", "--drain"],
                    env=env_for(home, KB_PDF_BACKEND=backend),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for _ in range(workers)
            ]
            for proc in procs:
                proc.wait()
            return time.perf_counter() - start

        one = median_of(sizes.runs, lambda: drain(1))
        two = median_of(sizes.runs, lambda: drain(2))
        rows.append(
            Row(
                "2 scaling",
                f"{sizes.batch_pdfs} PDFs x {sizes.batch_pages} pages "
                f"({backend}), speed-up of 2 workers",
                one / two,
                1.0,
                "x",
                ">= 1.8x",
                f"1 worker {one:.2f} s, 2 workers {two:.2f} s",
            )
        )
    rows.append(machine_parallelism(work, pdf, sizes))
    return rows


def machine_parallelism(work: Path, pdf: bytes, sizes: Sizes) -> Row:
    """What two processes gain on this machine at all: bare pypdf on the same batch.
    Context for the scaling target, not a target of kb's."""
    path = work / "scaling.pdf"
    path.write_bytes(pdf)
    script = (
        "import sys; from pypdf import PdfReader\n"
        "for _ in range(int(sys.argv[2])):\n"
        "    [page.extract_text() for page in PdfReader(sys.argv[1]).pages]"
    )

    def batch(processes: int) -> float:
        share = str(sizes.batch_pdfs // processes)
        start = time.perf_counter()
        procs = [subprocess.Popen([PY, "-c", script, str(path), share]) for _ in range(processes)]
        for proc in procs:
            proc.wait()
        return time.perf_counter() - start

    one = median_of(sizes.runs, lambda: batch(1))
    two = median_of(sizes.runs, lambda: batch(2))
    return Row(
        "2 scaling",
        f"the machine itself: bare pypdf on the same {sizes.batch_pdfs} PDFs, 2 processes",
        one / two,
        1.0,
        "x",
        "context",
        f"1 process {one:.2f} s, 2 processes {two:.2f} s",
    )


def backends() -> list[str]:
    from kb_cli.parsers.pdf import pdfium_available

    return ["pypdf", "pdfium"] if pdfium_available() else ["pypdf"]


# --- 3. contention --------------------------------------------------------------------


def contention(work: Path, sizes: Sizes) -> list[Row]:
    def drain(workers: int) -> tuple[float, float, int, bool]:
        home = Path(tempfile.mkdtemp(dir=work)) / "home"
        task_ids = upload_tiny(home, sizes.tiny_docs)
        probe = LockProbe(home / "kb.sqlite3")
        probe.start()
        start = time.perf_counter()
        procs = [
            subprocess.Popen(
                [PY, "-m", "kb_cli", "work", "--drain", "--json", "--worker-id", f"w{i}"],
                env=env_for(home),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(workers)
        ]
        outputs = [proc.communicate() for proc in procs]
        elapsed = time.perf_counter() - start
        probe.stop()
        lock_errors = sum(err.count("locked") + err.count('"busy"') for _, err in outputs)
        lock_errors += sum(proc.returncode != 0 for proc in procs)
        claimed = [
            json.loads(line)["task_id"]
            for out, _ in outputs
            for line in out.splitlines()
            if json.loads(line)["claimed"]
        ]
        exactly_once = sorted(claimed) == sorted(task_ids)
        return sizes.tiny_docs / elapsed, probe.worst_ms, lock_errors, exactly_once

    results, singles = [], []
    for _ in range(sizes.runs):  # interleaved: noise falls on both sides alike
        results.append(drain(sizes.contention_workers))
        singles.append(drain(1)[0])
    single = statistics.median(singles)
    rate = statistics.median(r[0] for r in results)
    return [
        Row(
            "3 contention",
            f"{sizes.contention_workers} workers, {sizes.tiny_docs} tiny docs, vs 1 worker",
            rate,
            single,
            "tasks/s",
            ">= 0.8x, 0 lock errors",
            f"worst write-lock wait seen by a probe {max(r[1] for r in results):.1f} ms; "
            f"lock errors {sum(r[2] for r in results)}; every task exactly once: "
            f"{all(r[3] for r in results)}",
            {
                "lock_errors": sum(r[2] for r in results),
                "worst_lock_wait_ms": max(r[1] for r in results),
                "exactly_once": all(r[3] for r in results),
            },
        )
    ]


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


# --- 4. parse efficiency ------------------------------------------------------------------


# The floor of `kb work` with the built-in model: the same PDF's text by pypdf, cut into
# pieces of the chunker's size, embedded by WordLlama's own inference, in one process.
EMBEDDING_FLOOR = """
import sys
from pypdf import PdfReader
from safetensors.numpy import load_file
from tokenizers import Tokenizer
from wordllama.inference import WordLlamaInference
from kb_cli.embeddings.local import TOKENIZER_FILE, WEIGHTS_FILE, package_dir
text = "\\n".join(page.extract_text() for page in PdfReader(sys.argv[1]).pages)
pieces = [text[i : i + 1000] for i in range(0, len(text), 850)]
package = package_dir()
model = WordLlamaInference(
    load_file(package / WEIGHTS_FILE)["embedding.weight"],
    Tokenizer.from_file(str(package / TOKENIZER_FILE)),
)
for i in range(0, len(pieces), 64):
    model.embed(pieces[i : i + 64], norm=True)
"""


# Documents as the benchmarks write them directly: 13 columns of 0001, the base of 0006,
# then 0008's rejected_revision, rejected_reason and archived_revision (none set).
DOCUMENT_ROWS = "INSERT INTO documents VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,'default',NULL,NULL,NULL)"


def parse_efficiency(work: Path, sizes: Sizes) -> list[Row]:
    """`kb work` on one big PDF against the bare work: without embeddings, against
    pypdf's text extraction alone; with the built-in model, against pypdf plus the
    model's own library embedding pieces of the same size (EMBEDDING_FLOOR)."""
    pdf_path = work / "big.pdf"
    pdf_path.write_bytes(make_pdf(paged_text(sizes.big_pdf_pages, words_per_page=250)))
    bare = [
        PY,
        "-c",
        "import sys; from pypdf import PdfReader; "
        "[p.extract_text() for p in PdfReader(sys.argv[1]).pages]",
        str(pdf_path),
    ]
    floor = [PY, "-c", EMBEDDING_FLOOR, str(pdf_path)]
    plain_env = env_for(work / "unused")
    # Interleaved, so that the machine's ups and downs fall on kb and reference alike.
    runs: dict[str, list[tuple[float, float]]] = {"bare": [], "floor": [], "local": []}
    runs |= {f"none-{backend}": [] for backend in backends()}
    for _ in range(sizes.runs):
        runs["bare"].append(peak_rss_of(bare, plain_env)[:2])
        runs["floor"].append(peak_rss_of(floor, plain_env)[:2])
        for name in [key for key in runs if key not in ("bare", "floor")]:
            home = Path(tempfile.mkdtemp(dir=work)) / "home"
            provider = "local" if name == "local" else "none"
            backend = "pypdf" if name == "local" else name.removeprefix("none-")
            extra = {"KB_EMBEDDINGS": provider, "KB_PDF_BACKEND": backend}
            kb(home, "upload", str(pdf_path), "--submit", **extra)
            command = [PY, "-m", "kb_cli", "work"]
            runs[name].append(peak_rss_of(command, env_for(home, **extra))[:2])
    wall = {name: statistics.median(r[0] for r in result) for name, result in runs.items()}
    rss = {name: statistics.median(r[1] for r in result) for name, result in runs.items()}
    pages = sizes.big_pdf_pages
    rows = []
    for backend in backends():
        name = f"none-{backend}"
        target = "<= 1.2x" if backend == "pypdf" else "<= 0.33x (3x faster)"
        rows.append(
            Row(
                "4 parse efficiency",
                f"kb work, {pages}-page PDF ({backend}), KB_EMBEDDINGS=none, wall",
                wall[name],
                wall["bare"],
                "s",
                target,
                "reference: bare pypdf script; both include interpreter start-up",
            )
        )
    rows += [
        Row(
            "4 parse efficiency",
            "kb work (pypdf), KB_EMBEDDINGS=none, peak memory",
            rss["none-pypdf"],
            rss["bare"],
            "MiB",
            "<= 1.5x",
        ),
        Row(
            "4 parse efficiency",
            f"kb work, {pages}-page PDF, built-in model, wall",
            wall["local"],
            wall["floor"],
            "s",
            "<= 1.2x",
            "reference: pypdf + WordLlama's own inference on pieces of the same size",
        ),
        Row(
            "4 parse efficiency",
            "kb work, built-in model, peak memory",
            rss["local"],
            rss["floor"],
            "MiB",
            "report",
        ),
    ]
    return rows


# --- 5. CLI latency -------------------------------------------------------------------------


# The same job as `kb status --json`: every document, newest first, with its latest
# task as a nested record, one JSON line each (the same bytes, field for field).
MINIMAL_STATUS = """
import json, sqlite3, sys
import typer, rich
app = typer.Typer()
TASK = ("task_id", "document_id", "status", "stage", "completed", "total", "attempt",
        "error_code", "error_detail", "worker_id", "created_at", "updated_at", "revision",
        "lease_expires_at", "retry_at")
@app.command()
def status(json_out: bool = typer.Option(False, "--json")):
    conn = sqlite3.connect(DB)
    rows = conn.execute(
        "SELECT d.id, d.filename, d.content_type, d.size_bytes, d.sha256, d.status, d.version,"
        " d.revision, d.published_revision, d.created_at, d.updated_at, t.id, t.document_id,"
        " t.status, t.stage, t.completed, t.total, t.attempt, t.error_code, t.error_detail,"
        " t.worker_id, t.created_at, t.updated_at, t.revision, t.lease_expires_at, t.retry_at"
        " FROM documents d LEFT JOIN ingestion_tasks t ON t.id = d.latest_task_id"
        " ORDER BY d.created_at DESC, d.id")
    out = sys.stdout
    for row in rows:
        record = dict(zip(("document_id", "filename", "content_type", "size_bytes", "sha256",
                           "status", "version", "revision", "published_revision",
                           "created_at", "updated_at"), row[:11]))
        record["latest_task"] = dict(zip(TASK, row[11:])) if row[11] else None
        out.write(json.dumps(record) + "\\n")
@app.command()
def other():
    pass
app()
"""


def cli_latency(work: Path, sizes: Sizes) -> list[Row]:
    home = Path(tempfile.mkdtemp(dir=work)) / "home"
    fill_documents(home, sizes.status_docs)
    script = work / "minimal_status.py"
    script.write_text(f"DB = {str(home / 'kb.sqlite3')!r}\n" + MINIMAL_STATUS)
    env = env_for(home)

    def wall(command: list[str]) -> float:
        start = time.perf_counter()
        subprocess.run(command, env=env, capture_output=True, check=True)
        return time.perf_counter() - start

    commands = {
        "kb_status": [PY, "-m", "kb_cli", "status", "--json"],
        "ref_status": [PY, str(script), "status", "--json"],
        "kb_help": [PY, "-m", "kb_cli", "--help"],
        "ref_help": [PY, str(script), "--help"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(max(sizes.runs, 7)):  # interleaved: noise falls on kb and reference alike
        for name, command in commands.items():
            times[name].append(wall(command))
    kb_status, ref_status, kb_help, ref_help = (statistics.median(times[name]) for name in commands)
    imports = subprocess.run(
        [PY, "-X", "importtime", "-m", "kb_cli", "--help"], env=env, capture_output=True, text=True
    ).stderr
    heavy = sorted(
        {
            name
            for name in ("sqlalchemy", "pypdf", "docx", "pypdfium2")
            if f" {name}\n" in imports or f" {name}." in imports
        }
    )
    return [
        Row(
            "5 CLI latency",
            f"kb status --json, {sizes.status_docs} documents",
            kb_status,
            ref_status,
            "s",
            "<= 1.3x",
            "reference: Typer + rich + stdlib sqlite3 script",
        ),
        Row(
            "5 CLI latency",
            "kb --help",
            kb_help,
            ref_help,
            "s",
            "no SQLAlchemy/parser import",
            f"heavy modules imported by --help: {heavy or 'none'}",
            {"heavy_imports": heavy},
        ),
    ]


def fill_documents(home: Path, count: int) -> None:
    """Documents with a latest task each, written straight into a fresh kb database."""
    kb(home, "db", "upgrade")  # creates the schema
    conn = sqlite3.connect(home / "kb.sqlite3")
    now = "2026-01-01T00:00:00.000000Z"
    docs, tasks = [], []
    for i in range(count):
        doc_id, task_id = str(uuid.uuid4()), str(uuid.uuid4())
        stamp = f"2026-01-01T00:00:{i % 60:02d}.{i:06d}Z"
        docs.append(
            (
                doc_id,
                f"file{i}.txt",
                "text/plain",
                100,
                "0" * 64,
                uuid.uuid4().hex,
                "review_pending",
                3,
                1,
                None,
                task_id,
                stamp,
                now,
            )
        )
        tasks.append(
            (
                task_id,
                doc_id,
                1,
                "succeeded",
                "finalizing",
                1,
                1,
                1,
                None,
                None,
                "w",
                None,
                None,
                stamp,
                now,
            )
        )
    conn.executemany(DOCUMENT_ROWS, docs)
    conn.executemany("INSERT INTO ingestion_tasks VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", tasks)
    conn.commit()
    conn.close()


# --- 6. write amplification -----------------------------------------------------------------


def write_amplification(work: Path, sizes: Sizes) -> list[Row]:
    from kb_cli.app import Kb
    from kb_cli.config import resolve_settings
    from kb_cli.services import documents
    from kb_cli.worker import Worker, WorkerOptions

    def commits_for(pages: int) -> int:
        home = Path(tempfile.mkdtemp(dir=work))
        path = home / f"doc{pages}.pdf"
        path.write_bytes(make_pdf(paged_text(pages)))
        service = Kb.open(resolve_settings(str(home / "kb"), None, None), actor="bench")
        documents.upload_files(service, [path], submit=True)
        counter = {"commits": 0}
        write = service.db.write

        def counted_write():  # every write transaction (the heartbeat's too) is one commit
            counter["commits"] += 1
            return write()

        service.db.write = counted_write
        list(Worker(service, WorkerOptions(worker_id="bench")).run())
        return counter["commits"]

    one, many = commits_for(1), commits_for(sizes.amplification_pages)
    return [
        Row(
            "6 write amplification",
            "commits for a 1-page PDF",
            one,
            20,
            "commits",
            "<= 20",
            "reference: the target",
        ),
        Row(
            "6 write amplification",
            f"commits for a {sizes.amplification_pages}-page PDF",
            many,
            one,
            "commits",
            "<= 2x the 1-page count",
            "progress writes are throttled to one per 0.25 s",
        ),
    ]


# --- 7. search latency -------------------------------------------------------------------------


def search_latency(work: Path, sizes: Sizes) -> list[Row]:
    from kb_cli.app import Kb
    from kb_cli.config import resolve_settings
    from kb_cli.services import search
    from kb_cli.textsearch import words

    rows = []
    for count in sizes.search_chunks:
        home = Path(tempfile.mkdtemp(dir=work)) / "home"
        fill_chunks(home, count)
        service = Kb.open(resolve_settings(str(home), None, None), actor="bench")
        raw = sqlite3.connect(home / "kb.sqlite3")
        for label, query in (("English", "retention policy"), ("Chinese", "知识库入库")):
            terms = " OR ".join(f'"{w}"' for w in words(query))  # segmented, as kb does

            def ours(query: str = query, service: Kb = service) -> float:
                start = time.perf_counter()
                search.search(service, query, limit=10, mode="lexical")
                return (time.perf_counter() - start) * 1000

            def in_scope(query: str = query, service: Kb = service) -> float:
                """--base: BM25 over one base's postings instead of FTS5's bm25()."""
                start = time.perf_counter()
                search.search(service, query, limit=10, mode="lexical", base="default")
                return (time.perf_counter() - start) * 1000

            def reference(terms: str = terms, raw=raw) -> float:
                start = time.perf_counter()
                raw.execute(
                    "SELECT c.document_id, c.text, bm25(chunks_terms) AS s FROM chunks_terms "
                    "JOIN chunks c ON c.id = chunks_terms.rowid WHERE chunks_terms MATCH ? "
                    "ORDER BY s LIMIT 10",
                    (terms,),
                ).fetchall()
                return (time.perf_counter() - start) * 1000

            ours(), in_scope(), reference()  # warm the page cache for all
            n = 30 if sizes.runs > 1 else 5
            mine = median_of(n, ours)
            scoped = median_of(n, in_scope)
            ref = median_of(n, reference)
            rows.append(
                Row(
                    "7 search latency",
                    f"{count} published chunks, {label}, lexical (in process)",
                    mine,
                    ref,
                    "ms",
                    "<= 1.5x raw FTS5; well under 100 ms",
                    "reference: the same FTS5 query with sqlite3, no visibility join",
                )
            )
            rows.append(
                Row(
                    "7 search latency",
                    f"{count} published chunks, {label}, lexical, one base (--base)",
                    scoped,
                    ref,
                    "ms",
                    "report",
                    "BM25 counted over the base's postings; a reader of some bases pays this",
                )
            )
        raw.close()
        rows.append(hybrid_process(home, count, sizes))
    return rows


def hybrid_process(home: Path, count: int, sizes: Sizes) -> Row:
    """Whole `kb search` processes: hybrid (load the model, embed the query, read every
    published vector, fuse) against lexical-only on the same database, interleaved."""
    question = "How long is the retention policy for invoices?"

    def run(mode: str) -> float:
        start = time.perf_counter()
        kb(home, "search", question, "--mode", mode, "--json")
        return time.perf_counter() - start

    run("hybrid"), run("lexical")  # warm caches
    hybrid, lexical = [], []
    for _ in range(10 if sizes.runs > 1 else 2):
        hybrid.append(run("hybrid"))
        lexical.append(run("lexical"))
    return Row(
        "7 search latency",
        f"{count} published chunks, whole `kb search` process, hybrid",
        statistics.median(hybrid),
        statistics.median(lexical),
        "s",
        "<= 2x lexical-only kb search" if count <= 10_000 else "report",
        "reference: the same process with --mode lexical; both include start-up",
    )


def fill_chunks(home: Path, count: int) -> None:
    """`count` published chunks with words in both scripts and 256-d float16 vectors of
    the built-in model's name (random unit vectors: search costs the same)."""
    import numpy as np

    from kb_cli.embeddings.local import MODEL_NAME
    from kb_cli.textsearch import count_words, index_terms

    kb(home, "db", "upgrade")  # creates the schema
    conn = sqlite3.connect(home / "kb.sqlite3")
    chinese = "知识库入库流程审核发布检索错误码文档上传草稿任务解析切分索引"
    per_doc = 50
    docs, chunks = [], []
    now = "2026-01-01T00:00:00.000000Z"
    vectors = np.random.default_rng(7).standard_normal((count, 256)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors.astype("<f2")
    for d in range(count // per_doc):
        doc_id = str(uuid.uuid4())
        docs.append(
            (
                doc_id,
                f"doc{d}.txt",
                "text/plain",
                1,
                "0" * 64,
                uuid.uuid4().hex,
                "published",
                1,
                1,
                1,
                None,
                now,
                now,
            )
        )
        for c in range(per_doc):
            n = d * per_doc + c
            words = " ".join(VOCABULARY[(n * 7 + i * 3) % len(VOCABULARY)] for i in range(60))
            zh = "".join(chinese[(n + i) % len(chinese)] for i in range(40))
            text = f"{words} {zh}"
            terms = index_terms(text)
            blob = vectors[n].tobytes()
            chunks.append(
                (doc_id, 1, c, "t", text, terms, count_words(terms), blob, MODEL_NAME, 256)
            )
    conn.executemany(DOCUMENT_ROWS, docs)
    conn.executemany(
        "INSERT INTO chunks (document_id, revision, chunk_index, task_id, text, terms, "
        "term_count, embedding, embedding_model, embedding_dim) VALUES (?,?,?,?,?,?,?,?,?,?)",
        chunks,
    )
    conn.commit()
    conn.close()


# --- 9. embeddings --------------------------------------------------------------------------


def embedding_cost(work: Path, sizes: Sizes) -> list[Row]:
    """The built-in model's throughput, and what the embedding stage adds to `kb work`."""
    from kb_cli.embeddings.local import LocalEmbedder

    embedder = LocalEmbedder()
    english = " ".join(VOCABULARY[i % len(VOCABULARY)] for i in range(400))[:800]
    count = 2000 if sizes.runs > 1 else 200
    texts = [f"{english} {i}" for i in range(count)]
    embedder.embed(texts[:64])  # load the model first

    def throughput() -> float:
        start = time.perf_counter()
        for i in range(0, count, embedder.batch_size):
            embedder.embed(texts[i : i + embedder.batch_size])
        return count / (time.perf_counter() - start)

    rate = median_of(sizes.runs, throughput)
    pdf = make_pdf(paged_text(sizes.big_pdf_pages))

    def work_with(provider: str) -> float:
        home = Path(tempfile.mkdtemp(dir=work)) / "home"
        path = home.parent / "big.pdf"
        path.write_bytes(pdf)
        kb(home, "upload", str(path), "--submit", KB_EMBEDDINGS=provider)
        start = time.perf_counter()
        kb(home, "work", KB_EMBEDDINGS=provider)
        return time.perf_counter() - start

    with_embeddings, without = [], []
    for _ in range(sizes.runs):  # interleaved, so both see the same machine
        with_embeddings.append(work_with("local"))
        without.append(work_with("none"))
    return [
        Row(
            "9 embeddings",
            "built-in model, 800-character English chunks, in process",
            rate,
            1000,
            "chunks/s",
            ">= 1,000 chunks/s (ratio >= 1)",
            "reference: the target itself",
        ),
        Row(
            "9 embeddings",
            f"kb work, {sizes.big_pdf_pages}-page PDF, with embeddings vs none",
            statistics.median(with_embeddings),
            statistics.median(without),
            "s",
            "<= 1.5x",
            "reference: the same run with KB_EMBEDDINGS=none",
        ),
    ]


# --- 8. claims per second, per engine -----------------------------------------------------


CLAIMER = """
import sys, time
from kb_cli.config import resolve_settings
from kb_cli.app import Kb
from kb_cli.worker import Worker, WorkerOptions
kb = Kb.open(resolve_settings(sys.argv[1], sys.argv[2], None), actor="bench")
worker = Worker(kb, WorkerOptions(worker_id=sys.argv[3]))
claims = 0
while worker.claim(None) is not None:
    claims += 1
print(claims)
"""


def claims_per_second(work: Path, sizes: Sizes) -> list[Row]:
    """Claim transactions only (no parsing): how fast N processes can take tasks."""
    engines = [("sqlite", None)]
    if os.environ.get("KB_BENCH_POSTGRES_URL"):
        engines.append(("postgresql", os.environ["KB_BENCH_POSTGRES_URL"]))
    tasks = max(200, sizes.tiny_docs)
    rows = []
    for engine, admin_url in engines:
        rates = {}
        for workers in (1, 2, 4, 8):
            home = Path(tempfile.mkdtemp(dir=work)) / "home"
            url = fresh_database(admin_url) if admin_url else f"sqlite:///{home}/kb.sqlite3"
            extra = {"DATABASE_URL": url}
            fill_queue(home, tasks, extra)
            start = time.perf_counter()
            procs = [
                subprocess.Popen(
                    [PY, "-c", CLAIMER, str(home), url, f"c{i}"],
                    env=env_for(home, **extra),
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for i in range(workers)
            ]
            claimed = sum(int(proc.communicate()[0]) for proc in procs)
            elapsed = time.perf_counter() - start
            if claimed != tasks:
                raise RuntimeError(f"{engine}: {claimed} claims for {tasks} tasks")
            rates[workers] = tasks / elapsed
        for workers, rate in rates.items():
            rows.append(
                Row(
                    "8 claims/s",
                    f"{engine}, {workers} claiming processes",
                    rate,
                    rates[1],
                    "claims/s",
                    "reported",
                    "claim transactions only; includes process start-up",
                )
            )
    return rows


def fill_queue(home: Path, count: int, extra: dict[str, str]) -> None:
    folder = home.parent / "q"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        (folder / f"q{i}.txt").write_text(f"queued {i}")
        paths.append(str(folder / f"q{i}.txt"))
    for start in range(0, count, 500):
        kb(home, "upload", *paths[start : start + 500], "--submit", **extra)


def fresh_database(admin_url: str) -> str:
    from sqlalchemy import create_engine, text

    name = f"kbbench_{uuid.uuid4().hex[:10]}"
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return admin_url.rsplit("/", 1)[0] + f"/{name}"


# --- 10. write-lock hold ---------------------------------------------------------------------


# `kb work`, timing each of its write transactions from the moment BEGIN IMMEDIATE got
# the lock to the end of COMMIT; prints the longest (and the count) on stderr last. The
# end of COMMIT includes SQLite's automatic checkpoint, which runs after the lock is
# released: the first argument "no-checkpoint" turns those off, to see the lock alone.
HOLDS_WRAPPER = """
import contextlib, json, sys, threading, time
from kb_cli import db
from kb_cli.engines import sqlite
if sys.argv.pop(1) == "no-checkpoint":
    sqlite.WAL_CHECKPOINT_PAGES = 0
begin, transaction = db.Database._begin, db.Database._transaction
taken, holds = threading.local(), []
def timed_begin(self, write):
    raw = begin(self, write)
    taken.at = time.perf_counter()
    return raw
@contextlib.contextmanager
def timed(self, write):
    with transaction(self, write) as conn:
        yield conn
    if write:
        holds.append(time.perf_counter() - taken.at)
db.Database._begin, db.Database._transaction = timed_begin, timed
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


def write_lock_hold(work: Path, sizes: Sizes) -> list[Row]:
    """The longest write-lock hold of the worker while a document of `lock_chunks`
    chunks is indexed, with uploads going on; the reference is the same document with
    every chunk in the completion transaction (KB_CHUNK_BATCH above the chunk count:
    kb before batching). Context: the longest wait of another writer for the lock."""
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
            "10 write lock",
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
            "10 write lock",
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


# --- 11. bounded parsing: the cost of the parse child -----------------------------------


# In a process like a worker's (embedding model loaded): seconds per parse of one file,
# in a forked child with limits (what kb does) and in-process (what it did).
PARSE_COST = """
import json, sys, time
from pathlib import Path
from kb_cli.config import resolve_settings
from kb_cli.embeddings import make_embedder
from kb_cli.parsers import Budget, ParseLimits, parse
from kb_cli.parsers import docx, pdf

embedder = make_embedder(resolve_settings().embeddings)
if embedder is not None:
    embedder.embed(["warm up"])
path, kind, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
module = pdf if kind == "application/pdf" else docx
module.preload()

def per_parse(run):
    run()
    started = time.perf_counter()
    for _ in range(count):
        run()
    return (time.perf_counter() - started) / count

isolated = per_parse(lambda: parse(path, kind, lambda done, total: None))
in_process = per_parse(lambda: module.parse(path, lambda d, t: None, Budget(ParseLimits())))
print(json.dumps({"isolated": isolated, "in_process": in_process}))
"""


def parse_isolation_cost(work: Path, sizes: Sizes) -> list[Row]:
    """Per document: what the forked, limited parse adds, against the whole cost of a
    tiny document of that kind in `kb work --drain`."""
    files = {
        "application/pdf": ("tiny.pdf", make_pdf(["A tiny page about ledgers."])),
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document": (
            "tiny.docx",
            make_docx("Ledgers", ["A tiny paragraph about invoices."]),
        ),
    }
    rows = []
    for kind, (name, data) in files.items():
        path = work / name
        path.write_bytes(data)
        done = subprocess.run(
            [PY, "-c", PARSE_COST, str(path), kind, str(sizes.parse_cost_docs)],
            env=env_for(work / "unused-home"),
            capture_output=True,
            text=True,
            check=True,
        )
        cost = json.loads(done.stdout)
        per_document = median_of(sizes.runs, lambda p=path: drain_copies(work, p, sizes))
        added = cost["isolated"] - cost["in_process"]
        rows.append(
            Row(
                "11 bounded parsing",
                f"added by the parse child per tiny {name[5:]}, vs kb work per such document",
                added * 1000,
                per_document * 1000,
                "ms",
                "<= 0.10x",
                f"parse in-process {cost['in_process'] * 1000:.2f} ms, in the child "
                f"{cost['isolated'] * 1000:.2f} ms; .txt/.md parse in-process",
            )
        )
    return rows


def drain_copies(work: Path, path: Path, sizes: Sizes) -> float:
    """Seconds per document of `kb work --drain` over copies of one small file."""
    home = Path(tempfile.mkdtemp(dir=work)) / "home"
    folder = home.parent / "copies"
    folder.mkdir()
    copies = []
    for i in range(sizes.parse_cost_docs):
        copy = folder / f"c{i}{path.suffix}"
        copy.write_bytes(path.read_bytes())
        copies.append(str(copy))
    kb(home, "upload", *copies, "--submit")
    started = time.perf_counter()
    kb(home, "work", "--drain")
    return (time.perf_counter() - started) / sizes.parse_cost_docs


# --- 12. chunker on unpunctuated text ------------------------------------------------------


def chunker_linearity(work: Path, sizes: Sizes) -> list[Row]:
    """Chunking time of N MB of text without sentence punctuation, against 4x the time
    of N/4 MB: about 1.0 when linear (the old chunker was quadratic here)."""
    from kb_cli.chunking import chunk_blocks
    from kb_cli.parsers import Block

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
                "12 chunker",
                f"{sizes.chunker_mb} MB text, {label}",
                whole,
                4 * part,
                "s",
                "<= 1.3x (linear)",
                "reference: 4 x the time of a quarter of the text",
            )
        )
    return rows


# --- 13. stage artefacts: a retry after the provider failed ---------------------------------


def retry_reuse(work: Path, sizes: Sizes) -> list[Row]:
    """A big PDF whose embedding provider fails twice then recovers: the three `kb work`
    attempts with the parse kept between them, against the same attempts with the kept
    parse deleted before each (every attempt downloads and parses, as before)."""
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
            "13 stage artefacts",
            f"{pages}-page PDF, provider fails twice then recovers: 3 kb work attempts, wall",
            statistics.median(totals["kept"]),
            statistics.median(totals["parsed every attempt"]),
            "s",
            "report",
            "reference: the same attempts, each downloading and parsing again (before)",
        ),
        Row(
            "13 stage artefacts",
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


# --- 14. waking idle workers ----------------------------------------------------------------


# One idle `kb work --loop` (a process of its own); each task submitted here, in this
# process, after a random pause; the latency is from the submit's commit to the claim
# (the claim's audit time: same clock). Runs with whatever kb_cli PYTHONPATH gives, so
# KB_BENCH_BEFORE=DIR measures another checkout (main) the same way.
WAKE_LATENCY = """
import json, os, random, subprocess, sys, tempfile, time
from datetime import datetime, timezone
from pathlib import Path
from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from kb_cli.services.documents import submit_document, upload_files
home, url, count, poll = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
kb = Kb.open(resolve_settings(home, url, None), actor="bench")
worker = subprocess.Popen(
    [sys.executable, "-m", "kb_cli", "work", "--loop", "--worker-id", "idle",
     "--poll-seconds", poll],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
time.sleep(2.0)
folder = Path(tempfile.mkdtemp())
latencies = []
for i in range(count):
    path = folder / f"w{i}.txt"
    path.write_text(f"wake {i}")
    [document] = upload_files(kb, [path])
    time.sleep(random.uniform(0.05, 0.6))
    task = submit_document(kb, document.document_id)
    committed = time.time()
    while True:
        with kb.db.read() as conn:
            claim = conn.execute(
                "SELECT at FROM audit_events WHERE entity_id = :id AND action = 'claim'",
                {"id": task.task_id},
            ).scalar()
            status = conn.execute(
                "SELECT status FROM ingestion_tasks WHERE id = :id", {"id": task.task_id}
            ).scalar()
        if claim and status == "succeeded":
            break
        time.sleep(0.02)
    at = datetime.strptime(claim, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    latencies.append(max(0.0, at.timestamp() - committed))
worker.terminate()
worker.wait()
print(json.dumps(latencies))
"""

# One idle worker in this process for a while, every statement and transaction it
# runs counted (and SQLite's data_version looks, where the tree has them).
IDLE_QUERIES = """
import json, sys, threading, time
from kb_cli import db
from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from kb_cli.worker import Worker, WorkerOptions
home, url, seconds, poll = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
counts = {"statements": 0, "transactions": 0, "looks": 0}
execute, begin = db.Connection.execute, db.Database._begin
def counted_execute(self, sql, params=None):
    counts["statements"] += 1
    return execute(self, sql, params)
def counted_begin(self, write):
    counts["transactions"] += 1
    return begin(self, write)
db.Connection.execute, db.Database._begin = counted_execute, counted_begin
try:
    from kb_cli.engines import sqlite
    look = sqlite.DataVersionWatch._version
    def counted_look(self):
        counts["looks"] += 1
        return look(self)
    sqlite.DataVersionWatch._version = counted_look
except (ImportError, AttributeError):
    pass
kb = Kb.open(resolve_settings(home, url, None), actor="bench")
stop = threading.Event()
worker = Worker(kb, WorkerOptions(worker_id="idle", poll_seconds=poll), stop=stop)
thread = threading.Thread(target=lambda: list(worker.run(max_tasks=None, loop=True)))
thread.start()
time.sleep(1.0)
counts = dict.fromkeys(counts, 0)
time.sleep(seconds)
idle = dict(counts)
stop.set()
thread.join()
print(json.dumps({key: value * 60 / seconds for key, value in idle.items()}))
"""


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def bench_engines() -> list[tuple[str, str | None]]:
    engines: list[tuple[str, str | None]] = [("sqlite", None)]
    if os.environ.get("KB_BENCH_POSTGRES_URL"):
        engines.append(("postgresql", os.environ["KB_BENCH_POSTGRES_URL"]))
    return engines


def fresh_home(work: Path, admin_url: str | None) -> tuple[Path, str]:
    home = Path(tempfile.mkdtemp(dir=work)) / "home"
    url = fresh_database(admin_url) if admin_url else f"sqlite:///{home}/kb.sqlite3"
    return home, url


def wake_up(work: Path, sizes: Sizes) -> list[Row]:
    """Claim latency after submit and an idle worker's queries: woken by the commit
    (default, 5 s fallback poll) against poll-only at 1 s (KB_WAKE=poll: the previous
    behaviour's timing), and against another checkout with KB_BENCH_BEFORE=DIR."""
    count = 5 if sizes.runs == 1 else 40
    idle_seconds = 3.0 if sizes.runs == 1 else 30.0
    variants = [("woken", {}, "5"), ("poll-only 1 s", {"KB_WAKE": "poll"}, "1")]
    if os.environ.get("KB_BENCH_BEFORE"):
        variants.append(("before", {"PYTHONPATH": os.environ["KB_BENCH_BEFORE"]}, "1"))
    rows = []
    for engine, admin_url in bench_engines():
        measured = {}
        for label, extra, poll in variants:
            home, url = fresh_home(work, admin_url)
            env = env_for(home, DATABASE_URL=url, KB_EMBEDDINGS="none", **extra)
            # Run outside the repository: its kb_cli would come first on sys.path.
            run = {"env": env, "cwd": work, "capture_output": True, "text": True, "check": True}
            latency = subprocess.run(
                [PY, "-c", WAKE_LATENCY, str(home), url, str(count), poll], **run
            )
            idle = subprocess.run(
                [PY, "-c", IDLE_QUERIES, str(home), url, str(idle_seconds), poll], **run
            )
            measured[label] = (json.loads(latency.stdout), json.loads(idle.stdout))
        (woken, woken_idle), (polled, polled_idle) = measured["woken"], measured["poll-only 1 s"]
        before = measured.get("before")
        for share, name in ((0.5, "p50"), (0.99, "p99")):
            note = f"{count} submits; reference: poll-only 1 s"
            if before:
                note += f"; before: {percentile(before[0], share) * 1000:.0f} ms"
            rows.append(
                Row(
                    "14 wake-up",
                    f"{engine}, claim latency after submit, {name}",
                    percentile(woken, share) * 1000,
                    percentile(polled, share) * 1000,
                    "ms",
                    "<= 100 ms",
                    note,
                )
            )
        note = (
            f"{woken_idle['statements']:.0f} statements/min; "
            f"{woken_idle['looks']:.0f} data_version looks/min (~12 us each); "
            f"reference: poll-only 1 s, {polled_idle['statements']:.0f} statements/min"
        )
        if before:
            note += (
                f"; before: {before[1]['transactions']:.0f} transactions, "
                f"{before[1]['statements']:.0f} statements/min"
            )
        rows.append(
            Row(
                "14 wake-up",
                f"{engine}, transactions per idle worker per minute",
                woken_idle["transactions"],
                polled_idle["transactions"],
                "/min",
                "reported",
                note,
                {"woken": woken_idle, "poll_only": polled_idle, "before": before and before[1]},
            )
        )
    return rows


# --- 15. relaying events -----------------------------------------------------------------


def relay_throughput(work: Path, sizes: Sizes) -> list[Row]:
    """Events a `kb relay` delivers per second to a loopback receiver that answers at
    once, against the same POSTs sent by a bare client loop (the HTTP floor)."""
    import http.client
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Receiver(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        received = 0

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            Receiver.received += 1
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    count = 200 if sizes.runs == 1 else 2000
    rows = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_port
    try:
        for engine, admin_url in bench_engines():
            home, url = fresh_home(work, admin_url)
            extra = {"DATABASE_URL": url, "KB_RELAY_SECRET": "bench"}
            fill_queue(home, count, extra)  # one task.queued event per document
            Receiver.received = 0
            started = time.perf_counter()
            relay = subprocess.Popen(
                [PY, "-m", "kb_cli", "relay", "--webhook", f"http://127.0.0.1:{port}/"],
                env=env_for(home, **extra),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            while Receiver.received < count:
                time.sleep(0.01)
            elapsed = time.perf_counter() - started
            relay.terminate()
            relay.wait()
            client = http.client.HTTPConnection("127.0.0.1", port)
            body = json.dumps({"event_id": 1, "type": "task.queued", "data": {}}).encode()
            floor_started = time.perf_counter()
            for _ in range(count):
                client.request("POST", "/", body, {"Content-Type": "application/json"})
                client.getresponse().read()
            floor = count / (time.perf_counter() - floor_started)
            client.close()
            rows.append(
                Row(
                    "15 relay",
                    f"{engine}, events delivered per second ({count} events)",
                    count / elapsed,
                    floor,
                    "events/s",
                    "reported",
                    "signed, one POST each, marked delivered one by one; includes start-up; "
                    "reference: the same POSTs from a bare client",
                )
            )
    finally:
        server.shutdown()
        server.server_close()
    return rows


# --- running and reporting -----------------------------------------------------------------


CASES = {
    "queue": queue_overhead,
    "scaling": scaling,
    "contention": contention,
    "parse": parse_efficiency,
    "cli": cli_latency,
    "amplification": write_amplification,
    "search": search_latency,
    "claims": claims_per_second,
    "embeddings": embedding_cost,
    "locks": write_lock_hold,
    "isolation": parse_isolation_cost,
    "chunker": chunker_linearity,
    "retry": retry_reuse,
    "wake": wake_up,
    "relay": relay_throughput,
}


def render(rows: list[Row]) -> str:
    lines = [
        "| case | metric | kb | reference | ratio | target | note |",
        "| --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        ref = "-" if row.reference is None else f"{row.reference:,.3g}"
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}x"
        lines.append(
            f"| {row.case} | {row.metric} | {row.kb:,.3g} {row.unit} | {ref} | "
            f"{ratio} | {row.target} | {row.note} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run (smoke)")
    parser.add_argument("--only", nargs="*", choices=sorted(CASES), help="run these cases")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks/results/latest.json")
    args = parser.parse_args()
    sizes = QUICK if args.quick else Sizes()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="kb-bench-") as scratch:
        for name, case in CASES.items():
            if args.only and name not in args.only:
                continue
            print(f"running {name} ...", file=sys.stderr, flush=True)
            new_rows = case(Path(scratch), sizes)
            print(render(new_rows).split("\n", 2)[2], file=sys.stderr, flush=True)
            rows += new_rows
    print(render(rows))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} "
                f"{platform.release()}, Python {platform.python_version()}, "
                f"SQLite {sqlite3.sqlite_version}",
                "quick": args.quick,
                "rows": [{**row.__dict__, "ratio": row.ratio} for row in rows],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
