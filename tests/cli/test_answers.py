"""Answers as a program feeds them to a language model: a chunk's context found but
not shown, neighbour passages (--context), and a reranker on a real HTTP server."""

from __future__ import annotations

from typing import ClassVar

import pytest

from tests.cli.test_review_gate import ingest, publish
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
    requests: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = self.read_json()
        type(self).requests.append({"body": body, "auth": self.headers.get("Authorization")})
        if self.failure:
            status, message = self.failure
            self.send_json(status, {"error": {"message": message}})
            return
        scores = [text.lower().count(self.favourite) for text in body["documents"]]
        if self.tei:
            self.send_json(200, [{"index": i, "score": s} for i, s in enumerate(scores)])
        else:
            results = [{"index": i, "relevance_score": s} for i, s in enumerate(scores)]
            self.send_json(200, {"results": results[::-1]})


@pytest.fixture
def rerank_server(monkeypatch):
    _Rerank.failure, _Rerank.tei, _Rerank.requests = None, False, []
    with serving(_Rerank) as port:
        monkeypatch.setenv("KB_RERANK", "http")
        monkeypatch.setenv("KB_RERANK_URL", f"http://127.0.0.1:{port}/rerank")
        monkeypatch.setenv("KB_RERANK_MODEL", "tiny-rerank")
        monkeypatch.setenv("KB_RERANK_API_KEY", "sk-rerank-secret")
        yield _Rerank


@pytest.fixture
def animals(invoke, tmp_path, monkeypatch):
    monkeypatch.setenv("KB_RERANK", "none")
    for name, text in {
        "otters.md": "# Otters\n\nOtters swim in rivers. Otters swim and swim.",
        "seals.md": "# Seals\n\nSeals swim in the sea near the walrus colony.",
        "walrus.md": "# Walrus\n\nThe walrus rests on ice; a walrus can swim too.",
    }.items():
        _published(invoke, tmp_path, name, text)
    monkeypatch.delenv("KB_RERANK")


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
