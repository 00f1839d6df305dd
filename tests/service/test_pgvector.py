"""pgvector's HNSW index on a real PostgreSQL server that has the extension (the CI's
PostgreSQL pass runs on one, .ci/postgres.sh): it finds what the exact scan finds,
and never a chunk outside the caller's scope, however selective the scope."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from kb_cli.metadata import MetaFilter
from kb_cli.migrations import pgvector
from kb_cli.permissions import Scope
from kb_cli.vectors.pgvector import (
    PgVectorIndex,
    indexes_vectors,
    nearest_by_index,
    nearest_statement,
)
from kb_cli.vectors.stored import exact_nearest
from tests.helpers import ON_POSTGRES

pytestmark = pytest.mark.skipif(not ON_POSTGRES, reason="pgvector is PostgreSQL's")

# Real text, several hundred chunks: modules of the standard library.
STDLIB = Path(__import__("json").__file__).parents[1]
OPEN_FILES = ["argparse.py", "pathlib.py", "tarfile.py", "logging/__init__.py"]
TAGGED_FILE = "shutil.py"  # --meta team=tools
SECRET_FILE = "subprocess.py"  # in a base the outsider may not read
DRAFT_FILE = "tempfile.py"  # processed, never published
QUESTIONS = [
    "parse command line arguments and print the help message",
    "extract every member of a compressed archive to a directory",
    "copy a directory tree recursively, preserving permissions",
    "start a child process and wait for its exit code",
    "create a temporary file that is deleted when closed",
    "join path components and resolve symbolic links",
    "write a log record to every handler of a logger",
]
DEPTH = 50


def ok(result) -> list[dict]:
    assert result.code == 0, result.stderr
    return result.records


def _corpus(invoke, root: Path) -> dict[str, str]:
    def upload(name: str, *options: str, token: str) -> str:
        copy = root / (Path(name).stem + ".txt")
        copy.write_text((STDLIB / name).read_text(encoding="utf-8"), encoding="utf-8")
        records = ok(invoke("upload", str(copy), "--submit", "--json", *options, token=token))
        return records[0]["document_id"]

    admin = ok(invoke("user", "add", "root", "--role", "admin", "--json"))[0]["token"]
    ok(invoke("base", "create", "secret", "--team", "insiders", "--json", token=admin))
    for name in OPEN_FILES:
        upload(name, token=admin)
    upload(TAGGED_FILE, "--meta", "team=tools", token=admin)
    secret = upload(SECRET_FILE, "--base", "secret", token=admin)
    ok(invoke("work", "--drain", "--json", token=admin))
    ok(invoke("publish", "--all-reviewed", "--json", token=admin))
    draft = upload(DRAFT_FILE, token=admin)
    ok(invoke("work", "--drain", "--json", token=admin))
    return {"secret": secret, "draft": draft}


@pytest.fixture(scope="module")
def corpus(build_home):
    return build_home(_corpus)


@pytest.fixture
def home(corpus, enter_home) -> tuple[Kb, dict[str, str]]:
    ids = enter_home(corpus)
    kb = Kb.open(resolve_settings(), actor="tester", create=False)
    with kb.db.read() as conn:
        if not pgvector.enabled(conn.raw):
            pytest.fail("the test server has no pgvector: start it with .ci/postgres.sh")
    return kb, ids


def _nearest(kb: Kb, index, question: str, scope: Scope) -> list[tuple[int, float]]:
    assert kb.embedder is not None
    vector = kb.embedder.embed_query(question)
    with kb.db.read() as conn:
        return index.nearest(conn, kb.embedder.model, vector, DEPTH, scope, -1.0)


def _exact(kb: Kb, question: str, scope: Scope) -> list[tuple[int, float]]:
    """The exact scan's ranking: what the index must agree with."""
    assert kb.embedder is not None
    vector = kb.embedder.embed_query(question)
    with kb.db.read() as conn:
        return exact_nearest(conn, kb.embedder.model, vector, DEPTH, scope, -1.0)


def test_the_index_finds_what_the_exact_scan_finds(home):
    kb, _ids = home
    assert isinstance(kb.vectors, PgVectorIndex)
    for question in QUESTIONS:
        found = _nearest(kb, kb.vectors, question, Scope())
        truth = _exact(kb, question, Scope())
        assert len(found) == DEPTH
        assert found[:10] == truth[:10], question  # same chunks, same scores, same order


def test_the_search_statement_can_walk_the_hnsw_index(home):
    kb, _ids = home
    assert kb.embedder is not None
    query = np.zeros(256, dtype=np.float32)  # any vector of the model's dimension
    with kb.db.read() as conn:
        assert indexes_vectors(conn)
        ids, _blobs = nearest_by_index(conn, kb.embedder.model, query, DEPTH, Scope(), 100)
        assert len(ids) == DEPTH  # from the index, not the exact fallback
        # Only the index gives chunks in that order without sorting them all; at this
        # size the planner would rather sort (at 100k it picks the index itself).
        conn.execute("SET LOCAL enable_sort = off")
        statement = nearest_statement(kb.embedder.model, 256, "").replace(
            ":query", "(SELECT embedding_hv FROM chunks LIMIT 1)::halfvec(256)"
        )
        plan = conn.execute("EXPLAIN " + statement, {"depth": DEPTH}).scalars()
    assert pgvector.index_name(kb.embedder.model, 256) in "\n".join(plan)


def test_no_chunk_outside_the_scope_even_when_the_scope_is_small(home):
    kb, ids = home
    with kb.db.read() as conn:
        of_document = "SELECT id FROM chunks WHERE document_id = :d"
        secret = set(conn.execute(of_document, {"d": ids["secret"]}).scalars())
        draft = set(conn.execute(of_document, {"d": ids["draft"]}).scalars())
        tagged = set(
            conn.execute(
                "SELECT c.id FROM chunks AS c JOIN documents AS d ON d.id = c.document_id"
                " WHERE d.meta ->> 'team' = 'tools'"
            ).scalars()
        )
    assert secret and draft and tagged
    outsider = Scope(reader="outsider")
    where = dataclasses.replace(Scope(), where=(MetaFilter("team", "tools", False),))
    insider = Scope(bases=("secret",))
    for question in QUESTIONS:
        seen = {chunk for chunk, _ in _nearest(kb, kb.vectors, question, outsider)}
        assert len(seen) == DEPTH and not seen & (secret | draft)
        kept = {chunk for chunk, _ in _nearest(kb, kb.vectors, question, where)}
        assert kept <= tagged and len(kept) == min(DEPTH, len(tagged))
        only_secret = _nearest(kb, kb.vectors, question, insider)
        assert {chunk for chunk, _ in only_secret} <= secret
        assert len(only_secret) == min(DEPTH, len(secret))
