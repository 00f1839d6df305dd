"""The product's SQL statements, as named functions over a Connection: every one but
the indexes' own (the words rankings in kb_cli/lexical/, the stored vectors the vector
indexes read in kb_cli/vectors/) and the schema's (kb_cli/migrations/).

Statements are plain SQL with `:name` parameters, the same text on SQLite and
PostgreSQL; the few clauses that differ (row locks, a caseless LIKE, JSON metadata)
come from the engine.
State changes are guarded UPDATEs: they name the statuses they may start from (and,
for a worker, the claim they belong to) and return the changed row, or None when no
row matched, so the caller can tell a legal transition from a lost race.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from enum import StrEnum
from typing import Any, NamedTuple, TypedDict, Unpack

from kb_cli.db import Connection, RawRow
from kb_cli.engines import EVENTS_CHANNEL, Engine, escape_like
from kb_cli.errors import NotFoundError
from kb_cli.lifecycle import ACTIVE_TASK_STATUSES, DocStatus, TaskStatus
from kb_cli.permissions import Scope
from kb_cli.records import (
    LISTING_COLUMNS,
    AuditRow,
    ChunkVector,
    DocumentRecord,
    DocumentRow,
    EventRow,
    NewChunk,
    TaskRow,
    TombstoneRow,
    UserRow,
)

MIN_PREFIX = 6
DOCUMENTS, TASKS, CHUNKS = "documents", "ingestion_tasks", "chunks"
AUDIT, OUTBOX, USERS = "audit_events", "outbox_events", "users"
BASES, TEAMS, USER_TEAMS = "bases", "teams", "user_teams"
BASE_TEAMS, BASE_GRANTS = "base_teams", "base_grants"
DELETED = "deleted_documents"
ARTEFACTS = "parse_artefacts"
REVISIONS = "document_revisions"
# A document being deleted is gone for every command already (its rows go in batches).
_NOT_DELETING = f"d.status <> '{DocStatus.DELETING}'"


# --- what a caller may read (docs/access.md, "Knowledge bases") ---------------------


# The bases the reader may read: company-wide (no team named), restricted to a team of
# the reader's, or granted to the reader. Not correlated with the outer row, so both
# engines evaluate it once per statement, not once per candidate. A document whose base
# is missing is in no readable base (kb doctor reports it).
_READABLE = f"""{{column}} IN (SELECT rb.name FROM {BASES} AS rb
        WHERE NOT EXISTS (SELECT 1 FROM {BASE_TEAMS} AS rt WHERE rt.base = rb.name)
           OR EXISTS (SELECT 1 FROM {BASE_TEAMS} AS rt
                      JOIN {USER_TEAMS} AS ru ON ru.team = rt.team
                      WHERE rt.base = rb.name AND ru.user_name = :_reader)
           OR EXISTS (SELECT 1 FROM {BASE_GRANTS} AS rg
                      WHERE rg.base = rb.name AND rg.user_name = :_reader))"""


def scope_filter(
    scope: Scope, column: str = "d.base", engine: Engine | None = None
) -> tuple[str, dict[str, Any]]:
    """A condition on `column` (a base name) limiting rows to the scope, and its
    parameters; ("", {}) when the scope is every base. Goes inside the statement that
    reads the rows, so nothing outside the scope is ever counted, ranked or returned.
    A scope with metadata filters (`where`) is for statements over documents `d`, on
    the `engine` that reads them."""
    clauses, params = [], {}
    if scope.reader is not None:
        clauses.append(_READABLE.format(column=column))
        params["_reader"] = scope.reader
    if scope.bases:
        names = [f"_base{index}" for index in range(len(scope.bases))]
        clauses.append(f"{column} IN ({', '.join(':' + name for name in names)})")
        params.update(zip(names, scope.bases, strict=True))
    for index, condition in enumerate(scope.where):
        assert engine is not None and column == "d.base", "metadata filters need documents d"
        clause, values = engine.meta_condition(
            "d.meta", f"_where{index}", condition.key, condition.value, condition.prefix
        )
        clauses.append(clause)
        params.update(values)
    return " AND ".join(clauses), params


def where_all(clauses: Iterable[str]) -> str:
    """A WHERE of every clause given that is not empty, joined by AND; nothing when
    every one is empty."""
    present = [clause for clause in clauses if clause]
    return " WHERE " + " AND ".join(present) if present else ""


# --- lookups -------------------------------------------------------------------------


# Whole rows are selected by their row type's fields, in order, and built positionally.
_DOCUMENT_ROW = ", ".join(DocumentRow._fields)
_TASK_ROW = ", ".join(TaskRow._fields)
_GET_DOCUMENT = f"SELECT {_DOCUMENT_ROW} FROM {DOCUMENTS} WHERE id = :id"
_GET_TASK = f"SELECT {_TASK_ROW} FROM {TASKS} WHERE id = :id"


def _document(row: RawRow | None) -> DocumentRow | None:
    return None if row is None else DocumentRow.read(row)


def _task(row: RawRow | None) -> TaskRow | None:
    return None if row is None else TaskRow.read(row)


def get_document(conn: Connection, document_id: str, lock: bool = False) -> DocumentRow | None:
    """With `lock`, PostgreSQL keeps the row locked until commit, so a guarded update in
    the same transaction never finds it changed (SQLite: BEGIN IMMEDIATE does that)."""
    sql = _GET_DOCUMENT + conn.engine.LOCK_ROW if lock else _GET_DOCUMENT
    return _document(conn.execute(sql, {"id": document_id}).first())


def get_task(conn: Connection, task_id: str, lock: bool = False) -> TaskRow | None:
    sql = _GET_TASK + conn.engine.LOCK_ROW if lock else _GET_TASK
    return _task(conn.execute(sql, {"id": task_id}).first())


def existing_document(conn: Connection, document_id: str, lock: bool = False) -> DocumentRow:
    """A document this transaction already found (its id was just resolved)."""
    document = get_document(conn, document_id, lock)
    if document is None:
        raise _gone("document", document_id)
    return document


def existing_task(conn: Connection, task_id: str, lock: bool = False) -> TaskRow:
    """A task this transaction already found (its id was just resolved)."""
    task = get_task(conn, task_id, lock)
    if task is None:
        raise _gone("task", task_id)
    return task


def _gone(noun: str, entity_id: str) -> NotFoundError:
    # Deleted by another transaction since the caller's read.
    return NotFoundError(f"no {noun} with id {entity_id!r}")


def find_ids(conn: Connection, table_name: str, ref: str, scope: Scope) -> list[str]:
    """The id equal to `ref`, or up to two ids starting with it (a prefix of at least
    MIN_PREFIX characters), among the rows in `scope`: enough to tell unique from
    ambiguous without counting rows the caller may not see. A task whose document is
    gone is in no base: only those who read every base find it."""
    if table_name == "documents":
        column, source, alive = "d.id", f"{DOCUMENTS} AS d", _NOT_DELETING
    elif table_name == "deleted":
        column, source, alive = "d.id", f"{DELETED} AS d", ""
    else:
        column, source = "t.id", f"{TASKS} AS t LEFT JOIN {DOCUMENTS} AS d ON d.id = t.document_id"
        alive = f"(d.status IS NULL OR {_NOT_DELETING})"
    scoped, params = scope_filter(scope, engine=conn.engine)
    if len(ref) >= MIN_PREFIX:
        match, params["ref"] = f"{column} LIKE :ref ESCAPE '\\'", escape_like(ref) + "%"
    else:
        match, params["ref"] = f"{column} = :ref", ref
    condition = where_all([match, alive, scoped])
    sql = f"SELECT {column} FROM {source}{condition} ORDER BY {column} LIMIT 2"
    ids: list[str] = conn.execute(sql, params).scalars()
    return ids


def documents_named(conn: Connection, filename: str, scope: Scope) -> list[str]:
    """Up to two ids of documents in `scope` whose file is named `filename`."""
    scoped, params = scope_filter(scope, engine=conn.engine)
    params["filename"] = filename
    where = where_all(["d.filename = :filename", _NOT_DELETING, scoped])
    ids: list[str] = conn.execute(
        f"SELECT d.id FROM {DOCUMENTS} AS d{where} LIMIT 2", params
    ).scalars()
    return ids


def list_documents(
    conn: Connection,
    status: str | None = None,
    error_code: str | None = None,
    document_id: str | None = None,
    scope: Scope = Scope(),
) -> list[DocumentRecord]:
    """Documents in `scope` newest first, each with its latest task, filtered by status,
    by that task's error code, or to one."""
    conditions = {
        "d.status = :status": status,
        "t.error_code = :error_code": error_code,
        "d.id = :id": document_id,
    }
    scoped, scope_params = scope_filter(scope, engine=conn.engine)
    clauses = [condition for condition, value in conditions.items() if value]
    clauses += [_NOT_DELETING, scoped]
    sql = (
        f"SELECT {', '.join(LISTING_COLUMNS)} FROM {DOCUMENTS} AS d"
        f" LEFT JOIN {TASKS} AS t ON t.id = d.latest_task_id{where_all(clauses)}"
        " ORDER BY d.created_at DESC, d.id"
    )
    params = {"status": status, "error_code": error_code, "id": document_id, **scope_params}
    return [DocumentRecord.from_listing(row) for row in conn.execute(sql, params)]


