"""`kb serve`: the real server as a process on a free loopback port, asked by a real
HTTP client (urllib), its tasks processed by a real `kb work`. The design's examples
(docs/interface.md, "HTTP") are these tests."""

from __future__ import annotations

import concurrent.futures
import json
import shutil
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.helpers import (
    DOC_KEYS,
    TASK_KEYS,
    kb_env,
    run_in_process,
    sqlite_only,
    start_kb,
    write_lock_held,
)
from tests.serving import Answer, Client, serving

TEXT = b"# Invoices\n\nInvoices are kept for seven years. Backups run every night.\n"


@pytest.fixture
def server() -> Iterator[Client]:
    with serving() as client:
        yield client


def _token(*args: str, token: str | None = None) -> str:
    env = None if token is None else kb_env(KB_TOKEN=token)
    result = run_in_process("user", "add", *args, "--json", env=env)
    assert result.code == 0, result.stderr
    return result.records[0]["token"]


def _work() -> None:
    assert run_in_process("work", "--drain").code == 0


def test_the_lifecycle_over_http(server):
    """upload -> submit (202, the task record) -> kb work -> publish -> search finds it;
    a retry of a draft and a cancel of a succeeded task are 409."""
    assert server.get("/api/health").body == {"status": "ok", "version": "0.1.0"}
    uploaded = server.upload({"invoices.md": TEXT})
    assert uploaded.status == 201, uploaded.body
    [document] = uploaded.body
    assert set(document) >= DOC_KEYS
    assert (document["filename"], document["status"], document["base"]) == (
        "invoices.md",
        "draft",
        "default",
    )
    doc = document["document_id"]

    retried = server.post(f"/api/documents/{doc}/retry")
    assert retried.status == 409 and retried.body["error"] == "conflict", retried.body

    submitted = server.post(f"/api/documents/{doc}/submit")
    assert submitted.status == 202, submitted.body
    task = submitted.body
    assert set(task) >= TASK_KEYS and task["status"] == "queued"
    assert task["document_id"] == doc
    assert server.get(f"/api/ingestion-tasks/{task['task_id']}").body == task

    _work()  # the server never runs tasks: `kb work` does
    done = server.get(f"/api/ingestion-tasks/{task['task_id']}")
    assert done.body["status"] == "succeeded", done.body
    cancelled = server.delete(f"/api/ingestion-tasks/{task['task_id']}")
    assert cancelled.status == 409 and cancelled.body["error"] == "conflict", cancelled.body

    published = server.post(f"/api/documents/{doc}/publish")
    assert published.status == 200 and published.body["status"] == "published", published.body
    assert server.get(f"/api/documents/{doc}").body["status"] == "published"
    found = server.get("/api/search?q=how+long+are+invoices+kept&limit=3")
    assert found.status == 200
    assert [hit["document_id"] for hit in found.body["hits"]][:1] == [doc]


def test_a_queued_task_is_cancelled_and_ids_name_their_kind(server):
    [document] = server.upload({"a.md": TEXT}).body
    task = server.post(f"/api/documents/{document['document_id']}/submit").body
    cancelled = server.delete(f"/api/ingestion-tasks/{task['task_id'][:8]}")
    assert cancelled.status == 200 and cancelled.body["status"] == "cancelled", cancelled.body
    # A document's id is not a task's, nor the other way round.
    assert server.get(f"/api/ingestion-tasks/{document['document_id']}").status == 404
    assert server.get(f"/api/documents/{task['task_id']}").status == 404


def test_tokens_roles_and_bases(server):
    """401 without a token once an admin exists, 403 for a viewer uploading, 404 for a
    document of a base the caller cannot read; each refusal in the audit trail."""
    admin = _token("root", "--role", "admin")
    viewer = _token("vera", "--role", "viewer", token=admin)
    editor = _token("ed", "--role", "editor", token=admin)
    assert (
        run_in_process("base", "create", "hr", "--team", "hr", env=kb_env(KB_TOKEN=admin)).code == 0
    )

    anonymous = server.upload({"a.md": TEXT})
    assert anonymous.status == 401, anonymous.body
    assert anonymous.body["error"] == "forbidden"
    assert anonymous.headers["www-authenticate"] == "Bearer"
    assert server.get("/api/search?q=invoices").status == 401
    assert server.get("/api/events").status == 401
    assert server.as_("kb_nothing_here").get("/api/search?q=invoices").status == 403

    refused = server.as_(viewer).upload({"a.md": TEXT})
    assert refused.status == 403 and refused.body["error"] == "forbidden", refused.body
    assert "viewer" in refused.body["message"]

    hidden = server.as_(admin).upload({"pay.md": TEXT}, base="hr")
    assert hidden.status == 201, hidden.body
    doc = hidden.body[0]["document_id"]
    assert server.as_(admin).get(f"/api/documents/{doc}").status == 200
    for path in (f"/api/documents/{doc}", f"/api/documents/{doc}/submit"):
        answer = server.as_(editor).request("POST" if path.endswith("submit") else "GET", path)
        assert answer.status == 404 and answer.body["error"] == "not_found", answer.body
    assert server.as_(editor).upload({"b.md": TEXT}, base="hr").status == 404
    assert server.as_(editor).upload({"b.md": TEXT}).status == 201

    trail = run_in_process("history", doc, "--json", env=kb_env(KB_TOKEN=admin)).records
    assert any(event.get("action") == "refused" for event in trail), trail


