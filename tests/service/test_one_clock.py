"""One clock: every timestamp kb writes comes from the application's clock (Kb.clock).
With a clock set far in the past or the future, every time a whole lifecycle wrote is
that clock's time, in every table; a call to the system's clock anywhere would show."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kb_cli.clock import ManualClock
from kb_cli.db import format_stamp, parse_stamp
from kb_cli.services import access, bases, removal, review, tasks, users
from kb_cli.services import documents as docs
from kb_cli.worker import Worker, WorkerOptions

TABLES = (
    "documents",
    "ingestion_tasks",
    "audit_events",
    "outbox_events",
    "users",
    "bases",
    "teams",
    "deleted_documents",
    "parse_artefacts",
)
# Written as the clock's time plus a duration (a lease, a backoff), not the time itself.
LATER = {"lease_expires_at", "retry_at"}


def timestamp_columns(conn, table: str) -> list[str]:
    """Every column of `table` that holds a time: named `at` or `..._at`."""
    cursor = conn.raw.execute(f"SELECT * FROM {table} WHERE 1 = 0")
    names = [column[0] for column in cursor.description]
    return [name for name in names if name == "at" or name.endswith("_at")]


def written_times(kb) -> dict[tuple[str, str], set[str]]:
    """(table, column) -> the distinct times written there."""
    found = {}
    with kb.db.read() as conn:
        for table in TABLES:
            for column in timestamp_columns(conn, table):
                # The default base is made by the schema's migration, before any clock.
                skip = " AND name <> 'default'" if table == "bases" else ""
                sql = f"SELECT DISTINCT {column} FROM {table} WHERE {column} IS NOT NULL{skip}"
                found[table, column] = set(conn.execute(sql).scalars())
    return found


def lifecycle(kb, tmp_path: Path, monkeypatch) -> None:
    """Upload, submit, work, publish, and every other write a person or a worker makes."""
    admin = access.add_user(kb, "alice", "admin")
    monkeypatch.setenv("KB_TOKEN", admin.token)  # once an admin exists, only one adds users
    access.add_user(kb, "bob", "viewer", ["sales"])
    access.note_use(kb, "alice")
    users.disable_user(kb, "bob")
    bases.create_base(kb, "engineering", ["platform"])
    bases.grant_base(kb, "engineering", "bob")
    paths = []
    for name, text in (
        ("a.txt", "Invoices are kept for ten years."),
        ("b.txt", "Keep it."),
        ("empty.txt", ""),
    ):
        paths.append(tmp_path / name)
        paths[-1].write_text(text)
    a, b, empty = (task.document_id for task in docs.upload_files(kb, paths, submit=True))
    worker = Worker(kb, WorkerOptions(worker_id="w1"))
    assert sum(result.claimed for result in worker.run(max_tasks=None)) == 3
    docs.publish_document(kb, a)
    review.reject_document(kb, b, "too short")
    review.unpublish_document(kb, a)
    docs.publish_document(kb, a)
    bases.move_document(kb, a, "engineering")
    tasks.retry_task(kb, empty, "documents")
    [cancelled] = docs.upload_files(kb, [paths[1]], submit=True)
    tasks.cancel_task(kb, cancelled.task_id)
    removal.delete(kb, removal.plan(kb, [b]))


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2001, 2, 3, 4, 5, 6, 789012, tzinfo=UTC),
        datetime.now(UTC) + timedelta(days=3650),
    ],
    ids=["past", "future"],
)
def test_every_written_time_is_the_clock_time(kb, tmp_path, monkeypatch, moment):
    kb.clock = ManualClock(moment)
    lifecycle(kb, tmp_path, monkeypatch)
    stamp = format_stamp(moment)
    found = written_times(kb)
    for (table, column), times in found.items():
        if column in LATER:
            assert all(moment <= parse_stamp(t) < moment + timedelta(days=1) for t in times)
        else:
            assert times <= {stamp}, (table, column, times - {stamp})
    # The lifecycle wrote each of these: the check above compared something.
    written = {key for key, times in found.items() if times}
    assert written >= {
        ("documents", "created_at"),
        ("documents", "updated_at"),
        ("ingestion_tasks", "created_at"),
        ("ingestion_tasks", "updated_at"),
        ("audit_events", "at"),
        ("outbox_events", "created_at"),
        ("users", "created_at"),
        ("users", "disabled_at"),
        ("users", "last_used_at"),
        ("bases", "created_at"),
        ("teams", "created_at"),
        ("deleted_documents", "deleted_at"),
    }
