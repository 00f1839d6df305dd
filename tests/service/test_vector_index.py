"""The SQLite home's derived vector index (kb_cli/vectors/signfile.py) on a real corpus
(flask's and httpx's documentation, embedded by the built-in model): the same top 10 as
the exact scan; new, deleted and re-embedded chunks after a build; damaged files; what
doctor reports and repairs; the worker building it once the base is large enough."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from kb_cli import queries
from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from kb_cli.embeddings import to_blob
from kb_cli.permissions import Scope
from kb_cli.records import ChunkVector
from kb_cli.vectors import stored
from kb_cli.vectors.signfile import (
    SignFileIndex,
    build,
    directory_for,
    index_path,
    read_index,
    writing,
)
from tests.helpers import run_kb, sqlite_only

pytestmark = sqlite_only

CORPORA = Path(__file__).resolve().parents[2] / "benchmarks" / "corpora"
# Far below the product's 20,000: the corpus has some 900 chunks.
SMALL = {"KB_VECTOR_INDEX_MIN_CHUNKS": "100"}
DEPTH = 50


def _corpus(invoke, root):
    for name, base in [("flask", "flask"), ("httpx", "httpx")]:
        assert invoke("base", "create", base, "--json").code == 0
        files = sorted(str(path) for path in (CORPORA / name / "docs").iterdir())
        uploaded = invoke("upload", *files, "--submit", "--base", base, "--json")
        assert uploaded.code == 0, uploaded.stderr
    assert invoke("work", "--drain", "--json").code == 0
    assert invoke("publish", "--all-reviewed", "--json").code == 0


@pytest.fixture(scope="module")
def corpus_home(build_home):
    return build_home(_corpus, **SMALL)


@pytest.fixture
def home(enter_home, corpus_home):
    """A copy of the corpus home of this test's own, without an index file yet."""
    enter_home(corpus_home, writes=True)
    kb = Kb.open(resolve_settings(), actor="tester")
    shutil.rmtree(directory_for(kb.settings), ignore_errors=True)  # the worker's, built
    yield kb
    kb.db.close()


def _questions() -> list[str]:
    lines = []
    for name in ("flask", "httpx"):
        lines += (CORPORA / name / "questions.jsonl").read_text().splitlines()
    return [json.loads(line)["question"] for line in lines]


def _query_vectors(kb: Kb) -> list[np.ndarray]:
    assert kb.embedder is not None
    return [kb.embedder.embed_query(question) for question in _questions()]


def _never(*args):
    raise AssertionError("the index fell back to the exact scan")


def _ranked(index, kb: Kb, query, scope: Scope = Scope(None)):
    assert kb.embedder is not None
    with kb.db.read() as conn:
        return index.nearest(conn, kb.embedder.model, query, DEPTH, scope, 0.2)


def _exact(kb: Kb, query, scope: Scope = Scope(None)):
    """The exact scan's ranking: what every index must agree with."""
    assert kb.embedder is not None
    with kb.db.read() as conn:
        return stored.exact_nearest(conn, kb.embedder.model, query, DEPTH, scope, 0.2)


def _rebuild(kb: Kb) -> Path:
    assert kb.embedder is not None
    directory = directory_for(kb.settings)
    with writing(directory, wait=True):
        build(kb.db, directory, kb.embedder.model, 256, incremental=False)
    return index_path(directory, kb.embedder.model, 256)


def test_the_index_ranks_as_the_exact_scan_does_in_every_scope(home):
    _rebuild(home)
    index = SignFileIndex(directory_for(home.settings), 0, _never)
    scopes = [Scope(None), Scope(None, ("httpx",)), Scope("nobody", ("flask",))]
    answered = 0
    for query in _query_vectors(home):
        for scope in scopes:
            found = _ranked(index, home, query, scope)[:10]
            assert _same(found, _exact(home, query, scope)[:10])
            answered += bool(found)
    assert answered > len(_questions())  # most questions find chunks in two scopes


def _same(found, expected) -> bool:
    """The same chunks in the same order, with the same scores (to float32 rounding: a
    product of one vector or of many is summed in another order)."""
    return [chunk for chunk, _ in found] == [chunk for chunk, _ in expected] and all(
        abs(a - b) < 1e-6 for (_, a), (_, b) in zip(found, expected, strict=True)
    )


