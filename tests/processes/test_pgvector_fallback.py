"""A PostgreSQL server without extensions (Debian's, as .ci/postgres.sh starts it with
KB_TEST_POSTGRES_SERVER=debian: no pgvector, no pg_textsearch): the schema's pgvector and
BM25 migrations make nothing, search by meaning scans every vector and the words are
ranked from the GIN index, as before; `kb doctor` says how to get pgvector's index
without counting it as a problem, and that words are ranked from the GIN index."""

from __future__ import annotations

import pytest

from kb_cli.migrations import HEAD
from tests.helpers import ON_POSTGRES, SAMPLES, clean_env, own_postgres, run_kb

pytestmark = pytest.mark.skipif(not ON_POSTGRES, reason="the PostgreSQL pass's")


def test_without_pgvector_search_scans_and_doctor_says_how_to_get_the_index(tmp_path):
    with own_postgres(server="debian") as server:
        env = clean_env(keep_engine=False, DATABASE_URL=server.url, KB_HOME=tmp_path / "home")

        def kb(*args: str):
            result = run_kb(*args, env=env, timeout=300)  # a loaded machine: minutes
            assert result.code == 0, result.stderr
            return result

        assert kb("db", "upgrade", "--json").record["to_revision"] == HEAD
        kb("upload", str(SAMPLES / "faq.txt"), "--submit")
        kb("work", "--drain")
        kb("publish", "--all-reviewed")
        hits = kb("search", "how long does ingestion of a file take", "--mode", "vector", "--json")
        assert hits.records and {hit["filename"] for hit in hits.records} == {"faq.txt"}
        hits = kb("search", "how long does ingestion of a file take", "--mode", "lexical", "--json")
        assert {hit["filename"] for hit in hits.records} == {"faq.txt"}
        doctor = kb("doctor", "--json").record
        assert doctor["ok"] is True and doctor["problems"] == []
        assert doctor["words_index"] == "gin"  # pg_textsearch's is an operator's choice
        [note] = doctor["notes"]
        assert "install pgvector" in note and "kb db upgrade" in note
