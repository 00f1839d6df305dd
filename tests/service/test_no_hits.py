"""Why a search found nothing (docs/search.md, "Search that answers questions"): each
cause its own hint, so that a `--where` that keeps nothing is not blamed on review."""

from __future__ import annotations

import dataclasses

import pytest

from kb_cli.app import Kb
from kb_cli.metadata import parse_where
from kb_cli.permissions import Actor, Role
from kb_cli.services.bases import create_base
from kb_cli.services.documents import publish_document, upload
from kb_cli.services.search import SearchRequest, search
from kb_cli.worker import Worker, WorkerOptions


def why(kb: Kb, question: str, **options) -> str | None:
    result = search(kb, SearchRequest(question, **options))
    assert result.hits == []
    return result.nothing_because


def ingest(kb: Kb, tmp_path, name: str, text: str, publish: bool = True, **options) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    [task] = upload(kb, [path], submit=True, **options).records
    list(Worker(kb, WorkerOptions(worker_id="w")).run(max_tasks=None))
    if publish:
        publish_document(kb, task.document_id)


def test_an_empty_knowledge_base_says_to_upload(kb):
    assert why(kb, "invoices") == (
        "no hits: the bases you may read have no document yet (kb upload FILE)"
    )


def test_an_empty_base_says_to_upload_into_it(kb, tmp_path):
    create_base(kb, "legal", [])
    ingest(kb, tmp_path, "a.md", "# A\n\nInvoices are kept.\n")
    assert why(kb, "invoices", base="legal") == (
        "no hits: base legal has no document yet (kb upload FILE --base legal)"
    )


def test_nothing_published_says_what_waits(kb, tmp_path):
    ingest(kb, tmp_path, "a.md", "# A\n\nInvoices are kept.\n", publish=False)
    assert "none is published" in why(kb, "invoices")
    assert "kb status --status review_pending" in why(kb, "invoices")


def test_a_where_that_keeps_nothing_names_the_filter_not_review(kb, tmp_path):
    ingest(kb, tmp_path, "a.md", "# A\n\nInvoices are kept.\n", meta={"team": "finance"})
    hint = why(kb, "invoices", where=parse_where(["Team=finance"]))  # the key's case
    assert "has metadata Team=finance" in hint and "case-sensitive" in hint
    assert "review_pending" not in hint


def test_a_question_nothing_answers_says_so(kb, tmp_path):
    ingest(kb, tmp_path, "a.md", "# A\n\nInvoices are kept.\n")
    hint = why(kb, "xylophonic quixotry", mode=None)
    assert hint == "no hits: no passage of the 1 published documents searched answers it"


def test_punctuation_alone_asks_nothing(kb):
    assert why(kb, "?!") == "no hits: the question holds no word or phrase to search for"


def test_a_reader_of_no_base_is_told_who_can_give_one(kb, tmp_path):
    create_base(kb, "secret", ["board"])
    ingest(kb, tmp_path, "a.md", "# A\n\nInvoices are kept.\n", base="secret")
    outsider = kb.acting_as(Actor("olga", Role.VIEWER))
    # The default base is company-wide: one the outsider can read, with no document.
    assert "have no document yet" in why(outsider, "invoices")
    with kb.db.write() as conn:  # every base restricted to a team she is not in
        conn.execute("INSERT INTO base_teams (base, team) VALUES ('default', 'board')", {})
    assert why(outsider, "invoices") == (
        "no hits: you may read no knowledge base; an admin can give you one "
        "(kb base grant NAME USER)"
    )


@pytest.mark.parametrize("mode", [None, "lexical"])
def test_a_search_with_hits_says_nothing_of_why(kb, tmp_path, mode):
    ingest(kb, tmp_path, "a.md", "# A\n\nInvoices are kept.\n")
    result = search(kb, dataclasses.replace(SearchRequest("invoices"), mode=mode))
    assert result.hits and result.nothing_because is None
