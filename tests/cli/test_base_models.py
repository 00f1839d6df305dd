"""Each base's embedding model: chosen at `kb base create --model`, used by every worker
and by search whatever their KB_EMBEDDINGS says, and switched online by `kb reindex
--base NAME --model NAME` (new vectors built beside the served ones, swapped in one
transaction, resumable). The two models here are the built-in one (`local`) and an
OpenAI-compatible server on loopback (`openai`)."""

from __future__ import annotations

import pytest

from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from kb_cli.services.reindex import switch_model
from tests.helpers import hits, publish

LOCAL = "wordllama-l2_supercat-256"
SERVED = "openai:tiny-embed"  # the loopback server's vectors


@pytest.fixture
def two_models(embedding_server, monkeypatch):
    """The processes' own setting is the built-in model; the server is there for a base
    that names `openai`."""
    monkeypatch.setenv("KB_EMBEDDINGS", "local")
    return embedding_server


def _ingest(invoke, tmp_path, name: str, text: str, base: str = "default") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    task = invoke("upload", str(path), "--base", base, "--submit", "--json").record
    assert invoke("work", "--json").code == 0
    publish(invoke, task["document_id"])
    return task["document_id"]


def _base(invoke, name: str) -> dict:
    [record] = [r for r in invoke("base", "list", "--json").records if r["base"] == name]
    return record


def test_a_base_is_embedded_by_its_own_model_whatever_the_worker_s_setting(
    invoke, tmp_path, two_models
):
    assert invoke("base", "create", "served", "--model", "openai").code == 0
    _ingest(invoke, tmp_path, "served.md", "Backups run nightly in the served region.", "served")
    _ingest(invoke, tmp_path, "local.md", "Backups run weekly in the local region.")
    asked = [text for request in two_models.requests for text in request["body"]["input"]]
    assert any("served region" in text for text in asked)
    assert not any("local region" in text for text in asked)
    by_file = {hit["filename"]: hit for hit in hits(invoke, "When do backups run?")}
    assert by_file["served.md"]["model"] == SERVED
    assert by_file["local.md"]["model"] == LOCAL
    # Each model ranks its own base's chunks: both come first in their ranking.
    assert by_file["served.md"]["vector_rank"] == by_file["local.md"]["vector_rank"] == 1
    assert _base(invoke, "served") | {"documents": 0} == {
        "base": "served",
        "teams": [],
        "grants": [],
        "documents": 0,
        "model": "openai",
        "model_from": "base",
        "switching_to": None,
    }
    assert (_base(invoke, "default")["model"], _base(invoke, "default")["model_from"]) == (
        "local",
        "KB_EMBEDDINGS",
    )


def test_search_narrowed_to_one_base_asks_only_its_model(invoke, tmp_path, two_models):
    assert invoke("base", "create", "served", "--model", "openai").code == 0
    _ingest(invoke, tmp_path, "local.md", "Backups run weekly in the local region.")
    asked_before = len(two_models.requests)
    [hit] = invoke("search", "backups", "--base", "default", "--json").records
    assert hit["model"] == LOCAL and len(two_models.requests) == asked_before
    assert invoke("search", "backups", "--base", "served", "--json").records == []


def test_a_model_that_does_not_exist_is_refused_and_nothing_is_made(invoke):
    refused = invoke("base", "create", "zh", "--model", "gpt-9", "--json")
    assert refused.code == 2 and "unknown model 'gpt-9'" in refused.error["message"]
    assert "zh" not in {record["base"] for record in invoke("base", "list", "--json").records}


