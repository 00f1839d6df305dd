"""`kb sync`: a folder and an S3 prefix kept in step with a base: added, unchanged (no
write transaction), changed (a new revision, the published one still served), missing
(kept, unpublished, deleted), skipped and failed with reasons, dry runs that write
nothing, and the editor check before anything is read."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from kb_cli.db import Database
from kb_cli.store.location import S3Location
from tests.helpers import object_keys
from tests.loopback import TEST_BUCKET, TEST_KEYS


def ok(result) -> list[dict]:
    assert result.code == 0, (result.code, result.stderr)
    return result.records


def by_path(records: list[dict]) -> dict[str, dict]:
    return {record["path"]: record for record in records if "path" in record}


def summary(records: list[dict]) -> dict:
    return records[-1]


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


FILES = {
    "handbook/leave.md": "# Leave\n\nTwenty-five days of annual leave.\n",
    "handbook/travel.txt": "Travel is booked through the portal.\n",
    "notes/invoices.md": "# Invoices\n\nInvoices are kept for ten years.\n",
}


@pytest.fixture
def writes(monkeypatch):
    """How many write transactions commit while a test runs (in this process)."""
    counted: list[str] = []
    monkeypatch.setattr(Database, "on_transaction", lambda kind, _s: counted.append(kind))
    return lambda: counted.count("write")


def test_a_folder_is_added_then_unchanged_with_no_write(invoke, tmp_path, writes):
    source = tree(tmp_path / "src", FILES)
    first = ok(invoke("sync", str(source), "--json"))
    added = by_path(first)
    assert {p: r["action"] for p, r in added.items()} == dict.fromkeys(FILES, "added")
    assert summary(first) | {"source": None} == {
        "source": None, "base": "default", "dry_run": False, "added": 3, "changed": 0,
        "unchanged": 0, "missing": 0, "skipped": 0, "failed": 0,
    }  # fmt: skip
    documents = {d["meta"]["path"]: d for d in ok(invoke("status", "--json"))}
    assert set(documents) == set(FILES)
    for path, document in documents.items():
        assert document["document_id"] == added[path]["document_id"]
        assert document["status"] == "processing"  # submitted
        assert document["meta"]["source"] == str(source.resolve())
        assert document["filename"] == path.rsplit("/", 1)[-1]
    before = writes()
    again = ok(invoke("sync", str(source), "--json"))
    assert {r["action"] for r in by_path(again).values()} == {"unchanged"}
    assert writes() == before, "an unchanged tree costs no write transaction"
    # A file touched but not changed is read once, and its new time recorded.
    os.utime(source / "handbook/leave.md", ns=(10**18, 10**18))
    touched = by_path(ok(invoke("sync", str(source), "--json")))["handbook/leave.md"]
    assert touched["action"] == "unchanged" and touched["reason"] == "same content"
    before = writes()
    ok(invoke("sync", str(source), "--json"))
    assert writes() == before


def test_an_edited_file_is_a_new_revision_and_the_published_one_stays_served(invoke, tmp_path):
    source = tree(tmp_path / "src", FILES)
    ok(invoke("sync", str(source), "--json"))
    ok(invoke("work", "--drain", "--json"))
    ok(invoke("publish", "--all-reviewed", "--json"))
    (source / "notes/invoices.md").write_text("# Invoices\n\nKept for seven years.\n", "utf-8")
    records = ok(invoke("sync", str(source), "--json"))
    changed = by_path(records)["notes/invoices.md"]
    assert changed["action"] == "changed" and summary(records)["changed"] == 1
    document = ok(invoke("status", changed["document_id"], "--json"))[0]
    assert document["revision"] == 2 and document["published_revision"] == 1
    assert document["status"] == "processing"
    served = ok(invoke("search", "invoices kept", "--json"))
    assert "ten years" in served[0]["text"]
    ok(invoke("work", "--drain", "--json"))
    ok(invoke("publish", changed["document_id"], "--json"))
    assert "seven years" in ok(invoke("search", "invoices kept", "--json"))[0]["text"]
    history = ok(invoke("history", changed["document_id"], "--json"))
    assert [e["action"] for e in history if e["entity_id"] == changed["document_id"]][:3] == [
        "upload", "meta", "submit",
    ]  # fmt: skip
    assert "replace" in {e["action"] for e in history}
    assert {e["actor"] for e in history if e["action"] in ("upload", "replace")} == {"root"}


@pytest.mark.parametrize("missing", ["keep", "unpublish", "delete"])
def test_a_file_gone_from_the_source(invoke, tmp_path, missing):
    source = tree(tmp_path / "src", FILES)
    ok(invoke("sync", str(source), "--json"))
    ok(invoke("work", "--drain", "--json"))
    ok(invoke("publish", "--all-reviewed", "--json"))
    (source / "handbook/travel.txt").unlink()
    planned = ok(invoke("sync", str(source), "--missing", missing, "--dry-run", "--json"))
    gone = by_path(planned)["handbook/travel.txt"]
    assert gone["action"] == "missing" and summary(planned)["dry_run"] is True
    document_id = gone["document_id"]
    assert ok(invoke("status", document_id, "--json"))[0]["status"] == "published"
    done = by_path(ok(invoke("sync", str(source), "--missing", missing, "--json")))
    assert done["handbook/travel.txt"]["action"] == "missing"
    status = invoke("status", document_id, "--json")
    if missing == "keep":
        assert status.records[0]["status"] == "published"
    elif missing == "unpublish":
        assert status.records[0]["status"] == "archived"
        assert "portal" not in str(ok(invoke("search", "portal", "--json")))
    else:
        assert status.code == 3
        assert "delete" in {e["action"] for e in ok(invoke("history", document_id, "--json"))}
    assert {r["action"] for p, r in done.items() if p != "handbook/travel.txt"} == {"unchanged"}


def test_dry_run_writes_nothing(invoke, tmp_path, writes):
    source = tree(tmp_path / "src", FILES)
    ok(invoke("sync", str(source), "--json"))
    ok(invoke("work", "--drain", "--json"))
    ok(invoke("publish", "--all-reviewed", "--json"))
    (source / "new.md").write_text("new\n", "utf-8")
    (source / "notes/invoices.md").write_text("changed\n", "utf-8")
    (source / "handbook/travel.txt").unlink()
    keys = object_keys()
    before = writes()
    planned = by_path(ok(invoke("sync", str(source), "--dry-run", "--missing", "delete", "--json")))
    assert planned["new.md"]["action"] == "added" and planned["new.md"]["document_id"] is None
    assert planned["notes/invoices.md"]["action"] == "changed"
    assert planned["handbook/travel.txt"]["reason"] == "would delete"
    assert writes() == before and object_keys() == keys
    assert len(ok(invoke("status", "--json"))) == 3


def test_what_cannot_be_synced_is_reported_and_the_rest_goes_on(invoke, tmp_path):
    source = tree(tmp_path / "src", FILES)
    (source / ".hidden.md").write_text("secret\n", "utf-8")
    (source / ".git").mkdir()
    (source / ".git/HEAD").write_text("ref\n", "utf-8")
    (source / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    outside = tmp_path / "outside.md"
    outside.write_text("outside\n", "utf-8")
    (source / "link-out.md").symlink_to(outside)
    (source / "link-in.md").symlink_to(source / "handbook/leave.md")
    (source / "loop").symlink_to(source)  # a symlinked folder is never followed
    (source / "tab\tname.md").write_text("control\n", "utf-8")
    locked = source / "locked"
    locked.mkdir()
    (locked / "x.md").write_text("x\n", "utf-8")
    locked.chmod(0)
    unreadable = source / "unreadable.md"
    unreadable.write_text("u\n", "utf-8")
    unreadable.chmod(0)
    try:
        result = invoke("sync", str(source), "--json")
    finally:
        locked.chmod(0o755)
        unreadable.chmod(0o644)
    records = by_path(result.records)
    actions = {path: (r["action"], r["reason"]) for path, r in records.items()}
    assert actions[".hidden.md"] == ("skipped", "hidden")
    assert actions[".git/"] == ("skipped", "hidden")
    assert actions["picture.png"] == ("skipped", "unsupported file type")
    # A link is never followed, wherever it points: the file it names is synced by its
    # own path when it lies under the source.
    for link in ("link-out.md", "link-in.md", "loop"):
        assert actions[link] == ("skipped", "a symbolic link (never followed)")
    assert actions["tab?name.md"][0] == "failed"
    assert "control character" in actions["tab?name.md"][1]
    if os.geteuid() != 0:  # root reads anything
        assert actions["locked/"][0] == "failed" and "Permission denied" in actions["locked/"][1]
        assert actions["unreadable.md"][0] == "failed"
        assert result.code == 6 and result.error["error"] == "invalid_input"
    for path in FILES:
        assert actions[path][0] == "added"


def test_include_exclude_and_checksum(invoke, tmp_path):
    source = tree(tmp_path / "src", FILES)
    only = by_path(ok(invoke("sync", str(source), "--include", "*.md", "--json")))
    assert set(only) == {"handbook/leave.md", "notes/invoices.md"}
    rest = by_path(
        ok(invoke("sync", str(source), "--exclude", "notes/*", "--missing", "delete", "--json"))
    )
    # Excluded paths are neither synced nor missing.
    assert set(rest) == {"handbook/leave.md", "handbook/travel.txt"}
    assert rest["handbook/travel.txt"]["action"] == "added"
    # Same size and time, other content: only --checksum sees it.
    path = source / "handbook/leave.md"
    stamp = path.stat()
    path.write_text("# Leave\n\nThirty-five days of annual leave.\n", "utf-8")
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert path.stat().st_size == stamp.st_size
    quick = by_path(ok(invoke("sync", str(source), "--json")))
    assert quick["handbook/leave.md"]["action"] == "unchanged"
    ok(invoke("work", "--drain", "--json"))
    ok(invoke("publish", "--all-reviewed", "--json"))
    checked = by_path(ok(invoke("sync", str(source), "--checksum", "--json")))
    assert checked["handbook/leave.md"]["action"] == "changed"


def test_only_an_editor_of_the_base_may_sync(invoke, tmp_path):
    admin = ok(invoke("user", "add", "root", "--role", "admin", "--json"))[0]["token"]
    viewer = ok(invoke("user", "add", "vic", "--role", "viewer", "--json", token=admin))[0]
    editor = ok(invoke("user", "add", "eve", "--role", "editor", "--team", "t", "--json",
                       token=admin))[0]  # fmt: skip
    ok(invoke("base", "create", "closed", "--team", "other", "--json", token=admin))
    # Refused before the source is read: it does not even exist.
    refused = invoke("sync", str(tmp_path / "nowhere"), "--json", token=viewer["token"])
    assert refused.code == 5
    refused = invoke("sync", str(tmp_path / "nowhere"), "--base", "closed", "--json",
                     token=editor["token"])  # fmt: skip
    assert refused.code == 3  # a base the caller cannot read does not exist for it
    refused = invoke("sync", str(tmp_path), "--missing", "unpublish", "--json",
                     token=editor["token"])  # fmt: skip
    assert refused.code == 5 and "reviewer" in refused.error["message"]
    source = tree(tmp_path / "src", FILES)
    records = ok(invoke("sync", str(source), "--json", token=editor["token"]))
    document_id = records[0]["document_id"]
    assert {e["actor"] for e in ok(invoke("history", document_id, "--json", token=admin))} <= {
        "eve", "worker",
    }  # fmt: skip
    events = ok(invoke("events", "--json", token=admin))
    assert any(e["document_id"] == document_id and e["type"] == "task.queued" for e in events)


def test_an_s3_prefix_is_synced(invoke, tmp_path, s3_endpoint, monkeypatch):
    import obstore

    from kb_cli.store.s3 import client

    for name, value in {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_REGION": "us-east-1",
                        **TEST_KEYS}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    prefix = f"docs-{uuid.uuid4().hex[:8]}"
    bucket = client(S3Location(TEST_BUCKET, prefix))
    for name, text in FILES.items():
        obstore.put(bucket, name, text.encode())
    obstore.put(bucket, ".hidden/x.md", b"hidden")
    location = f"s3://{TEST_BUCKET}/{prefix}"
    first = by_path(ok(invoke("sync", location, "--json")))
    assert {p: r["action"] for p, r in first.items()} == {
        **dict.fromkeys(FILES, "added"), ".hidden/x.md": "skipped",
    }  # fmt: skip
    document = ok(invoke("status", first["notes/invoices.md"]["document_id"], "--json"))[0]
    assert document["meta"]["source"] == location and document["meta"]["source_stamp"]
    again = by_path(ok(invoke("sync", location, "--json")))
    assert again["notes/invoices.md"]["action"] == "unchanged"
    ok(invoke("work", "--drain", "--json"))
    ok(invoke("publish", "--all-reviewed", "--json"))
    obstore.put(bucket, "notes/invoices.md", b"# Invoices\n\nSeven years.\n")
    obstore.delete(bucket, "handbook/travel.txt")
    dry = by_path(ok(invoke("sync", location, "--missing", "delete", "--dry-run", "--json")))
    assert dry["notes/invoices.md"]["action"] == "changed"
    assert dry["handbook/travel.txt"]["reason"] == "would delete"
    done = by_path(ok(invoke("sync", location, "--missing", "delete", "--json")))
    assert done["notes/invoices.md"]["action"] == "changed"
    assert done["handbook/travel.txt"]["reason"] == "deleted"
    assert len(ok(invoke("status", "--json"))) == 2
    doctor = invoke("doctor", "--json")
    assert doctor.code == 0, doctor.stdout


# --- a folder cannot steer sync (what a changing folder can do: docs/operations.md) ------


def test_a_moved_source_converges(invoke, tmp_path):
    share = tree(tmp_path / "share", FILES)
    first = by_path(ok(invoke("sync", str(share), "--json")))
    moved = tmp_path / "share-v2"
    share.rename(moved)
    (moved / "notes/invoices.md").unlink()
    result = invoke("sync", str(moved), "--missing", "delete", "--json")
    again = by_path(ok(result))
    assert again["notes/invoices.md"]["action"] == "missing"
    assert again["notes/invoices.md"]["reason"] == "deleted"
    for path in ("handbook/leave.md", "handbook/travel.txt"):  # the same documents
        assert again[path]["action"] == "unchanged"
        assert again[path]["document_id"] == first[path]["document_id"]
    assert f"synced from {share.resolve()}" in result.stderr  # said, not silently merged
    assert len(ok(invoke("status", "--json"))) == 2


def test_a_release_symlink_pointed_elsewhere_converges(invoke, tmp_path):
    first = tree(tmp_path / "release-1", FILES)
    second = tree(tmp_path / "release-2", {k: v for k, v in FILES.items() if "notes" not in k})
    current = tmp_path / "current"
    current.symlink_to(first)
    ok(invoke("sync", str(current), "--json"))
    current.unlink()
    current.symlink_to(second)
    again = by_path(ok(invoke("sync", str(current), "--missing", "delete", "--json")))
    assert again["notes/invoices.md"]["reason"] == "deleted"
    assert again["handbook/leave.md"]["action"] == "unchanged"


def test_an_unchanged_tree_writes_nothing_with_checksum(invoke, tmp_path, writes):
    source = tree(tmp_path / "src", FILES)
    added = by_path(ok(invoke("sync", str(source), "--json")))
    document_id = added["handbook/leave.md"]["document_id"]
    trail = ok(invoke("history", document_id, "--json"))
    version = ok(invoke("status", document_id, "--json"))[0]["version"]
    before = writes()
    checked = by_path(ok(invoke("sync", str(source), "--checksum", "--json")))
    assert {r["action"] for r in checked.values()} == {"unchanged"}
    assert writes() == before, "an unchanged tree costs no write, --checksum or not"
    assert ok(invoke("history", document_id, "--json")) == trail
    assert ok(invoke("status", document_id, "--json"))[0]["version"] == version


def test_syncs_own_keys_never_count_against_the_users(invoke, tmp_path):
    source = tree(tmp_path / "src", {"a.md": "# A\n\nFirst.\n"})
    own = [f"--meta=k{i}=v{i}" for i in range(32)]  # as many as a document may have
    uploaded = invoke("upload", str(source / "a.md"), "--meta", "path=a.md", *own, "--json")
    document_id = ok(uploaded)[0]["document_id"]
    (source / "a.md").write_text("# A\n\nSecond.\n", "utf-8")
    changed = by_path(ok(invoke("sync", str(source), "--json")))["a.md"]
    assert (changed["action"], changed["document_id"]) == ("changed", document_id)
    meta = ok(invoke("status", document_id, "--json"))[0]["meta"]
    assert len(meta) == 32 + 4  # its own, and path, source, source_size, source_stamp


def test_a_source_with_a_long_path_stays_syncable(invoke, tmp_path):
    deep = tmp_path.joinpath(*["f" * 200] * 6)  # an absolute path of over 1,200 characters
    source = tree(deep, {"a.md": "# A\n\nFirst.\n", "b.md": "# B\n\nBee.\n"})
    assert len(str(source.resolve())) > 1024
    ok(invoke("sync", str(source), "--json"))
    ok(invoke("work", "--drain", "--json"))
    ok(invoke("publish", "--all-reviewed", "--json"))
    (source / "a.md").write_text("# A\n\nSecond.\n", "utf-8")
    again = by_path(ok(invoke("sync", str(source), "--json")))
    assert again["a.md"]["action"] == "changed" and again["b.md"]["action"] == "unchanged"


def test_a_delete_a_killed_sync_began_is_finished_by_the_next(invoke, kb, tmp_path):
    from kb_cli.services import removal

    source = tree(tmp_path / "src", FILES)
    first = by_path(ok(invoke("sync", str(source), "--json")))
    (source / "notes/invoices.md").unlink()
    doomed = first["notes/invoices.md"]["document_id"]
    removal.begin(kb, doomed)  # where `kb sync --missing delete` stood when it was killed
    again = by_path(ok(invoke("sync", str(source), "--json")))
    record = again["notes/invoices.md"]
    assert (record["action"], record["document_id"]) == ("missing", doomed)
    assert "interrupted" in record["reason"]
    assert doomed not in {d["document_id"] for d in ok(invoke("status", "--json"))}
    assert invoke("doctor", "--json").code == 0


def _raw_s3(s3_endpoint: str):
    """An S3 client that may write any key (obstore refuses some), as another tool would."""
    import boto3

    return boto3.client(
        "s3", endpoint_url=s3_endpoint, region_name="us-east-1",
        aws_access_key_id=TEST_KEYS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=TEST_KEYS["AWS_SECRET_ACCESS_KEY"],
    )  # fmt: skip


@pytest.fixture
def s3_source(s3_endpoint, monkeypatch):
    """A fresh prefix of the test bucket, written by a client that may write any key (as
    another tool would: obstore refuses some), and its s3:// location."""
    for name, value in {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_REGION": "us-east-1",
                        **TEST_KEYS}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    prefix = f"src-{uuid.uuid4().hex[:8]}"
    raw = _raw_s3(s3_endpoint)

    def put(key: str, body: bytes) -> None:
        raw.put_object(Bucket=TEST_BUCKET, Key=f"{prefix}/{key}", Body=body)

    return put, f"s3://{TEST_BUCKET}/{prefix}"