def test_chunks_written_after_the_build_are_found_and_deleted_ones_never(home, invoke, tmp_path):
    _rebuild(home)
    index = SignFileIndex(directory_for(home.settings), 0, _never)
    note = tmp_path / "quokka.txt"
    note.write_text("The quokka protocol hands every request a marsupial token at the gate.\n")
    uploaded = invoke("upload", str(note), "--submit", "--base", "httpx", "--json").record
    assert invoke("work", "--drain", "--json").code == 0
    assert invoke("publish", uploaded["document_id"], "--json").code == 0
    assert home.embedder is not None
    query = home.embedder.embed_query("quokka protocol marsupial token")
    with home.db.read() as conn:
        (new_chunk,) = conn.execute(
            "SELECT id FROM chunks WHERE document_id = :d", {"d": uploaded["document_id"]}
        ).scalars()
    assert _ranked(index, home, query)[0][0] == new_chunk  # from the delta

    flask_docs = [
        record["document_id"]
        for record in invoke("status", "--json").records
        if record["filename"].startswith(("quickstart", "tutorial"))
    ]
    assert invoke("delete", *flask_docs, "--yes", "--json").code == 0
    with home.db.read() as conn:
        remaining = set(conn.execute("SELECT id FROM chunks").scalars())
    for query in _query_vectors(home)[:10]:
        found = _ranked(index, home, query)
        assert {chunk for chunk, _score in found} <= remaining
        assert _same(found[:10], _exact(home, query)[:10])


def test_a_re_embedding_makes_the_index_stale_until_rebuilt(home):
    _rebuild(home)
    fallbacks = []

    def counted(*args):
        fallbacks.append(1)
        return stored.exact_nearest(*args)

    index = SignFileIndex(directory_for(home.settings), 0, counted)
    query = _query_vectors(home)[0]
    _ranked(index, home, query)
    assert fallbacks == []
    best = _ranked(index, home, query)[0][0]
    flipped = -_vector_of(home, best)  # now the furthest chunk of all
    with home.db.write() as conn:
        queries.set_embeddings(
            conn, [ChunkVector(best, to_blob(flipped), "wordllama-l2_supercat-256", 256)]
        )
    found = _ranked(index, home, query)
    assert fallbacks == [1] and best not in [chunk for chunk, _ in found]
    assert _same(found, _exact(home, query))
    _rebuild(home)
    assert _same(_ranked(index, home, query), found) and fallbacks == [1]


def _vector_of(kb: Kb, chunk_id: int) -> np.ndarray:
    with kb.db.read() as conn:
        blob = conn.execute(
            "SELECT embedding FROM chunks WHERE id = :id", {"id": chunk_id}
        ).scalar()
    return np.frombuffer(bytes(blob), dtype="<f2").astype(np.float32)


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage header", "another model"])
def test_a_damaged_index_file_is_not_used(home, damage):
    path = _rebuild(home)
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "garbage header":
        path.write_bytes(b"KBVECIX1" + b"\xff" * 64 + data[72:])
    else:
        path.write_bytes(data.replace(b"wordllama-l2_supercat-256", b"wordllama-l2_supercat-999"))
    assert read_index(path) is None or read_index(path).header.model != "wordllama-l2_supercat-256"
    index = SignFileIndex(directory_for(home.settings), 0)
    for query in _query_vectors(home)[:5]:
        assert _same(_ranked(index, home, query), _exact(home, query))


def test_scrambled_ids_cost_recall_never_a_wrong_hit(home):
    """Bytes changed inside the body (a disk error): every hit is still a published chunk
    in scope, scored by the vector the database holds."""
    path = _rebuild(home)
    index = read_index(path)
    assert index is not None
    data = bytearray(path.read_bytes())
    start = len(data) - 8 - index.header.body_bytes()
    rng = np.random.default_rng(7)
    shuffled = rng.permutation(
        np.frombuffer(bytes(data[start : start + 8 * index.header.count]), "<i8")
    )
    data[start : start + 8 * index.header.count] = shuffled.tobytes()
    path.write_bytes(bytes(data))
    scrambled = SignFileIndex(directory_for(home.settings), 0, _never)
    scope = Scope(None, ("flask",))
    for query in _query_vectors(home)[:10]:
        exact = dict(_exact(home, query, Scope(None, ("flask",))))
        for chunk, score in _ranked(scrambled, home, query, scope):
            assert chunk in exact or score < min(exact.values())
            assert chunk not in exact or abs(exact[chunk] - score) < 1e-6


