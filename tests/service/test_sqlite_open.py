"""Opening a new SQLite database while another process writes it waits, as the busy
timeout promises, instead of failing at once."""

from __future__ import annotations

import sqlite3
import threading
import time

from kb_cli.engines import sqlite as engine


def test_switching_a_new_database_to_wal_waits_for_a_writer(tmp_path):
    path = tmp_path / "kb.db"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("CREATE TABLE first_write (x)")  # still in rollback-journal mode
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO first_write VALUES (1)")
    committer = threading.Timer(0.3, writer.execute, args=("COMMIT",))
    committer.start()
    started = time.monotonic()
    try:
        raw = engine.connect(f"sqlite:///{path}", busy_timeout_seconds=10)
    finally:
        committer.join()
        writer.close()
    waited = time.monotonic() - started
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("SELECT count(*) FROM first_write").fetchone()[0] == 1
    raw.close()
    assert waited >= 0.2, "it opened while the writer still held the database"
