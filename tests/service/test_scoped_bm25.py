"""BM25 over a scope: the same formula and the same numbers as SQLite FTS5's own
bm25() when the scope is the whole index, computed from the index's postings."""

from __future__ import annotations

import pytest

from kb_cli.engines import sqlite
from kb_cli.ranking import Corpus, best_scored, bm25
from tests.helpers import sqlite_only

CHUNK_TEXTS = [
    "Running the retention policy deletes invoices after seven years.",
    "The policy on travel: book early; the travel portal runs the booking.",
    "Invoices, invoices and more invoices: the finance team's retention rules.",
    "Nothing here matches the question at all, only parking and plants.",
    "Des accents: la politique de rétention s'applique aux factures.",
]


@sqlite_only
@pytest.mark.parametrize(
    "question", ["retention policy", "invoices run", "travel booking policy", "retention"]
)
def test_scoped_bm25_of_the_whole_index_is_fts5s_bm25(invoke, kb, tmp_path, question):
    for i, text in enumerate(CHUNK_TEXTS):
        (tmp_path / f"doc{i}.txt").write_text(text)
    tasks = invoke("upload", *(str(tmp_path / f"doc{i}.txt") for i in range(5)), "--submit")
    assert tasks.code == 0, tasks.stderr
    assert invoke("work", "--drain").code == 0
    for line in invoke("status", "--json").records:
        assert invoke("publish", line["document_id"]).code == 0
    terms = question.split()
    with kb.db.read() as conn:
        native = sqlite.ranked_by_the_index(conn, terms, [], 10)
        scoped = sqlite.ranked_in_scope(conn, terms, [], 10, "1 = 1", {})
    assert native, "the question matches some chunks"
    assert [chunk for chunk, _ in scoped] == [chunk for chunk, _ in native]
    for (_, mine), (_, theirs) in zip(scoped, native, strict=True):
        assert mine == pytest.approx(theirs, rel=1e-9)


def test_bm25_weighs_rare_terms_and_short_chunks_higher():
    corpus = Corpus(chunks=100, mean_length=10.0, frequency={"rare": 2, "common": 60})
    scores = bm25(
        corpus,
        [
            (1, "rare", 1, 10),
            (2, "common", 1, 10),
            (3, "rare", 1, 40),
            (4, "common", 3, 10),
        ],
    )
    assert scores[1] > scores[3] > 0  # the same word weighs more in a shorter chunk
    assert scores[1] > scores[4] > scores[2] > 0  # a rare word beats a frequent one
    assert best_scored(scores, 2) == [(1, scores[1]), (3, scores[3])]


def test_a_term_in_most_chunks_keeps_a_tiny_positive_weight():
    corpus = Corpus(chunks=4, mean_length=5.0, frequency={"the": 4})
    assert 0 < bm25(corpus, [(1, "the", 1, 5)])[1] < 1e-5


@sqlite_only
@pytest.mark.parametrize("postings", [sqlite.EXACT_POSTINGS, 0], ids=["bm25", "rarest"])
def test_the_index_ranking_looks_past_a_window_of_unpublished_matches(
    invoke, kb, tmp_path, monkeypatch, postings
):
    """More unpublished chunks outrank the published one than the first window holds
    (WINDOW_PER_RESULT per result; RESCORED_PER_RESULT from the rarest words): the
    window grows until it finds it, on either path."""
    monkeypatch.setattr(sqlite, "EXACT_POSTINGS", postings)
    drafts = sqlite.WINDOW_PER_RESULT * sqlite.WINDOW_GROWTH + 3
    for i in range(drafts):
        (tmp_path / f"draft{i}.txt").write_text(f"Invoices invoices invoices, draft {i}.")
    published = tmp_path / "published.txt"
    published.write_text("The invoices are kept by finance, with the contracts and the rest.")
    uploaded = invoke("upload", str(published), "--submit", "--json")
    assert uploaded.code == 0, uploaded.stderr
    document = uploaded.records[0]["document_id"]
    names = [str(tmp_path / f"draft{i}.txt") for i in range(drafts)]
    assert invoke("upload", *names, "--submit").code == 0
    assert invoke("work", "--drain").code == 0
    assert invoke("publish", document).code == 0
    with kb.db.read() as conn:
        ranked = sqlite.ranked_by_the_index(conn, ["invoices"], [], 1)
        published_id = conn.execute(
            "SELECT id FROM chunks WHERE document_id = :d", {"d": document}
        ).scalar()
        everything = conn.execute(
            "SELECT count(*) FROM chunks_terms WHERE chunks_terms MATCH 'invoices'"
        ).scalar()
    assert everything == drafts + 1
    assert [chunk for chunk, _score in ranked] == [published_id]
    with kb.db.read() as conn:  # a phrase no chunk holds: every match looked at, none kept
        assert sqlite.ranked_by_the_index(conn, ["invoices"], ["no such phrase"], 1) == []


