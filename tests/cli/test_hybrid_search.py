"""Search that answers questions: words, vectors, their fusion, providers, and kb eval."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from kb_cli.chunking import chunk_blocks
from kb_cli.embeddings.local import _TOKENIZER, _WEIGHTS, LocalEmbedder, _package_dir
from kb_cli.parsers import Block
from kb_cli.ranking import best_per_document, fuse, top_similar
from kb_cli.textsearch import index_terms, parse_query
from tests.helpers import SAMPLES, hits, ingest, publish
from tests.loopback import JsonHandler, serving

# --- words -----------------------------------------------------------------------------


def test_chinese_is_indexed_as_words_long_and_short():
    terms = index_terms("知识库入库流程 and English words.").split()
    assert {"知识", "知识库", "入库", "流程", "English"} <= set(terms)


def test_a_query_is_words_and_quoted_phrases_operators_are_text():
    query = parse_query('出差回来后最迟多久要提交报销？ "code freeze" NEAR(x* OR')
    assert query.phrases == ["code freeze"]
    assert {"出差", "报销", "NEAR", "x", "code", "freeze"} <= set(query.terms)
    assert parse_query("?!").empty
    assert parse_query("OR AND NOT").terms == ["OR", "AND", "NOT"]  # stopwords, but all it has


def test_stopwords_do_not_rank_but_a_phrase_keeps_its_words():
    assert parse_query("How do I stop waiting when the server is slow?").terms == [
        "stop",
        "waiting",
        "server",
        "slow",
    ]
    assert parse_query("怎么设置请求的超时时间？").terms == ["设置", "请求", "超时", "时间"]
    assert parse_query('what does "the end" mean').terms == ["mean", "the", "end"]
    assert parse_query('"the end"').terms == ["the", "end"]
    # A lone Chinese character is a particle or a generic verb, unless it is all there is.
    assert "跑" not in parse_query("进程已经在跑了，怎么打开 GC 日志？").terms
    assert parse_query("锁").terms == ["锁"]


def test_a_line_break_inside_chinese_words_is_no_space():
    [chunk] = chunk_blocks([Block("系统运行稳\n定，性能\n良好。\nNext\nline")])
    assert chunk.text == "系统运行稳定，性能良好。 Next line"


# --- ranking ---------------------------------------------------------------------------


def test_reciprocal_rank_fusion_rewards_agreement():
    fused = fuse([(1, 9.0), (2, 5.0)], [(2, 0.9), (3, 0.8)], k=60)
    assert [hit[0] for hit in fused] == [2, 1, 3]
    assert fused[0] == (2, pytest.approx(1 / 62 + 1 / 61), 2, 1)
    assert fused[1][2:] == (1, None) and fused[2][2:] == (None, 2)


def test_vector_candidates_below_the_floor_are_dropped():
    matrix = np.array([[1, 0], [0.6, 0.8], [0, 1]], dtype=np.float32)
    ranked = top_similar([10, 11, 12], matrix, np.array([1, 0]), floor=0.5, limit=5)
    assert [chunk for chunk, _ in ranked] == [10, 11]
    assert top_similar([10, 11, 12], matrix, np.array([1, 0]), 0.5, 1)[0][0] == 10


def test_one_hit_per_document_keeps_the_best():
    hits_ = [(1, 0.9, 1, None), (2, 0.8, 2, None), (3, 0.7, 3, None)]
    kept = best_per_document(hits_, {1: "a", 2: "a", 3: "b"}.__getitem__)
    assert [hit[0] for hit in kept] == [1, 3]


# --- the built-in model ----------------------------------------------------------------


def test_local_model_gives_wordllamas_own_vectors():
    """The same vectors as WordLlama's own inference, for a query and for long chunks
    in both scripts (the batch path that counts tokens instead of gathering rows)."""
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer
    from wordllama.inference import WordLlamaInference

    package = _package_dir()
    reference = WordLlamaInference(
        load_file(package / _WEIGHTS)["embedding.weight"],
        Tokenizer.from_file(str(package / _TOKENIZER)),
    )
    short = ["How can I protect a PDF with a password?", "出差回来后最迟多久要提交报销？"]
    long = [("知识库入库流程很重要。" * 80)[:800], ("Backups run nightly. " * 40)[:800]] * 20
    for texts in (short, long):
        ours = LocalEmbedder().embed(texts)
        theirs = reference.embed(texts, norm=True)
        assert ours.shape == (len(texts), 256)
        np.testing.assert_allclose(ours, theirs, atol=1e-5)


# --- search through the CLI ----------------------------------------------------------


@pytest.fixture
def corpus(invoke, tmp_path):
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
        }
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
    # Each document's best hit first, in rank order; its further hits after all of them.
    documents = [hit["filename"] for hit in lexical]
    firsts = len(set(documents))
    assert len(set(documents[:firsts])) == firsts
    assert ranks[:firsts] == sorted(ranks[:firsts]) and ranks[firsts:] == sorted(ranks[firsts:])
    per_document = invoke("search", question, "--per-document", "--json").records
    filenames = [hit["filename"] for hit in per_document]
    assert len(filenames) == len(set(filenames)) and filenames[0] == "pdf-security.md"
    chinese = invoke("search", "出差回来后最迟多久要提交报销？", "--per-document", "--json").records
    assert chinese[0]["filename"] == "travel-expense-zh.md"


def test_a_question_about_nothing_known_has_no_hits(invoke, corpus):
    result = invoke("search", "xylophonic quixotry", "--json")
    assert result.code == 0 and result.stdout == ""
    assert invoke("search", "x", "--mode", "bogus").code == 2


def test_without_embeddings_search_is_lexical(invoke, tmp_path, monkeypatch):
    monkeypatch.setenv("KB_EMBEDDINGS", "none")
    task = ingest(invoke, tmp_path, "a.md", "Backups run nightly in the primary region.")
    publish(invoke, task["document_id"])
    [hit] = hits(invoke, "When do backups run?")
    assert hit["lexical_rank"] == 1 and hit["vector_rank"] is None
    refused = invoke("search", "backups", "--mode", "vector", "--json")
    assert refused.code == 2 and "KB_EMBEDDINGS=none" in refused.error["message"]


# --- an OpenAI-compatible server on loopback --------------------------------------------


class _Embeddings(JsonHandler):
    """Answers like OpenAI's /v1/embeddings, or fails as the test tells it to."""

    failure: tuple[int, str] | None = None
    requests: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = self.read_json()
        type(self).requests.append({"body": body, "auth": self.headers.get("Authorization")})
        if self.failure:
            status, message = self.failure
            self.send_json(status, {"error": {"message": message}})
            return
        data = [
            {"index": i, "embedding": [len(text) % 7 + 1.0, text.count("e") + 1.0, 1.0]}
            for i, text in enumerate(body["input"])
        ]
        self.send_json(200, {"data": data, "model": body["model"]})


@pytest.fixture
def embedding_server(monkeypatch):
    _Embeddings.failure, _Embeddings.requests = None, []
    with serving(_Embeddings) as port:
        monkeypatch.setenv("KB_EMBEDDINGS", "openai")
        monkeypatch.setenv("KB_EMBEDDING_URL", f"http://127.0.0.1:{port}/v1")
        monkeypatch.setenv("KB_EMBEDDING_MODEL", "tiny-embed")
        monkeypatch.setenv("KB_EMBEDDING_API_KEY", "sk-test-secret-key")
        monkeypatch.setenv("KB_EMBEDDING_BATCH", "2")
        yield _Embeddings


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
