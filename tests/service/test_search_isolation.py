"""Isolation at scale (docs/access.md, "Knowledge bases"): searches race an unpublish, a
delete, a revoked grant and a team change, on a real database with the vector index the
engine uses in place (SQLite: the derived index file, built before the races; PostgreSQL:
whatever kb.vectors is there, and pg_textsearch's BM25 index where .ci/run has the
template databases made with it). No search that began after a change committed may return
a chunk that change took out of the reader's sight, in any mode."""

from __future__ import annotations

import os
import threading
import time

from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from kb_cli.permissions import Actor, Role
from kb_cli.ranking import SearchMode
from kb_cli.services.search import SearchRequest, search
from kb_cli.vectors.signfile import directory_for, index_path, read_index
from tests.helpers import ON_POSTGRES

TOPIC = "The rocket budget for the {name} launch: fuel, insurance and the ground crew's pay."
SEARCH_THREADS = 2
BM25_INDEX = os.environ.get("KB_TEST_BM25_INDEX") == "1"  # tests/helpers.py makes it


def _ok(result):
    assert result.code == 0, result.stderr
    return result.records


def _documents(invoke, tmp_path, admin: str) -> dict[str, str]:
    """name -> document id: one published document per way of leaving a reader's sight,
    and one that stays."""
    _ok(invoke("user", "add", "rita", "--role", "viewer", "--team", "eng", "--json", token=admin))
    _ok(invoke("base", "create", "open", "--json", token=admin))
    _ok(invoke("base", "create", "eng", "--team", "eng", "--json", token=admin))
    _ok(invoke("base", "create", "secret", "--team", "ops", "--json", token=admin))
    _ok(invoke("base", "grant", "secret", "rita", "--json", token=admin))
    ids = {}
    for name, base in [
        ("unpublished", "open"),
        ("deleted", "open"),
        ("revoked", "secret"),
        ("team", "eng"),
        ("kept", "open"),
    ]:
        path = tmp_path / f"{name}.txt"
        path.write_text(TOPIC.format(name=name) + "\n")
        task = _ok(invoke("upload", str(path), "--submit", "--base", base, "--json", token=admin))
        ids[name] = task[0]["document_id"]
    _ok(invoke("work", "--drain", "--json", token=admin))
    _ok(invoke("publish", "--all-reviewed", "--json", token=admin))
    return ids


def test_no_search_sees_what_a_committed_change_took_away(invoke, tmp_path, monkeypatch):
    monkeypatch.setenv("KB_VECTOR_INDEX_MIN_CHUNKS", "1")
    admin = _ok(invoke("user", "add", "root", "--role", "admin", "--json"))[0]["token"]
    ids = _documents(invoke, tmp_path, admin)
    if not ON_POSTGRES:
        _ok(invoke("reindex", "--vectors", "--json", token=admin))
    if BM25_INDEX:  # the races then run on pg_textsearch's ranking too (.ci/run)
        [doctor] = _ok(invoke("doctor", "--json", token=admin))
        assert doctor["words_index"] == "pg_textsearch"
    changes = [
        ("unpublished", ("unpublish", ids["unpublished"], "--json")),
        ("deleted", ("delete", ids["deleted"], "--yes", "--json")),
        ("revoked", ("base", "revoke", "secret", "rita", "--json")),
        ("team", ("user", "teams", "rita", "--remove", "eng", "--json")),
    ]
    committed: dict[str, float] = {}
    seen: list[tuple[float, set[str]]] = []
    stop = threading.Event()
    failures: list[BaseException] = []

    def searcher(modes: tuple[SearchMode, ...]) -> None:
        kb = Kb.open(resolve_settings(), create=False).acting_as(Actor("rita", Role.VIEWER))
        try:
            while not stop.is_set():
                for mode in modes:
                    began = time.monotonic()
                    hits = search(kb, SearchRequest("rocket budget launch fuel", 20, mode)).hits
                    seen.append((began, {hit.document_id for hit in hits}))
        except BaseException as error:
            failures.append(error)
        finally:
            kb.db.close()

    threads = [
        threading.Thread(target=searcher, args=(modes,))
        for modes in [
            (SearchMode.VECTOR, SearchMode.HYBRID),
            (SearchMode.VECTOR, SearchMode.LEXICAL),
        ][:SEARCH_THREADS]
    ]

    def searched_since(moment: float) -> None:
        """Until a search that began after `moment` has finished (the machine may be
        slow: no fixed pause decides what is tested)."""
        deadline = time.monotonic() + 60
        while not any(began > moment for began, _found in list(seen)):
            assert not failures and time.monotonic() < deadline, failures
            time.sleep(0.01)

    started = time.monotonic()
    for thread in threads:
        thread.start()
    try:
        searched_since(started)
        for name, args in changes:
            _ok(invoke(*args, token=admin))
            committed[name] = time.monotonic()
            searched_since(committed[name])
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert not failures, failures
    if not ON_POSTGRES:  # the index answered throughout: it is still current
        kb = Kb.open(resolve_settings(), create=False)
        path = index_path(directory_for(kb.settings), "wordllama-l2_supercat-256", 256)
        index = read_index(path)
        with kb.db.read() as conn:
            assert index is not None and index.current(conn)
        kb.db.close()
    everything = set(ids.values())
    assert any(found == everything for began, found in seen if began < committed["unpublished"])
    for name, at in committed.items():
        after = [found for began, found in seen if began > at]
        assert after, f"no search began after the {name} change"
        assert all(ids[name] not in found for found in after), name
        assert all(ids["kept"] in found for found in after)
