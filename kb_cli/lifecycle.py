"""The two state machines as data: statuses, stages, error codes and legal transitions."""

from __future__ import annotations

from enum import StrEnum


class TaskStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    RETRY_WAIT = "retry_wait"


class Stage(StrEnum):
    DOWNLOAD = "download"
    PARSE = "parse"
    EMBEDDING = "embedding"
    INDEXING = "indexing"
    FINALIZING = "finalizing"


class DocStatus(StrEnum):
    DRAFT = "draft"
    PROCESSING = "processing"
    REVIEW_PENDING = "review_pending"
    PUBLISHED = "published"
    FAILED = "failed"
    ARCHIVED = "archived"  # unpublished: search no longer serves it; publish brings it back
    DELETING = "deleting"  # a delete has begun; already not_found, its rows going in batches


class ListedDocStatus(StrEnum):
    """The statuses `kb status --status` lists: a `deleting` document is already gone."""

    DRAFT = "draft"
    PROCESSING = "processing"
    REVIEW_PENDING = "review_pending"
    PUBLISHED = "published"
    FAILED = "failed"
    ARCHIVED = "archived"


class EventType(StrEnum):
    """The lifecycle events a user may react to (`kb events`, `kb relay`)."""

    TASK_QUEUED = "task.queued"
    TASK_SUCCEEDED = "task.succeeded"
    TASK_FAILED = "task.failed"
    TASK_CANCELLED = "task.cancelled"
    DOCUMENT_REVIEW_PENDING = "document.review_pending"
    DOCUMENT_PUBLISHED = "document.published"
    DOCUMENT_UNPUBLISHED = "document.unpublished"
    DOCUMENT_DELETED = "document.deleted"


class ErrorCode(StrEnum):
    PARSE_ERROR = "parse_error"
    OBJECT_READ_ERROR = "object_read_error"
    EMPTY_DOCUMENT = "empty_document"
    DOCUMENT_NOT_FOUND = "document_not_found"
    INTERNAL_ERROR = "internal_error"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    WORKER_LOST = "worker_lost"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    DOCUMENT_TOO_LARGE = "document_too_large"


# Worth another attempt after a pause: the cause may go away by itself.
TRANSIENT_ERRORS = frozenset(
    {
        ErrorCode.OBJECT_READ_ERROR,
        ErrorCode.PROVIDER_UNAVAILABLE,
        ErrorCode.WORKER_LOST,
        ErrorCode.STORAGE_UNAVAILABLE,
    }
)

ACTIVE_TASK_STATUSES = (TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.RETRY_WAIT)
TERMINAL_TASK_STATUSES = (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED)

# The document status that goes with each task status (docs/interface.md, "The two
# state machines").
DOC_STATUS_FOR_TASK = {
    TaskStatus.QUEUED: DocStatus.PROCESSING,
    TaskStatus.RUNNING: DocStatus.PROCESSING,
    TaskStatus.RETRY_WAIT: DocStatus.PROCESSING,
    TaskStatus.SUCCEEDED: DocStatus.REVIEW_PENDING,
    TaskStatus.FAILED: DocStatus.FAILED,
    TaskStatus.CANCELLED: DocStatus.DRAFT,
}

# Legal task transitions: (from, to). Anything else is a conflict.
TASK_TRANSITIONS = frozenset(
    {
        (None, TaskStatus.QUEUED),  # submit
        (TaskStatus.QUEUED, TaskStatus.RUNNING),  # claim
        (TaskStatus.RETRY_WAIT, TaskStatus.RUNNING),  # claim after backoff
        (TaskStatus.RUNNING, TaskStatus.RUNNING),  # reclaim after an expired lease
        (TaskStatus.RUNNING, TaskStatus.SUCCEEDED),
        (TaskStatus.RUNNING, TaskStatus.FAILED),
        (TaskStatus.RUNNING, TaskStatus.RETRY_WAIT),
        (TaskStatus.RUNNING, TaskStatus.QUEUED),  # graceful release on SIGINT/SIGTERM
        (TaskStatus.QUEUED, TaskStatus.CANCELLED),
        (TaskStatus.RUNNING, TaskStatus.CANCELLED),
        (TaskStatus.RETRY_WAIT, TaskStatus.CANCELLED),
        (TaskStatus.FAILED, TaskStatus.QUEUED),  # manual retry
    }
)