def test_a_switch_builds_beside_then_swaps_and_search_follows(invoke, tmp_path, two_models):
    _ingest(invoke, tmp_path, "a.md", "Backups run nightly in the primary region.")
    assert hits(invoke, "When do backups run?")[0]["model"] == LOCAL
    switched = invoke("reindex", "--base", "default", "--model", "openai", "--json").record
    assert switched == {
        "base": "default",
        "model_from": "local",
        "model": "openai",
        "embedded": 1,
        "switched": 1,
        "notes": switched["notes"],
    }
    [hit] = hits(invoke, "When do backups run?")
    assert (hit["model"], hit["vector_rank"]) == (SERVED, 1)
    assert (_base(invoke, "default")["model"], _base(invoke, "default")["model_from"]) == (
        "openai",
        "base",
    )
    again = invoke("reindex", "--base", "default", "--model", "openai", "--json")
    assert again.code == 4 and "already uses the model openai" in again.error["message"]
    # A worker whose own setting is the built-in model embeds the base's new documents
    # with the base's model.
    _ingest(invoke, tmp_path, "b.md", "Restores are tested every quarter.")
    assert {hit["model"] for hit in hits(invoke, "restores tested")} == {SERVED}
    trail = [e["action"] for e in invoke("history", "base:default", "--json").records]
    assert {"model_switch", "model_switched"} <= set(trail)


def test_a_stopped_switch_serves_the_old_vectors_and_resumes_with_what_came_since(
    invoke, tmp_path, two_models
):
    two_models_text = "\n\n".join(f"Section {i}. " + "backups restore data " * 60 for i in range(4))
    _ingest(invoke, tmp_path, "long.md", two_models_text)
    kb = Kb.open(resolve_settings(), actor="tester")

    class Stop(Exception):
        pass

    def stop_after_the_first_batch(done: int, total: int) -> None:
        if done > 0:
            raise Stop

    with pytest.raises(Stop):
        switch_model(kb, "default", "openai", stop_after_the_first_batch)
    assert _base(invoke, "default")["switching_to"] == "openai"
    assert {hit["model"] for hit in hits(invoke, "backups restore")} == {LOCAL}
    # A document processed meanwhile is embedded by the base's model of the moment...
    _ingest(invoke, tmp_path, "new.md", "Restores are tested every quarter.")
    assert hits(invoke, "restores tested every quarter")[0]["model"] == LOCAL
    # ... and the switch, run again, builds only what it lacks, that one included.
    resumed = invoke("reindex", "--base", "default", "--model", "openai", "--json").record
    chunks = resumed["switched"]
    assert 0 < resumed["embedded"] < chunks
    assert {hit["model"] for hit in hits(invoke, "backups restore quarter")} == {SERVED}
    assert _base(invoke, "default")["switching_to"] is None


def test_a_switch_to_none_drops_the_base_s_vectors_in_one_step(invoke, tmp_path, two_models):
    _ingest(invoke, tmp_path, "a.md", "Backups run nightly in the primary region.")
    switched = invoke("reindex", "--base", "default", "--model", "none", "--json").record
    assert (switched["switched"], switched["embedded"]) == (1, 0)
    [hit] = hits(invoke, "backups")
    assert (hit["model"], hit["vector_rank"]) == (None, None)
    refused = invoke("search", "backups", "--mode", "vector", "--json")
    assert refused.code == 2 and "off for the bases searched" in refused.error["message"]


@pytest.mark.parametrize(
    "args",
    [
        ["--base", "default"],
        ["--model", "openai"],
        ["--base", "default", "--model", "openai", "--embeddings"],
        ["--base", "default", "--model", "gpt-9"],
    ],
)
def test_a_switch_asked_wrongly_is_a_usage_error_and_changes_nothing(invoke, args, two_models):
    result = invoke("reindex", *args, "--json")
    assert result.code == 2, result.stderr
    assert _base(invoke, "default")["switching_to"] is None


def test_a_switch_of_a_base_that_does_not_exist_names_base_create(invoke, two_models):
    result = invoke("reindex", "--base", "nowhere", "--model", "openai", "--json")
    assert result.code == 3 and "kb base create nowhere" in result.error["message"]


def test_a_switch_is_for_admins(invoke, two_models):
    admin = invoke("user", "add", "root", "--role", "admin", "--json").record["token"]
    editor = invoke("user", "add", "e", "--role", "editor", "--json", token=admin).record["token"]
    args = ("reindex", "--base", "default", "--model", "none", "--json")
    assert invoke(*args, token=editor).code == 5
    assert invoke(*args, token=admin).code == 0