def _published_corpus(invoke, tmp_path) -> None:
    for i, text in enumerate(CHUNK_TEXTS):
        (tmp_path / f"doc{i}.txt").write_text(text)
    names = [str(tmp_path / f"doc{i}.txt") for i in range(len(CHUNK_TEXTS))]
    assert invoke("upload", *names, "--submit").code == 0
    assert invoke("work", "--drain").code == 0
    assert invoke("publish", "--all-reviewed").code == 0


@sqlite_only
def test_the_rarest_words_rank_their_candidates_with_bm25s_own_numbers(
    invoke, kb, tmp_path, monkeypatch
):
    """Past EXACT_POSTINGS the candidates come from the words in at most COMMON_CHUNKS
    chunks (here: in one, so the rarest word alone) and the chunks holding every word;
    each is scored on every word with the index's statistics, so it has the score
    bm25() gives it, and only chunks without the rare words can be missed."""
    _published_corpus(invoke, tmp_path)
    monkeypatch.setattr(sqlite, "EXACT_POSTINGS", 0)
    monkeypatch.setattr(sqlite, "COMMON_CHUNKS", 1)
    terms = ["invoices", "retention", "policy", "travel"]
    with kb.db.read() as conn:
        rarest = sqlite.ranked_by_the_index(conn, terms, [], 10)
        exact = sqlite.ranked_by_bm25(conn, terms, [], 10)
        holding_travel = set(
            conn.execute(
                "SELECT rowid FROM chunks_terms WHERE chunks_terms MATCH 'travel'"
            ).scalars()
        )
    assert rarest == sorted(rarest, key=lambda hit: (-hit[1], hit[0]))
    exact_scores = dict(exact)
    for chunk, score in rarest:
        assert score == pytest.approx(exact_scores[chunk], rel=1e-9)
    missed = set(exact_scores) - {chunk for chunk, _ in rarest}
    assert missed and not missed & holding_travel  # travel: in one chunk, the rarest


@sqlite_only
def test_when_no_word_is_common_the_rarest_words_rank_as_bm25_does(
    invoke, kb, tmp_path, monkeypatch
):
    _published_corpus(invoke, tmp_path)
    monkeypatch.setattr(sqlite, "EXACT_POSTINGS", 0)
    terms = ["invoices", "retention", "policy", "travel", "plants"]
    with kb.db.read() as conn:
        rarest = sqlite.ranked_by_the_index(conn, terms, [], 10)
        exact = sqlite.ranked_by_bm25(conn, terms, [], 10)
    assert len(exact) == len(CHUNK_TEXTS)  # every chunk holds one of the words
    assert [chunk for chunk, _ in rarest] == [chunk for chunk, _ in exact]
    assert [score for _, score in rarest] == pytest.approx([score for _, score in exact])


@sqlite_only
def test_the_index_totals_are_the_chunks_and_their_mean_length(invoke, kb, tmp_path):
    _published_corpus(invoke, tmp_path)
    with kb.db.read() as conn:
        chunks, mean_length = sqlite._index_totals(conn)
        counted, tokens = conn.execute("SELECT count(*), sum(term_count) FROM chunks").first()
    assert chunks == counted == len(CHUNK_TEXTS)
    assert mean_length == pytest.approx(tokens / counted)