def test_errors_have_one_body_and_no_path(kb_home):
    with serving(KB_MAX_UPLOAD_BYTES="100") as server:
        too_large = server.upload({"big.md": b"x" * 5000})
        assert too_large.status == 413 and too_large.body["error"] == "invalid_input"
        large = server.upload({"big.md": b"x" * 101})
        assert large.status == 413 and large.body["error"] == "invalid_input", large.body
        unsupported = server.upload({"tool.exe": b"MZ"})
        assert unsupported.status == 422 and unsupported.body["error"] == "invalid_input"
        answers = [
            too_large,
            large,
            unsupported,
            server.get("/api/nowhere"),
            server.get("/api/search"),
            server.get("/api/search?q=x&mode=nonsense"),
            server.get("/api/documents/0123456789"),
            server.request("POST", "/api/documents", b"", {"Content-Type": "text/plain"}),
        ]
        assert [answer.status for answer in answers[3:]] == [404, 422, 422, 404, 422]
        for answer in answers:
            assert set(answer.body) == {"error", "message"}, answer.body
            assert str(kb_home) not in answer.body["message"]
            assert "/tmp" not in answer.body["message"], answer.body


@pytest.mark.slow  # the first upload creates the schema: 4 to 5 s
@pytest.mark.empty_database
def test_no_home_yet_is_said_without_its_path(kb_home):
    with serving() as server:
        answer = server.get("/api/search?q=invoices")
        assert answer.status == 422 and answer.body["error"] == "usage", answer.body
        assert str(kb_home) not in answer.body["message"]
        # The first upload makes it (its directory on SQLite, the schema on PostgreSQL):
        # search answers from then on.
        assert server.upload({"a.md": TEXT}).status == 201
        assert server.get("/api/search?q=invoices").status == 200


def test_an_address_in_use_is_a_usage_error(server):
    port = server.url.rsplit(":", 1)[1]
    process = start_kb("serve", "--port", port)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 2, stderr
    assert f"cannot listen on 127.0.0.1:{port}" in stderr


ROUTES = {
    ("GET", "/api/health"),
    ("POST", "/api/documents"),
    ("GET", "/api/documents/{document_id}"),
    ("POST", "/api/documents/{document_id}/submit"),
    ("POST", "/api/documents/{document_id}/retry"),
    ("POST", "/api/documents/{document_id}/publish"),
    ("GET", "/api/ingestion-tasks/{task_id}"),
    ("DELETE", "/api/ingestion-tasks/{task_id}"),
    ("GET", "/api/search"),
    ("GET", "/api/events"),
    ("GET", "/api/documents"),
    ("DELETE", "/api/documents/{document_id}"),
    ("GET", "/api/documents/{document_id}/history"),
    ("POST", "/api/documents/{document_id}/reject"),
    ("POST", "/api/documents/{document_id}/unpublish"),
    ("GET", "/api/ingestion-tasks"),
    ("GET", "/api/ingestion-tasks/{task_id}/history"),
}


def test_the_openapi_description_lists_the_documented_routes(server):
    """/openapi.json names exactly the routes docs/interface.md's "HTTP" table lists,
    and the table names each of them."""
    described = server.get("/openapi.json").body
    served = {
        (method.upper(), path) for path, item in described["paths"].items() for method in item
    }
    assert served == ROUTES
    table = Path(__file__).resolve().parents[2] / "docs" / "interface.md"
    text = table.read_text(encoding="utf-8").split("\n## HTTP\n", 1)[1]
    for method, path in ROUTES:
        shown = path.replace("{document_id}", "{id}").replace("{task_id}", "{id}")
        assert f"`{method} {shown}" in text, (method, path)