def test_doctor_names_the_models_a_stopped_switch_and_vectors_of_another_model(
    invoke, tmp_path, two_models
):
    assert "notes" not in invoke("doctor", "--json").record  # every base follows the setting
    assert invoke("base", "create", "served", "--model", "openai").code == 0
    document = _ingest(invoke, tmp_path, "a.md", "Backups run nightly in the primary region.")
    kb = Kb.open(resolve_settings(), actor="tester")
    with pytest.raises(RuntimeError):
        switch_model(kb, "default", "openai", _stop_at_once)
    assert invoke("base", "move", document, "served").code == 0
    report = invoke("doctor", "--json")
    assert report.code == 4
    assert report.record["notes"][-1] == (
        "embedding models by base: default=local (KB_EMBEDDINGS), served=openai"
    )
    problems = {(p["kind"], p["id"]): p["detail"] for p in report.record["problems"]}
    assert (
        "kb reindex --base default --model openai"
        in problems[("unfinished_model_switch", "default")]
    )
    assert "1 published chunks" in problems[("vectors_of_another_model", "served")]
    assert invoke("reindex", "--embeddings").code == 0  # the moved chunks get the base's model
    assert invoke("reindex", "--base", "default", "--model", "openai").code == 0
    assert invoke("doctor", "--json").code == 0


def _stop_at_once(done: int, total: int) -> None:
    raise RuntimeError("stopped")


def test_a_question_in_the_other_language_names_the_switch_to_a_model_that_reads_both(
    invoke, tmp_path, monkeypatch
):
    from kb_cli.services.search import SearchRequest, search

    monkeypatch.setenv("KB_EMBEDDINGS", "local")
    assert invoke("base", "create", "both", "--model", "multilingual").code == 0
    _ingest(invoke, tmp_path, "backups.md", "Backups run nightly in the primary region.")
    _ingest(invoke, tmp_path, "restores.md", "Restores are tested every quarter.", "both")
    kb = Kb.open(resolve_settings(), actor="tester")
    asked_in_chinese = search(kb, SearchRequest("备份什么时候运行？"))
    [hint] = asked_in_chinese.hints  # the base of the built-in model, not the other
    assert hint.startswith("the question is in Chinese and base default is mostly English")
    assert "kb reindex --base default --model multilingual" in hint
    assert search(kb, SearchRequest("备份什么时候运行？", base="both")).hints == []
    assert search(kb, SearchRequest("When do backups run?")).hints == []


def test_eval_reports_each_language_pair_and_the_model_of_each_base(invoke, tmp_path, monkeypatch):
    monkeypatch.setenv("KB_EMBEDDINGS", "local")
    assert invoke("base", "create", "both", "--model", "multilingual").code == 0
    _ingest(invoke, tmp_path, "backups.md", "Backups run nightly in the primary region.")
    _ingest(invoke, tmp_path, "restores.md", "恢复演练每个季度进行一次，由运维团队负责。", "both")
    questions = tmp_path / "questions.jsonl"
    questions.write_text(
        '{"question": "When do backups run?", "expected": ["backups.md"]}\n'
        '{"question": "How often are restores rehearsed?", "expected": ["restores.md"]}\n'
        '{"question": "恢复演练多久一次？", "expected": ["restores.md"]}\n',
        encoding="utf-8",
    )
    result = invoke("eval", str(questions), "--json")
    assert result.code == 0, result.stderr
    *asked, summary = result.records
    assert [record["language"] for record in asked] == ["latin", "latin>cjk", "cjk"]
    assert sorted(summary["by_language"]) == ["cjk", "latin", "latin>cjk"]
    assert summary["by_language"]["latin"]["questions"] == 1
    assert summary["models"] == {"both": "use-multilingual-v3-512", "default": LOCAL}
    plain = invoke("eval", str(questions)).stdout.splitlines()
    assert plain[-2].startswith("by language: cjk (1 question) hit@3 ")
    assert plain[-1] == f"models: both=use-multilingual-v3-512, default={LOCAL}"


