"""`kb serve` under load and faults: many clients at once against one knowledge base, a
server killed with kill -9 in the middle of an upload, and a SIGTERM while a request
is in flight. A real server process, real sockets, real workers."""

from __future__ import annotations

import concurrent.futures
import json
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.helpers import kb_env, run_in_process, start_kb
from tests.serving import Client, address, serving

pytestmark = pytest.mark.slow

TEXT = b"# Invoices\n\nInvoices are kept for seven years. Backups run every night.\n"


def _publish_one(server: Client) -> None:
    [task] = server.upload({"invoices.md": TEXT}, submit="true").body
    assert run_in_process("work", "--drain").code == 0
    assert server.post(f"/api/documents/{task['document_id']}/publish").status == 200


def test_200_searches_and_50_uploads_at_once_answer_without_an_error(kb_home):
    with serving() as server:
        _publish_one(server)
        with concurrent.futures.ThreadPoolExecutor(250) as pool:
            searches = [
                pool.submit(server.get, f"/api/search?q=how+long+are+invoices+kept+{n}")
                for n in range(200)
            ]
            uploads = [
                pool.submit(server.upload, {f"note-{n}.md": TEXT + f"Note {n}.\n".encode()})
                for n in range(50)
            ]
            answers = [future.result() for future in searches + uploads]
        failed = [(a.status, a.body) for a in answers if a.status not in (200, 201)]
        assert failed == []
        assert all(answer.body["hits"] for answer in answers[:200])
        names = {record["filename"] for record in server.get("/api/documents").body}
        assert names == {"invoices.md"} | {f"note-{n}.md" for n in range(50)}


def _multipart(name: str, data: bytes) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
        "Content-Type: text/markdown\r\n\r\n"
    ).encode()
    body += data + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def _half_sent(url: str, body: bytes, content_type: str) -> socket.socket:
    """An upload whose headers and first half are sent: the server is reading it."""
    where = urlsplit(url)
    sock = socket.create_connection((where.hostname, where.port), timeout=30)
    head = (
        f"POST /api/documents HTTP/1.1\r\nHost: {where.netloc}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    sock.sendall(head.encode() + body[: len(body) // 2])
    return sock


def _receiving(scratch_root: Path, timeout: float = 30) -> Path:
    """The directory of the upload the server is receiving, once its route runs (the
    form's parts are spooled by Starlette, then copied into it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in scratch_root.glob("kb-serve-*/*"):
            return path
        time.sleep(0.05)
    raise AssertionError("the server is not receiving the upload")


@pytest.fixture
def scratch_root(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "tmp"
    root.mkdir()
    yield root


def _start(scratch_root: Path):
    process = start_kb("serve", "--port", "0", "--json", env=kb_env(TMPDIR=str(scratch_root)))
    return process, address(process)


def test_a_server_killed_mid_upload_leaves_nothing_half_stored(kb_home, scratch_root):
    """kill -9 while a 4 MB file arrives: nothing of it is stored, `kb doctor` finds
    nothing wrong, and the next server removes what the killed one was receiving."""
    process, url = _start(scratch_root)
    try:
        assert Client(url).upload({"kept.md": TEXT}).status == 201
        body, content_type = _multipart(
            "big.md", b"# Big\n\n" + b"words and more words\n" * 200_000
        )
        sock = _half_sent(url, body, content_type)
        _receiving(scratch_root)
        process.kill()
        process.wait(timeout=30)
        sock.close()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    listed = run_in_process("status", "--json").records
    assert [record["filename"] for record in listed] == ["kept.md"]
    doctor = run_in_process("doctor", "--json")
    assert doctor.code == 0, doctor.stdout + doctor.stderr
    assert list(scratch_root.glob("kb-serve-*")), "the killed server's scratch is still there"
    process, url = _start(scratch_root)
    try:
        [own] = scratch_root.glob("kb-serve-*")  # the stale one removed
        assert own.name.startswith(f"kb-serve-{process.pid}-")
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    assert process.returncode == 0
    assert not list(scratch_root.glob("kb-serve-*"))


def test_sigterm_answers_the_upload_in_flight_then_stops(kb_home, scratch_root):
    """A stop asked for while a file arrives: the server reads the rest, stores it,
    answers 201, then exits 0; a new connection is no longer taken."""
    process, url = _start(scratch_root)
    try:
        body, content_type = _multipart("late.md", TEXT * 50_000)
        sock = _half_sent(url, body, content_type)
        _receiving(scratch_root)
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        sock.sendall(body[len(body) // 2 :])
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        sock.close()
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 201"), answer[:300]
    [record] = json.loads(payload)
    assert record["filename"] == "late.md" and record["status"] == "draft"
    listed = run_in_process("status", "--json").records
    assert [record["filename"] for record in listed] == ["late.md"]
    assert not list(scratch_root.glob("kb-serve-*"))
