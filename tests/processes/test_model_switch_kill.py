"""kill -9 of `kb reindex --base NAME --model M` while it builds the new vectors: the
base keeps its model and search its vectors; run again, the switch builds only what it
lacks and swaps. On both engines."""

from __future__ import annotations

import os
import signal

import pytest

from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from tests.helpers import hits, kb_env, start_kb, wait_until

pytestmark = pytest.mark.slow

LOCAL = "wordllama-l2_supercat-256"
SERVED = "openai:tiny-embed"


def _built(kb: Kb) -> int:
    with kb.db.read() as conn:
        return int(conn.execute("SELECT count(*) FROM vector_builds").scalar())


def test_a_switch_killed_midway_keeps_serving_and_resumes(
    invoke, tmp_path, embedding_server, monkeypatch
):
    monkeypatch.setenv("KB_EMBEDDINGS", "local")
    for n in range(6):
        (tmp_path / f"note-{n}.md").write_text(
            "\n\n".join(f"Part {n}.{i}: backups restore data " * 40 for i in range(3)),
            encoding="utf-8",
        )
    uploaded = invoke("upload", *(str(p) for p in sorted(tmp_path.glob("*.md"))), "--submit")
    assert uploaded.code == 0, uploaded.stderr
    assert invoke("work", "--drain").code == 0
    assert invoke("publish", "--all-reviewed").code == 0
    embedding_server.delay = 0.2  # a slow provider: the switch is caught midway
    kb = Kb.open(resolve_settings(), create=False)
    process = start_kb("reindex", "--base", "default", "--model", "openai", env=kb_env())
    try:
        wait_until(lambda: _built(kb) >= 4, timeout=60, message="no vector built")
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
    built = _built(kb)
    [base] = [b for b in invoke("base", "list", "--json").records if b["base"] == "default"]
    assert (base["model"], base["switching_to"]) == ("local", "openai")
    assert {hit["model"] for hit in hits(invoke, "backups restore")} == {LOCAL}
    embedding_server.delay = 0.0
    resumed = invoke("reindex", "--base", "default", "--model", "openai", "--json").record
    assert resumed["embedded"] == resumed["switched"] - built
    assert {hit["model"] for hit in hits(invoke, "backups restore")} == {SERVED}
    assert _built(kb) == 0  # the built vectors are dropped once swapped in


def test_a_task_that_embedded_before_a_switch_swapped_in_is_embedded_again(
    invoke, tmp_path, embedding_server, monkeypatch
):
    monkeypatch.setenv("KB_EMBEDDINGS", "local")
    (tmp_path / "a.md").write_text("Backups run nightly in the primary region.", "utf-8")
    task = invoke("upload", str(tmp_path / "a.md"), "--submit", "--json").record
    worker = start_kb("work", "--stage-delay", "1", env=kb_env(), stdout=None, stderr=None)
    try:
        wait_until(
            lambda: invoke("status", task["task_id"], "--json").record["stage"] == "indexing",
            timeout=60,
        )
        assert invoke("reindex", "--base", "default", "--model", "openai").code == 0
    finally:
        assert worker.wait(60) == 0
    trail = invoke("history", task["task_id"], "--json").records
    assert any("embedding model changed to openai:tiny-embed" in (e["detail"] or "") for e in trail)
    assert invoke("work", "--json").code == 0  # the released task, embedded again
    assert invoke("publish", task["document_id"]).code == 0
    assert [hit["model"] for hit in hits(invoke, "backups")] == [SERVED]


def test_a_switch_stopped_with_ctrl_c_says_how_to_resume(
    invoke, tmp_path, embedding_server, monkeypatch
):
    monkeypatch.setenv("KB_EMBEDDINGS", "local")
    (tmp_path / "a.md").write_text("\n\n".join(f"Part {i}: backups " * 40 for i in range(6)))
    assert invoke("upload", str(tmp_path / "a.md"), "--submit").code == 0
    assert invoke("work").code == 0
    embedding_server.delay = 0.3
    kb = Kb.open(resolve_settings(), create=False)
    process = start_kb("reindex", "--base", "default", "--model", "openai", env=kb_env())
    wait_until(lambda: _built(kb) >= 2, timeout=60, message="no vector built")
    process.send_signal(signal.SIGINT)
    _out, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert "kb reindex --base default --model openai resumes it" in err