def _events(response, count: int) -> list[dict]:
    """The next `count` events of a Server-Sent Events stream: id, event, data."""
    found: list[dict] = []
    event: dict = {}
    while len(found) < count:
        line = response.readline().decode("utf-8")
        assert line, "the stream ended"
        line = line.rstrip("\n")
        if not line:
            if "data" in event:
                found.append(event)
            event = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            event[name] = json.loads(value) if name == "data" else value
    return found


def _stream(server: Client, headers: dict | None = None):
    request = urllib.request.Request(server.url + "/api/events", headers=headers or {})
    return urllib.request.urlopen(request, timeout=30)


def test_events_stream_and_resume_after_the_last_id(kb_home):
    """GET /api/events follows the lifecycle events as Server-Sent Events; reconnected
    with Last-Event-ID it resumes after that event. The server stops cleanly (exit 0,
    see `serving`) with a stream still open."""
    with serving() as server:
        with _stream(server) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            [document] = server.upload({"a.md": TEXT}).body
            task = server.post(f"/api/documents/{document['document_id']}/submit").body
            [queued] = _events(stream, 1)
            assert queued["event"] == "task.queued"
            assert queued["data"]["task_id"] == task["task_id"]
            assert queued["id"] == str(queued["data"]["event_id"])
            server.delete(f"/api/ingestion-tasks/{task['task_id']}")
            [cancelled] = _events(stream, 1)
            assert cancelled["event"] == "task.cancelled"
        bad = server.request("GET", "/api/events", headers={"Last-Event-ID": "x"})
        assert bad.status == 422 and bad.body["error"] == "usage"
        resumed = _stream(server, {"Last-Event-ID": queued["id"]})
        assert _events(resumed, 1) == [cancelled]
    resumed.close()  # open while the server was told to stop


@pytest.mark.slow  # the stream looks again within 5 s (services/events.py)
def test_a_stream_ends_once_its_callers_token_is_replaced(server):
    """The stream checks its caller at every look, with the request's own token (the
    server has none): a replaced token ends it with an error event, audited."""
    admin = _token("root", "--role", "admin")
    reader = _token("rita", "--role", "viewer", token=admin)
    with _stream(server, {"Authorization": f"Bearer {reader}"}) as stream:
        assert run_in_process("user", "token", "rita", env=kb_env(KB_TOKEN=admin)).code == 0
        run_in_process("upload", "--json", str(_note()), env=kb_env(KB_TOKEN=admin))  # a look
        [ended] = _events(stream, 1)
        assert ended["event"] == "error" and ended["data"]["error"] == "forbidden", ended
        assert stream.readline() == b""  # and the stream ends


def _note() -> Path:
    path = Path("note.md")
    path.write_bytes(TEXT)
    return path


def _json_post(client: Client, path: str, body: dict) -> Answer:
    data = json.dumps(body).encode()
    return client.request("POST", path, data, {"Content-Type": "application/json"})


def test_upload_with_metadata_and_submit_then_list_by_the_status_filters(server):
    """The upload's `meta` and `submit` fields are `kb upload --meta --submit`; the
    listings take `kb status`'s filters."""
    submitted = server.upload({"pay.md": TEXT}, meta=["team=finance", "year=2026"], submit="true")
    assert submitted.status == 201, submitted.body
    [task] = submitted.body
    assert set(task) >= TASK_KEYS and task["status"] == "queued"
    [draft] = server.upload({"notes.md": TEXT + b"Notes.\n"}, meta="team=hr").body
    assert draft["status"] == "draft" and draft["meta"] == {"team": "hr"}

    every = server.get("/api/documents").body
    assert [record["filename"] for record in every] == ["notes.md", "pay.md"]
    finance = server.get("/api/documents?where=team=finance").body
    assert [record["document_id"] for record in finance] == [task["document_id"]]
    assert finance[0]["meta"] == {"team": "finance", "year": "2026"}
    assert [r["filename"] for r in server.get("/api/documents?status=draft").body] == ["notes.md"]
    assert len(server.get("/api/documents?limit=1").body) == 1
    queued = server.get("/api/ingestion-tasks?status=queued").body
    assert [t["task_id"] for t in queued] == [task["task_id"]]
    assert server.get("/api/ingestion-tasks?status=succeeded").body == []

    refused = [
        server.upload({"a.md": TEXT}, meta="no-equals"),
        server.upload({"a.md": TEXT}, submit="perhaps"),
        server.get("/api/documents?status=nonsense"),
        server.get("/api/documents?where=" + "&where=".join(f"k{n}=v" for n in range(40))),
    ]
    assert [answer.status for answer in refused] == [422] * 4, [a.body for a in refused]
    assert len(server.get("/api/documents").body) == 2  # nothing stored by a refused upload


