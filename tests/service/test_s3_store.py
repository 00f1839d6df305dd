"""The S3-compatible object store against a real S3 server on loopback (moto): streaming
puts (one conditional PUT, or a multipart upload), never an overwrite, the checksum, the
listing, the owner marker and the quarantine that `kb doctor` relies on, and what each
kind of failure becomes."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterator

import pytest

from kb_cli.errors import (
    ObjectStoreMisconfigured,
    ObjectStoreUnreachable,
    ObjectTooLarge,
    RepairRefused,
)
from kb_cli.services import doctor
from kb_cli.store import layout, open_store
from kb_cli.store.location import S3Location
from kb_cli.store.s3 import PART_BYTES, S3ObjectStore, classify
from tests.helpers import db_rows, later, run_in_process
from tests.loopback import JsonHandler, s3_store_env, serving

LIMIT = 64 * 1024 * 1024
LARGE = PART_BYTES + 1024 * 1024 + 7  # a multipart upload of two parts


@pytest.fixture
def s3_env(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This test's kb on a fresh prefix of the loopback bucket."""
    env = s3_store_env(s3_endpoint)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def store(s3_env: dict[str, str]) -> S3ObjectStore:
    opened = open_store(s3_env["OBJECT_STORE_ROOT"])
    assert isinstance(opened, S3ObjectStore)
    return opened


def read_back(store: S3ObjectStore, key: str) -> bytes:
    return b"".join(store.read_blocks(key))


