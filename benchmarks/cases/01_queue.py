"""Queue overhead: `kb work --drain` on tiny text files against Huey's no-op loop, with
kb's own statements from a bare sqlite3 loop as the floor."""

from __future__ import annotations

import sqlite3
import tempfile
import time
from pathlib import Path

from benchmarks.harness import Context, Row, kb, median_of, upload_tiny

TITLE = "queue overhead"


def run(ctx: Context) -> list[Row]:
    work, sizes = ctx.work, ctx.sizes

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
            f"{sizes.tiny_docs} tiny .txt, 1 worker",
            kb_rate,
            huey_rate,
            "tasks/s",
            ">= 0.5x Huey no-op",
            "kb parses, chunks and indexes each file; Huey runs a no-op "
            "(its dequeue/execute loop, in process)",
        ),
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
