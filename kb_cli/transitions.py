"""State changes with their audit events, written in the caller's transaction.

Callers read the row inside the same write transaction first, so `from_status` is what
the guarded UPDATE actually replaced; there is never a change without its event. The
changes a user may react to also write a lifecycle event (`kb events`, `kb relay`),
and a task that becomes claimable wakes the idle workers at commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Unpack

from kb_cli import queries
from kb_cli.db import Connection
from kb_cli.engines import TASKS_CHANNEL
from kb_cli.errors import ConflictError, InternalError
from kb_cli.lifecycle import (
    DocStatus,
    EventType,
    Stage,
    TaskStatus,
    is_legal_document_transition,
    is_legal_task_transition,
)
from kb_cli.queries import AuditEvent, DocumentChanges, LifecycleEvent, TaskChanges
from kb_cli.records import DocumentRow, TaskRow

# Where a new run of a task starts: no progress, no error, no pending retry.
FRESH_RUN: TaskChanges = {
    "stage": Stage.DOWNLOAD,
    "completed": 0,
    "total": 0,
    "error_code": None,
    "error_detail": None,
    "retry_at": None,
}

# Task moves that end a run, and document moves, that are lifecycle events.
TASK_EVENTS = {
    TaskStatus.SUCCEEDED: EventType.TASK_SUCCEEDED,
    TaskStatus.FAILED: EventType.TASK_FAILED,
    TaskStatus.CANCELLED: EventType.TASK_CANCELLED,
}
# A task that may be claimed (now, or at its retry time) is news for idle workers.
WAKING_TASK_STATUSES = (TaskStatus.QUEUED, TaskStatus.RETRY_WAIT)


def task_event_data(task: TaskRow) -> dict[str, Any]:
    return {
        "status": task.status,
        "revision": task.revision,
        "attempt": task.attempt,
        "error_code": task.error_code,
        "error_detail": task.error_detail,
    }


def document_event_type(action: str, to: DocStatus) -> EventType | None:
    """By what happened, not only where it went: an unpublish may keep the status."""
    if action == "unpublish":
        return EventType.DOCUMENT_UNPUBLISHED
    if to is DocStatus.REVIEW_PENDING:
        return EventType.DOCUMENT_REVIEW_PENDING
    if to is DocStatus.PUBLISHED and action == "publish":
        return EventType.DOCUMENT_PUBLISHED
    return None


@dataclass
class Events:
    """The audit and lifecycle events of several moves in one transaction, written
    together before it commits (one statement for each table): a worker that completes
    a batch of small tasks pays for its events' statements once. In the order of the
    moves, so `kb history` and `kb events` read them as if written one by one."""

    audit: list[AuditEvent] = field(default_factory=list)
    lifecycle: list[LifecycleEvent] = field(default_factory=list)
    wakes_tasks: bool = False

    def write(self, conn: Connection) -> None:
        queries.insert_audit_events(conn, self.audit)
        queries.insert_events(conn, self.lifecycle)
        if self.wakes_tasks:
            queries.wake(conn, TASKS_CHANNEL)
        self.audit, self.lifecycle, self.wakes_tasks = [], [], False


def _record(conn: Connection, events: Events | None, audit: AuditEvent) -> None:
    """An audit event now, or with the others of `events`."""
    if events is None:
        queries.insert_audit_events(conn, [audit])
    else:
        events.audit.append(audit)


def _publish(conn: Connection, events: Events | None, event: LifecycleEvent) -> None:
    """A lifecycle event now, or with the others of `events`."""
    if events is None:
        queries.insert_events(conn, [event])
    else:
        events.lifecycle.append(event)


def audit_event(
    actor: str,
    action: str,
    entity_id: str,
    from_status: str | None = None,
    to_status: str | None = None,
    detail: str | None = None,
    *,
    at: str,
) -> AuditEvent:
    return {
        "at": at,
        "actor": actor,
        "action": action,
        "entity_id": entity_id,
        "from_status": from_status,
        "to_status": to_status,
        "detail": (detail or None) and detail[:500],
    }


def move_task(
    conn: Connection,
    task: TaskRow,
    to: TaskStatus,
    *,
    actor: str,
    action: str,
    updated_at: str,
    detail: str | None = None,
    fence: tuple[str, int] | None = None,
    required: bool = False,
    events: Events | None = None,
    **values: Unpack[TaskChanges],
) -> TaskRow | None:
    """Move a task from the status it was read with: the new row, or None if it changed
    meanwhile (with `required`, a ConflictError instead). `updated_at` (the caller's
    clock) is also the time of its audit and lifecycle events, written now or, given
    `events`, when the caller writes those.

    A worker's move (`fence` given) always starts from its own running claim.
    """
    origin = TaskStatus.RUNNING if fence else task.status
    if not is_legal_task_transition(origin, to):
        raise InternalError(f"illegal task transition {origin} -> {to}")
    moved = queries.update_task(
        conn, task.id, [origin], fence=fence, status=to, updated_at=updated_at, **values
    )
    if moved:
        _record(
            conn, events, audit_event(actor, action, task.id, origin, to, detail, at=updated_at)
        )
        if to in TASK_EVENTS:
            data = task_event_data(moved)
            _publish(
                conn,
                events,
                LifecycleEvent(TASK_EVENTS[to], moved.document_id, task.id, data, updated_at),
            )
        if to in WAKING_TASK_STATUSES:
            if events is None:
                queries.wake(conn, TASKS_CHANNEL)
            else:
                events.wakes_tasks = True
    elif required:
        raise ConflictError(f"task {task.id} changed meanwhile; read it again and retry")
    return moved


def move_document(
    conn: Connection,
    document: DocumentRow,
    to: DocStatus,
    *,
    actor: str,
    action: str,
    updated_at: str,
    detail: str | None = None,
    if_version: int | None = None,
    required: bool = False,
    **values: Unpack[DocumentChanges],
) -> DocumentRow | None:
    """Move a document from the status it was read with, bumping its version: the new
    row, or None if it changed meanwhile. A move the document table does not list is
    refused before any write. `updated_at` (the caller's clock) is also the time of its
    audit and lifecycle events."""
    return move_document_from(
        conn,
        document.id,
        document.status,
        to,
        actor=actor,
        action=action,
        updated_at=updated_at,
        detail=detail,
        if_version=if_version,
        required=required,
        **values,
    )


def move_document_from(
    conn: Connection,
    document_id: str,
    origin: DocStatus,
    to: DocStatus,
    *,
    actor: str,
    action: str,
    updated_at: str,
    detail: str | None = None,
    if_version: int | None = None,
    required: bool = False,
    events: Events | None = None,
    **values: Unpack[DocumentChanges],
) -> DocumentRow | None:
    """As move_document, for a caller that knows the status the document should be in
    without reading its row (a worker moves its task's document on from processing)."""
    if not is_legal_document_transition(origin, to):
        raise InternalError(f"illegal document transition {origin} -> {to}")
    moved = queries.update_document(
        conn,
        document_id,
        [origin],
        if_version=if_version,
        status=to,
        updated_at=updated_at,
        **values,
    )
    if moved:
        audit = audit_event(actor, action, document_id, origin, to, detail, at=updated_at)
        _record(conn, events, audit)
        if kind := document_event_type(action, to):
            data = {
                "status": moved.status,
                "revision": moved.revision,
                "published_revision": moved.published_revision,
                "version": moved.version,
            }
            event = LifecycleEvent(kind, document_id, moved.latest_task_id, data, updated_at)
            _publish(conn, events, event)
    elif required:
        raise ConflictError(f"document {document_id} changed meanwhile; read it again and retry")
    return moved


def cancel_task(
    conn: Connection, task: TaskRow, *, actor: str, now: str, detail: str | None = None
) -> TaskRow | None:
    """An active task to `cancelled`, its lease and pending retry over (`kb cancel`, and
    the first step of `kb delete`). Chunks a running worker already wrote go in the same
    transaction; the worker notices at its next check and writes nothing more."""
    moved = move_task(
        conn,
        task,
        TaskStatus.CANCELLED,
        actor=actor,
        action="cancel",
        required=True,
        detail=detail,
        lease_expires_at=None,
        retry_at=None,
        updated_at=now,
    )
    queries.delete_task_chunks(conn, task.id)
    return moved


def requeue_task(
    conn: Connection,
    task: TaskRow,
    *,
    actor: str,
    action: str,
    updated_at: str,
    detail: str | None = None,
    fence: tuple[str, int] | None = None,
    required: bool = False,
    **values: Unpack[TaskChanges],
) -> TaskRow | None:
    """Back to `queued` / `download` / 0 / 0 with no claim, attempt kept, and no chunks
    of the abandoned run left behind (retry, graceful release, doctor's repair)."""
    changes: TaskChanges = {**FRESH_RUN, "worker_id": None, "lease_expires_at": None, **values}
    moved = move_task(
        conn,
        task,
        TaskStatus.QUEUED,
        actor=actor,
        action=action,
        updated_at=updated_at,
        detail=detail,
        fence=fence,
        required=required,
        **changes,
    )
    if moved:
        queries.delete_task_chunks(conn, task.id)
    return moved