def test_review_routes_reject_unpublish_delete_and_history(server):
    [task] = server.upload({"a.md": TEXT}, submit="true").body
    doc = task["document_id"]
    _work()
    no_reason = _json_post(server, f"/api/documents/{doc}/reject", {})
    assert no_reason.status == 422, no_reason.body
    rejected = _json_post(server, f"/api/documents/{doc}/reject", {"reason": "wrong year"})
    assert rejected.status == 200, rejected.body
    assert (rejected.body["status"], rejected.body["rejected_reason"]) == ("draft", "wrong year")
    again = _json_post(server, f"/api/documents/{doc}/reject", {"reason": "twice"})
    assert again.status == 409 and again.body["error"] == "conflict", again.body

    assert server.post(f"/api/documents/{doc}/submit").status == 202
    _work()
    assert server.post(f"/api/documents/{doc}/publish").status == 200
    unpublished = server.post(f"/api/documents/{doc}/unpublish")
    assert unpublished.status == 200 and unpublished.body["status"] == "archived"
    assert server.get("/api/search?q=invoices").body["hits"] == []

    deleted = server.delete(f"/api/documents/{doc}")
    assert deleted.status == 200, deleted.body
    assert (deleted.body["document_id"], deleted.body["deleted"]) == (doc, True)
    assert server.get(f"/api/documents/{doc}").status == 404
    assert server.delete(f"/api/documents/{doc}").status == 404
    trail = server.get(f"/api/documents/{doc}/history")
    assert trail.status == 200, trail.body
    actions = [event["action"] for event in trail.body]
    assert actions[0] == "upload" and "reject" in actions and actions[-1] == "delete", actions
    task_trail = server.get(f"/api/ingestion-tasks/{task['task_id']}/history")
    assert task_trail.status == 404  # its task went with the document; the trail is the document's


def test_search_takes_every_option_of_kb_search(server):
    [task] = server.upload({"a.md": TEXT}, meta="team=finance", submit="true").body
    [other] = server.upload(
        {"b.md": b"# Backups\n\nBackups run every night.\n"}, submit="true"
    ).body
    _work()
    for record in (task, other):
        assert server.post(f"/api/documents/{record['document_id']}/publish").status == 200

    def hits(query: str) -> list[dict]:
        answer = server.get("/api/search?" + query)
        assert answer.status == 200, answer.body
        return answer.body["hits"]

    assert {hit["document_id"] for hit in hits("q=backups")} == {
        task["document_id"],
        other["document_id"],
    }
    kept = hits("q=backups&where=team=finance")
    assert {hit["document_id"] for hit in kept} == {task["document_id"]}
    assert server.get("/api/search?q=backups&mode=lexical").body["mode"] == "lexical"
    assert len(hits("q=backups&per_document=true&limit=1")) == 1
    assert hits("q=backups&context=1")[0]["text"]
    too_many = server.get("/api/search?q=backups&limit=100000")
    assert too_many.status == 422, too_many.body
    assert too_many.body["message"].startswith("limit must be"), too_many.body
    wide = server.get("/api/search?q=backups&context=11")
    assert wide.status == 422, wide.body


def test_a_busy_database_is_503_with_retry_after(kb_home):
    """A write that waits past KB_BUSY_TIMEOUT for another's lock is `busy`: 503 and
    Retry-After, safe to send again; once the lock is gone the same request succeeds."""
    with serving(KB_BUSY_TIMEOUT="0.3") as server:
        [task] = server.upload({"a.md": TEXT}, submit="true").body
        with write_lock_held(task["task_id"]):
            busy = server.delete(f"/api/ingestion-tasks/{task['task_id']}")
        assert busy.status == 503 and busy.body["error"] == "busy", busy.body
        assert busy.headers["retry-after"] == "1"
        again = server.delete(f"/api/ingestion-tasks/{task['task_id']}")
        assert again.status == 200 and again.body["status"] == "cancelled", again.body


def test_a_request_head_of_a_megabyte_is_refused_before_kb_reads_it(server):
    """A head that one read does not bring whole is refused by h11 past 16 KiB: 400,
    or the connection closed while the client still sends; the server goes on."""
    try:
        urllib.request.urlopen(server.url + "/api/search?q=" + "a" * 1_000_000, timeout=30)
        refused = 200
    except urllib.error.HTTPError as error:
        refused = error.code
    except (ConnectionError, urllib.error.URLError):
        refused = 400
    assert refused == 400
    assert server.get("/api/health").status == 200


