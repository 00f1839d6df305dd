"""Task verbs: status, wait, cancel, retry."""

from __future__ import annotations

import threading
import time
from typing import Protocol

from kb_cli import intake, queries
from kb_cli.app import Kb, require_caller
from kb_cli.db import Connection, format_stamp, outlasting_outages
from kb_cli.errors import ConflictError, WaitTimeout
from kb_cli.lifecycle import (
    CANCELLABLE,
    TERMINAL_TASK_STATUSES,
    DocStatus,
    TaskStatus,
)
from kb_cli.records import DocumentRecord, DocumentRow, QueuePlace, TaskRecord, TaskRow
from kb_cli.services import reading
from kb_cli.transitions import cancel_task as cancel_task_row
from kb_cli.transitions import move_document

WAIT_POLL_SECONDS = 0.2
QUEUE_POLL_SECONDS = 1.0


# The services below take a full id and its kind, as the guard resolved them: a task's
# id, or a document's (kind "documents") standing for its latest task.


def get_record(kb: Kb, entity_id: str, kind: str | None = None) -> DocumentRecord | TaskRecord:
    """The task record (naming its file) for a task id, the document record for a
    document id."""
    with kb.db.read() as conn:
        if kind == "documents":
            return reading.with_review_facts(conn, queries.document_record(conn, entity_id))
        return _task_record(conn, queries.existing_task(conn, entity_id))


def get_task(kb: Kb, task_id: str) -> TaskRecord:
    with kb.db.read() as conn:
        return TaskRecord.from_row(queries.existing_task(conn, task_id))


def _task_record(conn: Connection, task: TaskRow) -> TaskRecord:
    """The task's record, naming its document's file (none when the document is gone)."""
    document = queries.get_document(conn, task.document_id)
    return TaskRecord.from_row(task, document.filename if document else None)


class WaitWatcher(Protocol):
    """Sees a waited-for task: once with its file, then at every poll, with its place
    in the queue while it is queued (read at most every QUEUE_POLL_SECONDS)."""

    def started(self, task: TaskRecord, filename: str, size: int) -> None: ...
    def __call__(self, task: TaskRecord, queue: QueuePlace | None) -> None: ...


def wait_for_task(
    kb: Kb,
    entity_id: str,
    kind: str | None = None,
    timeout: float | None = None,
    watcher: WaitWatcher | None = None,
) -> TaskRecord:
    """Poll the database until the task (or the document's latest task) ends. Each
    look checks the caller again, and a lost database server is reconnected to (from
    the first look: a wait begun as the server restarts rides it out too)."""
    unstoppable = threading.Event()  # Ctrl-C ends a wait as any command: interrupted

    def first_look() -> tuple[str, TaskRecord, DocumentRow | None]:
        with kb.db.read() as conn:
            task_id = _task_id_for(conn, entity_id, kind)
            task = TaskRecord.from_row(queries.existing_task(conn, task_id))
            return task_id, task, queries.get_document(conn, task.document_id)

    task_id, task, document = outlasting_outages(
        first_look, unstoppable, kb.settings.reconnect_seconds
    )
    filename = document.filename if document else None
    if watcher is not None:
        watcher.started(task, filename or "?", document.size_bytes if document else 0)
    deadline = None if timeout is None else time.monotonic() + timeout
    queue = _QueueReader(kb)

    def look() -> tuple[TaskRecord, QueuePlace | None]:
        with kb.db.read() as conn:
            require_caller(conn, kb.actor)
            row = queries.existing_task(conn, task_id)
            place = queue.place(conn, row) if watcher is not None else None
        return TaskRecord.from_row(row, filename), place

    while True:
        record, place = outlasting_outages(look, unstoppable, kb.settings.reconnect_seconds)
        if watcher is not None:
            watcher(record, place)
        if record.status in TERMINAL_TASK_STATUSES:
            return record
        if deadline is not None and time.monotonic() >= deadline:
            raise WaitTimeout(record)
        time.sleep(WAIT_POLL_SECONDS)


class _QueueReader:
    """A queued task's place in the queue, read again at most every QUEUE_POLL_SECONDS."""

    def __init__(self, kb: Kb) -> None:
        self.clock = kb.clock
        self.last: QueuePlace | None = None
        self.read_at = -QUEUE_POLL_SECONDS

    def place(self, conn: Connection, task: TaskRow) -> QueuePlace | None:
        if task.status != TaskStatus.QUEUED:
            self.last = None
        elif self.last is None or time.monotonic() - self.read_at >= QUEUE_POLL_SECONDS:
            now = format_stamp(self.clock.now())
            self.last = QueuePlace(*queries.queue_place(conn, task, now))
            self.read_at = time.monotonic()
        return self.last


def cancel_task(kb: Kb, entity_id: str, kind: str | None = None) -> TaskRecord:
    """queued/running/retry_wait -> cancelled; the document goes back to draft. A
    document id stands for its latest task."""
    with kb.db.write() as conn:
        task_id = _task_id_for(conn, entity_id, kind)
        task = queries.existing_task(conn, task_id, lock=True)
        if task.status not in CANCELLABLE:
            raise ConflictError(
                f"cannot cancel task {task_id}: {_ENDED.get(task.status, 'it is ' + task.status)}; "
                "only queued, running or retry_wait tasks can be cancelled"
            )
        now = kb.timestamp()
        cancel_task_row(conn, task, actor=kb.actor.name, now=now)
        document = queries.get_document(conn, task.document_id, lock=True)
        if document is not None and document.status == DocStatus.PROCESSING:
            move_document(
                conn,
                document,
                DocStatus.DRAFT,
                actor=kb.actor.name,
                action="cancel",
                required=True,
                detail=f"task {task_id}",
                updated_at=now,
            )
        filename = document.filename if document is not None else None
        return TaskRecord.from_row(queries.existing_task(conn, task_id), filename)


def retry_task(kb: Kb, entity_id: str, kind: str | None = None) -> TaskRecord:
    """failed/failed -> queued/processing, on the same task row, attempt unchanged."""
    with kb.db.write() as conn:
        task_id = _task_id_for(conn, entity_id, kind)
        filename = intake.requeue(conn, kb.actor.name, task_id, kb.timestamp(), kb.settings.given)
        return TaskRecord.from_row(queries.existing_task(conn, task_id), filename)


def retry_all_failed(kb: Kb, error_code: str | None = None) -> list[TaskRecord]:
    with kb.db.write() as conn:
        records = []
        for task_id in queries.failed_task_ids(conn, error_code, kb.scope):
            try:
                filename = intake.requeue(
                    conn, kb.actor.name, task_id, kb.timestamp(), kb.settings.given
                )
            except ConflictError:
                continue  # e.g. an older failed task of a document that moved on
            records.append(TaskRecord.from_row(queries.existing_task(conn, task_id), filename))
        return records


# An ended task's status as a person says it ("it already succeeded", not "it is succeeded").
_ENDED = {
    "succeeded": "it already succeeded",
    "failed": "it failed (kb retry runs it again)",
    "cancelled": "it was cancelled already",
}


def _task_id_for(conn: Connection, entity_id: str, kind: str | None) -> str:
    """A task id, or a document id standing for its latest task."""
    if kind != "documents":
        return entity_id
    document = queries.existing_document(conn, entity_id)
    if document.latest_task_id is None:
        raise ConflictError(
            f"document {entity_id} is a draft with no task yet; submit it first: "
            f"kb submit {entity_id} (then kb status ID --wait follows its task)"
        )
    return document.latest_task_id
