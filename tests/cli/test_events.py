"""`kb events`: every lifecycle change a user may react to is one event, written with
the change, and a caller sees the events of the bases it may read, oldest first."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import check_error, db_rows, is_rfc3339_utc

EVENT_FIELDS = {"event_id", "type", "document_id", "task_id", "base", "at", "data"}


def ok(result) -> list[dict]:
    assert result.code == 0, result.stderr
    return result.records


def write(tmp_path: Path, name: str, content: bytes | str) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


def types_by_document(events: list[dict]) -> dict[str, list[str]]:
    seen: dict[str, list[str]] = {}
    for event in events:
        seen.setdefault(event["document_id"], []).append(event["type"])
    return seen


def test_the_lifecycle_of_documents_is_a_stream_of_events(invoke, tmp_path):
    good = write(tmp_path, "good.txt", "a document that makes it all the way")
    broken = write(tmp_path, "broken.pdf", b"%PDF-1.4 not really a pdf")
    dropped = write(tmp_path, "dropped.txt", "cancelled before any worker came")
    [good_task, broken_task] = ok(invoke("upload", good, broken, "--submit", "--json"))
    [dropped_task] = ok(invoke("upload", dropped, "--submit", "--json"))
    ok(invoke("cancel", dropped_task["task_id"], "--json"))
    ok(invoke("work", "--drain", "--json"))
    good_id = good_task["document_id"]
    ok(invoke("publish", good_id, "--json"))
    ok(invoke("unpublish", good_id, "--json"))
    ok(invoke("delete", good_id, "--yes", "--json"))

    events = ok(invoke("events", "--json"))
    assert types_by_document(events) == {
        good_id: [
            "task.queued",
            "task.succeeded",
            "document.review_pending",
            "document.published",
            "document.unpublished",
            "document.deleted",
        ],
        broken_task["document_id"]: ["task.queued", "task.failed"],
        dropped_task["document_id"]: ["task.queued", "task.cancelled"],
    }
    assert [e["event_id"] for e in events] == sorted(e["event_id"] for e in events)
    for event in events:
        assert set(event) == EVENT_FIELDS and event["base"] == "default"
        assert is_rfc3339_utc(event["at"])
    failed = next(e for e in events if e["type"] == "task.failed")
    assert failed["task_id"] == broken_task["task_id"]
    assert failed["data"]["error_code"] == "parse_error"
    published = next(e for e in events if e["type"] == "document.published")
    assert published["data"]["published_revision"] == 1
    assert published["task_id"] == good_task["task_id"]

    later = ok(invoke("events", "--since", str(events[2]["event_id"]), "--json"))
    assert later == events[3:]
    plain = invoke("events")
    assert plain.code == 0 and len(plain.stdout.splitlines()) == len(events)
    assert "document.deleted" in plain.stdout


def test_a_refused_change_writes_no_event(invoke, tmp_path):
    [document] = ok(invoke("upload", write(tmp_path, "n.txt", "draft"), "--json"))
    before = len(db_rows("SELECT id FROM outbox_events"))
    check_error(invoke("publish", document["document_id"], "--json"), 4, "conflict")
    assert len(db_rows("SELECT id FROM outbox_events")) == before == 0


def test_a_caller_sees_only_the_events_of_bases_it_may_read(invoke, tmp_path):
    admin = ok(invoke("user", "add", "root", "--role", "admin", "--json"))[0]["token"]
    ok(invoke("base", "create", "sales", "--team", "sales", "--json", token=admin))
    ok(invoke("base", "create", "eng", "--team", "eng", "--json", token=admin))
    tokens = {}
    for name, role, team in [("sam", "viewer", "sales"), ("wendy", "worker", "eng")]:
        made = invoke("user", "add", name, "--role", role, "--team", team, "--json", token=admin)
        tokens[name] = ok(made)[0]["token"]
    for base in ("sales", "eng", "default"):
        path = write(tmp_path, f"{base}.txt", f"a note of {base}")
        ok(invoke("upload", path, "--base", base, "--submit", "--json", token=admin))

    every = ok(invoke("events", "--json", token=admin))
    assert {e["base"] for e in every} == {"sales", "eng", "default"}
    seen = ok(invoke("events", "--json", token=tokens["sam"]))
    assert {e["base"] for e in seen} == {"sales", "default"}
    assert seen == [e for e in every if e["base"] != "eng"]
    narrowed = ok(invoke("events", "--base", "sales", "--json", token=tokens["sam"]))
    assert [e["base"] for e in narrowed] == ["sales"]
    check_error(invoke("events", "--base", "eng", "--json", token=tokens["sam"]), 3, "not_found")
    check_error(invoke("events", "--json", token=tokens["wendy"]), 5, "forbidden")
    relay = invoke("relay", "--webhook", "http://127.0.0.1:9/", "--json", token=tokens["sam"])
    check_error(relay, 5, "forbidden")


@pytest.mark.empty_database  # no home: the refusal comes before anything is opened
@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/x",
        "https://user:secret@example.com/x",
        "http://example.com:abc/",
        "http://example.com:0/",
        "http://example.com:70000/",
        "http://[::1/",  # an unclosed IPv6 address (was a ValueError)
        "http://a..b/",  # an empty host label (was a UnicodeError once running)
        f"http://{'a' * 64}.example.com/",  # a label over 63 characters (likewise)
        "http://example.com/a b",  # a space in the path (was retried forever)
        "http://example.com/x?q=\x7f",
        "http://example.com/caf\u00e9",  # non-ASCII outside the host
    ],
)
def test_relay_refuses_a_webhook_it_could_not_post_to(invoke, url, kb_home):
    result = invoke("relay", "--webhook", url, "--json")
    check_error(result, 2, "usage")
    assert "secret" not in result.stderr.replace("--secret", "")
    assert not kb_home.exists()  # found before anything started


def test_relay_takes_a_webhook_with_an_international_host_or_an_address(invoke):
    """What the check lets through, http.client can send: these fail to connect (no
    such host, nothing listening), as any unreachable receiver, and are retried."""
    from kb_cli.services.relay import Webhook

    for url in ("http://b\u00fccher.example/kb", "http://[::1]:9/kb", "https://host.example./x"):
        assert Webhook(url).url == url