def document_record(conn: Connection, document_id: str) -> DocumentRecord:
    """The record of one document as `kb status ID` prints it, naming the file of the
    revision search serves when it is not the newest one's."""
    rows = list_documents(conn, document_id=document_id)
    if not rows:
        raise NotFoundError(f"no document with id {document_id!r}")
    record = rows[0]
    served = record.published_revision
    if served is not None and served != record.revision:
        file = revision_file(conn, document_id, served)
        if file is not None and file != (record.filename, record.content_type):
            record.published_file = file._asdict()
    return record


class SyncedDocument(NamedTuple):
    """What `kb sync` compares a file with: a document's id and metadata values."""

    id: str
    path: str
    source: str | None
    size: str | None
    stamp: str | None


def synced_documents(
    conn: Connection, base: str, size_key: str, stamp_key: str
) -> list[SyncedDocument]:
    """The live documents of `base` that have a metadata `path` (what `kb sync` matches
    files to), each with the metadata values the quick check compares, read by the
    database: no row or JSON is built in Python for each of 100,000 documents."""

    def value(key: str) -> str:
        # The engine's expression of `path` (what ux_documents_path indexes), for `key`.
        return conn.engine.META_PATH.format(column="d.meta").replace("path", key)

    path = value("path")
    sql = (
        f"SELECT d.id, {path} AS path, {value('source')} AS source,"
        f" {value(size_key)} AS size, {value(stamp_key)} AS stamp"
        f" FROM {DOCUMENTS} AS d"
        f" WHERE d.base = :base AND {path} IS NOT NULL AND {_NOT_DELETING}"
    )
    return [SyncedDocument._make(row) for row in conn.execute(sql, {"base": base})]


_TASK_ROW_OF_T = ", ".join(f"t.{column}" for column in TaskRow._fields)


def latest_tasks(conn: Connection) -> dict[str, TaskRow]:
    """The latest task of every document, by task id."""
    sql = (
        f"SELECT {_TASK_ROW_OF_T} FROM {DOCUMENTS} AS d"
        f" JOIN {TASKS} AS t ON t.id = d.latest_task_id"
    )
    tasks = map(TaskRow.read, conn.execute(sql))
    return {task.id: task for task in tasks}


def failed_task_ids(
    conn: Connection, error_code: str | None = None, scope: Scope = Scope()
) -> list[str]:
    scoped, params = scope_filter(scope, engine=conn.engine)
    clauses = [f"t.status = '{TaskStatus.FAILED}'", scoped]
    if error_code:
        clauses.append("t.error_code = :error_code")
        params["error_code"] = error_code
    sql = (
        f"SELECT t.id FROM {TASKS} AS t LEFT JOIN {DOCUMENTS} AS d ON d.id = t.document_id"
        f"{where_all(clauses)} ORDER BY t.created_at"
    )
    ids: list[str] = conn.execute(sql, params).scalars()
    return ids


def task_ids_of_document(conn: Connection, document_id: str) -> list[str]:
    sql = f"SELECT id FROM {TASKS} WHERE document_id = :id"
    ids: list[str] = conn.execute(sql, {"id": document_id}).scalars()
    return ids


def list_audit_events(conn: Connection, entity_ids: Sequence[str]) -> list[AuditRow]:
    names = [f"e{i}" for i in range(len(entity_ids))]
    placeholders = ", ".join(f":{name}" for name in names)
    sql = (
        f"SELECT {', '.join(AuditRow._fields)} FROM {AUDIT}"
        f" WHERE entity_id IN ({placeholders}) ORDER BY id"
    )
    params = dict(zip(names, entity_ids, strict=True))
    return [AuditRow._make(row) for row in conn.execute(sql, params)]


_IN_BATCH = 500  # values per IN list: far below both engines' limits on parameters


def _rows_in(conn: Connection, sql: str, values: Sequence[Any], **params: Any) -> list[RawRow]:
    """Rows of `sql`, whose `{values}` is an IN list of `values`, in batches."""
    rows: list[RawRow] = []
    for start in range(0, len(values), _IN_BATCH):
        batch = values[start : start + _IN_BATCH]
        names = [f"v{i}" for i in range(len(batch))]
        listed = ", ".join(f":{name}" for name in names)
        values_of = dict(zip(names, batch, strict=True))
        rows += conn.execute(sql.format(values=listed), {**params, **values_of}).all()
    return rows


class DocumentFile(NamedTuple):
    """A document's current file: what tells uploads apart."""

    id: str
    base: str
    filename: str
    sha256: str


def documents_with_content(
    conn: Connection, base: str, digests: Sequence[str]
) -> list[DocumentFile]:
    """Documents of `base` whose current file has one of these sha256 digests, oldest
    first."""
    sql = (
        f"SELECT d.id, d.base, d.filename, d.sha256 FROM {DOCUMENTS} AS d"
        f" WHERE d.base = :base AND d.sha256 IN ({{values}}) AND {_NOT_DELETING}"
        " ORDER BY d.created_at, d.id"
    )
    rows = _rows_in(conn, sql, list(dict.fromkeys(digests)), base=base)
    return [DocumentFile._make(row) for row in rows]


# --- inserts -------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _insert_sql(table: str, columns: tuple[str, ...]) -> str:
    values = ", ".join(f":{column}" for column in columns)
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({values})"


def _insert(conn: Connection, table: str, values: Mapping[str, object]) -> None:
    conn.execute(_insert_sql(table, tuple(values)), values)


class DocumentInsert(TypedDict):
    """A new document's columns (those not named start NULL)."""

    id: str
    base: str
    filename: str
    content_type: str
    size_bytes: int
    sha256: str
    object_key: str
    status: str
    version: int
    revision: int
    published_revision: int | None
    latest_task_id: str | None
    created_at: str
    updated_at: str
    meta: str  # JSON text (kb_cli/metadata.py); PostgreSQL casts it to jsonb


class TaskInsert(TypedDict):
    """A new task's columns (those not named start NULL)."""

    id: str
    document_id: str
    revision: int
    status: str
    stage: str
    completed: int
    total: int
    attempt: int
    created_at: str
    updated_at: str
    base: str  # its document's (migration 0017)
    settings: str | None  # JSON: what the queuing command was given (TaskSettings)


class UserInsert(TypedDict):
    name: str
    role: str
    token_id: str
    token_salt: str
    token_hash: str
    created_at: str


def insert_document(conn: Connection, **values: Unpack[DocumentInsert]) -> None:
    _insert(conn, DOCUMENTS, values)


def insert_task(conn: Connection, **values: Unpack[TaskInsert]) -> None:
    _insert(conn, TASKS, values)


def insert_user(conn: Connection, **values: Unpack[UserInsert]) -> None:
    _insert(conn, USERS, values)


class LifecycleEvent(NamedTuple):
    """A lifecycle event to write (`kb events`, `kb relay`)."""

    kind: str
    document_id: str
    task_id: str | None
    data: dict[str, Any]
    at: str


def insert_event(
    conn: Connection,
    kind: str,
    document_id: str,
    task_id: str | None,
    data: dict[str, Any],
    at: str,
) -> None:
    """A lifecycle event of the document (and task), with the document's base, in the
    caller's transaction; its watchers are woken at commit. The document's row is
    locked before the id is taken, so two transactions with events of one document
    take their ids in the order they commit (a worker's completion holds the task's
    lock, not yet the document's, when it writes `task.succeeded`)."""
    insert_events(conn, [LifecycleEvent(kind, document_id, task_id, data, at)])


def insert_events(conn: Connection, events: Sequence[LifecycleEvent]) -> None:
    """Lifecycle events (as insert_event writes one), in this order, in one statement."""
    if not events:
        return
    conn.executemany(
        f"INSERT INTO {OUTBOX} (topic, entity_id, document_id, task_id, base, payload, "
        "created_at) SELECT :topic, :entity_id, d.id, :task_id, d.base, :payload, :at "
        f"FROM {DOCUMENTS} AS d WHERE d.id = :document_id{conn.engine.LOCK_ROW}",
        [
            {
                "topic": event.kind,
                "entity_id": event.task_id or event.document_id,
                "document_id": event.document_id,
                "task_id": event.task_id,
                "payload": json.dumps(event.data),
                "at": event.at,
            }
            for event in events
        ],
    )
    wake(conn, EVENTS_CHANNEL)


class AuditEvent(TypedDict):
    """An audit event to write (kb_cli.transitions.audit_event makes one)."""

    at: str
    actor: str
    action: str
    entity_id: str
    from_status: str | None
    to_status: str | None
    detail: str | None


_AUDIT_COLUMNS = tuple(AuditEvent.__annotations__)


def insert_audit_events(conn: Connection, events: Sequence[AuditEvent]) -> None:
    if events:
        conn.executemany(_insert_sql(AUDIT, _AUDIT_COLUMNS), events)


