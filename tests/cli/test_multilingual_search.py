"""KB_EMBEDDINGS=multilingual through the real CLI: the worker stores the model's vectors
and a question in one language finds the page written in the other."""

from __future__ import annotations

from tests.helpers import ingest, publish


def test_an_english_question_finds_the_chinese_page_by_meaning(invoke, tmp_path, monkeypatch):
    monkeypatch.setenv("KB_EMBEDDINGS", "multilingual")
    for name, text in (
        ("expenses.md", "# 差旅\n\n出差回来后十五天内提交报销单，附上全部发票。"),
        ("rooms.md", "# 会议\n\n会议室需要提前一天在前台预订。"),
    ):
        publish(invoke, ingest(invoke, tmp_path, name, text)["document_id"])
    found = invoke(
        "search", "When do I hand in my travel expense claim?", "--mode", "vector", "--json"
    )
    assert found.code == 0, found.stderr
    assert found.records[0]["filename"] == "expenses.md"
