"""Queue overhead: `kb work --drain` on tiny text files against Huey's no-op loop, with
kb's own statements from a bare sqlite3 loop as the floor. KB_BENCH_BEFORE=DIR also
drains with another checkout (main), interleaved with this one's runs, on the same
load; CPU time per task is reported beside the rates."""

from __future__ import annotations

import os
import resource
import sqlite3
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.harness import PY, Context, Row, env_for, upload_tiny

TITLE = "queue overhead"


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run(ctx: Context) -> list[Row]:
    work, sizes = ctx.work, ctx.sizes
    before = os.environ.get("KB_BENCH_BEFORE")

    def kb_drain(checkout: str | None = None) -> tuple[float, float]:
        """Tasks/s and CPU ms per task of one `kb work --drain`."""
        home = Path(tempfile.mkdtemp(dir=work)) / "home"
        upload_tiny(home, sizes.tiny_docs)
        env = env_for(home, **({"PYTHONPATH": checkout} if checkout else {}))
        cpu, start = _children_cpu(), time.perf_counter()
        # Run outside the repository: its kb_cli would come first on sys.path.
        subprocess.run(
            [PY, "-m", "kb_cli", "work", "--drain", "--json"],
            env=env,
            cwd=work,
            capture_output=True,
            check=True,
        )
        seconds = time.perf_counter() - start
        return sizes.tiny_docs / seconds, (_children_cpu() - cpu) / sizes.tiny_docs * 1e3

    def huey_noop() -> tuple[float, float]:
        from huey import SqliteHuey

        huey = SqliteHuey(filename=str(Path(tempfile.mkdtemp(dir=work)) / "huey.db"))

        @huey.task()
        def noop() -> None:
            return None

        for _ in range(sizes.tiny_docs):
            noop()
        cpu, start = time.process_time(), time.perf_counter()
        done = 0
        while (task := huey.dequeue()) is not None:
            huey.execute(task)
            done += 1
        return done / (time.perf_counter() - start), (time.process_time() - cpu) / done * 1e3

    def sql_floor() -> float:
        home = Path(tempfile.mkdtemp(dir=work)) / "home"
        upload_tiny(home, sizes.tiny_docs)
        start = time.perf_counter()
        done = raw_sqlite_tasks(home)
        return done / (time.perf_counter() - start)

    measured: dict[str, list[tuple[float, float]]] = {"kb": [], "huey": [], "before": []}
    for _ in range(sizes.runs):  # interleaved: each run sees the same load
        measured["kb"].append(kb_drain())
        if before:
            measured["before"].append(kb_drain(before))
        measured["huey"].append(huey_noop())
    (kb_rate, kb_cpu), (huey_rate, huey_cpu) = _medians(measured["kb"]), _medians(measured["huey"])
    floor_rate = statistics.median(sql_floor() for _ in range(sizes.runs))
    rows = [
        Row(
            f"{sizes.tiny_docs} tiny .txt, 1 worker",
            kb_rate,
            huey_rate,
            "tasks/s",
            ">= 0.5x Huey no-op",
            "kb parses, chunks and indexes each file; Huey runs a no-op "
            "(its dequeue/execute loop, in process)",
        ),
        Row(
            "CPU per task, 1 worker (kb: the whole process, start-up included)",
            kb_cpu,
            huey_cpu,
            "ms",
            "context",
            "the ratio of CPU times, less moved by the machine's load than wall times",
        ),
    ]
    if before:
        before_rate, before_cpu = _medians(measured["before"])
        rows.append(
            Row(
                "the same, KB_BENCH_BEFORE's checkout (interleaved)",
                before_rate,
                huey_rate,
                "tasks/s",
                "context",
                f"CPU {before_cpu:.2f} ms per task; this checkout {kb_rate / before_rate:.2f}x",
            )
        )
    return [
        *rows,
        Row(
            "context: kb's statements for the same tasks, raw sqlite3, no Python logic",
            floor_rate,
            huey_rate,
            "tasks/s",
            "context",
            "the floor for kb's work per task: claim, audit, chunk into the FTS5 "
            "index, completion, in two transactions",
        ),
    ]


def _medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


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