def test_one_text_in_two_bases_of_two_models_adds_both_rankings(invoke, tmp_path, two_models):
    assert invoke("base", "create", "served", "--model", "openai").code == 0
    text = "Backups run nightly in the primary region."
    _ingest(invoke, tmp_path, "here.md", text)
    (tmp_path / "copy").mkdir()
    _ingest(invoke, tmp_path / "copy", "there.md", text, "served")
    [hit] = invoke("search", "When do backups run?", "--mode", "vector", "--json").records
    assert hit["also_in"] and hit["vector_rank"] == 1
    # Each model's ranking adds its share: twice what one ranking gives its first.
    assert hit["score"] == pytest.approx(2 / 61, abs=1e-6)


def test_a_switch_to_another_model_begun_meanwhile_stops_the_first_one_s_writes(
    invoke, tmp_path, two_models
):
    from kb_cli import queries
    from kb_cli.records import ChunkVector

    _ingest(invoke, tmp_path, "a.md", "Backups run nightly in the primary region.")
    kb = Kb.open(resolve_settings(), actor="tester")
    with pytest.raises(RuntimeError):
        switch_model(kb, "default", "openai", _stop_at_once)
    switched = invoke("reindex", "--base", "default", "--model", "none", "--json").record
    assert switched["model"] == "none"
    with kb.db.write() as conn:  # a late batch of the first switch
        chunk = conn.execute("SELECT id FROM chunks").scalar()
        late = ChunkVector(chunk, b"\0\0" * 3, SERVED, 3)
        assert queries.insert_built_vectors(conn, "default", [late]) == 0
        assert conn.execute("SELECT count(*) FROM vector_builds").scalar() == 0


def test_a_document_moved_out_during_a_switch_keeps_its_vectors(invoke, tmp_path, two_models):
    assert invoke("base", "create", "other", "--model", "local").code == 0
    staying = _ingest(invoke, tmp_path, "a.md", "Backups run nightly in the primary region.")
    leaving = _ingest(invoke, tmp_path, "b.md", "Restores are tested every quarter.")
    kb = Kb.open(resolve_settings(), actor="tester")
    with pytest.raises(RuntimeError):
        switch_model(kb, "default", "openai", _stop_after_all_built)
    assert invoke("base", "move", leaving, "other").code == 0
    resumed = invoke("reindex", "--base", "default", "--model", "openai", "--json").record
    assert resumed["switched"] == 1  # the chunk of the document that stayed
    by_file = {h["filename"]: h for h in hits(invoke, "restores tested quarter")}
    assert (by_file["b.md"]["model"], by_file["b.md"]["vector_rank"]) == (LOCAL, 1)
    assert staying and invoke("doctor", "--json").code == 0


def _stop_after_all_built(done: int, total: int) -> None:
    if done == total and total:
        raise RuntimeError("stopped")


def test_the_model_a_base_has_abandons_a_switch_or_pins_a_followed_one(
    invoke, tmp_path, two_models
):
    _ingest(invoke, tmp_path, "a.md", "Backups run nightly in the primary region.")
    kb = Kb.open(resolve_settings(), actor="tester")
    with pytest.raises(RuntimeError):
        switch_model(kb, "default", "openai", _stop_after_all_built)
    kept = invoke("reindex", "--base", "default", "--model", "local", "--json").record
    assert (kept["model"], kept["embedded"], kept["switched"]) == ("local", 0, 0)
    base = _base(invoke, "default")
    assert (base["model"], base["model_from"], base["switching_to"]) == ("local", "base", None)
    assert {h["model"] for h in hits(invoke, "backups")} == {LOCAL}
    assert invoke("reindex", "--base", "default", "--model", "local").code == 4


def test_a_model_this_process_cannot_build_is_refused_at_create_and_skipped_by_search(
    invoke, tmp_path, two_models, monkeypatch
):
    assert invoke("base", "create", "served", "--model", "openai").code == 0
    _ingest(invoke, tmp_path, "a.md", "Backups run nightly in the primary region.", "served")
    monkeypatch.delenv("KB_EMBEDDING_URL")
    refused = invoke("base", "create", "more", "--model", "openai", "--json")
    assert refused.code == 2 and "KB_EMBEDDING_URL" in refused.error["message"]
    searched = invoke("search", "backups", "--json")
    assert searched.code == 0
    [hit] = searched.records
    assert (hit["lexical_rank"], hit["model"]) == (1, None)
    assert "base served searched by words only" in searched.stderr
