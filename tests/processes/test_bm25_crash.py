"""pg_textsearch's BM25 index after a crash of the server: version 1.0 keeps what it took
in since the last checkpoint out of the index (the rows themselves are safe), so search
would never propose those chunks. `kb doctor` counts what the index holds against the
chunks, says so, and `--repair` rebuilds it. On a server of its own, stopped with
`pg_ctl -m immediate` (as a crash stops it)."""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers import ON_POSTGRES, REPO, SAMPLES, clean_env, own_postgres, run_kb

pytestmark = [pytest.mark.skipif(not ON_POSTGRES, reason="the PostgreSQL pass's"), pytest.mark.slow]


def _create_the_index(url: str) -> None:
    """As docs/many-hosts.md has an operator do it: kb never builds it itself."""
    import psycopg

    from kb_cli.migrations import bm25

    try:
        with psycopg.connect(url.replace("+psycopg", ""), autocommit=False) as raw:
            bm25.create_index(raw)
    except psycopg.Error:
        pytest.skip("this server does not load pg_textsearch")


def test_doctor_finds_the_chunks_a_crash_took_from_the_bm25_index_and_repair_restores_them(
    tmp_path,
):
    with own_postgres() as server:
        env = clean_env(keep_engine=False, DATABASE_URL=server.url, KB_HOME=tmp_path / "home")

        def kb(*args: str, code: int = 0):
            result = run_kb(*args, env=env, timeout=300)
            assert result.code == code, result.stderr
            return result

        kb("db", "upgrade")
        _create_the_index(server.url)
        kb("upload", str(SAMPLES / "faq.txt"), "--submit")
        kb("work", "--drain")
        kb("publish", "--all-reviewed")
        script = str(REPO / ".ci" / "postgres.sh")
        subprocess.run(["bash", script, "stop", server.directory], check=True, timeout=60)
        subprocess.run(["bash", script, "resume", server.directory], check=True, timeout=60)

        found = kb("doctor", "--json", code=4).record
        [problem] = found["problems"]
        assert problem["kind"] == "lexical_index", found
        repaired = kb("doctor", "--repair", "--json").record
        assert [fix["kind"] for fix in repaired["repaired"]] == ["lexical_index"]
        assert kb("doctor", "--json").record["ok"] is True
        hits = kb("search", "how long does ingestion of a file take", "--mode", "lexical", "--json")
        assert {hit["filename"] for hit in hits.records} == {"faq.txt"}


def test_after_a_clean_restart_search_still_finds_what_the_index_lost_count_of(tmp_path):
    """pg_textsearch 1.0 may count none of what it held only in memory once the server
    restarts cleanly, and then propose nothing: the words are ranked from the GIN index
    instead, so search finds them all the same; `kb doctor` says so and repair mends it."""
    with own_postgres() as server:
        env = clean_env(keep_engine=False, DATABASE_URL=server.url, KB_HOME=tmp_path / "home")

        def kb(*args: str, code: int | None = 0):
            result = run_kb(*args, env=env, timeout=300)
            assert code is None or result.code == code, result.stderr
            return result

        kb("db", "upgrade")
        _create_the_index(server.url)
        kb("upload", str(SAMPLES / "faq.txt"), str(SAMPLES / "handbook.pdf"), "--submit")
        kb("work", "--drain")
        kb("publish", "--all-reviewed")
        question = ("how long does ingestion of a file take", "--mode", "lexical", "--json")
        before = [
            (hit["document_id"], hit["chunk_index"]) for hit in kb("search", *question).records
        ]
        script = str(REPO / ".ci" / "postgres.sh")
        subprocess.run(["bash", script, "restart", server.directory], check=True, timeout=60)

        assert [
            (hit["document_id"], hit["chunk_index"]) for hit in kb("search", *question).records
        ] == before
        checked = kb("doctor", "--json", code=None)
        if checked.code == 4:  # the index lost count: said, and mended
            assert [p["kind"] for p in checked.record["problems"]] == ["lexical_index"]
            kb("doctor", "--repair", "--json")
        assert kb("doctor", "--json").record["ok"] is True
        assert [
            (hit["document_id"], hit["chunk_index"]) for hit in kb("search", *question).records
        ] == before
