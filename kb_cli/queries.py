"""Every SQL statement the product runs, as named functions over a Connection.

Statements are plain SQL with `:name` parameters, the same text on SQLite and
PostgreSQL; the few clauses that differ (row locks, search) come from the engine.
State changes are guarded UPDATEs: they name the statuses they may start from (and,
for a worker, the claim they belong to) and return the changed row, or None when no
row matched, so the caller can tell a legal transition from a lost race.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Any

from kb_cli.db import Connection
from kb_cli.engines import escape_like
from kb_cli.lifecycle import DocStatus, TaskStatus
from kb_cli.records import LISTING_COLUMNS

MIN_PREFIX = 6
DOCUMENTS, TASKS, CHUNKS = "documents", "ingestion_tasks", "chunks"
AUDIT, OUTBOX, USERS = "audit_events", "outbox_events", "users"


# --- lookups -------------------------------------------------------------------------


_GET_DOCUMENT = f"SELECT * FROM {DOCUMENTS} WHERE id = :id"
_GET_TASK = f"SELECT * FROM {TASKS} WHERE id = :id"


def get_document(conn: Connection, document_id: str, lock: bool = False) -> Any:
    """With `lock`, PostgreSQL keeps the row locked until commit, so a guarded update in
    the same transaction never finds it changed (SQLite: BEGIN IMMEDIATE does that)."""
    sql = _GET_DOCUMENT + conn.engine.LOCK_ROW if lock else _GET_DOCUMENT
    return conn.execute(sql, {"id": document_id}).first()


def get_task(conn: Connection, task_id: str, lock: bool = False) -> Any:
    sql = _GET_TASK + conn.engine.LOCK_ROW if lock else _GET_TASK
    return conn.execute(sql, {"id": task_id}).first()


def find_ids_by_prefix(conn: Connection, table_name: str, prefix: str) -> list[str]:
    """Up to two ids starting with `prefix`: enough to tell unique from ambiguous."""
    if len(prefix) < MIN_PREFIX:
        return []
    table = DOCUMENTS if table_name == "documents" else TASKS
    sql = f"SELECT id FROM {table} WHERE id LIKE :pattern ESCAPE '\\' LIMIT 2"
    return conn.execute(sql, {"pattern": escape_like(prefix) + "%"}).scalars()


def list_documents(
    conn: Connection,
    status: str | None = None,
    error_code: str | None = None,
    document_id: str | None = None,
) -> list[Any]:
    """Documents newest first, each with its latest task's columns (LISTING_COLUMNS),
    filtered by status, by that task's error code, or to one document."""
    conditions = {
        "d.status = :status": status,
        "t.error_code = :error_code": error_code,
        "d.id = :id": document_id,
    }
    clauses = [condition for condition, value in conditions.items() if value]
    where = " WHERE " + " AND ".join(clauses) if clauses else ""
    sql = (
        f"SELECT {', '.join(LISTING_COLUMNS)} FROM {DOCUMENTS} AS d"
        f" LEFT JOIN {TASKS} AS t ON t.id = d.latest_task_id{where}"
        " ORDER BY d.created_at DESC, d.id"
    )
    params = {"status": status, "error_code": error_code, "id": document_id}
    return conn.execute(sql, params).all()


def latest_tasks(conn: Connection) -> dict[str, Any]:
    """The latest task of every document, by task id."""
    sql = f"SELECT t.* FROM {DOCUMENTS} AS d JOIN {TASKS} AS t ON t.id = d.latest_task_id"
    return {row.id: row for row in conn.execute(sql)}


def failed_task_ids(conn: Connection, error_code: str | None = None) -> list[str]:
    sql = f"SELECT id FROM {TASKS} WHERE status = '{TaskStatus.FAILED}'"
    params = {}
    if error_code:
        sql += " AND error_code = :error_code"
        params["error_code"] = error_code
    return conn.execute(sql + " ORDER BY created_at", params).scalars()


def task_ids_of_document(conn: Connection, document_id: str) -> list[str]:
    sql = f"SELECT id FROM {TASKS} WHERE document_id = :id"
    return conn.execute(sql, {"id": document_id}).scalars()


