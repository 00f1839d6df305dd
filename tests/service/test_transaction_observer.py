"""The database tells an observer set for the process about every committed transaction,
its kind and how long it held the transaction open (what the benchmarks time write locks
with), and nothing once the observer is unset."""

from __future__ import annotations

import threading
import time

import pytest

from kb_cli.db import Database


def test_an_observer_hears_each_committed_transaction(kb):
    heard: list[tuple[str, float]] = []
    this_test = threading.get_ident()

    def observe(kind: str, seconds: float) -> None:
        # The observer is the process's: a thread an earlier test left to finish (a
        # worker's heartbeat, say) may commit meanwhile.
        if threading.get_ident() == this_test:
            heard.append((kind, seconds))

    Database.on_transaction = observe
    try:
        with kb.db.write() as conn:
            conn.execute("SELECT 1")
            time.sleep(0.05)
        with kb.db.read() as conn:
            conn.execute("SELECT 1")
        with pytest.raises(RuntimeError), kb.db.write():
            raise RuntimeError("rolled back, so not committed")
    finally:
        Database.on_transaction = None
    with kb.db.write() as conn:
        conn.execute("SELECT 1")
    assert [kind for kind, _ in heard] == ["write", "read"]
    assert heard[0][1] >= 0.05, "the time inside the transaction is not in its hold"
