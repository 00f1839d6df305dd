"""`kb doctor --repair` never destroys data, and a damaged database is named as such."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
import tracemalloc
from pathlib import Path

import pytest

from kb_cli.services import doctor
from tests.helpers import (
    ON_POSTGRES,
    db_rows,
    file_store_only,
    kb_env,
    remove_objects,
    run_in_process,
    sqlite_only,
)

# The same rules on a bucket prefix: tests/service/test_s3_store.py.
on_disk = file_store_only("plants, dates and counts files in the store directory")


def upload(tmp_path: Path, name: str, env: dict | None = None) -> dict:
    path = tmp_path / name
    path.write_text(f"words of {name}")
    result = run_in_process("upload", str(path), "--json", env=env)
    assert result.code == 0, result.stderr
    return result.record


def stored_objects(store: Path) -> dict[str, bytes]:
    """Every object file under the store, quarantine included, by name."""
    return {p.name: p.read_bytes() for p in store.rglob("*") if p.is_file() and len(p.name) == 32}


def age_objects(store: Path) -> None:
    """Past the grace period in which doctor leaves young objects alone."""
    old = time.time() - 3600
    for path in store.rglob("*"):
        if path.is_file():
            os.utime(path, (old, old))


@on_disk
def test_repair_refuses_a_store_that_belongs_to_another_database(tmp_path, kb_home):
    for name in ("a.txt", "b.txt", "c.txt"):
        upload(tmp_path, name)
    store = kb_home / "objects"
    before = stored_objects(store)
    age_objects(store)
    # Another knowledge base (its own database) pointed at the same store. An upload
    # there is refused now (the store names this database); its object is copied in.
    other = kb_env(KB_HOME=str(tmp_path / "other"))
    if ON_POSTGRES:
        other["DATABASE_URL"] = "sqlite:///" + str(tmp_path / "other.sqlite3")
    upload(tmp_path, "theirs.txt", env=other)
    other["OBJECT_STORE_ROOT"] = str(store)
    (tmp_path / "theirs2.txt").write_text("more of theirs")
    refused_upload = run_in_process("upload", str(tmp_path / "theirs2.txt"), "--json", env=other)
    assert refused_upload.code == 2 and "is not this knowledge base's" in refused_upload.stderr
    for path in (tmp_path / "other" / "objects").glob("??/*"):
        (store / path.parent.name).mkdir(exist_ok=True)
        shutil.copy(path, store / path.parent.name / path.name)
    age_objects(store)
    found = run_in_process("doctor", "--json", env=other)
    kinds = {problem["kind"] for problem in json.loads(found.stdout)["problems"]}
    assert found.code == 4 and kinds == {"orphan_object", "foreign_store"}
    refused = run_in_process("doctor", "--repair", "--json", env=other)
    assert refused.code == 4, refused.stderr
    assert "belongs to another database" in refused.error["message"]
    assert set(before) <= set(stored_objects(store))
    assert not (store / "quarantine").exists()
    own = json.loads(run_in_process("doctor", "--json").stdout)["problems"]
    assert [problem["kind"] for problem in own] == ["orphan_object"]  # theirs; ours all there


@on_disk
def test_repair_refuses_a_database_without_documents(tmp_path, kb_home):
    upload(tmp_path, "a.txt")
    store = kb_home / "objects"
    age_objects(store)
    fresh = kb_env(KB_HOME=str(tmp_path / "fresh"), OBJECT_STORE_ROOT=str(store))
    if ON_POSTGRES:
        fresh["DATABASE_URL"] = "sqlite:///" + str(tmp_path / "fresh.sqlite3")
    assert run_in_process("db", "upgrade", env=fresh).code == 0  # an empty database, not none
    refused = run_in_process("doctor", "--repair", "--json", env=fresh)
    assert refused.code == 4 and "has no documents" in refused.error["message"]
    assert len(stored_objects(store)) == 1 and not (store / "quarantine").exists()


@on_disk
def test_repair_moves_orphans_to_the_quarantine_and_never_deletes_them(tmp_path, kb_home):
    upload(tmp_path, "kept.txt")
    store = kb_home / "objects"
    orphan = store / "ab" / ("ab" + "0" * 30)
    orphan.parent.mkdir(exist_ok=True)
    orphan.write_bytes(b"nobody refers to me")
    age_objects(store)
    repaired = run_in_process("doctor", "--repair", "--json")
    assert repaired.code == 0, repaired.stderr
    [fix] = json.loads(repaired.stdout)["repaired"]
    assert fix["kind"] == "orphan_object" and fix["object_key"] == orphan.name
    assert not orphan.exists()
    assert (store / "quarantine" / orphan.name).read_bytes() == b"nobody refers to me"
    assert run_in_process("doctor", "--json").code == 0  # the quarantine is not an orphan


@on_disk
def test_a_store_from_before_owner_markers_is_adopted_when_it_holds_our_objects(tmp_path, kb_home):
    upload(tmp_path, "a.txt")
    store = kb_home / "objects"
    [marker] = store.glob("owner.*")
    marker.rmdir()
    orphan = store / "cd" / ("cd" + "1" * 30)
    orphan.parent.mkdir(exist_ok=True)
    orphan.write_bytes(b"left over")
    age_objects(store)
    assert run_in_process("doctor", "--repair", "--json").code == 0
    assert marker.is_dir() and (store / "quarantine" / orphan.name).exists()


def test_doctor_names_the_document_of_a_missing_object(tmp_path, kb_home):
    document = upload(tmp_path, "gone.txt")
    remove_objects()
    found = run_in_process("doctor", "--json")
    [problem] = json.loads(found.stdout)["problems"]
    assert problem["kind"] == "missing_object"
    assert problem["id"] == problem["document_id"] == document["document_id"]
    assert problem["object_key"] and document["document_id"] in problem["detail"]


@on_disk
def test_doctor_verify_finds_an_original_changed_in_the_store(tmp_path, kb_home, kb):
    changed, intact = upload(tmp_path, "changed.txt"), upload(tmp_path, "intact.txt")
    [row] = db_rows("SELECT object_key FROM documents WHERE id = :id", id=changed["document_id"])
    path = kb.store.local_path(row["object_key"])
    data = bytearray(path.read_bytes())
    data[0] ^= 1  # one bit, the size unchanged
    path.write_bytes(bytes(data))
    assert run_in_process("doctor", "--json").code == 0  # no invariant looks at the bytes
    for options in (["--verify"], ["--verify", "--repair"]):  # reported, never repaired
        found = run_in_process("doctor", *options, "--json")
        assert found.code == 4, found.stderr
        [problem] = json.loads(found.stdout)["problems"]
        assert problem["kind"] == "changed_object"
        assert problem["id"] == problem["document_id"] == changed["document_id"]
        assert problem["object_key"] == row["object_key"]
        assert intact["document_id"] not in problem["detail"]
    original = tmp_path / "changed.txt"
    replaced = run_in_process("upload", str(original), "--replace", changed["document_id"])
    assert replaced.code == 0, replaced.stderr
    assert run_in_process("doctor", "--verify", "--json").code == 0


@on_disk
def test_doctor_verify_reads_an_original_in_blocks(tmp_path, kb_home, kb):
    path = tmp_path / "large.txt"
    path.write_bytes(b"words " * 5_000_000)  # 30 MB
    assert run_in_process("upload", str(path), "--json").code == 0
    tracemalloc.start()
    try:
        report = doctor.check(kb, verify=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.ok, report.problems
    assert peak < 8 * 1024 * 1024, peak  # a block or two, never the object


@sqlite_only
@on_disk
def test_an_emptied_database_file_is_an_error_not_a_new_knowledge_base(tmp_path, kb_home):
    upload(tmp_path, "a.txt")
    database = kb_home / "kb.sqlite3"
    database.write_bytes(b"")
    Path(str(database) + "-wal").unlink(missing_ok=True)
    result = run_in_process("doctor", "--repair", "--json")
    assert result.code == 2 and "empty" in result.error["message"]
    assert database.stat().st_size == 0  # not silently re-created
    assert len(stored_objects(kb_home / "objects")) == 1


@sqlite_only
@pytest.mark.empty_database  # the test writes the home's file itself
def test_a_damaged_or_foreign_database_file_is_named(tmp_path, kb_home):
    kb_home.mkdir()
    database = kb_home / "kb.sqlite3"
    database.write_bytes(os.urandom(8192))
    garbage = run_in_process("status", "--json")
    assert garbage.code == 2 and "not a SQLite database" in garbage.error["message"]
    import sqlite3

    database.unlink()
    with sqlite3.connect(database) as conn:
        conn.execute("CREATE TABLE something_else (x)")
    foreign = run_in_process("status", "--json")
    assert foreign.code == 2 and "not a kb database" in foreign.error["message"]
    missing = run_in_process("--home", str(tmp_path / "no" / "such"), "status", "--json")
    assert missing.code == 2 and "no knowledge base in" in missing.error["message"]
    assert not (tmp_path / "no").exists()  # only upload, user add, base create make one
    nodir = run_in_process(
        "--database-url", f"sqlite:///{tmp_path}/none/kb.sqlite3", "status", "--json"
    )
    assert nodir.code == 2 and "directory does not exist" in nodir.error["message"]


@file_store_only("checks the modes of the object files kb creates in its home")
@pytest.mark.empty_database  # kb makes the home and its database file, not the fixture
def test_files_and_directories_are_private_to_their_owner(tmp_path, kb_home):
    upload(tmp_path, "secret.txt")
    for path in [kb_home, *kb_home.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path.name} is {oct(mode)}"
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path.name} is {oct(mode)}"
