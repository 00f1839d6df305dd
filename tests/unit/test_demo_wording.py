"""The demo's summary says who claimed a task without repeating a name."""

from __future__ import annotations

from kb_cli.console.demo import claims


def test_claims_name_each_worker_once_per_change():
    assert claims(["worker-A"]) == "claimed by worker-A"
    assert claims(["worker-A", "worker-A"]) == "claimed by worker-A twice"
    assert claims(["worker-B"] * 3) == "claimed by worker-B 3 times"
    assert claims(["worker-A", "worker-B"]) == "claimed by worker-A, then worker-B"
