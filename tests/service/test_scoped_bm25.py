"""BM25 over a scope: the same formula and the same numbers as SQLite FTS5's own
bm25() when the scope is the whole index, computed from the index's postings."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from kb_cli.lexical import fts5
from kb_cli.ranking import Corpus, best_scored, bm25
from tests.helpers import sqlite_only

CHUNK_TEXTS = [
    "Running the retention policy deletes invoices after seven years.",
    "The policy on travel: book early; the travel portal runs the booking.",
    "Invoices, invoices and more invoices: the finance team's retention rules.",
    "Nothing here matches the question at all, only parking and plants.",
    "Des accents: la politique de rétention s'applique aux factures.",
]


def _published_corpus(invoke, tmp_path) -> None:
    """CHUNK_TEXTS, a document each, all published."""
    for i, text in enumerate(CHUNK_TEXTS):
        (tmp_path / f"doc{i}.txt").write_text(text)
    names = [str(tmp_path / f"doc{i}.txt") for i in range(len(CHUNK_TEXTS))]
    assert invoke("upload", *names, "--submit").code == 0
    assert invoke("work", "--drain").code == 0
    assert invoke("publish", "--all-reviewed").code == 0


@pytest.fixture(scope="module")
def published_home(build_home):
    return build_home(_published_corpus)


@contextlib.contextmanager
def entered(enter_home, home, writes: bool = False) -> Iterator[Kb]:
    """The service layer on `home` (enter_home: as it is, or with `writes` a copy of this
    test's own), closed afterwards."""
    enter_home(home, writes=writes)
    kb = Kb.open(resolve_settings(), actor="tester", create=False)
    try:
        yield kb
    finally:
        kb.db.close()


@pytest.fixture
def published(enter_home, published_home) -> Iterator[Kb]:
    """The published corpus, for a test that only reads it."""
    with entered(enter_home, published_home) as kb:
        yield kb


@sqlite_only
@pytest.mark.parametrize(
    "question", ["retention policy", "invoices run", "travel booking policy", "retention"]
)
def test_scoped_bm25_of_the_whole_index_is_fts5s_bm25(published, question):
    kb = published
    terms = question.split()
    with kb.db.read() as conn:
        native = fts5.ranked_by_the_index(conn, terms, [], 10)
        scoped = fts5.ranked_in_scope(conn, terms, [], 10, "1 = 1", {})
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


DRAFTS = fts5.WINDOW_PER_RESULT * fts5.WINDOW_GROWTH + 3


def _drafts_and_one_published(invoke, tmp_path) -> str:
    """DRAFTS processed documents saying "invoices" more often than the one published
    (its id returned)."""
    for i in range(DRAFTS):
        (tmp_path / f"draft{i}.txt").write_text(f"Invoices invoices invoices, draft {i}.")
    published = tmp_path / "published.txt"
    published.write_text("The invoices are kept by finance, with the contracts and the rest.")
    uploaded = invoke("upload", str(published), "--submit", "--json")
    assert uploaded.code == 0, uploaded.stderr
    document = uploaded.records[0]["document_id"]
    names = [str(tmp_path / f"draft{i}.txt") for i in range(DRAFTS)]
    assert invoke("upload", *names, "--submit").code == 0
    assert invoke("work", "--drain").code == 0
    assert invoke("publish", document).code == 0
    return document


@pytest.fixture(scope="module")
def drafts_home(build_home):
    return build_home(_drafts_and_one_published)


@pytest.fixture
def drafts(enter_home, drafts_home) -> Iterator[tuple[Kb, str]]:
    """The drafts and the published document's id, for a test that only reads them."""
    with entered(enter_home, drafts_home) as kb:
        yield kb, drafts_home.value


@sqlite_only
@pytest.mark.parametrize("postings", [fts5.EXACT_POSTINGS, 0], ids=["bm25", "rarest"])
def test_the_index_ranking_looks_past_a_window_of_unpublished_matches(
    drafts, monkeypatch, postings
):
    """More unpublished chunks outrank the published one than the first window holds
    (WINDOW_PER_RESULT per result; RESCORED_PER_RESULT from the rarest words): the
    window grows until it finds it, on either path."""
    monkeypatch.setattr(fts5, "EXACT_POSTINGS", postings)
    kb, document = drafts
    with kb.db.read() as conn:
        ranked = fts5.ranked_by_the_index(conn, ["invoices"], [], 1)
        published_id = conn.execute(
            "SELECT id FROM chunks WHERE document_id = :d", {"d": document}
        ).scalar()
        everything = conn.execute(
            "SELECT count(*) FROM chunks_terms WHERE chunks_terms MATCH 'invoices'"
        ).scalar()
    assert everything == DRAFTS + 1
    assert [chunk for chunk, _score in ranked] == [published_id]
    with kb.db.read() as conn:  # a phrase no chunk holds: every match looked at, none kept
        assert fts5.ranked_by_the_index(conn, ["invoices"], ["no such phrase"], 1) == []


@sqlite_only
def test_the_rarest_words_rank_their_candidates_with_bm25s_own_numbers(published, monkeypatch):
    """Past EXACT_POSTINGS the candidates come from the words in at most COMMON_CHUNKS
    chunks (here: in one, so the rarest word, and more while too few are chosen) and
    the chunks holding every word; each is scored on every word with the index's
    statistics, so it has the score bm25() gives it."""
    kb = published
    monkeypatch.setattr(fts5, "EXACT_POSTINGS", 0)
    monkeypatch.setattr(fts5, "COMMON_CHUNKS", 1)
    terms = ["invoices", "retention", "policy", "travel"]
    with kb.db.read() as conn:
        rarest = fts5.ranked_by_the_index(conn, terms, [], 10)
        exact = fts5.ranked_by_bm25(conn, terms, [], 10)
        holding_travel = set(
            conn.execute(
                "SELECT rowid FROM chunks_terms WHERE chunks_terms MATCH 'travel'"
            ).scalars()
        )
    assert rarest == sorted(rarest, key=lambda hit: (-hit[1], hit[0]))
    exact_scores = dict(exact)
    for chunk, score in rarest:
        assert score == pytest.approx(exact_scores[chunk], rel=1e-9)
    assert holding_travel <= {chunk for chunk, _ in rarest}  # travel: the rarest word


def test_rare_words_choose_and_common_ones_join_while_too_few_chunks_are_chosen(monkeypatch):
    monkeypatch.setattr(fts5, "COMMON_CHUNKS", 100)
    frequency = {"flask": 3, "session": 90, "error": 5_000, "set": 9_000, "type": 8_000}
    assert fts5._choosing(frequency, enough=50) == ["flask", "session"]
    assert fts5._choosing(frequency, enough=200) == ["flask", "session", "error"]
    assert fts5._choosing({"set": 9_000, "type": 8_000}, enough=1) == ["type"]


@sqlite_only
def test_when_no_word_is_common_the_rarest_words_rank_as_bm25_does(published, monkeypatch):
    kb = published
    monkeypatch.setattr(fts5, "EXACT_POSTINGS", 0)
    terms = ["invoices", "retention", "policy", "travel", "plants"]
    with kb.db.read() as conn:
        rarest = fts5.ranked_by_the_index(conn, terms, [], 10)
        exact = fts5.ranked_by_bm25(conn, terms, [], 10)
    assert len(exact) == len(CHUNK_TEXTS)  # every chunk holds one of the words
    assert [chunk for chunk, _ in rarest] == [chunk for chunk, _ in exact]
    assert [score for _, score in rarest] == pytest.approx([score for _, score in exact])


@sqlite_only
def test_the_index_totals_are_the_chunks_and_their_mean_length(published):
    kb = published
    with kb.db.read() as conn:
        chunks, mean_length = fts5._index_totals(conn)
        counted, tokens = conn.execute("SELECT count(*), sum(term_count) FROM chunks").first()
    assert chunks == counted == len(CHUNK_TEXTS)
    assert mean_length == pytest.approx(tokens / counted)


_RUNS = (
    "SELECT document_id, revision, min(id), max(id), count(*), sum(term_count) FROM chunks "
    "GROUP BY 1, 2 ORDER BY 1, 2"
)


def _runs(conn) -> list[tuple]:
    sql = "SELECT document_id, revision, first_id, last_id, chunks, words FROM chunk_runs"
    return [tuple(row) for row in conn.execute(sql + " ORDER BY 1, 2").all()]


@pytest.fixture
def published_copy(enter_home, published_home) -> Iterator[Kb]:
    """A copy of the published corpus of this test's own, to change."""
    with entered(enter_home, published_home, writes=True) as kb:
        yield kb


@sqlite_only
def test_each_revisions_run_of_chunk_ids_follows_its_chunks(invoke, published_copy, tmp_path):
    """chunk_runs (a scope's chunks, size and mean length) stays what counting the
    chunks gives through new documents, a new revision and a deletion."""
    kb = published_copy
    (tmp_path / "new.txt").write_text("A second revision, with other words: " * 40)
    first = invoke("status", "--json").records[-1]["document_id"]
    assert invoke("upload", str(tmp_path / "new.txt"), "--replace", first).code == 0
    assert invoke("submit", first).code == 0
    assert invoke("work", "--drain").code == 0
    second = invoke("status", "--json").records[0]["document_id"]
    assert invoke("delete", second, "--yes").code == 0
    with kb.db.read() as conn:
        runs = _runs(conn)
        assert runs == [tuple(row) for row in conn.execute(_RUNS).all()]
    assert len({run[0] for run in runs}) == len(CHUNK_TEXTS) - 1
    assert all(last - first + 1 == chunks for _d, _r, first, last, chunks, _w in runs)


def _bases_corpus(invoke, tmp_path) -> None:
    """Two bases with the same kind of text, both published."""
    for base in ("finance", "travel"):
        assert invoke("base", "create", base).code == 0
        names = []
        for i, text in enumerate(CHUNK_TEXTS * 3):
            path = tmp_path / f"{base}{i}.txt"
            path.write_text(f"{text} ({base} copy {i}, {'extra words ' * i})")
            names.append(str(path))
        assert invoke("upload", *names, "--base", base, "--submit").code == 0
    assert invoke("work", "--drain").code == 0
    assert invoke("publish", "--all-reviewed").code == 0


QUESTION = ["invoices", "retention", "policy", "travel", "finance"]
SCOPE = ("d.base = :b", {"b": "finance"})


@pytest.fixture(scope="module")
def bases_home(build_home):
    return build_home(_bases_corpus)


@pytest.fixture
def bases(enter_home, bases_home) -> Iterator[Kb]:
    """The two bases, for a test that only reads them."""
    with entered(enter_home, bases_home) as kb:
        yield kb


@pytest.fixture
def bases_copy(enter_home, bases_home) -> Iterator[Kb]:
    """A copy of the two bases of this test's own, to change."""
    with entered(enter_home, bases_home, writes=True) as kb:
        yield kb


@sqlite_only
def test_in_a_scope_every_match_is_scored_with_the_scopes_statistics(bases):
    """Few matches in the scope: every one is scored, exactly as the postings give it."""
    kb = bases
    with kb.db.read() as conn:
        runs = fts5.ranked_in_scope(conn, QUESTION, [], 50, *SCOPE)
        postings = fts5.ranked_from_postings(conn, fts5._stems(conn, QUESTION), [], 50, *SCOPE)
        finance = set(
            conn.execute(
                "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id "
                "WHERE d.base = 'finance'"
            ).scalars()
        )
    assert len(runs) > 10 and {chunk for chunk, _ in runs} <= finance
    assert [chunk for chunk, _ in runs] == [chunk for chunk, _ in postings]
    assert [score for _, score in runs] == pytest.approx([score for _, score in postings])


@sqlite_only
def test_in_a_scope_the_scopes_own_words_choose_the_candidates(bases_copy, monkeypatch):
    """Past RESCORED_ALL, candidates come from the scope's chunks of its rarer words:
    each keeps the score the full ranking gives it, none is outside the scope, and
    the other base's chunks change nothing (scored alone in its own home, the same)."""
    kb = bases_copy
    monkeypatch.setattr(fts5, "RESCORED_ALL", 0)
    monkeypatch.setattr(fts5, "COMMON_CHUNKS", 3)
    with kb.db.read() as conn:
        stems = fts5._stems(conn, QUESTION)
        chosen = fts5.ranked_in_scope(conn, QUESTION, [], 5, *SCOPE)
        full = dict(fts5.ranked_from_postings(conn, stems, [], 1000, *SCOPE))
    assert len(chosen) == 5
    for chunk, score in chosen:
        assert score == pytest.approx(full[chunk])
    with kb.db.write() as conn:  # the other base's chunks gone: the same ranking
        conn.execute(
            "DELETE FROM chunks WHERE document_id IN "
            "(SELECT id FROM documents WHERE base = 'travel')"
        )
    with kb.db.read() as conn:
        assert fts5.ranked_in_scope(conn, QUESTION, [], 5, *SCOPE) == chosen


@sqlite_only
def test_a_run_with_a_gap_sends_the_scope_to_the_postings(invoke, bases_copy, tmp_path):
    kb = bases_copy
    long = tmp_path / "long.txt"
    long.write_text("\n\n".join(f"Paragraph {i} on the travel policy. " * 30 for i in range(12)))
    assert invoke("upload", str(long), "--base", "finance", "--submit").code == 0
    assert invoke("work", "--drain").code == 0
    with kb.db.write() as conn:  # a chunk out of the middle of a run
        assert conn.execute("SELECT max(last_id - first_id) FROM chunk_runs").scalar() >= 2
        conn.execute(
            "DELETE FROM chunks WHERE id = (SELECT first_id + 1 FROM chunk_runs "
            "WHERE last_id - first_id >= 2 LIMIT 1)"
        )
    with kb.db.read() as conn:
        assert fts5.ScopeRuns.of(conn, "d.base = 'travel'", {}) is not None
        everything = fts5.ScopeRuns.of(conn, "1 = 1", {})
        ranked = fts5.ranked_in_scope(conn, QUESTION, [], 10, "1 = 1", {})
        postings = fts5.ranked_from_postings(conn, fts5._stems(conn, QUESTION), [], 10, "1 = 1", {})
    assert everything is None
    assert ranked == postings
