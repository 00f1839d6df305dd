"""The two state machines through the service layer: every row of the contract's table
and every illegal transition it names. Real SQLite files, real object directories."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kb_cli import queries
from kb_cli.app import resolve_id
from kb_cli.errors import ConflictError, InvalidInputError, NotFoundError, UsageError
from kb_cli.lifecycle import DocStatus, TaskStatus, is_legal_pair
from kb_cli.services import documents as docs
from kb_cli.services import tasks
from kb_cli.worker import Worker, WorkerOptions
from tests.docgen import make_pdf
from tests.helpers import sqlite_only, wait_until


def write(tmp_path: Path, name: str, content: str | bytes = "Some text about retention.") -> Path:
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def work(kb, **options) -> list:
    """Drain the queue in process; the results of the claims that happened."""
    worker = Worker(kb, WorkerOptions(worker_id=options.pop("worker_id", "w1"), **options))
    return [result for result in worker.run(max_tasks=None) if result.claimed]


def count(kb, table: str, **where) -> int:
    conditions = "".join(f" AND {column} = :{column}" for column in where)
    with kb.db.read() as conn:
        return conn.execute(f"SELECT count(*) FROM {table} WHERE 1 = 1{conditions}", where).scalar()


def pairs_are_legal(kb) -> None:
    with kb.db.read() as conn:
        for row in conn.execute("SELECT * FROM documents"):
            task = queries.get_task(conn, row.latest_task_id) if row.latest_task_id else None
            assert is_legal_pair(
                TaskStatus(task.status) if task else None,
                DocStatus(row.status),
                row.published_revision is not None,
            ), (row.status, task and task.status)


def test_upload_creates_a_draft_and_stores_the_object(kb, tmp_path):
    [record] = docs.upload_files(kb, [write(tmp_path, "a.txt")])
    assert record.status == "draft" and record.version == 1 and record.revision == 1
    assert record.latest_task is None and record.published_revision is None
    assert record.content_type == "text/plain" and record.size_bytes == 26
    assert len(list(kb.store.keys())) == 1


def test_one_unsupported_file_stores_nothing(kb, tmp_path):
    good, bad = write(tmp_path, "a.md"), write(tmp_path, "b.exe")
    with pytest.raises(InvalidInputError):
        docs.upload_files(kb, [good, bad])
    assert count(kb, "documents") == 0 and list(kb.store.keys()) == []


def test_missing_file_is_a_usage_error(kb, tmp_path):
    with pytest.raises(UsageError):
        docs.upload_files(kb, [write(tmp_path, "a.txt"), tmp_path / "nope.pdf"])
    assert count(kb, "documents") == 0


def test_oversized_file_is_invalid_input(kb, tmp_path, monkeypatch):
    from dataclasses import replace

    kb.settings = replace(kb.settings, max_upload_bytes=10)
    with pytest.raises(InvalidInputError):
        docs.upload_files(kb, [write(tmp_path, "a.txt", "x" * 11)])
    assert count(kb, "documents") == 0 and list(kb.store.keys()) == []


def test_submit_queues_a_task_with_an_outbox_event(kb, tmp_path):
    [doc] = docs.upload_files(kb, [write(tmp_path, "a.txt")])
    task = docs.submit_document(kb, doc.document_id)
    assert (task.status, task.stage, task.completed, task.total, task.attempt) == (
        "queued",
        "download",
        0,
        0,
        0,
    )
    assert task.worker_id is None and task.error_code is None
    assert docs.document_record_for(kb, doc.document_id).status == "processing"
    assert count(kb, "outbox_events", entity_id=task.task_id) == 1
    with pytest.raises(ConflictError):
        docs.submit_document(kb, doc.document_id)
    pairs_are_legal(kb)


def test_ingestion_task_is_observable_and_cancellable(kb, tmp_path):
    [task] = docs.upload_files(kb, [write(tmp_path, "a.txt")], submit=True)
    seen = tasks.get_record(kb, task.task_id)
    assert seen.status == "queued" and seen.stage == "download"
    cancelled = tasks.cancel_task(kb, task.task_id)
    assert cancelled.status == "cancelled"
    assert docs.document_record_for(kb, task.document_id).status == "draft"
    with pytest.raises(ConflictError):
        tasks.cancel_task(kb, task.task_id)
    assert work(kb) == []  # nothing claimable after a cancel
    again = docs.submit_document(kb, task.document_id)  # a cancelled run may be resubmitted
    assert again.task_id != task.task_id and again.status == "queued"
    pairs_are_legal(kb)


def test_cancel_of_a_running_task_stops_the_worker_and_leaves_no_chunks(kb, tmp_path):
    text = "\n\n".join(f"Paragraph {i} " + "word " * 150 for i in range(12))
    [task] = docs.upload_files(kb, [write(tmp_path, "long.txt", text)], submit=True)
    worker = Worker(kb, WorkerOptions(worker_id="w1", stage_delay=0.05, progress_interval=0))
    results = []
    thread = threading.Thread(target=lambda: results.extend(worker.run()))
    thread.start()
    wait_until(
        lambda: tasks.get_record(kb, task.task_id).stage == "embedding",
        timeout=10,
        interval=0.02,
        message="condition not reached in time",
    )
    tasks.cancel_task(kb, task.task_id)
    thread.join(10)
    assert not thread.is_alive()
    assert results[0].task.status == "cancelled"
    assert count(kb, "chunks") == 0
    assert docs.document_record_for(kb, task.document_id).status == "draft"


def test_cancel_just_before_completing(kb, tmp_path):
    """The cancel wins: chunks are written only with the fenced completion, so none
    exist before it and none are left after it failed."""
    [task] = docs.upload_files(kb, [write(tmp_path, "a.txt")], submit=True)
    worker = Worker(kb, WorkerOptions(worker_id="w1"))
    original = worker.listener.progress

    def cancel_when_finalizing(task_id, stage, done, total):
        original(task_id, stage, done, total)
        if stage == "finalizing" and done == 0:
            assert count(kb, "chunks", task_id=task_id) == 0
            tasks.cancel_task(kb, task_id)

    worker.listener.progress = cancel_when_finalizing
    [result] = list(worker.run())
    assert result.task.status == "cancelled"
    assert count(kb, "chunks") == 0
    assert docs.document_record_for(kb, task.document_id).status == "draft"
    pairs_are_legal(kb)


def test_worker_runs_the_stages_and_moves_the_document_to_review(kb, tmp_path):
    [task] = docs.upload_files(
        kb, [write(tmp_path, "a.pdf", make_pdf(["One", "Two"]))], submit=True
    )
    stages = []
    worker = Worker(kb, WorkerOptions(worker_id="w1"))
    worker.listener.progress = lambda task_id, stage, done, total: stages.append(stage)
    [result] = list(worker.run())
    assert result.claimed and result.task.status == "succeeded"
    assert result.task.attempt == 1 and result.task.worker_id == "w1"
    assert list(dict.fromkeys(stages)) == [
        "download",
        "parse",
        "embedding",
        "indexing",
        "finalizing",
    ]
    document = docs.document_record_for(kb, task.document_id)
    assert document.status == "review_pending"
    assert count(kb, "chunks", document_id=task.document_id) >= 1
    pairs_are_legal(kb)


@pytest.mark.parametrize(
    ("name", "content", "code"),
    [
        ("damaged.pdf", b"%PDF-1.4\n garbage", "parse_error"),
        ("fake.docx", b"this is not a zip file", "parse_error"),
        ("empty.txt", b"", "empty_document"),
        ("blank.md", b"   \n\n  \n", "empty_document"),
        ("blank.pdf", make_pdf([""]), "empty_document"),
    ],
)
def test_permanent_failures_fail_at_once_with_their_code(kb, tmp_path, name, content, code):
    [task] = docs.upload_files(kb, [write(tmp_path, name, content)], submit=True)
    [result] = work(kb)
    assert result.task.status == "failed" and result.task.error_code == code
    assert result.task.attempt == 1
    assert "/" not in (result.task.error_detail or "")
    assert docs.document_record_for(kb, task.document_id).status == "failed"
    assert count(kb, "chunks") == 0
    pairs_are_legal(kb)


def test_missing_object_is_an_object_read_error(kb, tmp_path):
    docs.upload_files(kb, [write(tmp_path, "a.txt")], submit=True)
    for key in list(kb.store.keys()):
        kb.store.delete(key)
    [result] = work(kb, max_attempts=1)
    assert result.task.error_code == "object_read_error"
    assert result.task.stage == "download"


def test_task_whose_document_vanished_fails_with_document_not_found(kb, tmp_path):
    [task] = docs.upload_files(kb, [write(tmp_path, "a.txt")], submit=True)
    with kb.db.write() as conn:  # what a person with the sqlite3 shell could do
        conn.execute("DELETE FROM documents WHERE id = :id", {"id": task.document_id})
    [result] = work(kb)
    assert result.task.status == "failed" and result.task.error_code == "document_not_found"


def test_failed_ingestion_can_be_requeued(kb, tmp_path):
    [task] = docs.upload_files(kb, [write(tmp_path, "bad.pdf", b"%PDF-1.4 broken")], submit=True)
    [failed] = work(kb)
    assert failed.task.error_code == "parse_error"
    docs.replace_file(kb, write(tmp_path, "good.pdf", make_pdf(["Fixed text"])), task.document_id)
    assert docs.document_record_for(kb, task.document_id).status == "failed"
    requeued = tasks.retry_task(kb, task.document_id, "documents")  # its latest task
    assert requeued.task_id == task.task_id
    assert (requeued.status, requeued.stage, requeued.completed, requeued.total) == (
        "queued",
        "download",
        0,
        0,
    )
    assert requeued.attempt == 1 and requeued.error_code is None and requeued.worker_id is None
    assert docs.document_record_for(kb, task.document_id).status == "processing"
    [done] = work(kb)
    assert done.task.status == "succeeded" and done.task.attempt == 2
    document = docs.document_record_for(kb, task.document_id)
    assert document.status == "review_pending" and document.revision == 2
    with pytest.raises(ConflictError):
        tasks.retry_task(kb, task.task_id)  # succeeded tasks cannot be retried


def test_retry_all_failed_filters_by_error_code(kb, tmp_path):
    docs.upload_files(
        kb, [write(tmp_path, "a.pdf", b"%PDF broken"), write(tmp_path, "b.txt", b"")], submit=True
    )
    work(kb)
    [parse] = tasks.retry_all_failed(kb, "parse_error")
    assert parse.status == "queued"
    [empty] = tasks.retry_all_failed(kb)
    assert empty.status == "queued"
    assert tasks.retry_all_failed(kb) == []


def test_retry_refuses_a_draft_document_and_a_cancelled_task(kb, tmp_path):
    [task] = docs.upload_files(kb, [write(tmp_path, "a.txt")], submit=True)
    tasks.cancel_task(kb, task.task_id)
    with pytest.raises(ConflictError):
        tasks.retry_task(kb, task.task_id)
    with pytest.raises(ConflictError):
        tasks.retry_task(kb, task.document_id, "documents")


def test_publish_needs_review_pending_and_the_right_version(kb, tmp_path):
    [task] = docs.upload_files(kb, [write(tmp_path, "a.txt")], submit=True)
    with pytest.raises(ConflictError):
        docs.publish_document(kb, task.document_id)  # still processing
    work(kb)
    document = docs.document_record_for(kb, task.document_id)
    with pytest.raises(ConflictError):
        docs.publish_document(kb, task.document_id, if_version=document.version - 1)
    published = docs.publish_document(kb, task.document_id, if_version=document.version)
    assert published.status == "published" and published.published_revision == 1
    assert published.version == document.version + 1
    with pytest.raises(ConflictError):
        docs.publish_document(kb, task.document_id)
    pairs_are_legal(kb)


def test_replace_rules_follow_the_document_status(kb, tmp_path):
    [task] = docs.upload_files(kb, [write(tmp_path, "a.txt")], submit=True)
    with pytest.raises(ConflictError):  # processing
        docs.replace_file(kb, write(tmp_path, "b.txt"), task.document_id)
    work(kb)
    with pytest.raises(ConflictError):  # review_pending
        docs.replace_file(kb, write(tmp_path, "b.txt"), task.document_id)
    docs.publish_document(kb, task.document_id)
    replaced = docs.replace_file(kb, write(tmp_path, "c.txt", "new words"), task.document_id)
    assert replaced.status == "draft" and replaced.revision == 2
    assert replaced.published_revision == 1 and replaced.filename == "c.txt"
    assert replaced.latest_task.status == "succeeded"  # the legal extra pair
    assert len(list(kb.store.keys())) == 1  # the replaced file is gone
    pairs_are_legal(kb)


def test_ids_resolve_by_unique_prefix_only(kb, tmp_path):
    def resolve(ref: str) -> tuple[str, str]:
        with kb.db.read() as conn:
            return resolve_id(conn, kb.scope, ref, "tasks", "documents")

    [doc] = docs.upload_files(kb, [write(tmp_path, "a.txt")])
    assert resolve(doc.document_id[:6]) == ("documents", doc.document_id)
    with pytest.raises(NotFoundError):
        resolve(doc.document_id[:5])
    with pytest.raises(NotFoundError):
        resolve("ffffffff-0000")
    with kb.db.write() as conn:  # force two ids that share a prefix
        conn.execute(
            "UPDATE documents SET id = 'abcdef01-x' WHERE id = :id", {"id": doc.document_id}
        )
    docs.upload_files(kb, [write(tmp_path, "b.txt")])
    with kb.db.write() as conn:
        conn.execute("UPDATE documents SET id = 'abcdef02-y' WHERE id != 'abcdef01-x'")
    with pytest.raises(InvalidInputError):
        resolve("abcdef0")


def test_every_state_change_is_audited(kb, tmp_path):
    [task] = docs.upload_files(kb, [write(tmp_path, "a.txt")], submit=True)
    work(kb)
    docs.publish_document(kb, task.document_id)
    with kb.db.read() as conn:
        actions = [
            row.action for row in conn.execute("SELECT action FROM audit_events ORDER BY id")
        ]
    assert actions == ["upload", "submit", "submit", "claim", "complete", "complete", "publish"]


@sqlite_only
def test_claiming_reads_the_claimable_index_in_order_without_sorting_the_queue(kb):
    with kb.db.read() as conn:
        params = {"now": "2026"}
        sql = "EXPLAIN QUERY PLAN " + queries.next_claimable_sql(None, params)
        plan = " / ".join(row[3] for row in conn.execute(sql, params))
    assert "USING INDEX ix_tasks_claimable" in plan and "TEMP B-TREE" not in plan, plan


@sqlite_only
def test_a_worker_kept_to_a_base_reads_only_its_claimable_tasks_in_order(kb):
    """`kb work --base`: the index of claimable tasks by base, read in claim order, never
    the other bases' queue (a worker of several bases reads each base so)."""
    with kb.db.read() as conn:
        params = {"now": "2026"}
        sql = "EXPLAIN QUERY PLAN " + queries.next_claimable_sql("hr", params)
        plan = " / ".join(row[3] for row in conn.execute(sql, params))
    assert "USING INDEX ix_tasks_claimable_base (base>? AND base<?)" in plan, plan
    assert "TEMP B-TREE" not in plan, plan


