"""Every SQL statement the product runs, as named functions over a Connection.

State changes are guarded UPDATEs: they name the statuses they may start from (and,
for a worker, the claim they belong to) and report whether a row matched, so the
caller can tell a legal transition from a lost race or a forbidden one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    and_,
    bindparam,
    delete,
    insert,
    or_,
    select,
    text,
    update,
)

from kb_cli.lifecycle import DocStatus, TaskStatus
from kb_cli.models import audit, chunks, documents, outbox, tasks, users

MIN_PREFIX = 6


# --- lookups -------------------------------------------------------------------------


# The hot-path statements are built once: SQLAlchemy then reuses their cache keys and
# compiled forms, which takes most of its per-statement overhead off every task.
_GET_DOCUMENT = select(documents).where(documents.c.id == bindparam("_id"))
_GET_TASK = select(tasks).where(tasks.c.id == bindparam("_id"))
# For a read that a guarded update in the same transaction depends on: PostgreSQL locks
# the row until commit (SQLite needs nothing: BEGIN IMMEDIATE, and SQLAlchemy leaves
# FOR UPDATE out of its SQL), so the update never finds the row changed meanwhile.
_LOCK_DOCUMENT = _GET_DOCUMENT.with_for_update()
_LOCK_TASK = _GET_TASK.with_for_update()


def get_document(conn: Connection, document_id: str, lock: bool = False) -> Row | None:
    return conn.execute(_LOCK_DOCUMENT if lock else _GET_DOCUMENT, {"_id": document_id}).first()


def get_task(conn: Connection, task_id: str, lock: bool = False) -> Row | None:
    return conn.execute(_LOCK_TASK if lock else _GET_TASK, {"_id": task_id}).first()


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
    query = select(table.c.id).where(table.c.id.like(f"{escape_like(prefix)}%", escape="\\"))
    query = query.limit(2)
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


_INSERT_AUDIT = insert(audit)


def insert_audit_events(conn: Connection, events: list[dict[str, Any]]) -> None:
    if events:
        conn.execute(_INSERT_AUDIT, events)


def list_audit_events(conn: Connection, entity_ids: Sequence[str]) -> Sequence[Row]:
    query = select(audit).where(audit.c.entity_id.in_(entity_ids)).order_by(audit.c.id)
    return conn.execute(query).all()


def task_ids_of_document(conn: Connection, document_id: str) -> list[str]:
    return list(
        conn.execute(select(tasks.c.id).where(tasks.c.document_id == document_id)).scalars()
    )


# --- users ---------------------------------------------------------------------------


def admin_exists(conn: Connection) -> bool:
    query = select(users.c.name).where(users.c.role == "admin").limit(1)
    return conn.execute(query).first() is not None


def get_user(conn: Connection, name: str) -> Row | None:
    return conn.execute(select(users).where(users.c.name == name)).first()


def get_user_by_token_id(conn: Connection, token_id: str) -> Row | None:
    return conn.execute(select(users).where(users.c.token_id == token_id)).first()


def insert_user(conn: Connection, **values: Any) -> None:
    conn.execute(insert(users).values(**values))


# --- guarded updates -----------------------------------------------------------------


_FROM_STATUSES = bindparam("_from", expanding=True)
_UPDATE_DOCUMENT = (
    update(documents)
    .where(documents.c.id == bindparam("_id"), documents.c.status.in_(_FROM_STATUSES))
    .values(version=documents.c.version + 1)
)
_UPDATE_DOCUMENT_AT_VERSION = _UPDATE_DOCUMENT.where(documents.c.version == bindparam("_version"))
_UPDATE_TASK = update(tasks).where(
    tasks.c.id == bindparam("_id"), tasks.c.status.in_(_FROM_STATUSES)
)
_UPDATE_TASK_FENCED = _UPDATE_TASK.where(
    tasks.c.status == TaskStatus.RUNNING,
    tasks.c.worker_id == bindparam("_worker"),
    tasks.c.attempt == bindparam("_attempt"),
)


def update_document(
    conn: Connection,
    document_id: str,
    from_statuses: Iterable[DocStatus],
    *,
    if_version: int | None = None,
    **values: Any,
) -> bool:
    """Change a document row if its status (and version) still match; bumps `version`.

    The keyword arguments become the SET clause.
    """
    params = {"_id": document_id, "_from": [str(status) for status in from_statuses], **values}
    statement = _UPDATE_DOCUMENT
    if if_version is not None:
        statement, params["_version"] = _UPDATE_DOCUMENT_AT_VERSION, if_version
    return conn.execute(statement, params).rowcount == 1


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
    reclaimed can never write over the newer state. The keyword arguments become the
    SET clause.
    """
    params = {"_id": task_id, "_from": [str(status) for status in from_statuses], **values}
    statement = _UPDATE_TASK
    if fence is not None:
        statement = _UPDATE_TASK_FENCED
        params["_worker"], params["_attempt"] = fence
    return conn.execute(statement, params).rowcount == 1


# --- claiming ------------------------------------------------------------------------


# Queued, due for a retry, or running under a lease that has run out.
_CLAIMABLE = or_(
    tasks.c.status == TaskStatus.QUEUED,
    and_(tasks.c.status == TaskStatus.RETRY_WAIT, tasks.c.retry_at <= bindparam("_now")),
    and_(tasks.c.status == TaskStatus.RUNNING, tasks.c.lease_expires_at < bindparam("_now")),
)
_NEXT_CLAIMABLE = select(tasks).where(_CLAIMABLE).order_by(tasks.c.created_at, tasks.c.id).limit(1)
_NEXT_CLAIMABLE_SKIP_LOCKED = _NEXT_CLAIMABLE.with_for_update(skip_locked=True)
_CLAIMABLE_TASK = select(tasks).where(tasks.c.id == bindparam("_id"), _CLAIMABLE)
_CLAIMABLE_TASK_LOCKED = _CLAIMABLE_TASK.with_for_update()


def next_claimable_task(conn: Connection, now: str, skip_locked: bool = False) -> Row | None:
    """The oldest claimable task; on PostgreSQL skipping rows other claimers hold."""
    statement = _NEXT_CLAIMABLE_SKIP_LOCKED if skip_locked else _NEXT_CLAIMABLE
    return conn.execute(statement, {"_now": now}).first()


def claimable_task(conn: Connection, task_id: str, now: str, lock: bool = False) -> Row | None:
    """The named task if it is claimable; with `lock` (PostgreSQL) its row stays locked
    until the claim commits, so nobody finishes, renews or reclaims it in between."""
    statement = _CLAIMABLE_TASK_LOCKED if lock else _CLAIMABLE_TASK
    return conn.execute(statement, {"_id": task_id, "_now": now}).first()


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


def search_published_chunks(
    conn: Connection, words: list[str], trigrams: list[str], substrings: list[str], limit: int
) -> Sequence[Row]:
    """Chunks of published revisions matching every term, best first (per engine)."""
    from kb_cli.engines import for_url

    engine = for_url(conn.engine.url.drivername)
    sql, params = engine.search_statement(words, trigrams, substrings, limit)
    return conn.execute(text(sql), params).all()


def escape_like(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