def list_audit_events(conn: Connection, entity_ids: Sequence[str]) -> list[Any]:
    names = [f"e{i}" for i in range(len(entity_ids))]
    placeholders = ", ".join(f":{name}" for name in names)
    sql = f"SELECT * FROM {AUDIT} WHERE entity_id IN ({placeholders}) ORDER BY id"
    return conn.execute(sql, dict(zip(names, entity_ids, strict=True))).all()


# --- inserts -------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _insert_sql(table: str, columns: tuple[str, ...]) -> str:
    values = ", ".join(f":{column}" for column in columns)
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({values})"


def _insert(conn: Connection, table: str, values: dict[str, Any]) -> None:
    conn.execute(_insert_sql(table, tuple(values)), values)


def insert_document(conn: Connection, **values: Any) -> None:
    _insert(conn, DOCUMENTS, values)


def insert_task(conn: Connection, **values: Any) -> None:
    _insert(conn, TASKS, values)


def insert_user(conn: Connection, **values: Any) -> None:
    _insert(conn, USERS, values)


def insert_outbox_event(
    conn: Connection, topic: str, entity_id: str, payload: dict, at: str
) -> None:
    _insert(
        conn,
        OUTBOX,
        {"topic": topic, "entity_id": entity_id, "payload": json.dumps(payload), "created_at": at},
    )


_AUDIT_COLUMNS = ("at", "actor", "action", "entity_id", "from_status", "to_status", "detail")


def insert_audit_events(conn: Connection, events: list[dict[str, Any]]) -> None:
    if events:
        conn.executemany(_insert_sql(AUDIT, _AUDIT_COLUMNS), events)


# --- users ---------------------------------------------------------------------------


def admin_exists(conn: Connection) -> bool:
    sql = f"SELECT name FROM {USERS} WHERE role = 'admin' LIMIT 1"
    return conn.execute(sql).first() is not None


def database_id(conn: Connection) -> str | None:
    """The random id this database was given when its schema was made (kb_meta)."""
    return conn.execute("SELECT value FROM kb_meta WHERE key = 'database_id'").scalar()


def document_count(conn: Connection) -> int:
    return conn.execute(f"SELECT count(*) FROM {DOCUMENTS}").scalar()


def get_user(conn: Connection, name: str) -> Any:
    return conn.execute(f"SELECT * FROM {USERS} WHERE name = :name", {"name": name}).first()


def get_user_by_token_id(conn: Connection, token_id: str) -> Any:
    sql = f"SELECT * FROM {USERS} WHERE token_id = :token_id"
    return conn.execute(sql, {"token_id": token_id}).first()


# --- guarded updates -----------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _update_sql(
    table: str, columns: tuple[str, ...], from_statuses: tuple[str, ...], guards: str
) -> str:
    """UPDATE ... SET (from the keyword arguments) WHERE id and status (and guards)
    match, RETURNING the new row. Statuses are the enums' own values, never input."""
    assignments = [f"{column} = :{column}" for column in columns]
    if table == DOCUMENTS:
        assignments.append("version = version + 1")
    statuses = ", ".join(f"'{status}'" for status in from_statuses)
    return (
        f"UPDATE {table} SET {', '.join(assignments)} "
        f"WHERE id = :_id AND status IN ({statuses}){guards} RETURNING *"
    )


def _statuses(kinds: Iterable[StrEnum]) -> tuple[str, ...]:
    return tuple(kind.value for kind in kinds)


def _first_changed(conn: Connection, sql: str, params: dict[str, Any]) -> Any:
    rows = conn.execute(sql, params).all()  # all(): SQLite finishes the statement
    return rows[0] if rows else None


def update_document(
    conn: Connection,
    document_id: str,
    from_statuses: Iterable[DocStatus],
    *,
    if_version: int | None = None,
    **values: Any,
) -> Any:
    """Change a document row if its status (and version) still match; bumps `version`.

    The keyword arguments become the SET clause. Returns the new row, or None.
    """
    guards = " AND version = :_version" if if_version is not None else ""
    sql = _update_sql(DOCUMENTS, tuple(values), _statuses(from_statuses), guards)
    return _first_changed(conn, sql, {**values, "_id": document_id, "_version": if_version})


_FENCE = " AND worker_id = :_worker AND attempt = :_attempt"