# --- users ---------------------------------------------------------------------------


def admin_exists(conn: Connection) -> bool:
    sql = f"SELECT name FROM {USERS} WHERE role = 'admin' LIMIT 1"
    return conn.execute(sql).first() is not None


def database_id(conn: Connection) -> str | None:
    """The random id this database was given when its schema was made (kb_meta)."""
    found: str | None = conn.execute("SELECT value FROM kb_meta WHERE key = 'database_id'").scalar()
    return found


def recorded_object_store(conn: Connection) -> str | None:
    """Where the first upload stored this knowledge base's objects (kb_meta), for a
    person: a directory or an s3:// location, never a key."""
    found: str | None = conn.execute(
        "SELECT value FROM kb_meta WHERE key = 'object_store'"
    ).scalar()
    return found


def record_object_store(conn: Connection, where: str) -> None:
    sql = "INSERT INTO kb_meta (key, value) VALUES ('object_store', :where) ON CONFLICT DO NOTHING"
    conn.execute(sql, {"where": where[:500]})


def newest_object_key(conn: Connection) -> str | None:
    """The object of the newest document: one a store of this knowledge base holds."""
    sql = f"SELECT object_key FROM {DOCUMENTS} ORDER BY created_at DESC LIMIT 1"
    found: str | None = conn.execute(sql).scalar()
    return found


def document_count(conn: Connection) -> int:
    return int(conn.execute(f"SELECT count(*) FROM {DOCUMENTS}").scalar())


_USER_ROW = f"SELECT {', '.join(UserRow._fields)} FROM {USERS}"


def get_user(conn: Connection, name: str) -> UserRow | None:
    row = conn.execute(f"{_USER_ROW} WHERE name = :name", {"name": name}).first()
    return None if row is None else UserRow._make(row)


def get_user_by_token_id(conn: Connection, token_id: str) -> UserRow | None:
    row = conn.execute(f"{_USER_ROW} WHERE token_id = :token_id", {"token_id": token_id}).first()
    return None if row is None else UserRow._make(row)


# --- people: a user's life (list, disable, enable, token, teams), revoking a grant ----


def list_users(conn: Connection) -> list[UserRow]:
    """Every user by name."""
    return [UserRow._make(row) for row in conn.execute(f"{_USER_ROW} ORDER BY name")]


class Membership(NamedTuple):
    user_name: str
    team: str


def user_teams(conn: Connection, name: str | None = None) -> list[Membership]:
    """(user_name, team) of one user, or of every user, by team."""
    if name is None:
        rows = conn.execute(f"SELECT user_name, team FROM {USER_TEAMS} ORDER BY team")
    else:
        sql = f"SELECT user_name, team FROM {USER_TEAMS} WHERE user_name = :name ORDER BY team"
        rows = conn.execute(sql, {"name": name})
    return [Membership._make(row) for row in rows]


def user_is_disabled(conn: Connection, name: str) -> bool:
    """Whether the user a token authenticated is disabled now (or gone): one lookup by
    primary key, made by a running worker before each of its writes."""
    sql = f"SELECT disabled_at FROM {USERS} WHERE name = :name"
    row = conn.execute(sql, {"name": name}).first()
    return row is None or row[0] is not None


class CallerState(NamedTuple):
    disabled_at: str | None
    token_id: str


def caller_state(conn: Connection, name: str) -> CallerState | None:
    """(disabled_at, token_id) of the user a running command authenticated as: one
    lookup by primary key, made on each of its wake-ups."""
    sql = f"SELECT disabled_at, token_id FROM {USERS} WHERE name = :name"
    row = conn.execute(sql, {"name": name}).first()
    return None if row is None else CallerState._make(row)


def active_admins(conn: Connection) -> list[str]:
    """The names of the admins not disabled, their rows locked until commit on
    PostgreSQL (SQLite: BEGIN IMMEDIATE), so two admins disabling each other at once
    cannot both succeed."""
    sql = (
        f"SELECT name FROM {USERS} WHERE role = 'admin' AND disabled_at IS NULL ORDER BY name"
        + conn.engine.LOCK_ROW
    )
    names: list[str] = conn.execute(sql).scalars()
    return names


def set_user_disabled(conn: Connection, name: str, at: str | None) -> bool:
    """Disable (`at` a stamp) or enable (`at` None) a user; False when it already was."""
    guard = "disabled_at IS NOT NULL" if at is None else "disabled_at IS NULL"
    sql = f"UPDATE {USERS} SET disabled_at = :at WHERE name = :name AND {guard}"
    return conn.execute(sql, {"name": name, "at": at}).rowcount == 1


def set_user_token(conn: Connection, name: str, token_id: str, salt: str, hashed: str) -> bool:
    """A new token for the user: the old one stops matching at once."""
    sql = (
        f"UPDATE {USERS} SET token_id = :token_id, token_salt = :salt, token_hash = :hashed"
        " WHERE name = :name"
    )
    params = {"name": name, "token_id": token_id, "salt": salt, "hashed": hashed}
    return conn.execute(sql, params).rowcount == 1


def touch_user(conn: Connection, name: str, at: str, before: str) -> bool:
    """Note that the user's token was accepted at `at`, unless that was already noted
    since `before` (so at most one write a minute per user)."""
    sql = (
        f"UPDATE {USERS} SET last_used_at = :at WHERE name = :name"
        " AND (last_used_at IS NULL OR last_used_at < :before)"
    )
    return conn.execute(sql, {"name": name, "at": at, "before": before}).rowcount == 1


def delete_user_teams(conn: Connection, user: str, teams: Iterable[str]) -> None:
    rows = [{"user": user, "team": team} for team in teams]
    if rows:
        sql = f"DELETE FROM {USER_TEAMS} WHERE user_name = :user AND team = :team"
        conn.executemany(sql, rows)


def delete_grant(conn: Connection, base: str, user: str) -> bool:
    """False when the user had no grant on the base."""
    sql = f"DELETE FROM {BASE_GRANTS} WHERE base = :base AND user_name = :user"
    return conn.execute(sql, {"base": base, "user": user}).rowcount == 1


# --- knowledge bases, teams, grants ------------------------------------------------


def base_exists(conn: Connection, name: str, scope: Scope = Scope()) -> bool:
    scoped, params = scope_filter(Scope(scope.reader, scope.bases), "b.name")
    sql = f"SELECT 1 FROM {BASES} AS b{where_all(['b.name = :name', scoped])}"
    return conn.execute(sql, {**params, "name": name}).first() is not None


def base_names(conn: Connection, scope: Scope) -> list[str]:
    """The names of the bases in `scope`."""
    scoped, params = scope_filter(Scope(scope.reader, scope.bases), "b.name")
    names: list[str] = conn.execute(
        f"SELECT b.name FROM {BASES} AS b{where_all([scoped])} ORDER BY b.name", params
    ).scalars()
    return names


def base_of(conn: Connection, entity_id: str) -> str | None:
    """The base of a document, or of a task's document."""
    sql = f"""SELECT d.base FROM {DOCUMENTS} AS d WHERE d.id = :id
        UNION ALL
        SELECT d.base FROM {TASKS} AS t JOIN {DOCUMENTS} AS d ON d.id = t.document_id
        WHERE t.id = :id"""
    base: str | None = conn.execute(sql, {"id": entity_id}).scalar()
    return base


class BaseRow(NamedTuple):
    """A base of `bases` with how many documents it has, its embedding model (None: the
    process's KB_EMBEDDINGS) and the model a switch is building vectors of."""

    base: str
    documents: int
    model: str | None
    model_next: str | None


class BaseTeam(NamedTuple):
    base: str
    team: str


class BaseGrant(NamedTuple):
    base: str
    user_name: str


def list_bases(conn: Connection, scope: Scope) -> list[BaseRow]:
    """The bases in `scope`, by name."""
    scoped, params = scope_filter(Scope(scope.reader, scope.bases), "b.name")
    sql = (
        f"SELECT b.name AS base, (SELECT count(*) FROM {DOCUMENTS} AS d WHERE d.base = b.name)"
        f" AS documents, b.model, b.model_next FROM {BASES} AS b{where_all([scoped])}"
        " ORDER BY b.name"
    )
    return [BaseRow._make(row) for row in conn.execute(sql, params)]


def base_members(conn: Connection) -> tuple[list[BaseTeam], list[BaseGrant]]:
    """Every team restriction and every grant."""
    teams = conn.execute(f"SELECT base, team FROM {BASE_TEAMS} ORDER BY team")
    grants = conn.execute(f"SELECT base, user_name FROM {BASE_GRANTS} ORDER BY user_name")
    return list(map(BaseTeam._make, teams)), list(map(BaseGrant._make, grants))


def insert_base(conn: Connection, name: str, at: str, model: str | None = None) -> None:
    _insert(conn, BASES, {"name": name, "created_at": at, "model": model})


def base_models(conn: Connection, scope: Scope) -> dict[str, str | None]:
    """Each base in `scope`: its embedding model (None: the process's KB_EMBEDDINGS)."""
    scoped, params = scope_filter(Scope(scope.reader, scope.bases), "b.name")
    sql = f"SELECT b.name, b.model FROM {BASES} AS b{where_all([scoped])}"
    return dict(conn.execute(sql, params).all())


