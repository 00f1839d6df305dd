"""`kb relay` against a real HTTP receiver on loopback: every event delivered, signed,
in order per document; failures retried without skipping; a kill -9 loses nothing."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import db_rows, finish, kb_env, kb_json, start_kb, wait_until
from tests.loopback import JsonHandler, serving

SECRET = "relay-test-secret-4f1c"


class Receiver:
    """A webhook that records what it accepted, answering 500 to the first
    `failures` requests and taking `delay` seconds over each."""

    def __init__(self, failures: int = 0, delay: float = 0.0) -> None:
        self.failures = failures
        self.delay = delay
        self.accepted: list[tuple[dict, str, bytes]] = []  # (event, signature, body)
        self.refused = 0
        self.lock = threading.Lock()

    def handler(self) -> type[JsonHandler]:
        receiver = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(receiver.delay)
                with receiver.lock:
                    if receiver.refused < receiver.failures:
                        receiver.refused += 1
                        self.send_json(500, {"error": "try later"})
                        return
                    signature = self.headers.get("X-Kb-Signature", "")
                    receiver.accepted.append((json.loads(body), signature, body))
                self.send_json(200, {})

        return Handler

    def ids(self) -> list[int]:
        with self.lock:
            return [event["event_id"] for event, _, _ in self.accepted]


def make_events(tmp_path: Path, documents: int, rounds: int) -> list[dict]:
    """Submit and cancel each document `rounds` times: 2 events a round, per document."""
    paths = []
    for i in range(documents):
        path = tmp_path / f"doc{i}.txt"
        path.write_text(f"document number {i}")
        paths.append(path)
    uploaded = kb_json("upload", *paths)
    for _ in range(rounds):
        for document in uploaded:
            [task] = kb_json("submit", document["document_id"])
            kb_json("cancel", task["task_id"])
    return kb_json("events")


def assert_in_order_per_document(received: list[dict], written: list[dict]) -> None:
    """Every written event arrived; per document, first arrivals in the written order;
    a repeat is the same event again (same id, same content)."""
    first: dict[int, dict] = {}
    for event in received:
        assert first.setdefault(event["event_id"], event) == event
    assert set(first) == {event["event_id"] for event in written}
    by_document: dict[str, list[int]] = {}
    for event in first.values():
        by_document.setdefault(event["document_id"], []).append(event["event_id"])
    for document_id, ids in by_document.items():
        assert ids == [e["event_id"] for e in written if e["document_id"] == document_id]


def relay(port: int, *extra: str):
    env = kb_env(KB_RELAY_SECRET=SECRET)
    return start_kb("relay", "--webhook", f"http://127.0.0.1:{port}/hooks/kb", *extra, env=env)


def test_relay_delivers_every_event_signed_and_in_order(tmp_path):
    written = make_events(tmp_path, documents=4, rounds=2)
    receiver = Receiver()
    with serving(receiver.handler()) as port:
        proc = relay(port, "--json")
        wait_until(lambda: len(receiver.ids()) == len(written), timeout=30)
        # New events are delivered while the relay runs (woken by their commit).
        more = tmp_path / "more"
        more.mkdir()
        written = make_events(more, documents=1, rounds=1)
        wait_until(lambda: len(receiver.ids()) == len(written), timeout=30)
        proc.send_signal(signal.SIGTERM)
        result = finish(proc, timeout=15)
    assert result.code == 0, result.stderr
    received = [event for event, _, _ in receiver.accepted]
    assert_in_order_per_document(received, written)
    for _event, signature, body in receiver.accepted:
        expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(signature, expected)
    deliveries = result.records
    assert [d["event_id"] for d in deliveries] == receiver.ids()
    assert all(d["http_status"] == 200 and d["attempts"] == 1 for d in deliveries)
    assert SECRET not in result.stdout + result.stderr
    assert db_rows("SELECT id FROM outbox_events WHERE dispatched_at IS NULL") == []


def test_relay_retries_a_failing_receiver_without_skipping(tmp_path):
    written = make_events(tmp_path, documents=2, rounds=1)
    # Two refusals: retried twice, the pause doubled once (0.5 s, 1 s); a third refusal
    # proved nothing more and cost the 2 s pause after it.
    receiver = Receiver(failures=2)
    with serving(receiver.handler()) as port:
        proc = relay(port)
        wait_until(lambda: len(receiver.ids()) == len(written), timeout=30)
        proc.send_signal(signal.SIGINT)
        result = finish(proc, timeout=15)
    assert result.code == 0, result.stderr
    assert receiver.ids() == [event["event_id"] for event in written]
    assert result.stderr.count("HTTP 500") == 2
    assert "/hooks/kb" not in result.stderr  # the receiver's host only
    [first] = db_rows(
        "SELECT attempts FROM outbox_events WHERE id = :id", id=written[0]["event_id"]
    )
    assert first["attempts"] == 3


def test_relay_keeps_retrying_an_unreachable_receiver_until_stopped(tmp_path):
    make_events(tmp_path, documents=1, rounds=1)
    with serving(Receiver().handler()) as port:
        pass  # the port is free again: nobody answers there
    proc = relay(port)
    assert proc.stderr is not None
    wait_until(lambda: "cannot reach the receiver" in proc.stderr.readline(), timeout=15)
    proc.send_signal(signal.SIGTERM)
    result = finish(proc, timeout=15)
    assert result.code == 0
    assert len(db_rows("SELECT id FROM outbox_events WHERE dispatched_at IS NULL")) == 2


@pytest.mark.slow
def test_relay_killed_mid_stream_loses_nothing_and_reorders_nothing(tmp_path):
    written = make_events(tmp_path, documents=6, rounds=5)  # 60 events
    receiver = Receiver(delay=0.02)
    with serving(receiver.handler()) as port:
        for _ in range(2):  # two kills at different points of the stream
            proc = relay(port)
            target = len(receiver.ids()) + len(written) // 3
            wait_until(lambda target=target: len(receiver.ids()) >= target, timeout=60)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            proc.communicate()
        proc = relay(port)
        wait_until(lambda: {*receiver.ids()} >= {e["event_id"] for e in written}, timeout=60)
        proc.send_signal(signal.SIGTERM)
        assert finish(proc, timeout=15).code == 0
    received = [event for event, _, _ in receiver.accepted]
    assert_in_order_per_document(received, written)
    assert db_rows("SELECT id FROM outbox_events WHERE dispatched_at IS NULL") == []


# --- hostile receivers: a receiver sets neither the relay's memory nor its pace --------


class EndlessAnswer(JsonHandler):
    """200, then a body that never ends: chunked, or a Content-Length of 4 GiB; sent as
    fast as the relay reads it, until the relay hangs up."""

    chunked = True
    block = b"x" * 65536

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        if self.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(4 * 2**30))
        self.end_headers()
        frame = b"%x\r\n%s\r\n" % (len(self.block), self.block) if self.chunked else self.block
        try:
            while True:
                self.wfile.write(frame)
        except OSError:
            pass  # the relay closed the connection: what it should do


class HugeAnswer(EndlessAnswer):
    chunked = False


class DrippingAnswer(JsonHandler):
    """The first request is answered one byte every 0.3 s, forever: each socket read
    gets a byte in time, so a per-read time-out never fires. Later requests: 200."""

    requests = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).requests += 1
        if type(self).requests > 1:
            self.send_json(200, {})
            return
        try:
            for byte in itertools.cycle(b"HTTP/1.1 200 OK\r\nX-Slow: "):
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.3)
        except OSError:
            pass


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def undelivered() -> list[dict]:
    return db_rows("SELECT id, attempts FROM outbox_events WHERE dispatched_at IS NULL")


@pytest.mark.parametrize("handler", [EndlessAnswer, HugeAnswer], ids=["chunked", "4GiB"])
def test_an_endless_answer_is_not_read_and_the_status_decides(tmp_path, handler):
    """Against a normal receiver the relay peaks at its baseline; against one whose body
    never ends it stays within a few MB of it (docs/many-hosts.md states the bound),
    marks the event delivered on the 200, and the first SIGTERM stops it."""
    written = make_events(tmp_path, documents=1, rounds=1)
    receiver = Receiver()
    with serving(receiver.handler()) as port:
        proc = relay(port, "--json")
        wait_until(lambda: len(receiver.ids()) == len(written), timeout=30)
        baseline = peak_rss_mb(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert finish(proc, timeout=15).code == 0
    more = tmp_path / "more"
    more.mkdir()
    make_events(more, documents=1, rounds=1)
    with serving(handler) as port:
        proc = relay(port, "--json", "--timeout", "30")
        wait_until(lambda: not undelivered(), timeout=30, message="never marked delivered")
        time.sleep(1.0)  # what an unbounded read would have taken in meanwhile
        peak = peak_rss_mb(proc.pid)
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        result = finish(proc, timeout=15)
    assert result.code == 0, result.stderr
    assert time.monotonic() - started < 5
    assert [record["http_status"] for record in result.records] == [200, 200]
    assert peak < baseline + 20, (baseline, peak)


def test_a_dripping_answer_is_cut_at_the_timeout_and_retried(tmp_path):
    """--timeout bounds the whole delivery: an answer trickling a byte at a time is a
    failed attempt after 1 s, retried; the retry is delivered."""
    DrippingAnswer.requests = 0
    make_events(tmp_path, documents=1, rounds=1)
    with serving(DrippingAnswer) as port:
        started = time.monotonic()
        proc = relay(port, "--json", "--timeout", "1")
        wait_until(lambda: not undelivered(), timeout=20, message="held by the drip")
        elapsed = time.monotonic() - started
        proc.send_signal(signal.SIGTERM)
        result = finish(proc, timeout=15)
    assert result.code == 0, result.stderr
    assert "no complete answer within 1 s" in result.stderr
    assert elapsed < 8, elapsed
    assert result.records[0]["attempts"] == 2


def test_sigterm_ends_a_delivery_under_way(tmp_path):
    """A stop does not wait for a slow receiver: the delivery is cut, the event stays
    undelivered, and the relay exits 0 at once."""
    DrippingAnswer.requests = 0
    make_events(tmp_path, documents=1, rounds=1)
    with serving(DrippingAnswer) as port:
        proc = relay(port, "--timeout", "60")
        wait_until(lambda: DrippingAnswer.requests == 1, timeout=20)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        result = finish(proc, timeout=15)
    assert result.code == 0, result.stderr
    assert time.monotonic() - started < 2
    assert len(undelivered()) == 2
