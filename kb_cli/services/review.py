"""The review gate's other decisions: reject a revision, unpublish a document.

Both act in one short transaction; what search serves changes at commit. Chunks of a
rejected revision then go in bounded batches, each its own transaction."""

from __future__ import annotations

from kb_cli import queries
from kb_cli.app import Kb
from kb_cli.errors import ConflictError, UsageError
from kb_cli.intake import require_status
from kb_cli.lifecycle import REJECTABLE, DocStatus
from kb_cli.records import DocumentRecord
from kb_cli.transitions import move_document

MAX_REASON_CHARS = 500


def reject_document(kb: Kb, document_id: str, reason: str) -> DocumentRecord:
    """review_pending -> draft, or back to serving its published revision when the
    rejected one was to replace it; the reason is kept on the document and in history."""
    reason = " ".join(reason.split())
    if not reason or len(reason) > MAX_REASON_CHARS or not reason.isprintable():
        raise UsageError(f"--reason is 1 to {MAX_REASON_CHARS} printable characters")
    with kb.db.write() as conn:
        document = queries.existing_document(conn, document_id, lock=True)
        require_status(document, REJECTABLE, "reject")
        serving = document.published_revision is not None
        move_document(
            conn,
            document,
            DocStatus.PUBLISHED if serving else DocStatus.DRAFT,
            actor=kb.actor.name,
            action="reject",
            required=True,
            detail=f"revision {document.revision}: {reason}",
            rejected_revision=document.revision,
            rejected_reason=reason,
            updated_at=kb.timestamp(),
        )
    _remove_revision(kb, document_id, document.revision)
    with kb.db.read() as conn:
        return queries.document_record(conn, document_id)


def _remove_revision(kb: Kb, document_id: str, revision: int) -> None:
    """The chunks of a rejected revision, a batch per transaction (doctor --repair
    finishes what a crash leaves)."""
    batch = kb.settings.chunk_batch
    while True:
        with kb.db.write() as conn:
            if queries.delete_revision_chunks(conn, document_id, revision, batch) < batch:
                return


def unpublish_document(kb: Kb, document_id: str) -> DocumentRecord:
    """Search stops serving the document at commit. A published document is archived;
    one whose new revision is being worked on keeps its status. The chunks stay, so
    `kb publish` serves the revision again without reprocessing."""
    with kb.db.write() as conn:
        document = queries.existing_document(conn, document_id, lock=True)
        served = document.published_revision
        if served is None:
            raise ConflictError(
                f"cannot unpublish document {document_id}: search does not serve it "
                f"(it is {document.status} and has no published revision)"
            )
        move_document(
            conn,
            document,
            DocStatus.ARCHIVED if document.status is DocStatus.PUBLISHED else document.status,
            actor=kb.actor.name,
            action="unpublish",
            required=True,
            detail=f"revision {served}",
            published_revision=None,
            archived_revision=served,
            updated_at=kb.timestamp(),
        )
        return queries.document_record(conn, document_id)
