"""The two state machines as data, and the pure retry decision."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kb_cli.errors import InternalError
from kb_cli.lifecycle import (
    DOC_STATUS_FOR_TASK,
    DOCUMENT_TRANSITIONS,
    TASK_TRANSITIONS,
    DocStatus,
    ErrorCode,
    is_legal_document_transition,
)
from kb_cli.transitions import move_document_from
from kb_cli.worker import RetryPolicy

NOW = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = RetryPolicy(max_attempts=3, backoff_seconds=5.0)


def test_every_task_move_has_a_document_move_beside_it():
    """A task and its document change in one transaction: each task move that changes
    the document's status is a legal document move."""
    for old, new in TASK_TRANSITIONS:
        if old is None or old == new:
            continue
        doc_old, doc_new = DOC_STATUS_FOR_TASK[old], DOC_STATUS_FOR_TASK[new]
        if doc_old != doc_new:
            assert (doc_old, doc_new) in DOCUMENT_TRANSITIONS, (old, new)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (DocStatus.PUBLISHED, DocStatus.PROCESSING),  # a published document is not resubmitted
        (DocStatus.ARCHIVED, DocStatus.PROCESSING),  # an unpublished revision is not resubmitted
        (DocStatus.DELETING, DocStatus.DRAFT),  # a delete is never undone
        (DocStatus.DRAFT, DocStatus.PUBLISHED),  # no publishing without review
        (DocStatus.FAILED, DocStatus.PUBLISHED),
        (DocStatus.PROCESSING, DocStatus.PUBLISHED),
        (None, DocStatus.PROCESSING),
    ],
)
def test_document_moves_outside_the_table_are_illegal(old, new):
    assert not is_legal_document_transition(old, new)


def test_move_document_refuses_an_illegal_move_before_any_write():
    no_connection = None  # the refusal comes before the first statement
    with pytest.raises(InternalError, match="illegal document transition draft -> published"):
        move_document_from(
            no_connection,
            "d1",
            DocStatus.DRAFT,
            DocStatus.PUBLISHED,
            actor="t",
            action="publish",
            updated_at="2026-01-01T00:00:00.000000Z",
        )


def test_every_document_status_can_be_reached_and_left_but_deleting():
    reached = {new for _, new in DOCUMENT_TRANSITIONS}
    left = {old for old, new in DOCUMENT_TRANSITIONS if old is not None and old != new}
    assert reached == set(DocStatus)
    assert left == set(DocStatus) - {DocStatus.DELETING}  # its row goes, nothing follows


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.PROVIDER_UNAVAILABLE,
        ErrorCode.OBJECT_READ_ERROR,
        ErrorCode.STORAGE_UNAVAILABLE,
        ErrorCode.WORKER_LOST,
    ],
)
def test_a_transient_error_is_retried_with_a_doubling_delay(code):
    assert POLICY.decide(code, 1, NOW) == NOW + timedelta(seconds=5)
    assert POLICY.decide(code, 2, NOW) == NOW + timedelta(seconds=10)


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.PARSE_ERROR,
        ErrorCode.EMPTY_DOCUMENT,
        ErrorCode.DOCUMENT_TOO_LARGE,
        ErrorCode.DOCUMENT_NOT_FOUND,
        ErrorCode.INTERNAL_ERROR,
    ],
)
def test_a_permanent_error_is_never_retried(code):
    assert POLICY.decide(code, 1, NOW) is None


def test_the_last_attempt_is_not_retried():
    assert POLICY.decide(ErrorCode.PROVIDER_UNAVAILABLE, 3, NOW) is None
    assert POLICY.decide(ErrorCode.PROVIDER_UNAVAILABLE, 7, NOW) is None


def test_the_delay_is_capped_and_jittered():
    policy = RetryPolicy(max_attempts=100, backoff_seconds=5.0, cap_seconds=60.0)
    assert policy.decide(ErrorCode.PROVIDER_UNAVAILABLE, 30, NOW) == NOW + timedelta(seconds=60)
    low = policy.decide(ErrorCode.PROVIDER_UNAVAILABLE, 1, NOW, jitter=0.5)
    high = policy.decide(ErrorCode.PROVIDER_UNAVAILABLE, 1, NOW, jitter=1.5)
    assert (low, high) == (NOW + timedelta(seconds=2.5), NOW + timedelta(seconds=7.5))
