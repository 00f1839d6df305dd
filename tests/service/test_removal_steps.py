"""A delete interrupted after each of its steps (a crash) is never served, never shown,
and `doctor --repair` finishes it: no chunk, task, row or object is left."""

from __future__ import annotations

import dataclasses

import pytest

from kb_cli.ranking import SearchMode
from kb_cli.services import doctor, removal, search
from kb_cli.services import documents as docs
from kb_cli.worker import Worker, WorkerOptions
from tests.helpers import db_rows, object_keys

KESTREL = search.SearchRequest("kestrel", 5, SearchMode.LEXICAL)


@pytest.mark.parametrize("done", range(len(removal.STEPS) + 1))
def test_a_delete_stopped_after_any_step_is_finished_by_repair(kb, tmp_path, kb_home, done):
    kb.settings = dataclasses.replace(kb.settings, chunk_batch=7)
    path = tmp_path / "large.md"
    path.write_text("".join(f"# Part {i}\n\nkestrel fact {i}\n\n" for i in range(60)))
    [task] = docs.upload_files(kb, [path], submit=True)
    list(Worker(kb, WorkerOptions(worker_id="w")).run())
    docs.publish_document(kb, task.document_id)
    assert search.search(kb, KESTREL).hits
    removal.begin(kb, task.document_id)
    for step in removal.STEPS[:done]:
        step(kb, task.document_id)
    assert search.search(kb, KESTREL).hits == []
    assert docs.list_document_records(kb) == []
    report = doctor.check(kb)
    if done < len(removal.STEPS):
        assert [p.kind for p in report.problems] == ["unfinished_delete"]
        assert doctor.check(kb, repair=True).ok
    else:
        assert report.ok
    for table in ("documents", "chunks", "ingestion_tasks"):
        assert db_rows(f"SELECT id FROM {table}") == [], table
    assert object_keys() == []
    assert db_rows("SELECT id FROM deleted_documents") == [{"id": task.document_id}]
