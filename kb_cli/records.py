"""The records commands print (docs/interface.md, "Records"), built from database rows;
and the rows themselves, one typed record per table that code reads.

Plain (not frozen) dataclasses: a frozen one sets each field through
`object.__setattr__`, which doubled the cost of listing 10,000 documents. Rows are
named tuples: built positionally from the driver's row, and immutable; a status or
stage is its enum from the moment the row is read (`read`, by a dictionary lookup:
about 0.4 µs a row, where calling the enum cost five times as much).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kb_cli.lifecycle import DocStatus, Stage, TaskStatus


class DocumentRow(NamedTuple):
    """A row of `documents`: kb_cli/queries.py selects its fields, in this order."""

    id: str
    base: str
    filename: str
    content_type: str
    size_bytes: int
    sha256: str
    object_key: str
    status: DocStatus
    version: int
    revision: int
    published_revision: int | None
    latest_task_id: str | None
    rejected_revision: int | None
    rejected_reason: str | None
    archived_revision: int | None
    created_at: str
    updated_at: str
    meta: Any  # JSON text on SQLite, a dict on PostgreSQL: read it with meta_of

    @classmethod
    def read(cls, values: Sequence[Any]) -> DocumentRow:
        """The row the driver returned (its columns in this order), status typed."""
        typed = list(values)
        typed[_DOCUMENT_STATUS] = _DOC_STATUSES[typed[_DOCUMENT_STATUS]]
        return cls._make(typed)


def meta_of(value: Any) -> dict[str, str]:
    """A `meta` column as a dict, whichever engine read it."""
    if isinstance(value, str):
        import json

        loaded: dict[str, str] = json.loads(value)
        return loaded
    return dict(value or {})


class TaskRow(NamedTuple):
    """A row of `ingestion_tasks`: kb_cli/queries.py selects its fields, in this order."""

    id: str
    document_id: str
    revision: int
    status: TaskStatus
    stage: Stage
    completed: int
    total: int
    attempt: int
    error_code: str | None
    error_detail: str | None
    worker_id: str | None
    lease_expires_at: str | None
    retry_at: str | None
    created_at: str
    updated_at: str
    settings: str | None  # JSON: what the queuing command was given (config.TaskSettings)

    @classmethod
    def read(cls, values: Sequence[Any]) -> TaskRow:
        """The row the driver returned (its columns in this order), status and stage
        typed."""
        typed = list(values)
        typed[_TASK_STATUS] = _TASK_STATUSES[typed[_TASK_STATUS]]
        typed[_TASK_STAGE] = _STAGES[typed[_TASK_STAGE]]
        return cls._make(typed)


# Where `read` types a column, and what each stored value stands for.
_DOCUMENT_STATUS = DocumentRow._fields.index("status")
_TASK_STATUS, _TASK_STAGE = TaskRow._fields.index("status"), TaskRow._fields.index("stage")
_DOC_STATUSES = {status.value: status for status in DocStatus}
_TASK_STATUSES = {status.value: status for status in TaskStatus}
_STAGES = {stage.value: stage for stage in Stage}


class UserRow(NamedTuple):
    """A row of `users`: the token's columns too, never shown (UserRecord omits them)."""

    name: str
    role: str
    token_id: str
    token_salt: str
    token_hash: str
    created_at: str
    disabled_at: str | None
    last_used_at: str | None


class TombstoneRow(NamedTuple):
    """A row of `deleted_documents`: what remains of a deleted document."""

    id: str
    base: str
    filename: str
    task_ids: str
    deleted_at: str
    deleted_by: str


class AuditRow(NamedTuple):
    """A row of `audit_events`."""

    id: int
    at: str
    actor: str
    action: str
    entity_id: str
    from_status: str | None
    to_status: str | None
    detail: str | None


class EventRow(NamedTuple):
    """A row of `outbox_events`, without its delivery time."""

    id: int
    topic: str
    document_id: str | None
    task_id: str | None
    base: str | None
    created_at: str
    payload: str
    attempts: int


class NewChunk(NamedTuple):
    """A chunk as the worker writes it (queries.insert_chunks), made once by the
    pipeline: its text, its words for the lexical index, and its vector (None:
    embeddings off)."""

    chunk_index: int
    text: str
    page: int | None
    page_end: int | None  # the last page it covers, when not `page`
    heading: str | None
    context: str | None
    terms: str
    term_count: int
    embedding: bytes | None
    embedding_model: str | None
    embedding_dim: int | None


