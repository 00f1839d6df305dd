"""A folder cannot steer `kb sync` (docs/operations.md, "What a changing folder can do
to a sync"): each attack made at the one moment it needs, with real renames, links and
FIFOs, between the walk's listing of a name and its opening of it. The sync goes through
the service as the command runs it; only the moment of the change is the test's."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kb_cli import queries
from kb_cli.app import Kb
from kb_cli.services import removal
from kb_cli.services import sync as service
from kb_cli.store.sources import Entry, Opened, Source
from tests.helpers import db_rows, object_keys

SECRET = "The launch codes are kept in the blue folder.\n"


class Meddling:
    """The source the sync reads, but for a change made right `before` the walk yields
    the entry of a path (listed, not yet opened), or right `after` the sync opened it."""

    def __init__(self, source: Source, path: str, change: Callable[[], None], when: str):
        self.source, self.path, self.change, self.when = source, path, change, when
        self.name = source.name

    def entries(self) -> Iterator[Entry]:
        for entry in self.source.entries():
            if entry.path == self.path and self.when == "before":
                self.change()
            yield entry

    @contextlib.contextmanager
    def opened(self, entry: Entry, limit: int) -> Iterator[Opened]:
        with self.source.opened(entry, limit) as opened:
            if entry.path == self.path and self.when == "after":
                self.change()
            yield opened


def synced(kb: Kb, source: Path, change: Callable[[], None], path: str, when: str = "before"):
    """The records of one sync of `source` into the default base."""
    run = service.sync(kb, str(source), service.SyncOptions("default", missing="delete"))
    run.source = Meddling(run.source, path, change, when)
    summary = service.SyncSummary(str(source), "default", False)
    return {record.path: record for record in run.records(summary)}, summary


def stored_texts(kb: Kb) -> list[bytes]:
    """The content of every object the knowledge base holds."""
    keys = [row["object_key"] for row in db_rows("SELECT object_key FROM documents")]
    return [b"".join(kb.store.read_blocks(key)) for key in keys]


def limited(kb: Kb, max_bytes: int) -> None:
    kb.settings = dataclasses.replace(kb.settings, max_upload_bytes=max_bytes)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.md").write_text(SECRET, "utf-8")
    return folder


@pytest.fixture
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "share"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("# A\n\nAlpha.\n", "utf-8")
    (folder / "c.md").write_text("# C\n\nGamma.\n", "utf-8")
    (folder / "sub" / "b.md").write_text("# B\n\nBeta.\n", "utf-8")
    (folder / "z.md").write_text("# Z\n\nZeta.\n", "utf-8")
    return folder


def test_a_subfolder_swapped_for_a_link_out_is_not_walked(kb, source, outside):
    def swap() -> None:  # after the root was listed, before the walk enters sub/
        (source / "sub").rename(source / "sub-away")
        (source / "sub").symlink_to(outside, target_is_directory=True)

    records, summary = synced(kb, source, swap, "z.md")
    assert records["sub/"].action == "skipped" and "not the folder" in records["sub/"].reason
    assert not any(path.startswith("sub/") for path in records if path != "sub/")
    assert SECRET.encode() not in stored_texts(kb)
    assert summary.counts["added"] == 3  # a.md, c.md, z.md


def test_a_file_flipped_to_a_link_out_is_not_read(kb, source, outside):
    def flip() -> None:  # listed as a file, a link by the time it is opened
        (source / "c.md").unlink()
        (source / "c.md").symlink_to(outside / "secret.md")

    records, _summary = synced(kb, source, flip, "c.md")
    assert records["c.md"].action == "skipped"
    assert "symbolic link" in records["c.md"].reason
    assert SECRET.encode() not in stored_texts(kb)
    assert records["z.md"].action == "added"  # the walk went on


def test_a_file_replaced_by_another_file_is_not_read(kb, source, outside):
    def replace() -> None:  # another file (another inode) takes the name
        os.replace(outside / "secret.md", source / "c.md")

    records, _summary = synced(kb, source, replace, "c.md")
    assert records["c.md"].action == "skipped" and "replaced" in records["c.md"].reason
    assert SECRET.encode() not in stored_texts(kb)


def test_a_file_swapped_for_a_fifo_does_not_hang_the_sync(kb, source):
    def fifo() -> None:
        (source / "c.md").unlink()
        os.mkfifo(source / "c.md")

    found: list = []
    walk = threading.Thread(target=lambda: found.append(synced(kb, source, fifo, "c.md")))
    walk.start()
    walk.join(timeout=30)
    if walk.is_alive():  # free the thread a blocking open would hold, then fail
        with open(os.open(source / "c.md", os.O_WRONLY | os.O_NONBLOCK), "wb"):
            pass
        pytest.fail("the sync blocked on a FIFO")
    records, _summary = found[0]
    assert records["c.md"].action == "skipped" and "not a file" in records["c.md"].reason
    assert records["z.md"].action == "added"


def test_a_file_that_grows_past_the_limit_fails_alone(kb, source):
    limited(kb, 2000)

    def grow() -> None:  # listed small, opened large
        with open(source / "c.md", "a", encoding="utf-8") as file:
            file.write("x" * 5000)

    records, summary = synced(kb, source, grow, "c.md")
    assert (records["c.md"].action, records["c.md"].reason) == (
        "failed",
        "too large (limit 2000 bytes)",
    )
    assert records["z.md"].action == "added" and summary.counts["failed"] == 1


def test_a_file_that_grows_while_it_is_stored_fails_alone(kb, source):
    limited(kb, 2000)

    def grow() -> None:  # opened small, read large
        with open(source / "c.md", "a", encoding="utf-8") as file:
            file.write("x" * 5000)

    records, _summary = synced(kb, source, grow, "c.md", when="after")
    assert records["c.md"].action == "failed" and "too large" in records["c.md"].reason
    assert records["z.md"].action == "added"
    keys = set(object_keys())
    named = {row["object_key"] for row in db_rows("SELECT object_key FROM documents")}
    assert keys == named  # nothing stored for the file that failed


def test_a_document_deleted_while_its_changed_file_is_read_is_skipped(kb, source, invoke):
    first, _ = synced(kb, source, lambda: None, "none")
    assert invoke("work", "--drain", "--json").code == 0
    assert invoke("publish", "--all-reviewed", "--json").code == 0  # replaceable now
    (source / "c.md").write_text("# C\n\nGamma, changed.\n", "utf-8")
    doomed = first["c.md"].document_id

    def delete() -> None:
        assert invoke("delete", doomed, "--yes", "--json").code == 0

    records, _summary = synced(kb, source, delete, "c.md", when="after")
    assert records["c.md"].action == "skipped" and "deleted by another command" in (
        records["c.md"].reason or ""
    )
    assert records["z.md"].action == "unchanged"  # the walk went on


@pytest.mark.parametrize("how_far", ["begun", "finished"])
def test_a_missing_document_another_command_deletes_meanwhile(kb, source, how_far):
    first, _ = synced(kb, source, lambda: None, "none")
    (source / "a.md").unlink()
    (source / "c.md").unlink()
    doomed = first["a.md"].document_id

    def delete() -> None:  # another `--missing delete` sync, or `kb delete`, gets there first
        removal.begin(kb, doomed)
        if how_far == "finished":
            removal.finish(kb, doomed)

    records, summary = synced(kb, source, delete, "z.md")
    assert records["a.md"].action == "missing"
    assert records["a.md"].reason == "deleted by another command meanwhile"
    assert records["c.md"].reason == "deleted"  # the rest handled as asked
    with kb.db.read() as conn:
        assert queries.get_document(conn, first["c.md"].document_id) is None
    assert summary.counts["failed"] == 0


def test_an_s3_object_that_grows_past_the_limit_fails_alone(kb, s3_endpoint, monkeypatch):
    """Listed small, read large: refused as its size arrives (the GET's, then the
    bytes counted as they stream), never copied whole first."""
    import uuid

    import obstore

    from kb_cli.store.location import S3Location
    from kb_cli.store.s3 import client
    from tests.loopback import TEST_BUCKET, TEST_KEYS

    for name, value in {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_REGION": "us-east-1",
                        **TEST_KEYS}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    prefix = f"grow-{uuid.uuid4().hex[:8]}"
    bucket = client(S3Location(TEST_BUCKET, prefix))
    obstore.put(bucket, "a.md", b"# A\n\nAlpha.\n")
    obstore.put(bucket, "z.md", b"# Z\n\nZeta.\n")
    limited(kb, 2000)
    location = f"s3://{TEST_BUCKET}/{prefix}"

    def grow() -> None:
        obstore.put(bucket, "a.md", b"# A\n\n" + b"x" * 5000)

    run = service.sync(kb, location, service.SyncOptions("default"))
    run.source = Meddling(run.source, "a.md", grow, "before")
    summary = service.SyncSummary(location, "default", False)
    records = {record.path: record for record in run.records(summary)}
    assert (records["a.md"].action, records["a.md"].reason) == (
        "failed",
        "too large (limit 2000 bytes)",
    )
    assert records["z.md"].action == "added"
