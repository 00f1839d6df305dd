"""Every SQL statement the product runs, as named functions over a Connection.

State changes are guarded UPDATEs: they name the statuses they may start from (and,
for a worker, the claim they belong to) and report whether a row matched, so the
caller can tell a legal transition from a lost race or a forbidden one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, Row, and_, delete, func, insert, or_, select, update

from kb_cli.lifecycle import DocStatus, TaskStatus
from kb_cli.models import audit, chunks, documents, outbox, tasks

MIN_PREFIX = 6


# --- lookups -------------------------------------------------------------------------


def get_document(conn: Connection, document_id: str) -> Row | None:
    return conn.execute(select(documents).where(documents.c.id == document_id)).first()


def get_task(conn: Connection, task_id: str) -> Row | None:
    return conn.execute(select(tasks).where(tasks.c.id == task_id)).first()


def get_tasks(conn: Connection, task_ids: Iterable[str]) -> dict[str, Row]:
    ids = [task_id for task_id in task_ids if task_id]
    if not ids:
        return {}
    return {row.id: row for row in conn.execute(select(tasks).where(tasks.c.id.in_(ids)))}


def find_ids_by_prefix(conn: Connection, table_name: str, prefix: str) -> list[str]:
    """Up to two ids starting with `prefix`: enough to tell unique from ambiguous."""
    table = documents if table_name == "documents" else tasks
    if len(prefix) < MIN_PREFIX:
        return []
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    query = select(table.c.id).where(table.c.id.like(f"{escaped}%", escape="\\")).limit(2)
    return list(conn.execute(query).scalars())


def list_documents(
    conn: Connection, status: str | None = None, error_code: str | None = None
) -> Sequence[Row]:
    query = select(documents).order_by(documents.c.created_at.desc(), documents.c.id)
    if status:
        query = query.where(documents.c.status == status)
    if error_code:
        query = query.join(tasks, tasks.c.id == documents.c.latest_task_id).where(
            tasks.c.error_code == error_code
        )
    return conn.execute(query).all()


def failed_task_ids(conn: Connection, error_code: str | None = None) -> list[str]:
    query = select(tasks.c.id).where(tasks.c.status == TaskStatus.FAILED)
    if error_code:
        query = query.where(tasks.c.error_code == error_code)
    return list(conn.execute(query.order_by(tasks.c.created_at)).scalars())


# --- inserts -------------------------------------------------------------------------


def insert_document(conn: Connection, **values: Any) -> None:
    conn.execute(insert(documents).values(**values))


def insert_task(conn: Connection, **values: Any) -> None:
    conn.execute(insert(tasks).values(**values))


def insert_outbox_event(
    conn: Connection, topic: str, entity_id: str, payload: dict, at: str
) -> None:
    conn.execute(
        insert(outbox).values(
            topic=topic, entity_id=entity_id, payload=json.dumps(payload), created_at=at
        )
    )


def insert_audit_events(conn: Connection, events: list[dict[str, Any]]) -> None:
    if events:
        conn.execute(insert(audit), events)


def list_audit_events(conn: Connection, entity_ids: Sequence[str]) -> Sequence[Row]:
    query = select(audit).where(audit.c.entity_id.in_(entity_ids)).order_by(audit.c.id)
    return conn.execute(query).all()


# --- guarded updates -----------------------------------------------------------------


def update_document(
    conn: Connection,
    document_id: str,
    from_statuses: Iterable[DocStatus],
    *,
    if_version: int | None = None,
    **values: Any,
) -> bool:
    """Change a document row if its status (and version) still match; bumps `version`."""
    query = (
        update(documents)
        .where(documents.c.id == document_id)
        .where(documents.c.status.in_([str(status) for status in from_statuses]))
        .values(version=documents.c.version + 1, **values)
    )
    if if_version is not None:
        query = query.where(documents.c.version == if_version)
    return conn.execute(query).rowcount == 1


def update_task(
    conn: Connection,
    task_id: str,
    from_statuses: Iterable[TaskStatus],
    *,
    fence: tuple[str, int] | None = None,
    **values: Any,
) -> bool:
    """Change a task row if its status still matches and, for a worker, its claim.

    `fence` is (worker_id, attempt): a worker's write lands only while the task is
    still running under that exact claim, so a worker whose task was cancelled or
    reclaimed can never write over the newer state.
    """
    query = (
        update(tasks)
        .where(tasks.c.id == task_id)
        .where(tasks.c.status.in_([str(status) for status in from_statuses]))
        .values(**values)
    )
    if fence is not None:
        worker_id, attempt = fence
        query = query.where(
            tasks.c.status == TaskStatus.RUNNING,
            tasks.c.worker_id == worker_id,
            tasks.c.attempt == attempt,
        )
    return conn.execute(query).rowcount == 1


# --- claiming ------------------------------------------------------------------------


def claimable_condition(now: str):
    """Queued, due for a retry, or running under a lease that has run out."""
    return or_(
        tasks.c.status == TaskStatus.QUEUED,
        and_(tasks.c.status == TaskStatus.RETRY_WAIT, tasks.c.retry_at <= now),
        and_(tasks.c.status == TaskStatus.RUNNING, tasks.c.lease_expires_at < now),
    )


def next_claimable_task(conn: Connection, now: str, skip_locked: bool = False) -> Row | None:
    query = (
        select(tasks)
        .where(claimable_condition(now))
        .order_by(tasks.c.created_at, tasks.c.id)
        .limit(1)
    )
    if skip_locked:
        query = query.with_for_update(skip_locked=True)
    return conn.execute(query).first()


def claimable_task(conn: Connection, task_id: str, now: str) -> Row | None:
    query = select(tasks).where(tasks.c.id == task_id, claimable_condition(now))
    return conn.execute(query).first()


def next_retry_at(conn: Connection) -> str | None:
    query = select(func.min(tasks.c.retry_at)).where(tasks.c.status == TaskStatus.RETRY_WAIT)
    return conn.execute(query).scalar()


# --- chunks --------------------------------------------------------------------------


def replace_chunks(
    conn: Connection, document_id: str, revision: int, task_id: str, rows: list[dict]
) -> None:
    """Delete the revision's chunks and insert the new ones, in the caller's transaction."""
    conn.execute(
        delete(chunks).where(chunks.c.document_id == document_id, chunks.c.revision == revision)
    )
    if rows:
        conn.execute(
            insert(chunks),
            [
                {"document_id": document_id, "revision": revision, "task_id": task_id, **row}
                for row in rows
            ],
        )


def delete_task_chunks(conn: Connection, task_id: str) -> int:
    return conn.execute(delete(chunks).where(chunks.c.task_id == task_id)).rowcount


def delete_unpublished_chunks(conn: Connection, document_id: str, keep_revision: int) -> int:
    query = delete(chunks).where(
        chunks.c.document_id == document_id, chunks.c.revision != keep_revision
    )
    return conn.execute(query).rowcount


def delete_chunks_except(conn: Connection, document_id: str, keep: set[int]) -> int:
    query = delete(chunks).where(chunks.c.document_id == document_id)
    if keep:
        query = query.where(chunks.c.revision.not_in(keep))
    return conn.execute(query).rowcount


def count_chunks(conn: Connection, document_id: str, revision: int | None = None) -> int:
    query = select(func.count()).select_from(chunks).where(chunks.c.document_id == document_id)
    if revision is not None:
        query = query.where(chunks.c.revision == revision)
    return conn.execute(query).scalar_one()


def search_published_chunks(conn: Connection, words: list[str], limit: int) -> Sequence[Row]:
    """Minimal search: chunks of published revisions containing every word."""
    query = (
        select(
            chunks.c.document_id,
            documents.c.filename,
            chunks.c.revision,
            chunks.c.chunk_index,
            chunks.c.text,
            chunks.c.page,
            chunks.c.heading,
        )
        .join(documents, documents.c.id == chunks.c.document_id)
        .where(chunks.c.revision == documents.c.published_revision)
    )
    for word in words:
        escaped = word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = query.where(chunks.c.text.ilike(f"%{escaped}%", escape="\\"))
    return conn.execute(
        query.order_by(chunks.c.document_id, chunks.c.chunk_index).limit(limit)
    ).all()