def update_task(
    conn: Connection,
    task_id: str,
    from_statuses: Iterable[TaskStatus],
    *,
    fence: tuple[str, int] | None = None,
    **values: Any,
) -> Any:
    """Change a task row if its status still matches and, for a worker, its claim.

    `fence` is (worker_id, attempt): a worker's write lands only while the task is
    still running under that exact claim, so a worker whose task was cancelled or
    reclaimed can never write over the newer state. The keyword arguments become the
    SET clause. Returns the new row, or None.
    """
    params = {**values, "_id": task_id}
    if fence is not None:
        from_statuses = [TaskStatus.RUNNING]
        params["_worker"], params["_attempt"] = fence
    sql = _update_sql(TASKS, tuple(values), _statuses(from_statuses), _FENCE if fence else "")
    return _first_changed(conn, sql, params)


# --- claiming ------------------------------------------------------------------------


# Queued, due for a retry, or running under a lease that has run out. The first line
# repeats the predicate of the partial index `ix_tasks_claimable` (migration 0003), so
# both engines read that index in claim order instead of sorting the whole queue.
_CLAIMABLE = f"""SELECT * FROM {TASKS}
    WHERE status IN ('{TaskStatus.QUEUED}', '{TaskStatus.RETRY_WAIT}', '{TaskStatus.RUNNING}')
      AND (status = '{TaskStatus.QUEUED}'
           OR (status = '{TaskStatus.RETRY_WAIT}' AND retry_at <= :now)
           OR (status = '{TaskStatus.RUNNING}' AND lease_expires_at < :now))"""
_NEXT_CLAIMABLE = _CLAIMABLE + " ORDER BY created_at, id LIMIT 1"
_CLAIMABLE_TASK = _CLAIMABLE + " AND id = :id"


def next_claimable_task(conn: Connection, now: str) -> Any:
    """The oldest claimable task; on PostgreSQL its row stays locked until commit, and
    rows other claimers hold are skipped."""
    return conn.execute(_NEXT_CLAIMABLE + conn.engine.SKIP_LOCKED, {"now": now}).first()


def claimable_task(conn: Connection, task_id: str, now: str) -> Any:
    """The named task if it is claimable; on PostgreSQL its row stays locked until the
    claim commits, so nobody finishes, renews or reclaims it in between."""
    return conn.execute(_CLAIMABLE_TASK + conn.engine.LOCK_ROW, {"id": task_id, "now": now}).first()


# --- chunks --------------------------------------------------------------------------


_CHUNK_COLUMNS = (
    "document_id",
    "revision",
    "task_id",
    "chunk_index",
    "text",
    "page",
    "heading",
    "terms",
    "term_count",
    "embedding",
    "embedding_model",
    "embedding_dim",
)


def insert_chunks(
    conn: Connection, document_id: str, revision: int, task_id: str, rows: list[dict]
) -> None:
    """Insert a batch of a task's chunks; each row has the chunk's own columns
    (chunk_index ... embedding_dim)."""
    if rows:
        own = {"document_id": document_id, "revision": revision, "task_id": task_id}
        conn.executemany(_insert_sql(CHUNKS, _CHUNK_COLUMNS), [{**own, **row} for row in rows])


def delete_task_chunks(conn: Connection, task_id: str) -> int:
    sql = f"DELETE FROM {CHUNKS} WHERE task_id = :task_id"
    return conn.execute(sql, {"task_id": task_id}).rowcount


def delete_revision_chunks(conn: Connection, document_id: str, revision: int, limit: int) -> int:
    """Delete at most `limit` chunks of an unpublished revision (a bounded batch)."""
    sql = f"""DELETE FROM {CHUNKS} WHERE id IN (SELECT id FROM {CHUNKS}
        WHERE document_id = :document_id AND revision = :revision LIMIT :limit)"""
    params = {"document_id": document_id, "revision": revision, "limit": limit}
    return conn.execute(sql, params).rowcount


def delete_unpublished_chunks(conn: Connection, document_id: str, keep_revision: int) -> int:
    sql = f"DELETE FROM {CHUNKS} WHERE document_id = :id AND revision != :keep"
    return conn.execute(sql, {"id": document_id, "keep": keep_revision}).rowcount


def delete_chunks_except(conn: Connection, document_id: str, keep: set[int]) -> int:
    names = [f"k{i}" for i in range(len(keep))]
    sql = f"DELETE FROM {CHUNKS} WHERE document_id = :id"
    if names:
        sql += f" AND revision NOT IN ({', '.join(':' + name for name in names)})"
    params = {"id": document_id, **dict(zip(names, sorted(keep), strict=True))}
    return conn.execute(sql, params).rowcount