def test_s3_folder_markers_are_skipped_not_failed(invoke, s3_source):
    put, location = s3_source
    for key in ("handbook/leave.md", "notes/invoices.md"):
        put(key, FILES[key].encode())
    for key in ("handbook/", "handbook/policies/", "empty/"):  # what some tools write
        put(key, b"")
    records = by_path(ok(invoke("sync", location, "--json")))
    for marker in ("handbook", "handbook/policies", "empty"):
        assert records[marker]["action"] == "skipped"
        assert records[marker]["reason"] == "a folder marker, not a document"
    assert records["handbook/leave.md"]["action"] == "added"


def test_odd_s3_keys_fail_alone_and_hide_nothing_from_missing(invoke, s3_source):
    put, location = s3_source
    for key in ("handbook/leave.md", "notes/invoices.md"):
        put(key, FILES[key].encode())
    first = by_path(ok(invoke("sync", location, "--json")))
    assert {r["action"] for r in first.values()} == {"added"}
    for key in ("m/../up.md", "x//y.md", "ctl\x01.md"):  # keys the client cannot address
        put(key, b"# Odd\n")
    put("zeta.md", b"# Zeta\n\nLast.\n")
    result = invoke("sync", location, "--missing", "delete", "--json")
    assert result.code == 6 and result.error["error"] == "invalid_input"  # not "unreachable"
    records = by_path(result.records)
    for key in ("m/../up.md", "x//y.md", "ctl?.md"):  # each named, with the true reason
        assert records[key]["action"] == "failed"
        assert "cannot address" in records[key]["reason"]
    assert records["zeta.md"]["action"] == "added"  # the walk went on past every odd key
    # A page of the listing that holds such a key cannot be read (object_store parses
    # every key of it): what it hid is never missing, so nothing is deleted.
    assert records["/"]["action"] == "failed" and "not listed whole" in records["/"]["reason"]
    for path in ("handbook/leave.md", "notes/invoices.md"):
        assert records[path]["action"] in ("unchanged", "skipped")
    assert summary(result.records)["missing"] == 0
    assert len(ok(invoke("status", "--json"))) == 3
