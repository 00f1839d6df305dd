"""PostgreSQL's lexical ranking from its indexes: the per-base chunk counts (migration
0015) stay in step with every write; from the GIN index, the rarest-words-first ranking
is the full BM25 ranking, except where it says it is not (a question of common words
only); from pg_textsearch's BM25 index (where an operator made it: docs/many-hosts.md), the
candidates it proposes, re-scored on the scope, are the full ranking too."""

from __future__ import annotations

from pathlib import Path

import pytest

from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from kb_cli.errors import KbError
from kb_cli.lexical import tsvector
from kb_cli.metadata import MetaFilter
from kb_cli.permissions import Scope
from kb_cli.textsearch import parse_query
from tests.helpers import ON_POSTGRES

pytestmark = pytest.mark.skipif(not ON_POSTGRES, reason="the stored words are PostgreSQL's")

# Real text, several hundred chunks: modules of the standard library.
STDLIB = Path(__import__("json").__file__).parents[1]
OPEN_FILES = ["argparse.py", "pathlib.py", "tarfile.py"]
TAGGED_FILE = "shutil.py"  # --meta team=tools
SECRET_FILE = "zipfile.py"  # in a base the outsider may not read
QUESTIONS = [
    "parse command line arguments and print the help message",
    "extract every member of a compressed archive to a directory",
    "copy a directory tree recursively, preserving permissions",
    "join path components and resolve symbolic links",
    "tarfile extractall filter",
]
COMMON_WORDS = "self return"  # in most chunks of Python source ("the" is a stopword)
SOME_WORDS = "file name"  # in some of the chunks (in more than half, idf is its floor)
DEPTH = 30
TOTALS = """
    SELECT d.base, count(*) AS chunks, sum(c.term_count) AS words
    FROM chunks AS c JOIN documents AS d ON d.id = c.document_id GROUP BY d.base"""
KEPT = "SELECT base, sum(chunks) AS chunks, sum(words) AS words FROM chunk_totals GROUP BY base"


def ok(result) -> list[dict]:
    assert result.code == 0, result.stderr
    return result.records


def _corpus(invoke, root: Path) -> dict[str, str]:
    def upload(name: str, *options: str) -> str:
        copy = root / (Path(name).parent.name + Path(name).stem + ".txt")
        copy.write_text((STDLIB / name).read_text(encoding="utf-8"), encoding="utf-8")
        records = ok(invoke("upload", str(copy), "--submit", "--json", *options, token=admin))
        return records[0]["document_id"]

    admin = ok(invoke("user", "add", "root", "--role", "admin", "--json"))[0]["token"]
    ok(invoke("base", "create", "secret", "--team", "insiders", "--json", token=admin))
    ids = {name: upload(name) for name in OPEN_FILES}
    ids[TAGGED_FILE] = upload(TAGGED_FILE, "--meta", "team=tools")
    ids[SECRET_FILE] = upload(SECRET_FILE, "--base", "secret")
    ok(invoke("work", "--drain", "--json", token=admin))
    ok(invoke("publish", "--all-reviewed", "--json", token=admin))
    return ids | {"admin": admin}


@pytest.fixture(scope="module")
def corpus(build_home):
    return build_home(_corpus)


def _kept_in_step() -> None:
    from tests.helpers import db_rows

    def by_base(sql: str) -> dict[str, tuple[int, int]]:
        return {
            row["base"]: (int(row["chunks"]), int(row["words"]))
            for row in db_rows(sql)
            if row["chunks"]
        }

    assert by_base(KEPT) == by_base(TOTALS)


def test_the_chunk_counts_follow_ingestion_moves_and_deletes(corpus, enter_home, invoke):
    ids = enter_home(corpus, writes=True)
    admin = ids["admin"]
    _kept_in_step()
    ok(invoke("base", "move", ids[TAGGED_FILE], "secret", "--json", token=admin))
    _kept_in_step()
    ok(invoke("delete", ids["pathlib.py"], "--json", token=admin))
    ok(invoke("work", "--drain", "--json", token=admin))
    _kept_in_step()
    from tests.helpers import db_rows

    assert not db_rows("SELECT 1 FROM chunks WHERE document_id = :id", id=ids["pathlib.py"])


def _ranked(kb: Kb, question: str, scope: Scope) -> list[tuple[int, float]]:
    query = parse_query(question)
    with kb.db.read() as conn:
        return kb.lexical.ranking(conn, query.terms, query.phrases, DEPTH, scope)


GIN_ONLY = "SELECT false"  # as a server without pg_textsearch answers


@pytest.fixture
def gin_index(monkeypatch):
    """The words ranking of a server without pg_textsearch: from the GIN index."""
    monkeypatch.setattr(tsvector, "_HAS_BM25_INDEX", GIN_ONLY)


def _full(kb: Kb, question: str, scope: Scope, monkeypatch) -> list[tuple[int, float]]:
    """Every chunk scored: the GIN index's ranking, as this corpus is under CANDIDATES."""
    with monkeypatch.context() as gin:
        gin.setattr(tsvector, "_HAS_BM25_INDEX", GIN_ONLY)
        return _ranked(kb, question, scope)


