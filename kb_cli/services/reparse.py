"""`kb reparse`: a document's stored file processed again, with today's parsers and
settings, as a new revision, without an upload (docs/interface.md, "Re-parsing stored
files").

The new revision has the same file (object, sha256) as the current one; it is
submitted (a failed document is retried) and goes through review like any other, while
search keeps serving the published revision. A kept parse is keyed by the revision,
the sha256 and the parser key (parser version, chunk settings): the new revision has
none, so the file is parsed again.
"""

from __future__ import annotations

from dataclasses import dataclass

from kb_cli import intake, queries
from kb_cli.app import Kb, require_base
from kb_cli.errors import ConflictError, NotFoundError, UsageError
from kb_cli.lifecycle import REPLACEABLE, DocStatus
from kb_cli.records import DocumentRow
from kb_cli.transitions import move_document


@dataclass
class Reparse:
    """One document `kb reparse` queued (or, with --dry-run, would queue, or left)."""

    document_id: str
    filename: str
    base: str
    status: str
    revision: int  # the new revision once queued; the current one otherwise
    task_id: str | None
    queued: bool
    reason: str | None = None

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def plan(
    kb: Kb, document_ids: list[str], base: str | None = None, every: bool = False
) -> list[Reparse]:
    """The documents named (full ids, as the guard resolved them), of `base`, or every
    one the caller may read; each as it stands now (not queued)."""
    if sum((bool(document_ids), base is not None, every)) != 1:
        raise UsageError("say what to reparse: document ids, or --base NAME, or --all")
    with kb.db.read() as conn:
        if document_ids:
            rows = [queries.existing_document(conn, i) for i in dict.fromkeys(document_ids)]
        else:
            if base is not None:
                require_base(conn, kb.scope, base)
            listed = queries.list_documents(conn, scope=kb.actor.scope(base))
            rows = [queries.existing_document(conn, record.document_id) for record in listed]
    return [_as_planned(row) for row in rows]


def _as_planned(row: DocumentRow) -> Reparse:
    reason = None if row.status in _REPARSABLE else _why_not(row.status)
    return Reparse(row.id, row.filename, row.base, row.status, row.revision, None, False, reason)


def reparse(kb: Kb, planned: list[Reparse]) -> list[Reparse]:
    """Queue each planned document again, each in its own transaction; one that cannot
    be (being processed or reviewed, gone meanwhile) keeps its reason."""
    done = []
    for item in planned:
        if item.reason is None:
            try:
                item = _queue(kb, item.document_id)
            except (ConflictError, NotFoundError) as refused:
                item.reason = refused.message
        done.append(item)
    return done


def _queue(kb: Kb, document_id: str) -> Reparse:
    now, actor = kb.timestamp(), kb.actor.name
    with kb.db.write() as conn:
        document = queries.existing_document(conn, document_id, lock=True)
        intake.require_status(document, REPLACEABLE, "reparse")
        served = (DocStatus.PUBLISHED, DocStatus.ARCHIVED)
        new_status = DocStatus.DRAFT if document.status in served else document.status
        move_document(
            conn,
            document,
            new_status,
            actor=actor,
            action="reparse",
            required=True,
            detail=f"revision {document.revision + 1} (the stored file, parsed again)",
            revision=document.revision + 1,
            updated_at=now,
        )
        queries.insert_revision_file(
            conn, document_id, document.revision + 1, document.filename, document.content_type, now
        )
        queries.delete_artefacts(conn, document_id)
        if new_status == DocStatus.FAILED and document.latest_task_id is not None:
            intake.requeue(
                conn, actor, document.latest_task_id, now, kb.settings.given, new_revision=True
            )
            task_id = document.latest_task_id
        else:
            task_id = intake.submit(conn, actor, document_id, now, kb.settings.given).task_id
        row = queries.existing_document(conn, document_id)
    return Reparse(row.id, row.filename, row.base, row.status, row.revision, task_id, True)


_REPARSABLE = frozenset(str(status) for status in REPLACEABLE)


def _why_not(status: str) -> str:
    if status == DocStatus.PROCESSING:
        return "its task has not ended (kb status ID --wait)"
    if status == DocStatus.REVIEW_PENDING:
        return "a revision waits for review (publish or reject it first)"
    return f"it is {status}"