def document_base_model(conn: Connection, document_id: str) -> str | None:
    """The embedding model of the document's base now (None: it follows KB_EMBEDDINGS,
    or there is no such document)."""
    sql = f"""SELECT b.model FROM {DOCUMENTS} AS d JOIN {BASES} AS b ON b.name = d.base
        WHERE d.id = :id"""
    model: str | None = conn.execute(sql, {"id": document_id}).scalar()
    return model


def base_model(conn: Connection, base: str) -> str | None:
    """The base's embedding model; None: the process's KB_EMBEDDINGS (or no such base)."""
    row = conn.execute(f"SELECT model FROM {BASES} WHERE name = :base", {"base": base}).first()
    return None if row is None else row[0]


def insert_teams(conn: Connection, names: Iterable[str], at: str) -> None:
    """Teams are names: naming one creates it."""
    sql = f"INSERT INTO {TEAMS} (name, created_at) VALUES (:name, :at) ON CONFLICT DO NOTHING"
    conn.executemany(sql, [{"name": name, "at": at} for name in names])


def insert_base_teams(conn: Connection, base: str, teams: Iterable[str]) -> None:
    rows = [{"base": base, "team": team} for team in teams]
    if rows:
        conn.executemany(_insert_sql(BASE_TEAMS, ("base", "team")), rows)


def insert_user_teams(conn: Connection, user: str, teams: Iterable[str]) -> None:
    rows = [{"user_name": user, "team": team} for team in teams]
    if rows:
        conn.executemany(_insert_sql(USER_TEAMS, ("user_name", "team")), rows)


def insert_grant(conn: Connection, base: str, user: str) -> bool:
    """False when the user already had the grant."""
    sql = (
        f"INSERT INTO {BASE_GRANTS} (base, user_name) VALUES (:base, :user) ON CONFLICT DO NOTHING"
    )
    return conn.execute(sql, {"base": base, "user": user}).rowcount == 1


def move_to_base(
    conn: Connection, document_id: str, from_base: str, to_base: str, at: str
) -> DocumentRow | None:
    """Guarded on the base it was read with: None when it moved meanwhile. Its tasks
    move with it (the base they carry for `kb work --base`)."""
    sql = (
        f"UPDATE {DOCUMENTS} SET base = :to_base, version = version + 1, updated_at = :at"
        f" WHERE id = :id AND base = :from_base RETURNING {_DOCUMENT_ROW}"
    )
    params = {"id": document_id, "from_base": from_base, "to_base": to_base, "at": at}
    moved = _document(_first_changed(conn, sql, params))
    if moved is not None:
        sql = f"UPDATE {TASKS} SET base = :to_base WHERE document_id = :id"
        conn.execute(sql, {"id": document_id, "to_base": to_base})
    return moved


class DocumentBase(NamedTuple):
    id: str
    base: str


def documents_in_missing_bases(conn: Connection) -> list[DocumentBase]:
    sql = (
        f"SELECT id, base FROM {DOCUMENTS} AS d"
        f" WHERE NOT EXISTS (SELECT 1 FROM {BASES} AS b WHERE b.name = d.base) ORDER BY id"
    )
    return [DocumentBase._make(row) for row in conn.execute(sql)]


class BaseAccess(NamedTuple):
    """A team restriction (kind "team") or a grant (kind "user") of a base."""

    base: str
    kind: str
    name: str


def dangling_base_access(conn: Connection) -> list[BaseAccess]:
    """(base, kind, name) of team restrictions and grants naming a team or user that
    does not exist."""
    sql = f"""SELECT bt.base, 'team' AS kind, bt.team AS name FROM {BASE_TEAMS} AS bt
            WHERE NOT EXISTS (SELECT 1 FROM {TEAMS} AS t WHERE t.name = bt.team)
        UNION ALL
        SELECT g.base, 'user' AS kind, g.user_name AS name FROM {BASE_GRANTS} AS g
            WHERE NOT EXISTS (SELECT 1 FROM {USERS} AS u WHERE u.name = g.user_name)
        ORDER BY 1, 2, 3"""
    return [BaseAccess._make(row) for row in conn.execute(sql)]


# --- taking documents out ---------------------------------------------------------------


class TombstoneInsert(TypedDict):
    id: str
    base: str
    filename: str
    task_ids: str  # JSON list
    deleted_at: str
    deleted_by: str


def insert_tombstone(conn: Connection, **values: Unpack[TombstoneInsert]) -> None:
    """What remains of a deleted document: base, file name, task ids, who and when."""
    _insert(conn, DELETED, values)


def get_tombstone(conn: Connection, document_id: str) -> TombstoneRow | None:
    sql = f"SELECT {', '.join(TombstoneRow._fields)} FROM {DELETED} WHERE id = :id"
    row = conn.execute(sql, {"id": document_id}).first()
    return None if row is None else TombstoneRow._make(row)


def delete_document_chunks(conn: Connection, document_id: str, limit: int) -> int:
    """Up to `limit` chunks of any revision of the document; how many went."""
    sql = f"""DELETE FROM {CHUNKS} WHERE id IN
        (SELECT id FROM {CHUNKS} WHERE document_id = :id LIMIT :limit)"""
    return conn.execute(sql, {"id": document_id, "limit": limit}).rowcount


def delete_document_tasks(conn: Connection, document_id: str) -> int:
    sql = f"DELETE FROM {TASKS} WHERE document_id = :id"
    return conn.execute(sql, {"id": document_id}).rowcount


def delete_document_row(conn: Connection, document_id: str) -> bool:
    """The last step of a delete: only a document marked deleting, with no chunk left
    (and the files of its revisions with it)."""
    sql = f"""DELETE FROM {DOCUMENTS} WHERE id = :id AND status = '{DocStatus.DELETING}'
        AND NOT EXISTS (SELECT 1 FROM {CHUNKS} WHERE document_id = :id)"""
    if conn.execute(sql, {"id": document_id}).rowcount != 1:
        return False
    conn.execute(f"DELETE FROM {REVISIONS} WHERE document_id = :id", {"id": document_id})
    return True


# --- the file of each revision ---------------------------------------------------------


def insert_revision_file(
    conn: Connection, document_id: str, revision: int, filename: str, content_type: str, at: str
) -> None:
    """Which file a revision was made from (upload, replace)."""
    _insert(
        conn,
        REVISIONS,
        {
            "document_id": document_id,
            "revision": revision,
            "filename": filename,
            "content_type": content_type,
            "created_at": at,
        },
    )


class RevisionFile(NamedTuple):
    filename: str
    content_type: str


def revision_file(conn: Connection, document_id: str, revision: int) -> RevisionFile | None:
    """The file a revision was made from; None for a revision older than that record."""
    sql = f"""SELECT filename, content_type FROM {REVISIONS}
        WHERE document_id = :id AND revision = :revision"""
    row = conn.execute(sql, {"id": document_id, "revision": revision}).first()
    return None if row is None else RevisionFile._make(row)


def chunk_texts(conn: Connection, document_id: str, revision: int) -> Iterator[str]:
    sql = f"SELECT text FROM {CHUNKS} WHERE document_id = :id AND revision = :revision"
    for (text,) in conn.execute(sql, {"id": document_id, "revision": revision}):
        yield text


def count_revision_chunks(conn: Connection, document_id: str, revision: int) -> int:
    sql = f"SELECT count(*) FROM {CHUNKS} WHERE document_id = :id AND revision = :revision"
    return int(conn.execute(sql, {"id": document_id, "revision": revision}).one()[0])


def ocr_pages_of(conn: Connection, document_id: str, revision: int) -> int | None:
    """Pages of a revision its parse read by OCR; None when not recorded (parsed before
    kb counted them, or not parsed yet)."""
    sql = f"""SELECT ocr_pages FROM {REVISIONS}
        WHERE document_id = :id AND revision = :revision"""
    row = conn.execute(sql, {"id": document_id, "revision": revision}).first()
    return None if row is None or row[0] is None else int(row[0])


def set_ocr_pages(conn: Connection, document_id: str, revision: int, pages: int) -> None:
    sql = f"""UPDATE {REVISIONS} SET ocr_pages = :pages
        WHERE document_id = :id AND revision = :revision"""
    conn.execute(sql, {"pages": pages, "id": document_id, "revision": revision})


def revision_has_chunks(conn: Connection, document_id: str, revision: int) -> bool:
    sql = f"SELECT 1 FROM {CHUNKS} WHERE document_id = :id AND revision = :revision LIMIT 1"
    return conn.execute(sql, {"id": document_id, "revision": revision}).first() is not None


# --- objects stored but not yet committed, or to be deleted (migration 0014) ----------

PENDING = "pending_objects"


class PendingObject(NamedTuple):
    object_key: str
    process: str  # host:pid:start of the command that owns it
    created_at: str


