"""Two hosts for real: two homes that share only the PostgreSQL database and the S3
bucket prefix, each with its own `kb work --loop`; one is killed (-9) in the middle of a
task, the other takes that task over when its lease runs out, and every document ends
`review_pending` with exactly one set of chunks."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.helpers import ON_POSTGRES, db_rows, kb_env, run_kb, start_kb, wait_until
from tests.loopback import s3_store_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not ON_POSTGRES, reason="two hosts share a PostgreSQL database"),
]
DOCUMENTS = 6


def host_env(tmp_path: Path, name: str, store: dict[str, str]) -> dict[str, str]:
    """A host of its own: its own home (and no shared directory), the shared database
    (the test's) and the shared bucket prefix."""
    return kb_env(KB_HOME=str(tmp_path / name), KB_EMBEDDINGS="none", **store)


def worker(env: dict[str, str], name: str):
    return start_kb(
        "work", "--loop", "--worker-id", name, "--lease-seconds", "2", "--stage-delay", "0.1",
        env=env,
    )  # fmt: skip


def running_on(name: str) -> list[dict]:
    return db_rows(
        "SELECT id, stage FROM ingestion_tasks WHERE status = 'running' AND worker_id = :w",
        w=name,
    )


def test_two_hosts_share_one_database_and_one_bucket(tmp_path, s3_endpoint):
    store = s3_store_env(s3_endpoint)
    host_a, host_b = host_env(tmp_path, "host-a", store), host_env(tmp_path, "host-b", store)
    for i in range(DOCUMENTS):
        path = tmp_path / f"doc{i}.txt"
        path.write_text(
            "\n\n".join(f"Section {j} of report {i}. " + "heron " * 80 for j in range(6))
        )
        uploaded = run_kb("upload", str(path), "--submit", "--json", env=(host_a, host_b)[i % 2])
        assert uploaded.code == 0, uploaded.stderr
    victim = worker(host_a, "host-a")
    [taken] = wait_until(
        lambda: [row for row in running_on("host-a") if row["stage"] != "download"],
        message="host-a never got past a download",
    )
    rescuer = worker(host_b, "host-b")
    victim.send_signal(signal.SIGKILL)  # mid-task: its claim is left running
    victim.communicate(timeout=10)

    def all_in_review() -> bool:
        rows = db_rows("SELECT status FROM documents")
        return [row["status"] for row in rows] == ["review_pending"] * DOCUMENTS

    wait_until(all_in_review, timeout=120, interval=0.2, message="not every document ended")
    rescuer.send_signal(signal.SIGTERM)
    _out, log = rescuer.communicate(timeout=30)
    assert f"reclaimed task={taken['id']} from=host-a worker=host-b" in log
    sets = db_rows(
        "SELECT document_id, COUNT(*) AS chunks, COUNT(DISTINCT chunk_index) AS indexes, "
        "COUNT(DISTINCT task_id) AS tasks FROM chunks GROUP BY document_id"
    )
    assert len(sets) == DOCUMENTS
    for row in sets:
        assert row["chunks"] == row["indexes"] > 0 and row["tasks"] == 1, row
    assert not (tmp_path / "host-a" / "objects").exists()  # the objects are in the bucket
    for env in (host_a, host_b):  # both see the same, complete store: no orphan, none missing
        checked = run_kb("doctor", "--json", env=env)
        assert checked.code == 0, checked.stdout