# --- search --------------------------------------------------------------------------


_PUBLISHED_CHUNKS = f"""FROM {CHUNKS} AS c
    JOIN {DOCUMENTS} AS d ON d.id = c.document_id AND c.revision = d.published_revision"""


def lexical_ranking(
    conn: Connection, terms: list[str], phrases: list[str], limit: int
) -> list[tuple[int, float]]:
    """(chunk id, BM25 score) of published chunks, best first (per engine)."""
    sql, params = conn.engine.lexical_statement(terms, phrases, limit)
    return [(row[0], float(row[1])) for row in conn.execute(sql, params)]


def phrase_chunk_ids(conn: Connection, phrases: list[str]) -> set[int]:
    """Published chunks containing every phrase (ASCII case-insensitive)."""
    names = [f"p{i}" for i in range(len(phrases))]
    where = " AND ".join(conn.engine.caseless_like("c.text", name) for name in names)
    params = {name: "%" + escape_like(p) + "%" for name, p in zip(names, phrases, strict=True)}
    return set(conn.execute(f"SELECT c.id {_PUBLISHED_CHUNKS} WHERE {where}", params).scalars())


def published_vectors(conn: Connection, model: str, dim: int) -> tuple[list[int], list[bytes]]:
    """Ids and stored vectors of the published chunks embedded by `model`."""
    sql = (
        f"SELECT c.id, c.embedding {_PUBLISHED_CHUNKS}"
        " WHERE c.embedding_model = :model AND c.embedding_dim = :dim"
    )
    rows = conn.execute(sql, {"model": model, "dim": dim}).all()
    return [row[0] for row in rows], [bytes(row[1]) for row in rows]


def has_published_vectors(conn: Connection, model: str) -> bool:
    sql = f"SELECT 1 {_PUBLISHED_CHUNKS} WHERE c.embedding_model = :model LIMIT 1"
    return conn.execute(sql, {"model": model}).first() is not None


def chunk_details(conn: Connection, chunk_ids: Sequence[int]) -> dict[int, Any]:
    """What a hit shows, by chunk id."""
    names = [f"c{i}" for i in range(len(chunk_ids))]
    if not names:
        return {}
    sql = (
        "SELECT c.id, c.document_id, d.filename, c.revision, c.chunk_index, c.text, c.page,"
        f" c.heading {_PUBLISHED_CHUNKS} WHERE c.id IN ({', '.join(':' + n for n in names)})"
    )
    return {row.id: row for row in conn.execute(sql, dict(zip(names, chunk_ids, strict=True)))}


# --- embeddings of stored chunks (kb reindex --embeddings) ---------------------------


def revisions_to_embed(conn: Connection, model: str) -> list[Any]:
    """(document_id, revision, chunks) of every revision with chunks not yet embedded
    by `model`, published revisions first."""
    sql = f"""SELECT c.document_id, c.revision, count(*) AS chunks
        FROM {CHUNKS} AS c JOIN {DOCUMENTS} AS d ON d.id = c.document_id
        WHERE c.embedding_model IS NULL OR c.embedding_model != :model
        GROUP BY c.document_id, c.revision, d.published_revision
        ORDER BY CASE WHEN c.revision = d.published_revision THEN 0 ELSE 1 END,
                 c.document_id, c.revision"""
    return conn.execute(sql, {"model": model}).all()


def chunks_to_embed(conn: Connection, document_id: str, revision: int, model: str) -> list[Any]:
    sql = f"""SELECT id, text FROM {CHUNKS}
        WHERE document_id = :id AND revision = :rev
          AND (embedding_model IS NULL OR embedding_model != :model)
        ORDER BY chunk_index"""
    return conn.execute(sql, {"id": document_id, "rev": revision, "model": model}).all()


def set_embeddings(conn: Connection, rows: list[dict]) -> None:
    """rows: {id, embedding, embedding_model, embedding_dim}; chunks deleted meanwhile
    are simply not found."""
    conn.executemany(
        f"UPDATE {CHUNKS} SET embedding = :embedding, embedding_model = :embedding_model,"
        " embedding_dim = :embedding_dim WHERE id = :id",
        rows,
    )
