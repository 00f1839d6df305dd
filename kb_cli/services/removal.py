"""`kb delete`: documents out of the knowledge base, with everything they own.

A delete first marks the document `deleting` in one short transaction: its running
task (if any) is cancelled there (a cancel always wins: the worker's next fenced write
is refused), search stops serving it, every command finds it no more, a tombstone keeps
what `kb history` needs, and the delete is an audit event. Then its rows go in bounded
batches (chunks, kept parses, tasks), then its stored object, then the row itself. A
crash at any point leaves a `deleting` document, which `kb doctor --repair` finishes:
never a chunk that search serves, never an object that no row names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kb_cli import queries
from kb_cli.app import Kb, require_base
from kb_cli.db import Connection
from kb_cli.errors import ConflictError, NotFoundError, UsageError
from kb_cli.lifecycle import ACTIVE_TASK_STATUSES, DocStatus, EventType
from kb_cli.records import DocumentRow
from kb_cli.transitions import cancel_task, move_document


@dataclass
class Deletion:
    """One document a delete removes (or, with --dry-run, would remove)."""

    document_id: str
    filename: str
    base: str
    status: str
    chunks: int
    tasks: int
    deleted: bool

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def plan(
    kb: Kb, document_ids: list[str], status: str | None = None, base: str | None = None
) -> list[Deletion]:
    """The documents named (full ids, as the guard resolved them) or matching the
    filter, in the caller's readable bases."""
    if document_ids and (status or base):
        raise UsageError("give document ids or --status, not both")
    if not document_ids and not (status or base):
        raise UsageError("say what to delete: document ids, or --status S and/or --base NAME")
    with kb.db.read() as conn:
        if document_ids:
            ids = list(dict.fromkeys(document_ids))
        else:
            if base is not None:
                require_base(conn, kb.scope, base)
            rows = queries.list_documents(conn, status=status, scope=kb.actor.scope(base))
            ids = [row.document_id for row in rows]
        return [_planned(conn, document_id) for document_id in ids]


def _planned(conn: Connection, document_id: str) -> Deletion:
    document = queries.existing_document(conn, document_id)
    footprint = queries.document_footprint(conn, document_id)
    return Deletion(
        document_id,
        document.filename,
        document.base,
        document.status,
        footprint.chunks,
        footprint.tasks,
        deleted=False,
    )


def delete(kb: Kb, planned: list[Deletion]) -> list[Deletion]:
    """Delete what `plan` found; each document marked in its own transaction, then
    emptied in batches."""
    done = []
    for deletion in planned:
        begin(kb, deletion.document_id)
        finish(kb, deletion.document_id)
        deletion.deleted = True
        done.append(deletion)
    return done


def begin(kb: Kb, document_id: str) -> None:
    """The first step, in one transaction: cancel, stop serving, hide, record."""
    now = kb.timestamp()
    with kb.db.write() as conn:
        # The task row before the document row, in the order a worker and `kb cancel`
        # lock them, so that two transactions never wait for each other in a circle.
        current = queries.existing_document(conn, document_id)
        if current.status == DocStatus.DELETING:  # another command's delete: as good as gone
            raise NotFoundError(f"no document with id {document_id!r}")
        latest = current.latest_task_id
        if latest:
            _cancel_active(kb, conn, latest, now)
        document = queries.existing_document(conn, document_id, lock=True)
        if document.latest_task_id != latest:  # submitted again meanwhile
            raise ConflictError(f"document {document_id} changed meanwhile; run the delete again")
        task_ids = queries.task_ids_of_document(conn, document_id)
        move_document(
            conn,
            document,
            DocStatus.DELETING,
            actor=kb.actor.name,
            action="delete",
            required=True,
            detail=f"{document.filename} (base {document.base})",
            published_revision=None,
            archived_revision=None,
            updated_at=now,
        )
        queries.insert_tombstone(
            conn,
            id=document_id,
            base=document.base,
            filename=document.filename,
            task_ids=json.dumps(task_ids),
            deleted_at=now,
            deleted_by=kb.actor.name,
        )
        data = {"filename": document.filename, "tasks": len(task_ids)}
        queries.insert_event(conn, EventType.DOCUMENT_DELETED, document_id, None, data, now)


def _cancel_active(kb: Kb, conn: Connection, task_id: str, now: str) -> None:
    """A task still queued, running or waiting to retry is cancelled first, as `kb
    cancel` would: a worker holding it writes nothing more."""
    task = queries.existing_task(conn, task_id, lock=True)
    if task.status in ACTIVE_TASK_STATUSES:
        detail = "the document is being deleted"
        cancel_task(conn, task, actor=kb.actor.name, now=now, detail=detail)


def finish(kb: Kb, document_id: str) -> None:
    """Remove what a document marked `deleting` still owns, in bounded transactions.
    Safe to run again from any point (doctor --repair does after a crash)."""
    for step in STEPS:
        step(kb, document_id)


def remove_chunks(kb: Kb, document_id: str) -> None:
    batch = kb.settings.chunk_batch
    while True:
        with kb.db.write() as conn:
            if queries.delete_document_chunks(conn, document_id, batch) < batch:
                return


def remove_tasks(kb: Kb, document_id: str) -> None:
    with kb.db.write() as conn:
        queries.delete_document_tasks(conn, document_id)


def remove_artefacts(kb: Kb, document_id: str) -> None:
    """The kept parses of its revisions (one small row per revision)."""
    with kb.db.write() as conn:
        queries.delete_artefacts(conn, document_id)


def remove_object(kb: Kb, document_id: str) -> None:
    """Before the row, so that no object is ever left that no row names."""
    with kb.db.read() as conn:
        document = queries.get_document(conn, document_id)
    if document is not None:
        kb.store.delete(document.object_key)


def remove_row(kb: Kb, document_id: str) -> None:
    with kb.db.write() as conn:
        queries.delete_document_row(conn, document_id)


# The order of a delete after `begin`; a crash between two steps is finished by `finish`.
STEPS = (remove_chunks, remove_artefacts, remove_tasks, remove_object, remove_row)


def unfinished(conn: Connection) -> list[DocumentRow]:
    """Documents whose delete began and did not end (a crash): for doctor."""
    return queries.documents_being_deleted(conn)