def insert_pending_objects(conn: Connection, keys: list[str], process: str, at: str) -> None:
    if keys:
        conn.executemany(
            f"INSERT INTO {PENDING} (object_key, process, created_at)"
            " VALUES (:object_key, :process, :created_at)",
            [{"object_key": key, "process": process, "created_at": at} for key in keys],
        )


def delete_pending_objects(conn: Connection, keys: list[str]) -> None:
    if keys:
        conn.executemany(
            f"DELETE FROM {PENDING} WHERE object_key = :key", [{"key": key} for key in keys]
        )


def pending_objects(conn: Connection) -> list[PendingObject]:
    sql = f"SELECT object_key, process, created_at FROM {PENDING} ORDER BY created_at"
    return [PendingObject._make(row) for row in conn.execute(sql)]


def documents_being_deleted(conn: Connection) -> list[DocumentRow]:
    sql = f"SELECT {_DOCUMENT_ROW} FROM {DOCUMENTS} WHERE status = '{DocStatus.DELETING}'"
    return [DocumentRow.read(row) for row in conn.execute(sql + " ORDER BY id")]


class Footprint(NamedTuple):
    """How many chunks and tasks a document has, and the bytes of its chunks' text."""

    chunks: int
    chunk_bytes: int
    tasks: int


def document_footprint(conn: Connection, document_id: str) -> Footprint:
    """How many chunks and tasks a document has, and the bytes of its chunks' text."""
    sql = f"""SELECT
        (SELECT count(*) FROM {CHUNKS} WHERE document_id = :id) AS chunks,
        (SELECT coalesce(sum(length(text)), 0) FROM {CHUNKS} WHERE document_id = :id)
            AS chunk_bytes,
        (SELECT count(*) FROM {TASKS} WHERE document_id = :id) AS tasks"""
    row = conn.execute(sql, {"id": document_id}).first()
    assert row is not None  # an aggregate always returns one row
    return Footprint._make(row)


# --- what doctor checks ----------------------------------------------------------------


def object_keys(conn: Connection) -> dict[str, str]:
    """Every stored object a document refers to: object key -> document id."""
    rows = conn.execute(f"SELECT object_key, id FROM {DOCUMENTS}")
    return {object_key: document_id for object_key, document_id in rows}


def all_documents(conn: Connection) -> list[DocumentRow]:
    return [
        DocumentRow.read(row) for row in conn.execute(f"SELECT {_DOCUMENT_ROW} FROM {DOCUMENTS}")
    ]


class TaskObject(NamedTuple):
    """A task, its document, and where the document's file is stored (what doctor
    reports of a task)."""

    id: str
    document_id: str
    object_key: str | None


def stale_active_tasks(conn: Connection) -> list[TaskObject]:
    """Active tasks that are not their document's latest task."""
    active = ", ".join(f"'{status}'" for status in ACTIVE_TASK_STATUSES)
    rows = conn.execute(
        f"""SELECT t.id, d.id AS document_id, d.object_key
        FROM {TASKS} AS t JOIN {DOCUMENTS} AS d ON d.id = t.document_id
        WHERE t.status IN ({active})
          AND (d.latest_task_id IS NULL OR d.latest_task_id != t.id)"""
    )
    return [TaskObject._make(row) for row in rows]


class ChunkOwner(NamedTuple):
    """A (document, revision, task) that has chunks, and what decides whether they may
    exist; the document's and the task's columns are None when that row is gone."""

    document_id: str
    revision: int
    task_id: str
    published_revision: int | None
    archived_revision: int | None
    rejected_revision: int | None
    document_status: str | None
    latest_task_id: str | None
    object_key: str | None
    task_status: str | None
    task_revision: int | None


def chunk_owners(conn: Connection) -> list[ChunkOwner]:
    """Each (document, revision, task) that has chunks, with what decides whether they
    may exist: the document's published revision and latest task, and that task."""
    rows = conn.execute(
        f"""SELECT DISTINCT c.document_id, c.revision, c.task_id, d.published_revision,
            d.archived_revision, d.rejected_revision, d.status AS document_status,
            d.latest_task_id, d.object_key, t.status AS task_status, t.revision AS task_revision
        FROM {CHUNKS} AS c
        LEFT JOIN {DOCUMENTS} AS d ON d.id = c.document_id
        LEFT JOIN {TASKS} AS t ON t.id = c.task_id"""
    )
    return [ChunkOwner._make(row) for row in rows]


class ExpiredLease(NamedTuple):
    """A running task whose lease ran out, and where its document's file is stored."""

    id: str
    document_id: str
    worker_id: str | None
    lease_expires_at: str | None
    object_key: str | None


def expired_running_tasks(conn: Connection, now: str) -> list[ExpiredLease]:
    rows = conn.execute(
        f"""SELECT t.id, t.document_id, t.worker_id, t.lease_expires_at, d.object_key
        FROM {TASKS} AS t LEFT JOIN {DOCUMENTS} AS d ON d.id = t.document_id
        WHERE t.status = '{TaskStatus.RUNNING}' AND t.lease_expires_at < :now""",
        {"now": now},
    )
    return [ExpiredLease._make(row) for row in rows]


# --- guarded updates -----------------------------------------------------------------


class DocumentChanges(TypedDict, total=False):
    """The columns of a document a transition may set, beside its status and time."""

    filename: str
    content_type: str
    size_bytes: int
    sha256: str
    object_key: str
    revision: int
    published_revision: int | None
    latest_task_id: str | None
    rejected_revision: int | None
    rejected_reason: str | None
    archived_revision: int | None
    meta: str  # JSON text (kb_cli/metadata.py)


class DocumentUpdate(DocumentChanges, total=False):
    status: str
    updated_at: str


class TaskChanges(TypedDict, total=False):
    """The columns of a task a transition (or a worker's progress) may set, beside its
    status and time."""

    revision: int
    stage: str
    completed: int
    total: int
    attempt: int
    error_code: str | None
    error_detail: str | None
    worker_id: str | None
    lease_expires_at: str | None
    retry_at: str | None
    settings: str | None


class TaskUpdate(TaskChanges, total=False):
    status: str
    updated_at: str


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
    returned = _DOCUMENT_ROW if table == DOCUMENTS else _TASK_ROW
    return (
        f"UPDATE {table} SET {', '.join(assignments)} "
        f"WHERE id = :_id AND status IN ({statuses}){guards} RETURNING {returned}"
    )


def _statuses(kinds: Iterable[StrEnum]) -> tuple[str, ...]:
    return tuple(kind.value for kind in kinds)


def _first_changed(conn: Connection, sql: str, params: dict[str, Any]) -> RawRow | None:
    rows = conn.execute(sql, params).all()  # all(): SQLite finishes the statement
    return rows[0] if rows else None


def update_document(
    conn: Connection,
    document_id: str,
    from_statuses: Iterable[DocStatus],
    *,
    if_version: int | None = None,
    **values: Unpack[DocumentUpdate],
) -> DocumentRow | None:
    """Change a document row if its status (and version) still match; bumps `version`.

    The keyword arguments become the SET clause. Returns the new row, or None.
    """
    guards = " AND version = :_version" if if_version is not None else ""
    sql = _update_sql(DOCUMENTS, tuple(values), _statuses(from_statuses), guards)
    params = {**values, "_id": document_id, "_version": if_version}
    return _document(_first_changed(conn, sql, params))


_FENCE = " AND worker_id = :_worker AND attempt = :_attempt"


def update_task(
    conn: Connection,
    task_id: str,
    from_statuses: Iterable[TaskStatus],
    *,
    fence: tuple[str, int] | None = None,
    **values: Unpack[TaskUpdate],
) -> TaskRow | None:
    """Change a task row if its status still matches and, for a worker, its claim.

    `fence` is (worker_id, attempt): a worker's write lands only while the task is
    still running under that exact claim, so a worker whose task was cancelled or
    reclaimed can never write over the newer state. The keyword arguments become the
    SET clause. Returns the new row, or None.
    """
    params: dict[str, Any] = {**values, "_id": task_id}
    if fence is not None:
        from_statuses = [TaskStatus.RUNNING]
        params["_worker"], params["_attempt"] = fence
    sql = _update_sql(TASKS, tuple(values), _statuses(from_statuses), _FENCE if fence else "")
    return _task(_first_changed(conn, sql, params))


# --- claiming ------------------------------------------------------------------------


# Queued, due for a retry, or running under a lease that has run out. The first line
# repeats the predicate of the partial indexes `ix_tasks_claimable` (migration 0003) and
# `ix_tasks_claimable_base` (0017), so both engines read one of them in claim order
# instead of sorting the whole queue: the first for every base, the second for the
# bases a worker is kept to (a task carries its document's base for this).
_CLAIMABLE = f"""SELECT {_TASK_ROW} FROM {TASKS}
    WHERE status IN ('{TaskStatus.QUEUED}', '{TaskStatus.RETRY_WAIT}', '{TaskStatus.RUNNING}')
      AND (status = '{TaskStatus.QUEUED}'
           OR (status = '{TaskStatus.RETRY_WAIT}' AND retry_at <= :now)
           OR (status = '{TaskStatus.RUNNING}' AND lease_expires_at < :now))"""


