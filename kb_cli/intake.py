"""A document's way in, inside the caller's transaction: inserted as a draft, its file
replaced by a new revision, submitted as a queued task, its failed task queued again;
and the check that the object store its file went to is this knowledge base's. The
verbs that share these steps (upload, replace, submit, retry, sync, reparse) each open
their own short transaction around them and commit; a step reads what it changes with
a row lock and writes through the guarded transitions, so a race is a conflict, never a
half-made change.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from kb_cli import metadata, pending, queries
from kb_cli.app import Kb, check_store_owner
from kb_cli.config import TaskSettings
from kb_cli.db import Connection
from kb_cli.engines import TASKS_CHANNEL
from kb_cli.errors import ConflictError, NotFoundError
from kb_cli.lifecycle import (
    REPLACEABLE,
    RETRYABLE_DOC,
    RETRYABLE_TASK,
    SUBMITTABLE,
    DocStatus,
    EventType,
    Stage,
    TaskStatus,
)
from kb_cli.queries import AuditEvent
from kb_cli.records import DocumentRow, TaskRecord, meta_of
from kb_cli.store import StoredObject
from kb_cli.transitions import (
    audit_event,
    move_document,
    requeue_task,
    task_event_data,
)


def claimed_store(kb: Kb) -> str | None:
    """The database the store names as its owner; a store that names none yet (the
    first upload) is claimed for this one. Read before any write transaction."""
    pending.clean_abandoned(kb)  # what a killed command on this host left
    owner = kb.store.owner(writing=True)
    if owner is None:
        with kb.db.read() as conn:
            owner = queries.database_id(conn)
        if owner is not None:  # every schema since 0001 has one
            kb.store.claim(owner)
    return owner


def own_store(conn: Connection, kb: Kb, owner: str | None) -> None:
    """In an upload's write: refuse a store of another knowledge base (its objects are
    then deleted with the rest), and record where this knowledge base's store is."""
    check_store_owner(conn, kb, owner)
    queries.record_object_store(conn, kb.settings.store_where(short=False))


@dataclass(frozen=True)
class NewDocument:
    """What a new document row is made of: its file as stored, and its metadata."""

    filename: str
    content_type: str
    stored: StoredObject
    meta: dict[str, str]


def insert_document(conn: Connection, actor: str, base: str, new: NewDocument, now: str) -> str:
    """A draft document row with its audit events, in `conn`: its id. AlreadyExists
    when its metadata `path` is taken in `base` (the database's unique index)."""
    document_id = str(uuid.uuid4())
    obj = new.stored
    queries.insert_document(
        conn,
        id=document_id,
        base=base,
        filename=new.filename,
        content_type=new.content_type,
        size_bytes=obj.size_bytes,
        sha256=obj.sha256,
        object_key=obj.key,
        status=DocStatus.DRAFT,
        version=1,
        revision=1,
        published_revision=None,
        latest_task_id=None,
        created_at=now,
        updated_at=now,
        meta=json.dumps(new.meta, ensure_ascii=False, sort_keys=True),
    )
    queries.insert_revision_file(conn, document_id, 1, new.filename, new.content_type, now)
    pending.settle(conn, [obj.key])
    events = [
        audit_event(actor, "upload", document_id, None, DocStatus.DRAFT, new.filename, at=now)
    ]
    if new.meta:
        events.append(meta_event(actor, document_id, new.meta, now))
    queries.insert_audit_events(conn, events)
    return document_id


def meta_event(actor: str, document_id: str, meta: dict[str, str], now: str) -> AuditEvent:
    """The audit event of a document's metadata being set: every key and value."""
    return audit_event(actor, "meta", document_id, None, None, metadata.describe(meta), at=now)


def _renamed(document: DocumentRow, new_file: NewDocument) -> str | None:
    """The old and new file, when the new one has another name or type."""
    old = (document.filename, document.content_type)
    new = (new_file.filename, new_file.content_type)
    if old == new:
        return None
    return f"{old[0]} ({old[1]}) -> {new[0]} ({new[1]})"


def replace_revision(
    conn: Connection, actor: str, document: DocumentRow, new: NewDocument, now: str
) -> str | None:
    """In `conn`: the document's next revision is the stored file of `new`, its metadata
    keys updated with `new.meta`; its old object is pending, the caller's to delete after
    commit (pending.discard).
    A conflict unless the document is draft, failed, published or unpublished. Returns
    the old and new file when the new one has another name or type (_renamed)."""
    require_status(document, REPLACEABLE, "replace")
    renamed = _renamed(document, new)
    revision = document.revision + 1
    # A published (or unpublished) document goes back to draft; draft and failed
    # keep their status so that `retry` reprocesses a failed document's new file.
    served = (DocStatus.PUBLISHED, DocStatus.ARCHIVED)
    new_status = DocStatus.DRAFT if document.status in served else document.status
    merged = metadata.checked({**meta_of(document.meta), **new.meta})
    obj = new.stored
    move_document(
        conn,
        document,
        new_status,
        actor=actor,
        action="replace",
        required=True,
        detail=f"revision {revision}" + (f": {renamed}" if renamed else ""),
        filename=new.filename,
        content_type=new.content_type,
        size_bytes=obj.size_bytes,
        sha256=obj.sha256,
        object_key=obj.key,
        revision=revision,
        updated_at=now,
        meta=json.dumps(merged, ensure_ascii=False, sort_keys=True),
    )
    queries.insert_revision_file(conn, document.id, revision, new.filename, new.content_type, now)
    if new.meta:
        queries.insert_audit_events(conn, [meta_event(actor, document.id, new.meta, now)])
    queries.delete_artefacts(conn, document.id)  # parses of the superseded file
    pending.settle(conn, [obj.key])
    if document.object_key != obj.key:
        pending.release(conn, document.object_key, now)
    return renamed


