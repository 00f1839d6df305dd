"""Search that answers questions through the CLI: hybrid ranking on the sample knowledge
base, kb eval, providers on a loopback server. The pure pieces are in tests/unit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import SAMPLES, hits, ingest, publish

# --- search through the CLI ----------------------------------------------------------


def _corpus(invoke, root):
    """The sample knowledge base: every document published, the travel policy replaced
    by a new published revision, and a pricing draft processed but never published."""
    files = sorted((SAMPLES / "knowledge").glob("*.md"))
    tasks = invoke("upload", *map(str, files), "--submit", "--json").records
    assert invoke("work", "--drain", "--json").code == 0
    ids = {path.name: task["document_id"] for path, task in zip(files, tasks, strict=True)}
    for document_id in ids.values():
        publish(invoke, document_id)
    updates = SAMPLES / "knowledge-updates"
    replaced = invoke(
        "upload", str(updates / "travel-policy.md"), "--replace", ids["travel-policy.md"], "--json"
    )
    assert replaced.code == 0, replaced.stderr
    assert invoke("submit", ids["travel-policy.md"], "--json").code == 0
    draft = invoke("upload", str(updates / "pricing-draft-2027.md"), "--submit", "--json").record
    assert invoke("work", "--drain", "--json").code == 0
    publish(invoke, ids["travel-policy.md"])
    ids["pricing-draft-2027.md"] = draft["document_id"]
    return ids


@pytest.fixture(scope="module")
def corpus_home(build_home):
    return build_home(_corpus)


@pytest.fixture
def corpus(enter_home, corpus_home):
    """The sample knowledge base (`_corpus`), which these tests only read."""
    return enter_home(corpus_home)


def test_eval_on_the_shipped_question_set(invoke, corpus):
    result = invoke(
        "eval", str(SAMPLES / "knowledge" / "questions.jsonl"), "--min-hit-rate", "0.9", "--json"
    )
    assert result.code == 0, result.stderr
    *questions, summary = result.records
    assert set(summary) == {
        "questions",
        "k",
        "hit_at_1",
        "hit_at_k",
        "recall_at_k",
        "mrr",
        "forbidden_leaks",
        "passage_questions",
        "passage_hit_at_1",
        "passage_hit_at_k",
        "passage_mrr",
        "by_language",
        "models",
    }
    assert summary["k"] == 3 and summary["forbidden_leaks"] == 0
    assert summary["questions"] == len(questions) >= 30
    for record in questions:
        assert set(record) == {
            "question",
            "expected",
            "first_expected_rank",
            "hit",
            "forbidden_returned",
            "language",
        }
    by_language = summary["by_language"]
    assert sum(rates["questions"] for rates in by_language.values()) == summary["questions"]
    assert set(by_language) <= {"latin", "cjk", "latin>cjk", "cjk>latin"}
    for language in ("en", "zh"):
        asked = [q for q in questions if q["question"].isascii() == (language == "en")]
        rate = sum(q["hit"] for q in asked) / len(asked)
        assert len(asked) >= 10 and rate >= 0.9, (language, rate)
    # The superseded revision is never served; its successor answers instead.
    assert hits(invoke, '"Quillfeather"') == []
    found = hits(invoke, "How many days do I have to submit expense claims after a trip?")
    assert found[0]["filename"] == "travel-policy.md" and found[0]["revision"] == 2
    assert "30 days" in " ".join(hit["text"] for hit in found if hit["revision"] == 2)


def test_eval_exits_4_below_the_hit_rate_or_on_a_leak(invoke, corpus, tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        json.dumps(
            {"question": "What discount do enterprise customers get?", "expected": ["vpn-setup.md"]}
        )
        + "\n"
    )
    low = invoke("eval", str(questions), "--min-hit-rate", "0.5", "--json")
    assert low.code == 4 and low.error["error"] == "conflict"
    assert low.records[-1]["hit_at_k"] == 0.0  # the records are still printed
    leak = tmp_path / "leak.jsonl"
    published = next(iter(corpus))
    leak.write_text(
        json.dumps(
            {
                "question": "How do I connect to the VPN?",
                "expected": ["vpn-setup.md"],
                "forbidden": ["vpn-setup.md", published],
            }
        )
        + "\n"
    )
    assert invoke("eval", str(leak), "--json").code == 4
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "no expected"}\n')
    assert invoke("eval", str(bad), "--json").error["message"].startswith("line 1 of")


def test_eval_scores_passages_that_hold_an_answer_and_gates_on_them(invoke, corpus, tmp_path):
    questions = tmp_path / "passages.jsonl"
    lines = [
        {
            "question": "出差回来后最迟多久要提交报销？",
            "expected": ["travel-expense-zh.md"],
            "answer": "15  个工作日内",  # whitespace runs count as one space
        },
        {
            "question": "出差回来后最迟多久要提交报销？",
            "expected": ["travel-expense-zh.md"],
            "answer": ["no page says this", "NOR THIS"],
        },
        {"question": "How do I connect to the VPN?", "expected": ["vpn-setup.md"]},
    ]
    questions.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    result = invoke("eval", str(questions), "--json", "--min-passage-hit-rate", "0.5")
    assert result.code == 0, result.stderr
    found, missed, unanswered, summary = result.records
    assert found["first_answer_rank"] in (1, 2, 3) and found["answer_hit"] is True
    assert found["answer_filename"] == "travel-expense-zh.md"
    assert missed["first_answer_rank"] is None and missed["answer_hit"] is False
    assert "first_answer_rank" not in unanswered and unanswered["hit"] is True
    assert summary["passage_questions"] == 2 and summary["passage_hit_at_k"] == 0.5
    assert summary["passage_mrr"] == round(0.5 / found["first_answer_rank"], 4)
    assert summary["questions"] == 3 and summary["hit_at_k"] == 1.0  # documents as before
    gated = invoke("eval", str(questions), "--json", "--min-passage-hit-rate", "0.6")
    assert gated.code == 4 and "--min-passage-hit-rate" in gated.error["message"]
    plain = invoke("eval", str(questions))
    assert "answer #" in plain.stdout and "passages (2 questions with an answer)" in plain.stdout
    without = tmp_path / "documents.jsonl"
    without.write_text(json.dumps(lines[2]) + "\n")
    refused = invoke("eval", str(without), "--min-passage-hit-rate", "0.5", "--json")
    assert refused.code == 2 and "answer" in refused.error["message"]
    blank = tmp_path / "blank.jsonl"
    blank.write_text(json.dumps(lines[2] | {"answer": " "}) + "\n")
    assert invoke("eval", str(blank), "--json").error["message"].startswith("line 1 of")


def test_modes_ranks_and_one_hit_per_document(invoke, corpus):
    question = "How can I protect a PDF so that it asks for a password before opening?"
    hybrid = hits(invoke, question)
    assert hybrid[0]["filename"] == "pdf-security.md"
    assert hybrid[0]["lexical_rank"] and hybrid[0]["vector_rank"]
    lexical = invoke("search", question, "--mode", "lexical", "--json").records
    vector = invoke("search", question, "--mode", "vector", "--json").records
    assert all(hit["vector_rank"] is None for hit in lexical)
    assert all(hit["lexical_rank"] is None for hit in vector)
    ranks = [hit["lexical_rank"] for hit in lexical]
    assert ranks[0] == 1 and len(set(ranks)) == len(ranks)
    # Best score first, always; a document's later hits in its own rank order.
    scores = [hit["score"] for hit in lexical]
    assert scores == sorted(scores, reverse=True)
    for document in {hit["filename"] for hit in lexical}:
        own = [hit["lexical_rank"] for hit in lexical if hit["filename"] == document]
        assert own == sorted(own)
    per_document = invoke("search", question, "--per-document", "--json").records
    filenames = [hit["filename"] for hit in per_document]
    assert len(filenames) == len(set(filenames)) and filenames[0] == "pdf-security.md"
    chinese = invoke("search", "出差回来后最迟多久要提交报销？", "--per-document", "--json").records
    assert chinese[0]["filename"] == "travel-expense-zh.md"


def test_the_answering_passage_of_the_walkthrough_question_is_in_the_top_3(invoke, corpus):
    found = hits(invoke, "出差回来后最迟多久要提交报销？")
    assert any("15 个工作日内" in hit["text"] for hit in found[:3]), [h["text"] for h in found]
    scores = [hit["score"] for hit in found]
    assert scores == sorted(scores, reverse=True)


def test_a_question_about_nothing_known_has_no_hits(invoke, corpus):
    result = invoke("search", "xylophonic quixotry", "--json")
    assert result.code == 0 and result.stdout == ""
    assert invoke("search", "x", "--mode", "bogus").code == 2


def test_an_empty_quoted_phrase_is_dropped_by_search_and_eval(invoke, tmp_path):
    task = ingest(invoke, tmp_path, "budget.txt", "The budget review of invoices is in May.")
    publish(invoke, task["document_id"])
    for mode in ("hybrid", "lexical", "vector"):
        for query, found in (('""', 0), ('invoices ""', 1), ("budget “” review", 1), ("「」", 0)):
            result = invoke("search", query, "--mode", mode, "--json")
            assert result.code == 0, (mode, query, result.stderr)
            assert len(result.records) == found, (mode, query)
    questions = tmp_path / "q.jsonl"
    lines = [{"question": q, "expected": ["budget.txt"]} for q in ('invoices ""', "「」 budget")]
    questions.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = invoke("eval", str(questions), "--json")
    assert result.code == 0, result.stderr
    assert result.records[-1]["hit_at_1"] == 1.0


def test_without_embeddings_search_is_lexical(invoke, tmp_path, monkeypatch):
    monkeypatch.setenv("KB_EMBEDDINGS", "none")
    task = ingest(invoke, tmp_path, "a.md", "Backups run nightly in the primary region.")
    publish(invoke, task["document_id"])
    [hit] = hits(invoke, "When do backups run?")
    assert hit["lexical_rank"] == 1 and hit["vector_rank"] is None
    refused = invoke("search", "backups", "--mode", "vector", "--json")
    assert refused.code == 2 and "KB_EMBEDDINGS=none" in refused.error["message"]


# --- an OpenAI-compatible server on loopback --------------------------------------------


def _task(invoke, task_id: str) -> dict:
    return invoke("status", task_id, "--json").record


def test_http_provider_embeds_in_batches_with_the_key(invoke, tmp_path, embedding_server):
    text = "\n\n".join(f"Paragraph {i} " + "lorem ipsum " * 90 for i in range(5))
    task = ingest(invoke, tmp_path, "long.md", text)
    assert _task(invoke, task["task_id"])["status"] == "succeeded"
    batches = [request["body"]["input"] for request in embedding_server.requests]
    assert len(batches) >= 2 and all(len(batch) <= 2 for batch in batches)
    assert {request["auth"] for request in embedding_server.requests} == {
        "Bearer sk-test-secret-key"
    }
    assert {request["body"]["model"] for request in embedding_server.requests} == {"tiny-embed"}


@pytest.mark.parametrize("status", [429, 500, 503])
def test_provider_overload_waits_and_retries(invoke, tmp_path, embedding_server, status):
    embedding_server.failure = (status, "try later")
    task = ingest(invoke, tmp_path, "a.md", "Some text to embed.")
    record = _task(invoke, task["task_id"])
    assert (record["status"], record["error_code"]) == ("retry_wait", "provider_unavailable")
    assert record["stage"] == "embedding" and f"HTTP {status}" in record["error_detail"]


def test_unreachable_provider_is_transient(invoke, tmp_path, embedding_server, monkeypatch):
    monkeypatch.setenv("KB_EMBEDDING_URL", "http://127.0.0.1:9/v1")  # the discard port
    task = ingest(invoke, tmp_path, "a.md", "Some text to embed.")
    record = _task(invoke, task["task_id"])
    assert (record["status"], record["error_code"]) == ("retry_wait", "provider_unavailable")


def test_a_rejected_key_fails_at_once_without_leaking_it(invoke, tmp_path, embedding_server):
    embedding_server.failure = (401, "Incorrect API key provided: sk-test-secret-key")
    task = ingest(invoke, tmp_path, "a.md", "Some text to embed.")
    record = _task(invoke, task["task_id"])
    assert (record["status"], record["error_code"]) == ("failed", "internal_error")
    assert "HTTP 401" in record["error_detail"] and "KB_EMBEDDING_API_KEY" in record["error_detail"]
    assert "secret" not in json.dumps(record)


def test_a_new_model_never_mixes_with_the_old_until_reindexed(
    invoke, tmp_path, embedding_server, monkeypatch
):
    monkeypatch.setenv("KB_EMBEDDINGS", "local")
    task = ingest(invoke, tmp_path, "a.md", "Backups run nightly in the primary region.")
    publish(invoke, task["document_id"])
    assert hits(invoke, "When do backups run?")[0]["vector_rank"] == 1
    monkeypatch.setenv("KB_EMBEDDINGS", "openai")  # the local vectors no longer count
    [hit] = hits(invoke, "When do backups run?")
    assert hit["vector_rank"] is None and hit["lexical_rank"] == 1
    report = invoke("reindex", "--embeddings", "--json").record
    assert report == {"model": "openai:tiny-embed", "revisions": 1, "chunks": 1}
    assert hits(invoke, "When do backups run?")[0]["vector_rank"] == 1
    again = invoke("reindex", "--embeddings", "--json").record
    assert again["chunks"] == 0  # resumable: nothing left to do


def test_reindex_is_for_admins(invoke):
    admin = invoke("user", "add", "root", "--role", "admin", "--json").record["token"]
    viewer = invoke("user", "add", "v", "--role", "viewer", "--json", token=admin).record["token"]
    assert invoke("reindex", "--embeddings", "--json", token=viewer).code == 5
    assert invoke("reindex", "--embeddings", "--json", token=admin).code == 0
    assert (
        invoke(
            "eval", str(Path(SAMPLES / "knowledge" / "questions.jsonl")), "--json", token=viewer
        ).code
        == 0
    )