_QUEUE_PLACE = f"""SELECT
    (SELECT count(*) FROM ({_CLAIMABLE}) AS claimable
     WHERE created_at < :created_at OR (created_at = :created_at AND id < :id)) AS ahead,
    (SELECT count(DISTINCT worker_id) FROM {TASKS}
     WHERE status = '{TaskStatus.RUNNING}' AND lease_expires_at >= :now) AS busy"""


def queue_place(conn: Connection, task: TaskRow, now: str) -> tuple[int, int]:
    """(claimable tasks that workers take before `task`, in claim order; workers that
    hold a live claim). Counts over every base: workers serve them all."""
    params = {"created_at": task.created_at, "id": task.id, "now": now}
    [(ahead, busy)] = conn.execute(_QUEUE_PLACE, params).all()
    return int(ahead), int(busy)


def _in_bases(sql: str, bases: Sequence[str], params: dict[str, Any]) -> str:
    """`sql` (a statement over tasks, ending in its WHERE) kept to the tasks of
    `bases` (none: every base), their names added to `params`."""
    scoped, values = scope_filter(Scope(bases=tuple(bases)), "base")
    params.update(values)
    return f"{sql} AND {scoped}" if scoped else sql


def next_claimable_sql(base: str | None, params: dict[str, Any]) -> str:
    """The statement that reads the oldest claimable task, of every base (None) or of
    one. For one base, a range of one value, and the base first in the order, where
    `base = :_base` would do: a planner that takes the base for a constant drops it from
    the order, and may then read the index of every base's claimable tasks in claim
    order, skipping other bases' tasks one by one (PostgreSQL did, once its statistics
    showed the base holding half the queue: 2.6 ms with 20,000 tasks of another base
    ahead, instead of 0.03 ms)."""
    if base is None:
        return _CLAIMABLE + " ORDER BY created_at, id LIMIT 1"
    params["_base"] = base
    return (
        _CLAIMABLE + " AND base >= :_base AND base <= :_base ORDER BY base, created_at, id LIMIT 1"
    )


def _each_base(bases: Sequence[str]) -> Sequence[str | None]:
    """The bases a claim reads one by one: those named, or every base at once (None)."""
    return bases or [None]


def next_claimable_task(conn: Connection, now: str, bases: Sequence[str] = ()) -> TaskRow | None:
    """The oldest claimable task, of every base or of `bases`: one indexed statement per
    base named, the oldest of their answers (so another base's queue costs nothing). On
    PostgreSQL each row read stays locked until commit (the one not claimed, for this
    short transaction only), and rows other claimers hold are skipped."""
    found = []
    for base in _each_base(bases):
        params: dict[str, Any] = {"now": now}
        sql = next_claimable_sql(base, params) + conn.engine.SKIP_LOCKED
        row = _task(conn.execute(sql, params).first())
        if row is not None:
            found.append(row)
    return min(found, key=lambda row: (row.created_at, row.id), default=None)


def has_claimable_task(conn: Connection, now: str, bases: Sequence[str] = ()) -> bool:
    """Whether some task (of `bases`, when named) is claimable now; locks nothing."""
    for base in _each_base(bases):
        params: dict[str, Any] = {"now": now}
        if conn.execute(next_claimable_sql(base, params), params).first() is not None:
            return True
    return False


def next_due(conn: Connection, bases: Sequence[str] = ()) -> str | None:
    """When a task (of `bases`, when named) that is not claimable now may become
    claimable by itself: the earliest retry time or lease expiry (a stamp), or None
    when none is pending."""
    params: dict[str, Any] = {}
    waiting = _in_bases(f"FROM {TASKS} WHERE status = '{TaskStatus.RETRY_WAIT}'", bases, params)
    running = _in_bases(f"FROM {TASKS} WHERE status = '{TaskStatus.RUNNING}'", bases, params)
    due: str | None = conn.execute(
        f"""SELECT min(due) FROM (
            SELECT min(retry_at) AS due {waiting}
            UNION ALL
            SELECT min(lease_expires_at) {running}
        ) AS pending""",
        params,
    ).scalar()
    return due


def wake(conn: Connection, channel: str) -> None:
    """Wake the processes watching `channel` when this transaction commits."""
    conn.engine.notify(conn.raw, channel)


def claimable_task(
    conn: Connection, task_id: str, now: str, bases: Sequence[str] = ()
) -> TaskRow | None:
    """The named task if it is claimable (and of `bases`, when named); on PostgreSQL
    its row stays locked until the claim commits, so nobody finishes, renews or
    reclaims it in between."""
    params: dict[str, Any] = {"id": task_id, "now": now}
    sql = _in_bases(_CLAIMABLE + " AND id = :id", bases, params)
    return _task(conn.execute(sql + conn.engine.LOCK_ROW, params).first())


# --- chunks --------------------------------------------------------------------------


_CHUNK_COLUMNS = ("document_id", "revision", "task_id", *NewChunk._fields)
Beside = Mapping[str, Sequence[object]]
"""Columns a vector index keeps beside each chunk's vector (VectorIndex.beside): a
value per row written."""


def insert_chunks(
    conn: Connection,
    document_id: str,
    revision: int,
    task_id: str,
    rows: Sequence[NewChunk],
    beside: Beside | None = None,
) -> None:
    """Insert a batch of a task's chunks, with the columns its vector index fills."""
    if rows:
        own = {"document_id": document_id, "revision": revision, "task_id": task_id}
        columns = (*_CHUNK_COLUMNS, *(beside or {}))
        conn.executemany(_insert_sql(CHUNKS, columns), _with_beside(own, rows, beside))


def _with_beside(
    own: Mapping[str, object], rows: Sequence[NamedTuple], beside: Beside | None
) -> list[dict[str, object]]:
    """Each row's parameters: `own`, the row's fields, and its value of each column
    `beside`."""
    extra = list(zip(*beside.values(), strict=True)) if beside else [()] * len(rows)
    names = tuple(beside or {})
    return [
        {**own, **row._asdict(), **dict(zip(names, values, strict=True))}
        for row, values in zip(rows, extra, strict=True)
    ]


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


# --- parse artefacts (kb_cli/artefacts.py) ---------------------------------------------


def get_artefact(
    conn: Connection, document_id: str, revision: int, sha256: str, parser_key: str
) -> bytes | None:
    """The stored parse of this revision, when it was made from these bytes by this
    parser; None otherwise."""
    sql = f"""SELECT payload FROM {ARTEFACTS} WHERE document_id = :document_id
        AND revision = :revision AND sha256 = :sha256 AND parser_key = :parser_key"""
    params = {
        "document_id": document_id,
        "revision": revision,
        "sha256": sha256,
        "parser_key": parser_key,
    }
    payload = conn.execute(sql, params).scalar()
    return None if payload is None else bytes(payload)


def has_artefact(conn: Connection, document_id: str, revision: int) -> bool:
    """Whether a parse of this revision is kept (by any parser, of any bytes)."""
    sql = f"SELECT 1 FROM {ARTEFACTS} WHERE document_id = :document_id AND revision = :revision"
    params = {"document_id": document_id, "revision": revision}
    return conn.execute(sql, params).first() is not None


class ArtefactInsert(TypedDict):
    document_id: str
    revision: int
    sha256: str
    parser_key: str
    chunks: int
    payload: bytes
    task_id: str
    created_at: str


def put_artefact(conn: Connection, **values: Unpack[ArtefactInsert]) -> None:
    """Store a revision's parse, in place of any earlier one (another parser's)."""
    delete_artefacts(conn, values["document_id"], values["revision"])
    _insert(conn, ARTEFACTS, values)


def delete_artefacts(conn: Connection, document_id: str, revision: int | None = None) -> int:
    """The parse artefacts of one revision, or of every revision, of a document."""
    sql = f"DELETE FROM {ARTEFACTS} WHERE document_id = :id"
    params: dict[str, Any] = {"id": document_id}
    if revision is not None:
        sql += " AND revision = :revision"
        params["revision"] = revision
    return conn.execute(sql, params).rowcount


class ArtefactOwner(NamedTuple):
    """A parse artefact (without its payload) and its document's columns (None when the
    document is gone: `found` is its id)."""

    document_id: str
    revision: int
    sha256: str
    chunks: int
    found: str | None
    document_status: str | None
    document_revision: int | None
    document_sha256: str | None
    rejected_revision: int | None
    object_key: str | None


def artefact_owners(conn: Connection, document_id: str | None = None) -> list[ArtefactOwner]:
    """Each parse artefact (without its payload) with what decides whether it may still
    be needed: its document's status, current revision, sha256 and rejected revision."""
    sql = f"""SELECT a.document_id, a.revision, a.sha256, a.chunks, d.id AS found,
            d.status AS document_status, d.revision AS document_revision,
            d.sha256 AS document_sha256, d.rejected_revision, d.object_key
        FROM {ARTEFACTS} AS a LEFT JOIN {DOCUMENTS} AS d ON d.id = a.document_id"""
    if document_id is None:
        rows = conn.execute(sql)
    else:
        rows = conn.execute(sql + " WHERE a.document_id = :id", {"id": document_id})
    return [ArtefactOwner._make(row) for row in rows]