@pytest.mark.parametrize("size", [0, 1000, LARGE], ids=["empty", "small", "multipart"])
def test_put_streams_hashes_and_reads_back(store, size):
    data = os.urandom(size)
    stored = store.put(io.BytesIO(data), LIMIT)
    assert (stored.size_bytes, stored.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert read_back(store, stored.key) == data
    assert store.exists(stored.key) and store.local_path(stored.key) is None
    assert [key for key, _ in store.entries()] == [stored.key]  # no temporary left behind


@pytest.mark.parametrize("size", [1000, LARGE], ids=["small", "multipart"])
def test_an_existing_object_is_never_overwritten(store, size, monkeypatch):
    monkeypatch.setattr(layout, "new_key", lambda: "ab" * 16)  # the same key twice
    first = store.put(io.BytesIO(b"first"), LIMIT)
    with pytest.raises(Exception, match="already exists") as refused:
        store.put(io.BytesIO(os.urandom(size)), LIMIT)
    assert type(refused.value).__name__ == "AlreadyExistsError"
    assert read_back(store, first.key) == b"first"
    assert [key for key, _ in store.entries()] == [first.key]


@pytest.mark.parametrize("size", [2000, LARGE], ids=["small", "multipart"])
def test_a_file_over_the_limit_stores_nothing(store, size):
    with pytest.raises(ObjectTooLarge):
        store.put(io.BytesIO(os.urandom(size)), size - 1)
    assert list(store.entries()) == []


def test_delete_exists_and_a_missing_object(store):
    stored = store.put(io.BytesIO(b"words"), LIMIT)
    store.delete(stored.key)
    store.delete(stored.key)  # gone already: nothing happens
    assert not store.exists(stored.key)
    with pytest.raises(FileNotFoundError):
        read_back(store, stored.key)


def test_the_owner_marker_names_the_first_database_only(store):
    assert store.owner() is None
    store.claim("database-one")
    store.claim("database-two")
    assert store.owner() == "database-one"
    assert list(store.entries()) == []  # the marker is not an object


def test_quarantine_keeps_the_bytes_under_the_quarantine_prefix(store, s3_env):
    stored = store.put(io.BytesIO(b"nobody refers to me"), LIMIT)
    store.quarantine(stored.key)
    assert not store.exists(stored.key) and list(store.entries()) == []
    location = S3Location.parse(s3_env["OBJECT_STORE_ROOT"])
    quarantine = open_store(f"s3://{location.bucket}/{location.prefix}/quarantine")
    assert isinstance(quarantine, S3ObjectStore)
    import obstore

    assert bytes(obstore.get(quarantine._s3, stored.key).bytes()) == b"nobody refers to me"


def upload(tmp_path, name: str, text: str = "words") -> dict:
    path = tmp_path / name
    path.write_text(text)
    result = run_in_process("upload", str(path), "--json")
    assert result.code == 0, result.stderr
    return result.record


def test_doctor_lists_the_prefix_and_quarantines_its_orphans(tmp_path, store):
    kept = upload(tmp_path, "kept.txt")
    orphan = store.put(io.BytesIO(b"left behind"), LIMIT)
    assert doctor.check(later(0)).ok  # young: maybe an upload whose row is on its way
    report = doctor.check(later(3600), repair=True)
    assert [(p.kind, p.id) for p in report.repaired] == [("orphan_object", orphan.key)]
    assert report.ok and not store.exists(orphan.key)
    [row] = db_rows("SELECT object_key FROM documents WHERE id = :id", id=kept["document_id"])
    assert [key for key, _ in store.entries()] == [row["object_key"]]


def test_doctor_verify_streams_every_object_and_finds_a_changed_one(tmp_path, store):
    import obstore

    document = upload(tmp_path, "kept.txt")
    assert doctor.check(later(0), verify=True).ok
    [row] = db_rows("SELECT object_key FROM documents WHERE id = :id", id=document["document_id"])
    key = row["object_key"]
    obstore.put(store._s3, f"{layout.shard_of(key)}/{key}", b"other words")  # behind kb's back
    [problem] = doctor.check(later(0), verify=True).problems
    assert (problem.kind, problem.id, problem.object_key) == (
        "changed_object",
        document["document_id"],
        key,
    )


def test_doctor_never_repairs_a_prefix_that_names_another_database(tmp_path, store):
    import obstore

    upload(tmp_path, "ours.txt")
    orphan = store.put(io.BytesIO(b"someone else's"), LIMIT)
    [ours] = [meta["path"] for meta in obstore.list_with_delimiter(store._s3)["objects"]]
    obstore.delete(store._s3, ours)  # the marker now names another database
    obstore.put(store._s3, "owner.another-database", b"")
    found = doctor.check(later(3600))
    assert {p.kind for p in found.problems} == {"foreign_store", "orphan_object"}
    with pytest.raises(RepairRefused, match="belongs to another database"):
        doctor.check(later(3600), repair=True)
    assert store.exists(orphan.key)


# --- failures -------------------------------------------------------------------------

HERE = S3Location("kb-tests", "p")


class SlowDown(JsonHandler):
    """An S3 endpoint under load: every request is told to slow down (503)."""

    def answer(self) -> None:
        body = b"<?xml version='1.0'?><Error><Code>SlowDown</Code></Error>"
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_POST = answer


@pytest.fixture
def slow_endpoint(monkeypatch) -> Iterator[str]:
    with serving(SlowDown) as port:
        endpoint = f"http://127.0.0.1:{port}"
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        yield endpoint


def test_throttling_and_an_endpoint_that_is_down_are_transient(s3_env, monkeypatch, slow_endpoint):
    throttled = S3ObjectStore(S3Location.parse(s3_env["OBJECT_STORE_ROOT"]))
    with pytest.raises(ObjectStoreUnreachable, match="503 SlowDown"):
        read_back(throttled, "ab" * 16)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens
    down = S3ObjectStore(S3Location.parse(s3_env["OBJECT_STORE_ROOT"]))
    with pytest.raises(ObjectStoreUnreachable, match="connection failed"):
        down.put(io.BytesIO(b"words"), LIMIT)


def test_a_missing_bucket_is_permanent_and_named(s3_endpoint, monkeypatch):
    for name, value in s3_store_env(s3_endpoint, bucket="no-such-bucket").items():
        monkeypatch.setenv(name, value)
    store = open_store("s3://no-such-bucket/p")
    with pytest.raises(ObjectStoreMisconfigured, match="'no-such-bucket' does not exist"):
        store.owner()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("status code: 403 Forbidden: <Code>InvalidAccessKeyId</Code>", "credentials"),
        ("status code: 403 Forbidden: <Code>SignatureDoesNotMatch</Code>", "credentials"),
        ("status code: 403 Forbidden: <Code>AccessDenied</Code>", "policy"),
        ("status code: 301 Moved Permanently: <Code>PermanentRedirect</Code>", "AWS_REGION"),
        ("status code: 500 Internal Server Error", "run again"),
        ("status code: 429 Too Many Requests", "run again"),
        ("HTTP error: error sending request", "connection failed"),
        ("operation timed out", "timed out"),
    ],
)
def test_each_failure_says_what_to_fix(text, expected):
    error = classify(RuntimeError(text), HERE)
    assert expected in str(error)
    permanent = expected in ("credentials", "policy", "AWS_REGION")
    assert isinstance(error, ObjectStoreMisconfigured if permanent else ObjectStoreUnreachable)
