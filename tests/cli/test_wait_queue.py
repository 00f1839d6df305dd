"""`kb status --wait` on a queued task: its place in the queue, and the hint to start a
worker only when no worker holds a live claim (an idle worker polls every second and
would have claimed it)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from kb_cli.app import Kb
from kb_cli.clock import ManualClock
from kb_cli.config import WorkerOptions, resolve_settings
from kb_cli.console import waiting
from kb_cli.worker.claim import Claimant, take


@pytest.fixture(autouse=True)
def _quick_hint(monkeypatch):
    monkeypatch.setattr(waiting, "NO_WORKER_HINT_SECONDS", 0.3)


def submit(invoke, tmp_path, count: int) -> list[str]:
    paths = []
    for i in range(count):
        paths.append(tmp_path / f"doc{i}.md")
        paths[-1].write_text(f"# Doc {i}\n\nwords {i}\n", encoding="utf-8")
    result = invoke("upload", *map(str, paths), "--submit", "--json")
    assert result.code == 0, result.stderr
    return [record["task_id"] for record in result.records]


def claim(task_id: str, worker_id: str, seconds_ago: float = 0) -> None:
    """A real claim, as `kb work` takes it, without running the task."""
    kb = Kb.open(resolve_settings(), actor="tester")
    kb.clock = ManualClock(datetime.now(UTC) - timedelta(seconds=seconds_ago))
    try:
        taken = take(Claimant(kb, WorkerOptions(worker_id=worker_id), threading.Event()), task_id)
    finally:
        kb.db.close()
    assert taken.claim is not None


def waiting_lines(invoke, task_id: str) -> list[str]:
    # Its last look comes at 0.6 s or later, past the 0.3 s of the hint: said by then, or
    # never (one look every 0.2 s before it).
    result = invoke("status", task_id, "--wait", "--timeout", "0.6")
    assert result.code == 7  # still queued
    return [line for line in result.stderr.splitlines() if line.startswith("waiting for task")]


def test_busy_workers_are_named_with_the_place_and_no_hint_to_start_one(invoke, tmp_path):
    first, second, third, fourth = submit(invoke, tmp_path, 4)
    claim(first, "A")
    claim(second, "B")
    assert waiting_lines(invoke, fourth) == [
        f"waiting for task {fourth}: queued: 1 task ahead, 2 workers busy"
    ]
    assert waiting_lines(invoke, third) == [
        f"waiting for task {third}: queued: next in line, 2 workers busy"
    ]


def test_with_nothing_running_the_hint_says_to_start_a_worker(invoke, tmp_path):
    [only] = submit(invoke, tmp_path, 1)
    [hint] = waiting_lines(invoke, only)
    assert "no worker has claimed it" in hint and "kb work --loop" in hint


def test_a_claim_whose_lease_ran_out_is_no_busy_worker_but_a_task_ahead(invoke, tmp_path):
    lost, queued = submit(invoke, tmp_path, 2)
    claim(lost, "gone", seconds_ago=120)  # its 60 s lease ended a minute ago
    place, hint = waiting_lines(invoke, queued)
    assert place.endswith("queued: 1 task ahead, no workers busy")
    assert "kb work --loop" in hint
