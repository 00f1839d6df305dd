"""Commands racing as real processes: exactly one winner, the loser refused cleanly."""

from __future__ import annotations

import json

import pytest

from tests.helpers import ingest, kb_env, start_kb


def test_two_concurrent_publishes_with_the_same_version_one_wins(invoke, tmp_path):
    task = ingest(invoke, tmp_path, "a.txt", "Reviewed text.")
    version = invoke("status", task["document_id"], "--json").record["version"]
    racers = [
        start_kb(
            "publish", task["document_id"], "--if-version", str(version), "--json", env=kb_env()
        )
        for _ in range(2)
    ]
    codes = sorted(racer.wait(timeout=60) for racer in racers)
    assert codes == [0, 4]
    loser = next(racer for racer in racers if racer.returncode == 4)
    assert json.loads(loser.stderr.read().strip().splitlines()[-1])["error"] == "conflict"
    final = invoke("status", task["document_id"], "--json").record
    assert final["status"] == "published" and final["version"] == version + 1


@pytest.mark.slow
def test_two_first_admins_racing_make_exactly_one(tmp_path, kb_home):
    for round_ in range(10):
        home = tmp_path / f"home{round_}"
        env = kb_env(KB_HOME=str(home))
        if "DATABASE_URL" in env:  # PostgreSQL: a database per round is too slow
            pytest.skip("the race runs on fresh SQLite homes")
        # No preparation: both racers find a new home and create the schema too.
        racers = [
            start_kb("user", "add", name, "--role", "admin", "--json", env=env)
            for name in ("x", "y")
        ]
        outcomes = sorted(finish(racer) for racer in racers)
        codes = [code for code, _ in outcomes]
        assert codes == [0, 5], f"round {round_}: exit codes {codes}: {outcomes}"


def finish(process) -> tuple[int, str]:
    """(exit code, stderr) of a started kb."""
    _, stderr = process.communicate(timeout=60)
    return process.returncode, stderr