# --- search --------------------------------------------------------------------------


# Chunks `c` of their document's published revision, the document as `d`.
OF_PUBLISHED_REVISION = (
    f"JOIN {DOCUMENTS} AS d ON d.id = c.document_id AND c.revision = d.published_revision"
)
PUBLISHED_CHUNKS = f"FROM {CHUNKS} AS c {OF_PUBLISHED_REVISION}"


class ScopeCounts(NamedTuple):
    """What a caller's search could look at: readable bases (of those named), their
    documents, the published ones, and the published ones its metadata filters keep."""

    bases: int
    documents: int
    published: int
    matching: int


def search_scope_counts(conn: Connection, scope: Scope) -> ScopeCounts:
    bases_in, base_params = scope_filter(Scope(scope.reader, scope.bases), "b.name")
    bases = conn.execute(f"SELECT count(*) FROM {BASES} AS b{where_all([bases_in])}", base_params)
    documents_in, params = scope_filter(Scope(scope.reader, scope.bases), engine=conn.engine)
    filtered, filter_params = scope_filter(scope, engine=conn.engine)
    row = conn.execute(
        f"""SELECT count(*) AS documents, count(d.published_revision) AS published,
            coalesce(sum(CASE WHEN d.published_revision IS NOT NULL AND {filtered or "1 = 1"}
                         THEN 1 ELSE 0 END), 0) AS matching
        FROM {DOCUMENTS} AS d{where_all([documents_in, _NOT_DELETING])}""",
        {**params, **filter_params},
    ).one()
    return ScopeCounts(int(bases.one()[0]), int(row[0]), int(row[1]), int(row[2]))


def published_texts(conn: Connection, scope: Scope, limit: int) -> list[str]:
    """The text of up to `limit` published chunks in `scope` (whichever come first: no
    order, so that a big base is not read whole to pick them)."""
    scoped, params = scope_filter(scope, engine=conn.engine)
    sql = f"SELECT c.text {PUBLISHED_CHUNKS}{where_all([scoped])} LIMIT :limit"
    return list(conn.execute(sql, {**params, "limit": limit}).scalars())


def published_texts_named(conn: Connection, scope: Scope, name: str, limit: int) -> list[str]:
    """The text of up to `limit` published chunks of the documents in `scope` that
    answer to `name` (their id, or the file name of the revision served)."""
    scoped, params = scope_filter(Scope(scope.reader, scope.bases))
    sql = f"""SELECT c.text {PUBLISHED_CHUNKS}
        JOIN {REVISIONS} AS r ON r.document_id = d.id AND r.revision = d.published_revision
        {where_all(["(d.id = :name OR r.filename = :name)", scoped])} ORDER BY c.id LIMIT :limit"""
    return list(conn.execute(sql, {**params, "name": name, "limit": limit}).scalars())


def has_published_vectors(conn: Connection, model: str, scope: Scope) -> bool:
    scoped, params = scope_filter(scope, engine=conn.engine)
    clauses = ["c.embedding_model = :model", scoped]
    sql = f"SELECT 1 {PUBLISHED_CHUNKS}{where_all(clauses)} LIMIT 1"
    return conn.execute(sql, {**params, "model": model}).first() is not None


class ChunkDetail(NamedTuple):
    """A published chunk as a hit shows it."""

    id: int
    document_id: str
    base: str
    filename: str  # of the revision served
    revision: int
    chunk_index: int
    text: str
    page: int | None
    page_end: int | None
    heading: str | None
    context: str | None
    content_type: str  # of the revision served


def chunk_details(conn: Connection, chunk_ids: Sequence[int]) -> dict[int, ChunkDetail]:
    """What a hit shows, by chunk id: the file is the served revision's (the document
    row names the newest file, which may be a candidate's not yet published)."""
    names = [f"c{i}" for i in range(len(chunk_ids))]
    if not names:
        return {}
    sql = (
        "SELECT c.id, c.document_id, d.base, coalesce(r.filename, d.filename) AS filename,"
        " c.revision, c.chunk_index, c.text, c.page, c.page_end, c.heading, c.context,"
        f" coalesce(r.content_type, d.content_type) AS content_type {PUBLISHED_CHUNKS}"
        f" LEFT JOIN {REVISIONS} AS r ON r.document_id = c.document_id"
        " AND r.revision = c.revision"
        f" WHERE c.id IN ({', '.join(':' + n for n in names)})"
    )
    rows = conn.execute(sql, dict(zip(names, chunk_ids, strict=True)))
    return {detail.id: detail for detail in map(ChunkDetail._make, rows)}


class PassageChunk(NamedTuple):
    """A chunk of a passage."""

    chunk_index: int
    text: str
    page: int | None
    page_end: int | None
    heading: str | None
    context: str | None


def chunk_range(
    conn: Connection, document_id: str, revision: int, first: int, last: int
) -> list[PassageChunk]:
    """Chunks `first`..`last` of a revision, in order (the neighbours of a hit)."""
    sql = f"""SELECT chunk_index, text, page, page_end, heading, context FROM {CHUNKS}
        WHERE document_id = :document_id AND revision = :revision
          AND chunk_index BETWEEN :first AND :last
        ORDER BY chunk_index"""
    params = {"document_id": document_id, "revision": revision, "first": first, "last": last}
    return [PassageChunk._make(row) for row in conn.execute(sql, params)]


def revision_chunks(conn: Connection, document_id: str, revision: int) -> list[PassageChunk]:
    """Every chunk of a revision, in order (what `kb show` reads)."""
    sql = f"""SELECT chunk_index, text, page, page_end, heading, context FROM {CHUNKS}
        WHERE document_id = :document_id AND revision = :revision ORDER BY chunk_index"""
    params = {"document_id": document_id, "revision": revision}
    return [PassageChunk._make(row) for row in conn.execute(sql, params)]


# --- embeddings of stored chunks (kb reindex --embeddings) ---------------------------


class RevisionChunks(NamedTuple):
    document_id: str
    revision: int
    chunks: int


def revisions_to_embed(
    conn: Connection, model: str, bases: Sequence[str] | None = None
) -> list[RevisionChunks]:
    """(document_id, revision, chunks) of every revision (of `bases`: None, every base)
    with chunks not yet embedded by `model`, published revisions first."""
    in_bases, params = _in_list("d.base", "b", bases)
    sql = f"""SELECT c.document_id, c.revision, count(*) AS chunks
        FROM {CHUNKS} AS c JOIN {DOCUMENTS} AS d ON d.id = c.document_id
        WHERE (c.embedding_model IS NULL OR c.embedding_model != :model){in_bases}
        GROUP BY c.document_id, c.revision, d.published_revision
        ORDER BY CASE WHEN c.revision = d.published_revision THEN 0 ELSE 1 END,
                 c.document_id, c.revision"""
    return [RevisionChunks._make(row) for row in conn.execute(sql, {**params, "model": model})]


def _in_list(column: str, prefix: str, values: Sequence[str] | None) -> tuple[str, dict[str, str]]:
    """` AND column IN (...)` with its parameters; nothing when `values` is None."""
    if values is None:
        return "", {}
    names = {f"{prefix}{i}": value for i, value in enumerate(values)}
    listed = ", ".join(f":{name}" for name in names) or "NULL"
    return f" AND {column} IN ({listed})", names


class ChunkToEmbed(NamedTuple):
    id: int
    text: str
    context: str | None


def chunks_to_embed(
    conn: Connection, document_id: str, revision: int, model: str
) -> list[ChunkToEmbed]:
    sql = f"""SELECT id, text, context FROM {CHUNKS}
        WHERE document_id = :id AND revision = :rev
          AND (embedding_model IS NULL OR embedding_model != :model)
        ORDER BY chunk_index"""
    params = {"id": document_id, "rev": revision, "model": model}
    return [ChunkToEmbed._make(row) for row in conn.execute(sql, params)]


def set_embeddings(
    conn: Connection, rows: Sequence[ChunkVector], beside: Beside | None = None
) -> None:
    """Each chunk's new vector (with the columns its vector index fills); chunks deleted
    meanwhile are simply not found. Bumps the vector epoch in the same transaction: a
    vector index built before holds vectors some chunks no longer have, and is stale
    from the commit."""
    columns = ("embedding", "embedding_model", "embedding_dim", *(beside or {}))
    conn.executemany(
        f"UPDATE {CHUNKS} SET {', '.join(f'{name} = :{name}' for name in columns)} WHERE id = :id",
        _with_beside({}, rows, beside),
    )
    bump_vector_epoch(conn)


# --- a base's switch of embedding model (kb reindex --base --model) -------------------

VECTOR_BUILDS = "vector_builds"


def start_model_switch(conn: Connection, base: str, provider: str, model: str | None) -> None:
    """Mark `base` as switching to `provider`, whose vectors are of `model` (None: no
    vectors), and drop the vectors built for a switch to another: they are of no use
    to this one."""
    conn.execute(
        f"UPDATE {BASES} SET model_next = :provider WHERE name = :base",
        {"base": base, "provider": provider},
    )
    conn.execute(
        f"DELETE FROM {VECTOR_BUILDS} WHERE base = :base AND model != :model",
        {"base": base, "model": model or ""},
    )