# Every status a document rests in; `deleting` is the way out.
ACTIVE_DOCUMENT_STATUSES = (
    DocStatus.DRAFT,
    DocStatus.PROCESSING,
    DocStatus.REVIEW_PENDING,
    DocStatus.PUBLISHED,
    DocStatus.FAILED,
    DocStatus.ARCHIVED,
)

# Legal document transitions: (from, to). `move_document` refuses anything else.
DOCUMENT_TRANSITIONS = frozenset(
    {
        (None, DocStatus.DRAFT),  # upload
        (DocStatus.DRAFT, DocStatus.PROCESSING),  # submit
        (DocStatus.PROCESSING, DocStatus.REVIEW_PENDING),  # the task succeeded
        (DocStatus.PROCESSING, DocStatus.FAILED),  # the task failed
        (DocStatus.PROCESSING, DocStatus.DRAFT),  # the task was cancelled
        (DocStatus.FAILED, DocStatus.PROCESSING),  # manual retry
        (DocStatus.REVIEW_PENDING, DocStatus.PUBLISHED),  # publish
        # upload --replace: a new revision; a published document becomes a draft again
        (DocStatus.DRAFT, DocStatus.DRAFT),
        (DocStatus.FAILED, DocStatus.FAILED),
        (DocStatus.PUBLISHED, DocStatus.DRAFT),
        (DocStatus.ARCHIVED, DocStatus.DRAFT),
        # reject: back to draft, or to serving the published revision it would replace
        (DocStatus.REVIEW_PENDING, DocStatus.DRAFT),
        # unpublish: a published document is archived; a document still serving an
        # earlier revision while it is worked on keeps its status and stops serving it
        (DocStatus.PUBLISHED, DocStatus.ARCHIVED),
        (DocStatus.PROCESSING, DocStatus.PROCESSING),
        (DocStatus.REVIEW_PENDING, DocStatus.REVIEW_PENDING),
        (DocStatus.ARCHIVED, DocStatus.PUBLISHED),  # publish again, without reprocessing
        # delete: from anywhere; the row itself goes at the end
        *((status, DocStatus.DELETING) for status in ACTIVE_DOCUMENT_STATUSES),
    }
)

# Statuses a command may start from.
SUBMITTABLE = (DocStatus.DRAFT,)
REPLACEABLE = (DocStatus.DRAFT, DocStatus.FAILED, DocStatus.PUBLISHED, DocStatus.ARCHIVED)
PUBLISHABLE = (DocStatus.REVIEW_PENDING, DocStatus.ARCHIVED)
REJECTABLE = (DocStatus.REVIEW_PENDING,)
CANCELLABLE = ACTIVE_TASK_STATUSES
RETRYABLE_TASK = (TaskStatus.FAILED,)
RETRYABLE_DOC = (DocStatus.FAILED,)


def is_legal_task_transition(old: TaskStatus | None, new: TaskStatus) -> bool:
    return (old, new) in TASK_TRANSITIONS


def is_legal_document_transition(old: DocStatus | None, new: DocStatus) -> bool:
    return (old, new) in DOCUMENT_TRANSITIONS


def is_legal_pair(
    task: TaskStatus | None, doc: DocStatus, has_published: bool, rejected: bool = False
) -> bool:
    """True when a document status may stand beside its latest task's status.

    `has_published`: the document has (or had, before an unpublish) a published
    revision; `rejected`: a reviewer turned its latest task's revision down."""
    if doc is DocStatus.DELETING:
        return True  # on its way out, whatever it was
    if task is None:
        return doc is DocStatus.DRAFT
    if DOC_STATUS_FOR_TASK[task] is doc:
        return True
    if task is TaskStatus.SUCCEEDED and doc in (DocStatus.PUBLISHED, DocStatus.ARCHIVED):
        return True
    # A replaced published document, or a rejected revision, is a draft again while
    # its old task stays latest.
    return task is TaskStatus.SUCCEEDED and doc is DocStatus.DRAFT and (has_published or rejected)