def submit(
    conn: Connection,
    actor: str,
    document_id: str,
    now: str,
    asked: TaskSettings = TaskSettings(),
) -> TaskRecord:
    """draft -> processing with a new queued task and its outbox event, in `conn`: the
    task's record. The task carries the settings `asked` (what the queuing command was
    given) and its document's base."""
    document = queries.existing_document(conn, document_id, lock=True)
    require_status(document, SUBMITTABLE, "submit")
    task_id = str(uuid.uuid4())
    queries.insert_task(
        conn,
        id=task_id,
        document_id=document_id,
        revision=document.revision,
        status=TaskStatus.QUEUED,
        stage=Stage.DOWNLOAD,
        completed=0,
        total=0,
        attempt=0,
        created_at=now,
        updated_at=now,
        base=document.base,
        settings=asked.to_json(),
    )
    if not move_document(
        conn,
        document,
        DocStatus.PROCESSING,
        actor=actor,
        action="submit",
        detail=f"task {task_id}",
        latest_task_id=task_id,
        rejected_revision=None,
        rejected_reason=None,
        updated_at=now,
    ):
        raise ConflictError(f"document {document_id} changed meanwhile; try again")
    queries.insert_audit_events(
        conn,
        [
            audit_event(
                actor,
                "submit",
                task_id,
                None,
                TaskStatus.QUEUED,
                f"document {document_id} revision {document.revision}" + _asked(asked),
                at=now,
            )
        ],
    )
    task = queries.existing_task(conn, task_id)
    queries.insert_event(
        conn, EventType.TASK_QUEUED, document_id, task_id, task_event_data(task), now
    )
    queries.wake(conn, TASKS_CHANNEL)
    return TaskRecord.from_row(task, document.filename)


# What a person can do next with a document in each status, for refusals.
NEXT_STEP = {
    DocStatus.DRAFT: "submit it first: kb submit {id}",
    DocStatus.PROCESSING: "its task has not ended: kb status {id} --wait (or kb cancel {id})",
    DocStatus.REVIEW_PENDING: "a reviewer publishes it (kb publish {id}) or rejects it "
    "(kb reject {id} --reason TEXT) first",
    DocStatus.PUBLISHED: "to change it: kb upload FILE --replace {id}",
    DocStatus.FAILED: "fix the cause (kb upload FILE --replace {id}), then: kb retry {id}",
    DocStatus.ARCHIVED: "kb publish {id} serves it again; kb upload FILE --replace {id} changes it",
    DocStatus.DELETING: "it cannot change any more",
}
# The status a verb leads to: refusing it there is "already".
_OUTCOME = {"publish": DocStatus.PUBLISHED, "submit": DocStatus.PROCESSING}


def require_status(document: DocumentRow | None, allowed: tuple[DocStatus, ...], verb: str) -> None:
    """A conflict unless the document's status is one `verb` takes: the status, once,
    and what to do next."""
    if document is None:
        raise NotFoundError("no document with that id")
    status = document.status
    if status not in allowed:
        already = "already " if _OUTCOME.get(verb) == status else ""
        hint = NEXT_STEP[status].format(id=document.id)
        raise ConflictError(
            f"cannot {verb} document {document.id}: it is {already}{status}; {hint}"
        )


def _asked(asked: TaskSettings) -> str:
    """What a history event says of the settings a task was queued with."""
    return f"; settings {asked.describe()}" if asked.given() else ""


def requeue(
    conn: Connection,
    actor: str,
    task_id: str,
    now: str,
    given: TaskSettings = TaskSettings(),
    new_revision: bool = False,
) -> str:
    """Requeue the failed task: its document's file name. A retry keeps the settings
    the task was queued with, changed where the requeuing command was `given` others;
    a task requeued for a new revision (reparse, sync) is asked afresh, as a submit."""
    task = queries.existing_task(conn, task_id, lock=True)
    document = queries.get_document(conn, task.document_id, lock=True)
    if document is None:
        raise ConflictError(f"cannot retry task {task_id}: its document no longer exists")
    if task.status not in RETRYABLE_TASK or document.status not in RETRYABLE_DOC:
        raise ConflictError(
            f"cannot retry task {task_id}: task is {task.status} and document is "
            f"{document.status}; only failed tasks of failed documents can be retried "
            f"(kb status {document.id} shows where it stands)"
        )
    if document.latest_task_id != task_id:
        raise ConflictError(
            f"task {task_id} is not the latest task of its document: "
            f"kb retry {document.id} retries the latest"
        )
    asked = given if new_revision else given.over(TaskSettings.from_json(task.settings))
    requeued = requeue_task(
        conn,
        task,
        actor=actor,
        action="retry",
        required=True,
        detail=f"was {task.error_code}" + _asked(asked),
        revision=document.revision,
        updated_at=now,
        settings=asked.to_json(),
    )
    move_document(
        conn,
        document,
        DocStatus.PROCESSING,
        actor=actor,
        action="retry",
        required=True,
        detail=f"task {task_id}",
        updated_at=now,
    )
    assert requeued is not None  # required: a lost race raised ConflictError
    data = task_event_data(requeued)
    queries.insert_event(conn, EventType.TASK_QUEUED, document.id, task_id, data, now)
    return document.filename