def abandon_model_switch(conn: Connection, base: str, provider: str) -> None:
    """The base keeps `provider` as its model: no switch, no vectors built for one."""
    conn.execute(
        f"UPDATE {BASES} SET model = :provider, model_next = NULL WHERE name = :base",
        {"base": base, "provider": provider},
    )
    conn.execute(f"DELETE FROM {VECTOR_BUILDS} WHERE base = :base", {"base": base})


def switching_to(conn: Connection, base: str) -> str | None:
    sql = f"SELECT model_next FROM {BASES} WHERE name = :base"
    model: str | None = conn.execute(sql, {"base": base}).scalar()
    return model


def revisions_to_build(conn: Connection, base: str, model: str) -> list[RevisionChunks]:
    """(document_id, revision, chunks) of each revision of the base with chunks that
    have no vector of `model` built yet, published revisions first."""
    sql = f"""SELECT c.document_id, c.revision, count(*) AS chunks
        FROM {CHUNKS} AS c JOIN {DOCUMENTS} AS d ON d.id = c.document_id
        WHERE d.base = :base AND NOT EXISTS (SELECT 1 FROM {VECTOR_BUILDS} AS v
            WHERE v.chunk_id = c.id AND v.model = :model)
        GROUP BY c.document_id, c.revision, d.published_revision
        ORDER BY CASE WHEN c.revision = d.published_revision THEN 0 ELSE 1 END,
                 c.document_id, c.revision"""
    rows = conn.execute(sql, {"base": base, "model": model})
    return [RevisionChunks._make(row) for row in rows]


def chunks_to_build(
    conn: Connection, document_id: str, revision: int, model: str
) -> list[ChunkToEmbed]:
    sql = f"""SELECT c.id, c.text, c.context FROM {CHUNKS} AS c
        WHERE c.document_id = :id AND c.revision = :rev AND NOT EXISTS (
            SELECT 1 FROM {VECTOR_BUILDS} AS v WHERE v.chunk_id = c.id AND v.model = :model)
        ORDER BY c.chunk_index"""
    params = {"id": document_id, "rev": revision, "model": model}
    return [ChunkToEmbed._make(row) for row in conn.execute(sql, params)]


def insert_built_vectors(conn: Connection, base: str, rows: Sequence[ChunkVector]) -> int:
    """Vectors of the switch's model beside the chunks' own, written only while the
    base is switching to the provider it was when the batch began (a switch to another
    begun meanwhile stops this one's writes: 0); a chunk deleted meanwhile is skipped,
    one built twice (two runs of one switch at once) kept once. How many were written."""
    sql = f"""INSERT INTO {VECTOR_BUILDS} (chunk_id, model, base, embedding, embedding_dim)
        SELECT c.id, :model, :into_base, :embedding, :dim FROM {CHUNKS} AS c
        WHERE c.id = :id AND EXISTS (SELECT 1 FROM {BASES} AS b
            WHERE b.name = :base AND b.model_next = :provider)
        ON CONFLICT (chunk_id, model) DO NOTHING"""
    provider = switching_to(conn, base)
    written = 0
    for r in rows:
        # The base twice: PostgreSQL types a parameter once, and a column read here and
        # a value written there differ (varchar, text).
        values = {"id": r.id, "base": base, "into_base": base, "provider": provider}
        values |= {"model": r.embedding_model}
        values |= {"embedding": r.embedding, "dim": r.embedding_dim}
        written += conn.execute(sql, values).rowcount
    return written


def chunks_without_built_vector(conn: Connection, base: str, model: str) -> int:
    sql = f"""SELECT count(*) FROM {CHUNKS} AS c JOIN {DOCUMENTS} AS d ON d.id = c.document_id
        WHERE d.base = :base AND NOT EXISTS (SELECT 1 FROM {VECTOR_BUILDS} AS v
            WHERE v.chunk_id = c.id AND v.model = :model)"""
    return int(conn.execute(sql, {"base": base, "model": model}).scalar())


def finish_model_switch(
    conn: Connection, base: str, provider: str, model: str | None
) -> int | None:
    """In one transaction: the base takes `provider` if it is still switching to it
    (None, nothing written, when another command changed the switch), then every chunk
    of a document of the base now takes its built vector of `model` (the vector index
    columns derive from it: pgvector's trigger), or none when `model` is None (the
    provider `none`), and every built vector of the base is dropped; the number of
    chunks switched."""
    taken = conn.execute(
        f"""UPDATE {BASES} SET model = :provider, model_next = NULL
        WHERE name = :base AND model_next = :provider""",
        {"base": base, "provider": provider},
    ).rowcount
    if taken != 1:
        return None
    in_base = f"document_id IN (SELECT id FROM {DOCUMENTS} WHERE base = :base)"
    if model is None:
        dropped = f"""UPDATE {CHUNKS} SET embedding = NULL, embedding_model = NULL,
            embedding_dim = NULL WHERE {in_base}"""
        switched: int = conn.execute(dropped, {"base": base}).rowcount
    else:
        built = f"FROM {VECTOR_BUILDS} AS v WHERE v.chunk_id = {CHUNKS}.id AND v.model = :model"
        swapped = f"""UPDATE {CHUNKS} SET embedding = (SELECT v.embedding {built}),
            embedding_model = :model, embedding_dim = (SELECT v.embedding_dim {built})
            WHERE {in_base} AND EXISTS (SELECT 1 {built})"""
        switched = conn.execute(swapped, {"base": base, "model": model}).rowcount
    conn.execute(f"DELETE FROM {VECTOR_BUILDS} WHERE base = :base", {"base": base})
    bump_vector_epoch(conn)
    return switched


def vectors_of_other_models(conn: Connection, base: str, model: str) -> int:
    """How many published chunks of the base have a vector of a model other than
    `model` (moved from a base of another model, or embedded by a worker just before
    a switch): search of the base does not see them by meaning."""
    sql = f"""SELECT count(*) {PUBLISHED_CHUNKS} WHERE d.base = :base
        AND c.embedding_model IS NOT NULL AND c.embedding_model != :model"""
    return int(conn.execute(sql, {"base": base, "model": model}).scalar())


def vectors_built(conn: Connection, base: str, model: str) -> int:
    sql = f"SELECT count(*) FROM {VECTOR_BUILDS} WHERE base = :base AND model = :model"
    return int(conn.execute(sql, {"base": base, "model": model}).scalar())


def bump_vector_epoch(conn: Connection) -> None:
    """A vector index built before holds vectors some chunks no longer have: it is
    stale from this commit."""
    conn.execute(
        "INSERT INTO kb_meta (key, value) VALUES ('vector_epoch', '1') ON CONFLICT (key)"
        " DO UPDATE SET value = CAST(CAST(kb_meta.value AS INTEGER) + 1 AS VARCHAR(20))"
    )


# --- lifecycle events ----------------------------------------------------------------


_EVENT_COLUMNS = ", ".join(f"e.{column}" for column in EventRow._fields)


def events_after(
    conn: Connection, scope: Scope, after: int, also: Sequence[int], limit: int
) -> list[tuple[EventRow, bool]]:
    """Events with an id above `after` (and those in `also`), oldest first, each with
    whether its base is in `scope`. Unreadable ones are returned too (never shown), so
    that a reader can tell an id it may not see from one not committed yet."""
    where, params = scope_filter(scope, "e.base")
    readable = f"CASE WHEN {where} THEN 1 ELSE 0 END" if where else "1"
    wanted = "e.id > :after"
    if also:
        wanted = f"({wanted} OR e.id IN ({', '.join(str(int(i)) for i in also)}))"
    rows = conn.execute(
        f"SELECT {_EVENT_COLUMNS}, {readable} AS readable FROM {OUTBOX} AS e "
        f"WHERE {wanted} ORDER BY e.id LIMIT :limit",
        {**params, "after": after, "limit": limit},
    )
    return [(EventRow._make(row[:-1]), bool(row[-1])) for row in rows]


def undelivered_events(conn: Connection, limit: int) -> list[EventRow]:
    """The oldest events no webhook has acknowledged, of every base."""
    rows = conn.execute(
        f"SELECT {_EVENT_COLUMNS} FROM {OUTBOX} AS e "
        "WHERE e.dispatched_at IS NULL ORDER BY e.id LIMIT :limit",
        {"limit": limit},
    )
    return [EventRow._make(row) for row in rows]


def mark_delivered(conn: Connection, event_id: int, at: str) -> None:
    conn.execute(
        f"UPDATE {OUTBOX} SET dispatched_at = :at, attempts = attempts + 1 "
        "WHERE id = :id AND dispatched_at IS NULL",
        {"id": event_id, "at": at},
    )


def count_delivery_attempt(conn: Connection, event_id: int) -> None:
    conn.execute(f"UPDATE {OUTBOX} SET attempts = attempts + 1 WHERE id = :id", {"id": event_id})
