"""Schema migrations: a database made by the first revision is upgraded, a newer one refused."""

from __future__ import annotations

import pytest

from kb_cli import migrations
from kb_cli.config import resolve_settings
from kb_cli.db import Database
from tests.helpers import ON_POSTGRES, db_rows, first_revision_database, run_in_process

pytestmark = pytest.mark.empty_database


def test_a_first_revision_database_is_upgraded():
    database = first_revision_database()
    with database.read() as conn:
        assert database.schema_version(conn) == "0001"
    if ON_POSTGRES:  # shared servers are upgraded on purpose, never as a side effect
        refused = run_in_process("search", "wombat", "--json")
        assert refused.code == 1 and "kb db upgrade" in refused.error["message"]
        upgraded = run_in_process("db", "upgrade", "--json")
        assert upgraded.code == 0
        assert upgraded.record == {"from_revision": "0001", "to_revision": migrations.HEAD}
    hits = run_in_process("search", "wombat", "--json")
    assert hits.code == 0, hits.stderr
    assert [hit["filename"] for hit in hits.records] == ["old.txt"]  # indexed on upgrade
    assert hits.records[0]["content_type"] == "text/plain"
    # Each document's newest revision gets the row naming its file (0011).
    files = db_rows("SELECT revision, filename, content_type FROM document_revisions")
    assert files == [{"revision": 1, "filename": "old.txt", "content_type": "text/plain"}]
    if not ON_POSTGRES:  # each revision's run of chunk ids, chunks and words (0016)
        runs = db_rows("SELECT first_id, last_id, chunks, words FROM chunk_runs")
        counted = db_rows(
            "SELECT min(id) AS first_id, max(id) AS last_id, count(*) AS chunks, "
            "sum(term_count) AS words FROM chunks"
        )
        assert runs == counted and runs[0]["words"] > 0
    with database.read() as conn:
        assert database.schema_version(conn) == migrations.HEAD
    again = run_in_process("db", "upgrade", "--json")
    assert again.record == {"from_revision": migrations.HEAD, "to_revision": migrations.HEAD}


def test_a_newer_schema_is_refused_with_a_clear_error():
    assert run_in_process("db", "upgrade").code == 0
    settings = resolve_settings()
    database = Database(settings.database_url, settings.busy_timeout_seconds)
    with database.write() as conn:
        conn.execute("UPDATE kb_schema_version SET version_num = '9999'")
    result = run_in_process("status", "--json")
    assert result.code == 1
    assert "newer than this kb knows" in result.error["message"]
    assert "Traceback" not in result.stderr


def test_old_queued_events_of_deleted_documents_keep_their_base():
    """Before lifecycle events (0010), a submit wrote `ingestion_task.queued` naming the
    task; once its document was deleted the task is gone, and the event's document and
    base come from its payload and the document's tombstone."""
    from sqlalchemy import text

    from kb_cli.config import resolve_settings

    settings = resolve_settings()
    settings.home.mkdir(parents=True, exist_ok=True)
    database = Database(settings.database_url, settings.busy_timeout_seconds)
    engine = database.engine.sqlalchemy_engine(settings.database_url, 5.0)
    document, task, now = "d" * 8 + "-0000-0000-0000-000000000002", "t" * 36, "2026-01-01T00:00:00Z"
    with engine.begin() as conn:
        migrations.upgrade(conn, "0009_stage_artefacts")
        conn.execute(
            text(
                "INSERT INTO deleted_documents VALUES "
                "(:id, 'finance', 'gone.txt', '[]', :now, 'alice')"
            ),
            {"id": document, "now": now},
        )
        conn.execute(
            text(
                "INSERT INTO outbox_events (topic, entity_id, payload, created_at) "
                "VALUES ('ingestion_task.queued', :task, :payload, :now)"
            ),
            {"task": task, "now": now, "payload": f'{{"document_id": "{document}"}}'},
        )
        migrations.upgrade(conn)
        [row] = conn.execute(text("SELECT topic, document_id, base FROM outbox_events")).all()
    engine.dispose()
    assert tuple(row) == ("task.queued", document, "finance")


def test_a_task_queued_before_0017_carries_its_document_s_base_and_no_settings():
    """0017: each task gets its document's base (a worker kept to that base claims it,
    through the index of claimable tasks by base) and no settings (NULL: the worker's
    own, as before); a task whose document row is gone gets no base."""
    from sqlalchemy import text

    from kb_cli import queries

    settings = resolve_settings()
    settings.home.mkdir(parents=True, exist_ok=True)
    database = Database(settings.database_url, settings.busy_timeout_seconds)
    engine = database.engine.sqlalchemy_engine(settings.database_url, 5.0)
    now = "2026-01-01T00:00:00.000000Z"
    with engine.begin() as conn:
        migrations.upgrade(conn, "0016_chunk_runs")
        conn.execute(text("INSERT INTO bases (name, created_at) VALUES ('hr', :now)"), {"now": now})
        conn.execute(
            text(
                "INSERT INTO documents (id, filename, content_type, size_bytes, sha256, "
                "object_key, status, version, revision, latest_task_id, created_at, "
                "updated_at, base) VALUES ('d1', 'leave.md', 'text/markdown', 5, :sha, 'k', "
                "'processing', 2, 1, 't1', :now, :now, 'hr')"
            ),
            {"sha": "0" * 64, "now": now},
        )
        for task, document in [("t1", "d1"), ("t2", "gone")]:
            conn.execute(
                text(
                    "INSERT INTO ingestion_tasks (id, document_id, revision, status, stage, "
                    "completed, total, attempt, created_at, updated_at) VALUES (:task, "
                    ":document, 1, 'queued', 'download', 0, 0, 0, :now, :now)"
                ),
                {"task": task, "document": document, "now": now},
            )
        migrations.upgrade(conn)
    engine.dispose()
    rows = db_rows("SELECT id, base, settings FROM ingestion_tasks ORDER BY id")
    assert rows == [
        {"id": "t1", "base": "hr", "settings": None},
        {"id": "t2", "base": None, "settings": None},
    ]
    with database.read() as conn:
        assert queries.next_claimable_task(conn, now, ("hr",)).id == "t1"
        assert queries.next_claimable_task(conn, now, ("default",)) is None
    database.close()
