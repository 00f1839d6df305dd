"""Schema migrations: a database made by the first revision is upgraded, a newer one refused."""

from __future__ import annotations

from sqlalchemy import text

from kb_cli import migrations
from kb_cli.config import resolve_settings
from kb_cli.db import Database
from tests.conftest import ON_POSTGRES, run_kb

NOW = "2026-01-01T00:00:00.000000Z"


def first_revision_database() -> Database:
    """A database as the first schema revision left it, with one published document."""
    settings = resolve_settings()
    settings.home.mkdir(parents=True, exist_ok=True)
    database = Database(settings.database_url, settings.busy_timeout_seconds)
    engine = database.engine.sqlalchemy_engine(settings.database_url, 5.0)
    with engine.begin() as conn:  # Alembic runs on SQLAlchemy, as `Database.upgrade` does
        migrations.upgrade(conn, "0001")
        conn.execute(
            text(
                "INSERT INTO documents VALUES ('d0000000-0000-0000-0000-000000000001', 'old.txt', "
                "'text/plain', 5, :sha, 'k', 'published', 4, 1, 1, NULL, :now, :now)"
            ),
            {"sha": "0" * 64, "now": NOW},
        )
        conn.execute(
            text(
                "INSERT INTO chunks (document_id, revision, chunk_index, task_id, text) VALUES "
                "('d0000000-0000-0000-0000-000000000001', 1, 0, 't', 'legacy wombat notes')"
            )
        )
    engine.dispose()
    return database


def test_a_first_revision_database_is_upgraded():
    database = first_revision_database()
    with database.read() as conn:
        assert database.schema_version(conn) == "0001"
    if ON_POSTGRES:  # shared servers are upgraded on purpose, never as a side effect
        refused = run_kb("search", "wombat", "--json")
        assert refused.code == 1 and "kb db upgrade" in refused.error["message"]
        upgraded = run_kb("db", "upgrade", "--json")
        assert upgraded.code == 0
        assert upgraded.record == {"from_revision": "0001", "to_revision": migrations.HEAD}
    hits = run_kb("search", "wombat", "--json")
    assert hits.code == 0, hits.stderr
    assert [hit["filename"] for hit in hits.records] == ["old.txt"]  # indexed on upgrade
    with database.read() as conn:
        assert database.schema_version(conn) == migrations.HEAD
    again = run_kb("db", "upgrade", "--json")
    assert again.record == {"from_revision": migrations.HEAD, "to_revision": migrations.HEAD}


def test_a_newer_schema_is_refused_with_a_clear_error():
    assert run_kb("db", "upgrade").code == 0
    settings = resolve_settings()
    database = Database(settings.database_url, settings.busy_timeout_seconds)
    with database.write() as conn:
        conn.execute("UPDATE kb_schema_version SET version_num = '9999'")
    result = run_kb("status", "--json")
    assert result.code == 1
    assert "newer than this kb knows" in result.error["message"]
    assert "Traceback" not in result.stderr