class ChunkVector(NamedTuple):
    """A stored chunk's new vector (queries.set_embeddings, `kb reindex --embeddings`)."""

    id: int
    embedding: bytes
    embedding_model: str
    embedding_dim: int


@dataclass
class TaskRecord:
    task_id: str
    document_id: str
    status: str
    stage: str
    completed: int
    total: int
    attempt: int
    error_code: str | None
    error_detail: str | None
    worker_id: str | None
    created_at: str
    updated_at: str
    revision: int
    lease_expires_at: str | None
    retry_at: str | None
    # The file of the task's document, where the service that made the record read it
    # (what a screen names a task by); not part of the printed record.
    filename: str | None = None

    @classmethod
    def from_row(cls, row: TaskRow, filename: str | None = None) -> TaskRecord:
        # Positional, in field order: three times faster than keywords, which shows
        # when `kb status` lists 10,000 documents.
        return cls(
            row.id,
            row.document_id,
            row.status,
            row.stage,
            row.completed,
            row.total,
            row.attempt,
            row.error_code,
            row.error_detail,
            row.worker_id,
            row.created_at,
            row.updated_at,
            row.revision,
            row.lease_expires_at,
            row.retry_at,
            filename,
        )

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)  # flat: no need for asdict's deep copy
        del data["filename"]
        return data


@dataclass(frozen=True)
class ChunkChange:
    """What a revision changes in chunks against the one search serves: chunk texts
    compared, whitespace aside. `replaces_revision` None: nothing is served, so every
    chunk is added (a new document, or one never published)."""

    replaces_revision: int | None
    chunks_added: int
    chunks_removed: int
    chunks_kept: int

    @property
    def is_new(self) -> bool:
        return self.replaces_revision is None

    def to_dict(self) -> dict[str, Any]:
        return {"new": self.is_new, **self.__dict__}


@dataclass
class DocumentRecord:
    document_id: str
    base: str
    filename: str
    content_type: str
    size_bytes: int
    sha256: str
    status: str
    version: int
    revision: int
    published_revision: int | None
    created_at: str
    updated_at: str
    # Set by `kb unpublish` (the revision it stopped serving) and `kb reject` (why).
    archived_revision: int | None
    rejected_reason: str | None
    # Metadata (`kb upload --meta`, `kb sync`): string keys and values, {} when none.
    meta: dict[str, str]
    latest_task: TaskRecord | None
    # One document's record only: the served revision's file when it is not `filename`
    # (a replace not yet published), as {"filename", "content_type"}; else left out.
    published_file: dict[str, str] | None = None
    # One document's record (`kb status ID`) only: its newest revision's chunks, and the
    # pages its parse read by OCR (when recorded); else left out.
    chunks: int | None = None
    ocr_pages: int | None = None
    # A `review_pending` document, in `kb status ID` and `kb status --status
    # review_pending`: what publishing it would change; else left out.
    change: ChunkChange | None = None

    @classmethod
    def from_listing(cls, values: tuple[Any, ...]) -> DocumentRecord:
        """From a row of LISTING_COLUMNS: the document's fields, then its latest task's
        (all NULL when it has none)."""
        split = len(DOCUMENT_COLUMNS)
        task = TaskRecord(*values[split:]) if values[split] is not None else None
        # Positional for speed: LISTING_COLUMNS start with exactly the document's fields,
        # `meta` last.
        return cls(*values[: split - 1], meta_of(values[split - 1]), task)  # type: ignore[call-arg]

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["latest_task"] = self.latest_task.to_dict() if self.latest_task else None
        for key in _ONLY_WHEN_TOLD:
            if data[key] is None:
                del data[key]
        if self.change is not None:
            data["change"] = self.change.to_dict()
        return data


_ONLY_WHEN_TOLD = ("published_file", "chunks", "ocr_pages", "change")


# The columns behind each record, in field order; a listing selects both, so that
# records are built positionally from one joined row (`kb status` on 10,000 documents).
TASK_COLUMNS = (
    "id",
    "document_id",
    "status",
    "stage",
    "completed",
    "total",
    "attempt",
    "error_code",
    "error_detail",
    "worker_id",
    "created_at",
    "updated_at",
    "revision",
    "lease_expires_at",
    "retry_at",
)
DOCUMENT_COLUMNS = (
    "id",
    "base",
    "filename",
    "content_type",
    "size_bytes",
    "sha256",
    "status",
    "version",
    "revision",
    "published_revision",
    "created_at",
    "updated_at",
    "archived_revision",
    "rejected_reason",
    "meta",
)
# Task columns get their own names: psycopg's rows refuse a second `id` or `status`.
LISTING_COLUMNS = tuple(f"d.{column}" for column in DOCUMENT_COLUMNS) + tuple(
    f"t.{column} AS task_{column}" for column in TASK_COLUMNS
)


