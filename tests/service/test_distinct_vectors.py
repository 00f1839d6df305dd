"""pgvector's index holds each distinct vector once (`distinct_vectors`, migration 0020)
on a real PostgreSQL server with the extension: the table keeps in step with the chunks
through every write, every chunk of a repeated vector is still found, and a key is never
dropped while a chunk that another transaction is committing has it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from kb_cli.embeddings import from_blobs
from kb_cli.migrations import pgvector
from kb_cli.permissions import Scope
from tests.helpers import ON_POSTGRES

pytestmark = pytest.mark.skipif(not ON_POSTGRES, reason="pgvector is PostgreSQL's")

STDLIB = Path(__import__("json").__file__).parents[1]
COPIED = "argparse.py"  # uploaded twice, as two files: every vector twice
OTHER = "tarfile.py"
IN_STEP = f"""SELECT
    (SELECT count(*) FROM {pgvector.DISTINCT}) AS indexed,
    (SELECT count(DISTINCT (embedding_model, {pgvector.vector_key()})) FROM chunks
     WHERE embedding IS NOT NULL) AS distinct_in_chunks"""


def ok(result) -> list[dict]:
    assert result.code == 0, result.stderr
    return result.records


def _corpus(invoke, root: Path) -> dict[str, str]:
    ids = {}
    for name, source in (("first", COPIED), ("second", COPIED), ("other", OTHER)):
        (root / name).mkdir()
        copy = root / name / (Path(source).stem + ".txt")  # a chunk's vector reads its name
        copy.write_text((STDLIB / source).read_text(encoding="utf-8"), encoding="utf-8")
        ids[name] = ok(invoke("upload", str(copy), "--submit", "--json"))[0]["document_id"]
    ok(invoke("work", "--drain", "--json"))
    ok(invoke("publish", "--all-reviewed", "--json"))
    return ids


@pytest.fixture(scope="module")
def corpus(build_home):
    return build_home(_corpus)


@pytest.fixture
def home(corpus, enter_home) -> tuple[Kb, dict[str, str]]:
    ids = enter_home(corpus, writes=True)
    kb = Kb.open(resolve_settings(), actor="tester", create=False)
    with kb.db.read() as conn:
        if not pgvector.keeps_distinct(conn.raw):
            pytest.fail("the test server has no pgvector: start it with .ci/postgres.sh")
    return kb, ids


def _in_step(kb: Kb) -> tuple[int, int]:
    with kb.db.read() as conn:
        row = conn.execute(IN_STEP).one()
    return row.indexed, row.distinct_in_chunks


def _keys_of(kb: Kb, document_id: str) -> set[bytes]:
    with kb.db.read() as conn:
        sql = f"SELECT {pgvector.vector_key()} FROM chunks WHERE document_id = :d"
        return {bytes(key) for key in conn.execute(sql, {"d": document_id}).scalars()}


def _indexed(kb: Kb, keys: set[bytes]) -> set[bytes]:
    with kb.db.read() as conn:
        sql = f"SELECT key FROM {pgvector.DISTINCT} WHERE key = ANY(:keys)"
        return {bytes(key) for key in conn.execute(sql, {"keys": list(keys)}).scalars()}


def test_each_vector_is_indexed_once_and_all_its_chunks_are_found(home):
    kb, ids = home
    indexed, distinct = _in_step(kb)
    assert indexed == distinct
    with kb.db.read() as conn:
        chunks = conn.execute("SELECT count(*) FROM chunks").scalar()
        assert indexed < chunks  # the copy's vectors are not indexed again
        first = conn.execute(
            "SELECT id, embedding FROM chunks WHERE document_id = :d ORDER BY chunk_index LIMIT 1",
            {"d": ids["first"]},
        ).one()
        query = from_blobs([bytes(first.embedding)], 256)[0].astype(np.float32)
        query /= np.linalg.norm(query)
        found = kb.vectors.nearest(conn, kb.embedder.model, query, 10, Scope(), -1.0)
        same = conn.execute(
            "SELECT id FROM chunks WHERE embedding = :e ORDER BY id", {"e": first.embedding}
        ).scalars()
    same = list(same)
    assert len(same) >= 2  # the chunk and its copy's twin
    assert [chunk for chunk, _score in found[: len(same)]] == same


def test_a_key_goes_with_the_last_chunk_that_has_it(home, invoke):
    kb, ids = home
    copied, other = _keys_of(kb, ids["first"]), _keys_of(kb, ids["other"])
    ok(invoke("delete", ids["first"], "--yes", "--json"))
    assert _indexed(kb, copied) == copied  # the second copy still has every one
    ok(invoke("delete", ids["second"], "--yes", "--json"))
    assert _indexed(kb, copied - other) == set()
    assert _indexed(kb, other) == other
    assert _in_step(kb)[0] == _in_step(kb)[1]


def test_a_changed_vector_moves_its_key(home):
    kb, ids = home
    with kb.db.write() as conn:
        (chunk,) = conn.execute(
            "SELECT id FROM chunks WHERE document_id = :d ORDER BY chunk_index LIMIT 1",
            {"d": ids["other"]},
        ).scalars()
        old = conn.execute(
            f"SELECT {pgvector.vector_key()} FROM chunks WHERE id = :id", {"id": chunk}
        ).scalar()
        first_byte_zeroed = "decode(regexp_replace(encode(embedding, 'hex'), '^..', '00'), 'hex')"
        conn.execute(
            f"UPDATE chunks SET embedding = {first_byte_zeroed} WHERE id = :id", {"id": chunk}
        )
        new = conn.execute(
            f"SELECT {pgvector.vector_key()} FROM chunks WHERE id = :id", {"id": chunk}
        ).scalar()
    assert old != new
    assert _indexed(kb, {bytes(new)}) == {bytes(new)}
    assert _indexed(kb, {bytes(old)}) == set()
    assert _in_step(kb)[0] == _in_step(kb)[1]


COPY_ROW = """INSERT INTO chunks (document_id, revision, task_id, chunk_index, text, terms,
    term_count, embedding, embedding_model, embedding_dim)
    SELECT document_id, revision, task_id, chunk_index + 100000, text, terms, term_count,
    embedding, embedding_model, embedding_dim FROM chunks WHERE id = :id"""


@pytest.mark.parametrize("first", ["writer", "deleter"])
def test_a_key_stays_while_a_concurrent_writer_adds_a_chunk_that_has_it(home, first):
    """One transaction deletes the only chunk of a vector while another writes a new
    chunk of the same vector: whichever goes first, the key stays."""
    kb, ids = home
    with kb.db.read() as conn:
        chunk, key = conn.execute(
            f"SELECT id, {pgvector.vector_key()} FROM chunks AS c WHERE document_id = :d"
            f" AND NOT EXISTS (SELECT 1 FROM chunks AS o WHERE o.id != c.id"
            f" AND o.embedding = c.embedding) ORDER BY chunk_index LIMIT 1",
            {"d": ids["other"]},
        ).one()
    started, waited = threading.Event(), {}

    def run(who: str, sql: str) -> None:
        with kb.db.write() as conn:
            began = time.monotonic()
            conn.execute(sql, {"id": chunk})
            waited[who] = time.monotonic() - began
            if who == first:
                started.set()
                time.sleep(1.0)  # the other one waits for this commit meanwhile

    def write() -> None:
        run("writer", COPY_ROW)

    def delete() -> None:
        run("deleter", "DELETE FROM chunks WHERE id = :id")

    leader, follower = (write, delete) if first == "writer" else (delete, write)
    threads = [threading.Thread(target=leader)]
    threads[0].start()
    assert started.wait(10)
    threads.append(threading.Thread(target=follower))
    threads[1].start()
    for thread in threads:
        thread.join(30)
    second = "deleter" if first == "writer" else "writer"
    assert waited[second] > 0.5  # its trigger waited for the other's commit
    assert _indexed(kb, {bytes(key)}) == {bytes(key)}
    assert _in_step(kb)[0] == _in_step(kb)[1]