def test_status_lists_documents_newest_first_with_their_latest_task_and_filters(kb, tmp_path):
    good = docs.upload_files(kb, [write(tmp_path, "good.txt")], submit=True)[0]
    bad = docs.upload_files(kb, [write(tmp_path, "bad.pdf", b"%PDF-1.4 broken")], submit=True)[0]
    [draft] = docs.upload_files(kb, [write(tmp_path, "draft.txt")])
    work(kb, max_attempts=1)
    listed = docs.list_document_records(kb)
    assert [record.filename for record in listed] == ["draft.txt", "bad.pdf", "good.txt"]
    assert listed[0].latest_task is None
    assert listed[1].latest_task.task_id == bad.task_id
    assert listed[1].latest_task.error_code == "parse_error"
    assert listed[2].latest_task.status == "succeeded" and listed[2].status == "review_pending"
    assert listed[2].to_dict() == docs.document_record_for(kb, good.document_id).to_dict()
    failed = docs.list_document_records(kb, status="failed")
    assert [record.document_id for record in failed] == [bad.document_id]
    by_code = docs.list_document_records(kb, error_code="parse_error")
    assert [record.document_id for record in by_code] == [bad.document_id]
    assert docs.list_document_records(kb, status="draft")[0].document_id == draft.document_id


def test_publish_all_reviewed_publishes_each_on_its_own_and_skips_what_moved_on(kb, tmp_path):
    from kb_cli.services import review

    paths = [write(tmp_path, f"{name}.md", f"# {name}\n\nText about {name}.") for name in "abc"]
    ids = {task.document_id for task in docs.upload_files(kb, paths, submit=True)}
    work(kb)
    publishing = docs.publish_all_reviewed(kb)
    first = next(publishing)
    assert first.status == "published"  # committed already, before the next one starts:
    assert docs.document_record_for(kb, first.document_id).status == "published"
    rejected, last = sorted(ids - {first.document_id})
    review.reject_document(kb, rejected, "rejected meanwhile")
    assert [record.document_id for record in publishing] == [last]
    assert docs.document_record_for(kb, rejected).status == "draft"