@dataclass(frozen=True)
class QueuePlace:
    """Where a queued task stands: claimable tasks workers take before it, and workers
    holding a live claim (a running task whose lease has not run out)."""

    ahead: int
    busy_workers: int


@dataclass
class WorkResult:
    """One claim attempt of `kb work`: `task` is the final task record when claimed."""

    claimed: bool
    worker_id: str
    task_id: str | None
    task: TaskRecord | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "claimed": self.claimed,
            "worker_id": self.worker_id,
            "task_id": self.task_id,
            "task": self.task.to_dict() if self.task else None,
        }


@dataclass
class ChunkRecord:
    """A chunk as `kb show --chunks` prints it: where it stands and its text."""

    document_id: str
    revision: int
    chunk_index: int
    page: int | None
    page_end: int | None  # the last page it covers, when not `page`
    heading: str | None
    length: int  # characters of its text
    text: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class AlsoIn(NamedTuple):
    """Another document holding a hit's text (whitespace aside)."""

    document_id: str
    filename: str


@dataclass
class SearchHit:
    document_id: str
    base: str
    filename: str
    revision: int
    chunk_index: int
    score: float
    text: str
    lexical_rank: int | None
    vector_rank: int | None
    page: int | None
    heading: str | None
    snippet: str
    # The last page the hit's text covers, when it spans pages (a chunk, or a passage).
    page_end: int | None = None
    # --context: the first and last chunk the passage in `text` covers; else None.
    passage: tuple[int, int] | None = None
    content_type: str | None = None  # of the revision served, like filename
    also_in: list[AlsoIn] = field(default_factory=list)
    # The embedding model that ranked its base's chunks by meaning (None: words alone).
    model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        record = dict(self.__dict__)
        passage = record.pop("passage")
        if passage is not None:
            record["first_chunk"], record["last_chunk"] = passage
        record["also_in"] = [other._asdict() for other in self.also_in]
        return record


@dataclass
class AuditRecord:
    at: str
    actor: str
    action: str
    entity_id: str
    from_status: str | None
    to_status: str | None
    detail: str | None

    @classmethod
    def from_row(cls, row: AuditRow) -> AuditRecord:
        return cls(
            row.at, row.actor, row.action, row.entity_id, row.from_status, row.to_status, row.detail
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class BaseRecord:
    """A knowledge base: who reads it (no teams: everyone), how many documents, and its
    embedding model: `model` the provider its vectors come from, `model_from` "base"
    when the base chose it, "KB_EMBEDDINGS" when it follows the process's setting;
    `switching_to` the model a `kb reindex --base --model` switch is building."""

    base: str
    teams: list[str]
    grants: list[str]
    documents: int
    model: str
    model_from: str
    switching_to: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class UserRecord:
    """A user as `kb user list` shows it: never the token or its hash."""

    user: str
    role: str
    teams: list[str]
    state: str  # "active" or "disabled"
    created_at: str
    last_used_at: str | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class EventRecord:
    """A lifecycle event (`kb events`, the body `kb relay` posts). `event_id` grows with
    every event; a receiver deduplicates by it."""

    event_id: int
    type: str
    document_id: str | None
    task_id: str | None
    base: str | None
    at: str
    data: dict[str, Any]

    @classmethod
    def from_row(cls, row: EventRow) -> EventRecord:
        import json

        return cls(
            row.id,
            row.topic,
            row.document_id,
            row.task_id,
            row.base,
            row.created_at,
            json.loads(row.payload),
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class IndexProblem:
    """An index that search cannot use now: it answers, by reading every vector, and
    slower. `rebuild` of the model and dimension repairs it."""

    model: str
    dim: int
    detail: str


@dataclass
class BuildReport:
    """What a build wrote: the vectors of one model and dimension."""

    model: str
    dim: int
    chunks: int  # in the index
    added: int  # read from the database by this build
    watermark: int
    path: str
    bytes: int

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)