SCOPES = {
    "every base": Scope(),
    "an outsider's bases": Scope(reader="outsider"),
    "one base": Scope(bases=("default",)),
    "tagged documents": Scope(where=(MetaFilter("team", "tools"),)),
}


@pytest.mark.parametrize("scope", SCOPES.values(), ids=SCOPES.keys())
def test_rarest_words_first_is_the_full_ranking(corpus, enter_home, monkeypatch, scope):
    enter_home(corpus)
    kb = Kb.open(resolve_settings(), actor="tester", create=False)
    monkeypatch.setattr(tsvector, "_HAS_BM25_INDEX", GIN_ONLY)
    for question in QUESTIONS:
        full = _ranked(kb, question, scope)  # this corpus is under CANDIDATES: all scored
        assert full, question
        with monkeypatch.context() as small:
            small.setattr(tsvector, "CANDIDATES", 100)
            found = _ranked(kb, question, scope)
        assert [chunk for chunk, _ in found] == [chunk for chunk, _ in full], question
        assert [score for _, score in found] == pytest.approx([score for _, score in full])


@pytest.mark.parametrize("scope", SCOPES.values(), ids=SCOPES.keys())
def test_the_bm25_index_proposes_what_the_full_ranking_finds(
    corpus, enter_home, monkeypatch, scope
):
    """Over every base, its candidates scored by kb: the same scores, and the full
    ranking's top 10 in its order (further down, a chunk its own word splitting did not
    propose may be missing: docs/search.md measures how often). Any narrower scope is
    the GIN index's ranking, exactly: the index's statistics count every base, so it
    never chooses what a narrower caller sees (docs/access.md)."""
    enter_home(corpus)
    kb = Kb.open(resolve_settings(), actor="tester", create=False)
    _skip_without_bm25(kb)
    for question in [*QUESTIONS, COMMON_WORDS, SOME_WORDS, '"extract" members']:
        full = _full(kb, question, scope, monkeypatch)
        found = _ranked(kb, question, scope)
        if scope != Scope():
            assert found == full, question
            continue
        assert [chunk for chunk, _ in found[:10]] == [chunk for chunk, _ in full[:10]], question
        assert len(set(dict(found)) & set(dict(full))) >= 0.9 * len(full), question
        scores = dict(full)
        assert all(score == pytest.approx(scores[c]) for c, score in found if c in scores)


def _skip_without_bm25(kb: Kb) -> None:
    """The BM25 index made as docs/many-hosts.md has an operator make it, where the
    server loads pg_textsearch (a test server of .ci/postgres.sh's default kind)."""
    import psycopg

    from kb_cli.migrations import bm25

    try:
        with kb.db.write() as conn:
            if not bm25.enabled(conn.raw):
                bm25.create_index(conn.raw)
    except (psycopg.Error, KbError):
        pytest.skip("the server does not load pg_textsearch")


def test_a_question_of_common_words_only_ranks_the_first_chunks_holding_all(
    corpus, enter_home, monkeypatch, gin_index
):
    enter_home(corpus)
    kb = Kb.open(resolve_settings(), actor="tester", create=False)
    full = _ranked(kb, COMMON_WORDS, Scope())
    monkeypatch.setattr(tsvector, "CANDIDATES", 40)
    found = _ranked(kb, COMMON_WORDS, Scope())
    assert len(found) == DEPTH
    assert {chunk for chunk, _ in found} != {chunk for chunk, _ in full}  # where it gives way
    with kb.db.read() as conn:
        for chunk, score in found:
            words = conn.execute(
                "SELECT words FROM chunks WHERE id = :id AND words @@ to_tsquery('self & return')",
                {"id": chunk},
            ).first()
            assert words is not None, "each candidate holds every common word"
            assert score == pytest.approx(dict(full).get(chunk, score))  # scores stay BM25's


def test_a_scoped_score_never_counts_a_base_out_of_scope(
    corpus, enter_home, invoke, monkeypatch, tmp_path
):
    from tests.helpers import db_execute

    ids = enter_home(corpus, writes=True)
    kb = Kb.open(resolve_settings(), actor="tester", create=False)
    monkeypatch.setattr(tsvector, "COUNTED", 10)  # so that every word is past it
    outsider = Scope(reader="outsider")  # not in the team of base "secret"
    db_execute("ANALYZE chunks")
    before = _ranked(kb, SOME_WORDS, outsider)
    copy = tmp_path / "more.txt"  # with the S3 store, the home has no directory
    copy.write_text((STDLIB / "configparser.py").read_text(encoding="utf-8"), encoding="utf-8")
    admin = ids["admin"]
    ok(invoke("upload", str(copy), "--base", "secret", "--submit", "--json", token=admin))
    ok(invoke("work", "--drain", "--json", token=admin))
    ok(invoke("publish", "--all-reviewed", "--json", token=admin))
    db_execute("ANALYZE chunks")  # the table's shares now count the new chunks
    assert before
    assert _ranked(kb, SOME_WORDS, outsider) == before