def test_doctor_reports_a_missing_or_stale_index_and_repair_rebuilds_it(home, invoke):
    found = invoke("doctor", "--json")
    assert found.code == 4
    (problem,) = found.record["problems"]
    assert problem["kind"] == "vector_index" and "missing" in problem["detail"]
    repaired = invoke("doctor", "--repair", "--json")
    assert repaired.code == 0 and repaired.record["repaired"][0]["kind"] == "vector_index"
    assert invoke("doctor", "--json").code == 0
    path = index_path(directory_for(home.settings), "wordllama-l2_supercat-256", 256)
    path.write_bytes(path.read_bytes()[:100])
    assert "damaged" in invoke("doctor", "--json").record["problems"][0]["detail"]
    assert invoke("doctor", "--repair", "--json").code == 0
    assert read_index(path) is not None


def test_doctor_says_nothing_below_the_threshold(home, invoke, monkeypatch):
    monkeypatch.setenv("KB_VECTOR_INDEX_MIN_CHUNKS", "20000")
    assert invoke("doctor", "--json").code == 0


def test_reindex_vectors_writes_the_index(home, invoke):
    result = invoke("reindex", "--vectors", "--json")
    assert result.code == 0, result.stderr
    (record,) = result.records
    assert record["chunks"] > 100 and record["model"] == "wordllama-l2_supercat-256"
    assert read_index(Path(record["path"])) is not None
    text = invoke("reindex", "--vectors")
    assert text.code == 0 and text.stdout.startswith("indexed ")


def test_the_worker_builds_the_index_once_the_base_is_large_enough(home, invoke, tmp_path):
    path = index_path(directory_for(home.settings), "wordllama-l2_supercat-256", 256)
    assert not path.exists()
    note = tmp_path / "note.txt"
    note.write_text("One more page about request hooks.\n")
    invoke("upload", str(note), "--submit", "--base", "httpx", "--json")
    assert invoke("work", "--json").code == 0
    index = read_index(path)
    assert index is not None
    with home.db.read() as conn:
        assert index.current(conn)
        assert index.header.watermark == stored.newest_chunk_id(conn)


def test_an_index_of_another_database_is_not_used(home, tmp_path):
    path = _rebuild(home)
    header = read_index(path)
    assert header is not None
    data = path.read_bytes()
    database_id = header.header.database_id
    assert database_id is not None
    path.write_bytes(data.replace(database_id.encode(), b"0" * len(database_id)))
    index = read_index(path)
    assert index is not None
    with home.db.read() as conn:
        assert not index.current(conn)
    assert dataclasses.replace(header.header, database_id="0" * len(database_id)) == index.header


def test_the_vectors_read_by_position_and_in_one_read_are_the_database_s(home):
    """A search reads its candidates' vectors row by row, a fold all of them at once:
    both are the half-precision vectors the database holds, for the ids beside them."""
    index = read_index(_rebuild(home))
    assert index is not None
    every = index.every_half()
    some = np.array([0, 7, index.header.count - 1])
    assert np.array_equal(index.halves(some), every[some])
    with home.db.read() as conn:
        ids, blobs = stored.vectors_between(conn, home.embedder.model, 256, 0, 1 << 62, 1 << 30)
    assert ids == index.ids.tolist()
    assert np.array_equal(np.frombuffer(b"".join(blobs), every.dtype).reshape(every.shape), every)


QUESTION = "How do I set a timeout on a request?"