def test_two_callers_at_once_each_see_only_their_own_base(server):
    """Requests of two callers interleaved on the server's threads, over every route
    that lists or reads: neither ever sees the other's base (the server's one knowledge
    base is entered per request as its caller)."""
    admin = _token("root", "--role", "admin")
    as_admin = kb_env(KB_TOKEN=admin)
    ids = {}
    for team in ("hr", "eng"):
        assert run_in_process("base", "create", team, "--team", team, env=as_admin).code == 0
        text = f"# {team} handbook\n\nInvoices of {team} are kept for seven years.\n".encode()
        [task] = server.as_(admin).upload({f"{team}.md": text}, base=team, submit="true").body
        ids[team] = task["document_id"]
    assert run_in_process("work", "--drain", env=as_admin).code == 0
    for doc in ids.values():
        assert server.as_(admin).post(f"/api/documents/{doc}/publish").status == 200
    readers = {
        team: server.as_(_token(f"{team}-reader", "--role", "viewer", "--team", team, token=admin))
        for team in ("hr", "eng")
    }

    def seen(team: str) -> set[str]:
        client, other = readers[team], ids["eng" if team == "hr" else "hr"]
        found = {record["document_id"] for record in client.get("/api/documents").body}
        found |= {task["document_id"] for task in client.get("/api/ingestion-tasks").body}
        answer = client.get("/api/search?q=invoices+kept+seven+years")
        found |= {hit["document_id"] for hit in answer.body["hits"]}
        for path in (f"/api/documents/{other}", f"/api/documents/{other}/history"):
            assert client.get(path).status == 404, path
        return found

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        asked = [pool.submit(seen, team) for _ in range(8) for team in ("hr", "eng")]
        answers = [future.result() for future in asked]
    assert answers == [{ids["hr"]}, {ids["eng"]}] * 8


@sqlite_only
def test_a_home_deleted_while_serving_is_opened_again_not_written_blind(kb_home):
    """The server keeps its knowledge base open; when its database file goes (the home
    deleted), reads say there is none and the next upload makes a new one that every
    command sees, instead of writing to the deleted file."""
    with serving() as server:
        assert server.upload({"a.md": TEXT}).status == 201
        shutil.rmtree(kb_home)
        gone = server.get("/api/documents")
        assert gone.status == 422 and "no knowledge base yet" in gone.body["message"]
        assert server.upload({"b.md": TEXT}).status == 201
        listed = [record["filename"] for record in server.get("/api/documents").body]
        assert listed == ["b.md"]
    assert [r["filename"] for r in run_in_process("status", "--json").records] == ["b.md"]


def test_scratch_trouble_never_stops_uploads(kb_home, tmp_path):
    """A directory named like a server's scratch with no process behind it (even a pid
    no process can have) is no obstacle at start; the server's own scratch removed by a
    cleaner is made again at the next upload."""
    root = tmp_path / "tmp"
    (root / "kb-serve-99999999999999999999-x").mkdir(parents=True)
    with serving(TMPDIR=str(root)) as server:
        [own] = root.glob(f"kb-serve-{server.process.pid}-*")
        shutil.rmtree(own)
        assert server.upload({"a.md": TEXT}).status == 201
    assert not list(root.glob("kb-serve-*"))


def test_bad_names_bodies_and_event_ids_are_422(server):
    answers = [
        server.upload({"n" * 300 + ".md": TEXT}),
        server.get(f"/api/events?since={2**63}"),
        server.request("GET", "/api/events", headers={"Last-Event-ID": "9" * 30}),
        server.request(
            "POST",
            "/api/documents/abcdef/reject",
            b"[" * 100_000,
            {"Content-Type": "application/json"},
        ),
    ]
    assert [answer.status for answer in answers] == [422] * 4, [a.body for a in answers]
    assert all(answer.body["error"] == "usage" for answer in answers), [a.body for a in answers]
    assert answers[1].body["message"].startswith("since is an event id")


def test_an_upload_is_refused_before_its_body_is_read(server):
    """Once users exist, an upload without a token is answered 401 while its body is
    still being sent: the caller is checked first."""
    _token("root", "--role", "admin")
    where = urlsplit(server.url)
    with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
        head = (
            f"POST /api/documents HTTP/1.1\r\nHost: {where.netloc}\r\n"
            "Content-Type: multipart/form-data; boundary=x\r\n"
            f"Content-Length: {100 * 1024 * 1024}\r\n\r\n"
        )
        sock.sendall(head.encode() + b"--x\r\n" + b"a" * 65536)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
