"""kill -9 of `kb reindex --vectors` while it writes the SQLite home's vector index
(kb_cli/vectors/signfile.py): the file search reads is the old one or the new one,
never a part; search answers as the exact scan does; the next build removes what the
dead writer left and takes the lock it held."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from kb_cli.permissions import Scope
from kb_cli.vectors.signfile import SignFileIndex, directory_for, index_path, read_index
from kb_cli.vectors.stored import exact_nearest
from tests.helpers import kb_env, sqlite_only, start_kb

pytestmark = [sqlite_only, pytest.mark.slow]

DOCS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpora" / "flask" / "docs"
MODEL = "wordllama-l2_supercat-256"


def _killed_while_writing(directory: Path) -> bool:
    """Start a rebuild and SIGKILL it the moment its temporary file appears (or at once
    when it has finished first); whether it was caught writing."""
    process = start_kb("reindex", "--vectors", "--json", env=kb_env())
    caught = False
    while process.poll() is None:
        if any(directory.glob(".tmp-*")):
            caught = True
            break
        time.sleep(0.0005)
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
    process.wait(30)
    return caught


def test_a_writer_killed_mid_write_leaves_a_usable_index(invoke, tmp_path):
    uploaded = invoke("upload", *map(str, sorted(DOCS.iterdir())), "--submit", "--json")
    assert uploaded.code == 0, uploaded.stderr
    assert invoke("work", "--drain", "--json").code == 0
    assert invoke("publish", "--all-reviewed", "--json").code == 0
    assert invoke("reindex", "--vectors", "--json").code == 0
    kb = Kb.open(resolve_settings(), create=False)
    directory = directory_for(kb.settings)
    path = index_path(directory, MODEL, 256)
    before = path.read_bytes()
    assert kb.embedder is not None
    query = kb.embedder.embed_query("how do I register a blueprint")
    index = SignFileIndex(directory, 0)
    caught = 0
    for _attempt in range(4):
        caught += _killed_while_writing(directory)
        loaded = read_index(path)
        assert loaded is not None  # the old file or the new one, whole
        with kb.db.read() as conn:
            assert loaded.current(conn)
            found = index.nearest(conn, MODEL, query, 50, Scope(None), 0.2)
            exact = exact_nearest(conn, MODEL, query, 50, Scope(None), 0.2)
        assert [chunk for chunk, _ in found[:10]] == [chunk for chunk, _ in exact[:10]]
    assert caught, "no kill landed while the file was being written"
    assert invoke("reindex", "--vectors", "--json").code == 0  # the dead writer's lock is free
    assert not list(directory.glob(".tmp-*"))
    assert path.read_bytes() == before  # nothing changed in the database: the same file
    kb.db.close()