def _damage(kb: Kb, path: Path, damage: str) -> None:
    """One half-precision value of the best chunk's row, where it counts most for
    QUESTION: its top exponent bit flipped (about 65,536 times larger: no longer a
    component of a unit vector, yet finite), or made infinite or NaN (numpy warned)."""
    index = read_index(path)
    assert index is not None and kb.embedder is not None
    query = kb.embedder.embed_query(QUESTION)
    best = _exact(kb, query)[0][0]
    row = int(np.flatnonzero(index.ids == best)[0])
    dimension = int(np.argmax(np.abs(index.every_half()[row].astype(np.float32) * query)))
    halves_at = path.stat().st_size - 8 - 2 * index.header.dim * index.header.count
    at = halves_at + 2 * (row * index.header.dim + dimension)
    data = bytearray(path.read_bytes())
    if damage == "one bit flipped":
        data[at + 1] ^= 0x40  # little-endian: the high byte holds the exponent's top bit
    else:
        data[at : at + 2] = np.array([np.inf if damage == "infinite" else np.nan], "<f2").tobytes()
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["one bit flipped", "infinite", "NaN"])
def test_damaged_vectors_are_searched_as_the_exact_scan_and_doctor_finds_them(
    home, tmp_path, damage
):
    path = _rebuild(home)
    exact = _searched_without_the_index(path, tmp_path)
    _damage(home, path, damage)
    searched = run_kb("search", QUESTION, "--mode", "vector", "--json")
    assert searched.code == 0 and searched.stderr == ""  # no numpy RuntimeWarning
    assert searched.records == exact.records
    found = run_kb("doctor", "--json")
    assert found.code == 4, found.stdout
    (problem,) = found.record["problems"]
    assert problem["kind"] == "vector_index" and "is damaged" in problem["detail"]
    repaired = run_kb("doctor", "--repair", "--json")
    assert repaired.code == 0 and repaired.record["repaired"][0]["kind"] == "vector_index"
    assert run_kb("doctor", "--json").code == 0
    index = read_index(path)
    assert index is not None and index.intact()
    assert run_kb("search", QUESTION, "--mode", "vector", "--json").records == exact.records


def _searched_without_the_index(path: Path, tmp_path: Path):
    """`kb search` as the exact scan answers it: the index file moved away meanwhile."""
    aside = tmp_path / path.name
    path.rename(aside)
    try:
        result = run_kb("search", QUESTION, "--mode", "vector", "--json")
    finally:
        aside.rename(path)
    assert result.code == 0 and result.records, result.stderr
    return result


def test_a_fold_never_copies_damaged_vectors_on(home, invoke, tmp_path):
    """A fold copies the indexed vectors into the new file and checksums them anew: from
    a damaged file it would make the damage look whole. It writes every vector from the
    database instead."""
    path = _rebuild(home)
    _damage(home, path, "one bit flipped")
    note = tmp_path / "note.txt"
    note.write_text("One more page about request timeouts.\n")
    assert invoke("upload", str(note), "--submit", "--base", "httpx", "--json").code == 0
    assert invoke("work", "--json").code == 0
    assert home.embedder is not None
    directory = directory_for(home.settings)
    with writing(directory, wait=True):
        report = build(home.db, directory, home.embedder.model, 256, incremental=True)
    index = read_index(path)
    assert index is not None
    with home.db.read() as conn:
        ids, blobs = stored.vectors_between(conn, home.embedder.model, 256, 0, 1 << 62, 1 << 30)
    every = index.every_half()
    assert ids == index.ids.tolist()
    assert np.array_equal(np.frombuffer(b"".join(blobs), every.dtype).reshape(every.shape), every)
    assert report.added == report.chunks and index.intact()  # none copied; checksum whole


def test_an_index_file_of_the_first_format_is_stale_and_rebuilt(home):
    """Files written before the checksum (format 1) are not read: doctor calls them
    stale, and --repair writes them anew."""
    path = _rebuild(home)
    path.write_bytes(b"KBVECIX1" + path.read_bytes()[8:])
    assert read_index(path) is None
    found = run_kb("doctor", "--json")
    assert found.code == 4 and "is stale" in found.record["problems"][0]["detail"]
    assert run_kb("doctor", "--repair", "--json").code == 0
    assert path.read_bytes()[:8] == b"KBVECIX2" and run_kb("doctor", "--json").code == 0
