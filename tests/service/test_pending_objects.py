"""Objects recorded as pending (kb_cli/pending.py): an object of a live command
is no problem, one of a gone command is `abandoned_object` at once and is cleaned by the
next command on its host or by `kb doctor --repair`; another host's is judged by age;
an object a document names is never deleted, whatever a row says."""

from __future__ import annotations

import io
import os
import socket

from kb_cli import intake, pending, queries
from kb_cli.services import doctor, documents
from kb_cli.store import QUARANTINE, FileObjectStore
from tests.helpers import later, object_keys

HOST = socket.gethostname()
# This very process's pid, with another start time: a pid reused by another process.
GONE = f"{HOST}:{os.getpid()}:0"
ELSEWHERE = f"another-host.example:{os.getpid()}:1"


def planted(kb, process: str, content: bytes = b"half done") -> str:
    """An object written under a pending row of `process`, and no document."""
    key = os.urandom(16).hex()
    with kb.db.write() as conn:
        queries.insert_pending_objects(conn, [key], process, kb.timestamp())
    kb.store.put(io.BytesIO(content), 1 << 20, key)
    return key


def kinds(kb) -> list[tuple[str, str]]:
    return [(p.kind, p.id) for p in doctor.check(kb).problems]


def pending_keys(kb) -> set[str]:
    with kb.db.read() as conn:
        return {row.object_key for row in queries.pending_objects(conn)}


def test_a_live_commands_object_is_no_problem_and_a_gone_ones_is_cleaned(kb, tmp_path):
    intake.claimed_store(kb)
    live = planted(kb, pending.this_process())
    gone = planted(kb, GONE)
    assert kinds(kb) == [("abandoned_object", gone)]  # at once: no grace period
    assert kinds(later(3600)) == [("abandoned_object", gone)]  # live stays live
    source = tmp_path / "a.md"
    source.write_text("# A\n\nThe text of a.\n", "utf-8")
    documents.upload(kb, [source])  # the next upload on this host cleans up
    assert gone not in object_keys() and live in object_keys()
    assert pending_keys(kb) == {live}
    assert kinds(kb) == []


def test_another_hosts_object_is_left_alone_until_it_is_old_then_quarantined(kb):
    intake.claimed_store(kb)
    key = planted(kb, ELSEWHERE)
    assert kinds(kb) == []
    assert pending.clean_abandoned(later(3600)) == []  # only this host's are cleaned
    assert kinds(later(pending.OTHER_HOST_GRACE_SECONDS + 60)) == [("abandoned_object", key)]
    report = doctor.check(later(pending.OTHER_HOST_GRACE_SECONDS + 60), repair=True)
    assert [(p.kind, p.id) for p in report.repaired] == [("abandoned_object", key)]
    assert key not in object_keys() and pending_keys(kb) == set()
    if isinstance(kb.store, FileObjectStore):  # quarantined, not deleted: it may be slow
        assert (kb.store.root / QUARANTINE / key).read_bytes() == b"half done"


def test_doctor_repair_deletes_an_abandoned_object(kb):
    intake.claimed_store(kb)
    key = planted(kb, GONE)
    report = doctor.check(kb, repair=True)
    assert [(p.kind, p.id) for p in report.repaired] == [("abandoned_object", key)]
    assert report.ok and key not in object_keys() and pending_keys(kb) == set()


def test_an_object_a_document_names_is_never_deleted_for_a_stale_row(kb, tmp_path):
    source = tmp_path / "a.md"
    source.write_text("# A\n\nThe text of a.\n", "utf-8")
    [record] = documents.upload(kb, [source]).records
    [(key, _id)] = queries_object_keys(kb)
    with kb.db.write() as conn:  # a row that should not be there, of a gone process
        queries.insert_pending_objects(conn, [key], GONE, kb.timestamp())
    assert kinds(kb) == []
    assert pending.clean_abandoned(kb) == [key]
    assert key in object_keys() and pending_keys(kb) == set()
    assert record.document_id == _id


def queries_object_keys(kb) -> list[tuple[str, str]]:
    with kb.db.read() as conn:
        return sorted(queries.object_keys(conn).items())
