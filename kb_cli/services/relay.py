"""`kb relay`: deliver lifecycle events to a webhook, at least once, in order.

One event per POST, oldest undelivered first; the next one waits until this one is
acknowledged, so events reach the receiver in the order they were written (per
document, and overall). An event is marked delivered only after the receiver's 2xx:
a relay killed between the two delivers it again on restart, and the receiver
deduplicates by `event_id`. A failure (non-2xx, time-out, unreachable) is retried
with growing pauses, never skipped. The body is signed with HMAC-SHA256 when a
secret is set; the secret never appears in a message.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import json
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from kb_cli import queries
from kb_cli.app import Kb, require_caller
from kb_cli.db import outlasting_outages
from kb_cli.engines import EVENTS_CHANNEL, WATCH_SLICE_SECONDS
from kb_cli.errors import StopRequested, UsageError
from kb_cli.provider_http import check_url
from kb_cli.records import EventRecord, EventRow

T = TypeVar("T")

SIGNATURE_HEADER = "X-Kb-Signature"  # "sha256=" + hex HMAC-SHA256(secret, body)
EVENT_ID_HEADER = "X-Kb-Event-Id"
BATCH = 200
IDLE_POLL_SECONDS = 5.0
FIRST_BACKOFF_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 60.0
# Of an answer, the relay reads the status and at most this much of the body (the
# status alone decides); a longer body is left unread and its connection closed.
ANSWER_PREFIX_BYTES = 64 * 1024


@dataclass(frozen=True)
class Webhook:
    url: str
    secret: str | None = None
    timeout_seconds: float = 10.0

    def __post_init__(self) -> None:
        check_url(self.url, "--webhook")
        parts = urllib.parse.urlsplit(self.url)
        if parts.username or parts.password:  # http.client would never send them
            raise UsageError(
                "--webhook must not carry a user or password: the receiver checks "
                "the X-Kb-Signature header (--secret) instead"
            )

    @property
    def host(self) -> str:
        """How messages name the receiver: never its path, query or credentials."""
        parts = urllib.parse.urlsplit(self.url)
        return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


def sign(secret: str, body: bytes) -> str:
    """The signature header's value: how a receiver checks that kb sent the body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def event_body(event: EventRecord) -> bytes:
    return json.dumps(event.to_dict(), ensure_ascii=False, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Delivery:
    """One event acknowledged by the receiver."""

    event_id: int
    type: str
    document_id: str | None
    attempts: int
    http_status: int

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


class DeliveryFailed(Exception):
    """The receiver did not acknowledge: why, in a few words (no URL path, no body)."""


class Poster:
    """POSTs to one webhook over a kept-alive connection, opened again after any error.

    A receiver sets neither the relay's memory nor its pace: each delivery (connect,
    send, answer) ends within the webhook's timeout in all, however slowly the answer
    trickles, and of the answer only the status line, the headers (http.client's
    limits: 100 lines of at most 64 KiB) and the first ANSWER_PREFIX_BYTES of the body
    are read; a longer body is left unread and the connection closed."""

    def __init__(self, webhook: Webhook) -> None:
        self.webhook = webhook
        self._parts = urllib.parse.urlsplit(webhook.url)
        self._connection: http.client.HTTPConnection | None = None

    def post(self, event: EventRecord, stop: threading.Event) -> int:
        """The receiver's 2xx status, or DeliveryFailed (also when `stop` is set while
        the delivery is under way: it ends at once)."""
        body = event_body(event)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "kb-relay",
            EVENT_ID_HEADER: str(event.event_id),
        }
        if self.webhook.secret:
            headers[SIGNATURE_HEADER] = sign(self.webhook.secret, body)
        path = self._parts.path or "/"
        if self._parts.query:
            path += "?" + self._parts.query
        connection = self._connect()
        watchdog = Watchdog(connection, self.webhook.timeout_seconds, stop)
        try:
            connection.request("POST", path, body, headers)
            answer = connection.getresponse()
            answer.read(ANSWER_PREFIX_BYTES)
            complete = answer.isclosed()
        except (OSError, http.client.HTTPException, ValueError) as error:
            cut_short = watchdog.finish()
            self.close()
            if cut_short or isinstance(error, TimeoutError):
                raise DeliveryFailed(
                    f"no complete answer within {self.webhook.timeout_seconds:g} s"
                ) from None
            raise DeliveryFailed(f"cannot reach the receiver ({type(error).__name__})") from None
        if watchdog.finish() or not complete or answer.will_close:
            self.close()  # its socket was shut, or holds the unread rest of a long answer
        if not 200 <= answer.status < 300:
            raise DeliveryFailed(f"HTTP {answer.status}")
        return answer.status

    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is None:
            kind = (
                http.client.HTTPSConnection
                if self._parts.scheme == "https"
                else http.client.HTTPConnection
            )
            self._connection = kind(
                self._parts.hostname or "",
                self._parts.port,
                timeout=self.webhook.timeout_seconds,
            )
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class Watchdog:
    """Ends one delivery that outlasts its time, or that a stop request interrupts, by
    shutting its socket: the blocked send or read fails at once. A socket time-out
    bounds each read only, and a receiver sending a byte every second never trips it."""

    def __init__(self, connection: http.client.HTTPConnection, seconds: float, stop) -> None:
        self._connection = connection
        self._deadline = time.monotonic() + seconds
        self._stop = stop
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._fired = False
        threading.Thread(target=self._watch, name="kb-relay-watchdog", daemon=True).start()

    def _watch(self) -> None:
        while not self._done.wait(WATCH_SLICE_SECONDS):
            if (time.monotonic() >= self._deadline or self._stop.is_set()) and self._fire():
                return

    def _fire(self) -> bool:
        """Shut the delivery's socket; False while it has none yet (still connecting,
        which the socket time-out bounds): then it is shut as soon as it has one."""
        with self._lock:
            if self._done.is_set():
                return True
            self._fired = True
            sock = self._connection.sock
            if sock is None:
                return False
            with contextlib.suppress(OSError):  # the plain socket's: no TLS goodbye
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            return True

    def finish(self) -> bool:
        """Stop watching; whether the delivery was cut short."""
        with self._lock:
            self._done.set()
            return self._fired


class RelayListener(Protocol):
    """What the relay tells its display."""

    def delivered(self, delivery: Delivery) -> None: ...
    def failed(self, event: EventRecord, attempt: int, reason: str, retry_in: float) -> None: ...


class Relay:
    def __init__(
        self,
        kb: Kb,
        webhook: Webhook,
        listener: RelayListener,
        stop: threading.Event,
    ) -> None:
        self.kb = kb
        self.webhook = webhook
        self.listener = listener
        self.stop = stop
        self.poster = Poster(webhook)

    def run(self) -> None:
        """Deliver every undelivered event, then each new one as it commits, until
        `stop` is set. Before each delivery the caller is checked again (CallerRevoked),
        and a lost database server is reconnected to (db.outlasting_outages)."""
        watch = self.kb.db.watch(EVENTS_CHANNEL)
        try:
            while not self.stop.is_set():
                pending = self._outlasting(self._pending)
                if not pending:
                    watch.wait(IDLE_POLL_SECONDS, self.stop)
                for row in pending:
                    if not self.deliver(EventRecord.from_row(row), row.attempts):
                        return
        except StopRequested:
            return
        finally:
            watch.close()
            self.poster.close()

    def _pending(self) -> list[EventRow]:
        with self.kb.db.read() as conn:
            require_caller(conn, self.kb.actor)
            return queries.undelivered_events(conn, BATCH)

    def _caller_checked(self) -> None:
        with self.kb.db.read() as conn:
            require_caller(conn, self.kb.actor)

    def _outlasting(self, step: Callable[[], T]) -> T:
        return outlasting_outages(step, self.stop, self.kb.settings.reconnect_seconds)

    def deliver(self, event: EventRecord, attempts: int) -> bool:
        """Post `event` until the receiver acknowledges it, then mark it delivered;
        False when told to stop first (it stays undelivered)."""
        delay = FIRST_BACKOFF_SECONDS
        while not self.stop.is_set():
            self._outlasting(self._caller_checked)
            attempts += 1
            try:
                status = self.poster.post(event, self.stop)
            except DeliveryFailed as failure:
                if self.stop.is_set():
                    return False
                self._outlasting(lambda: self._count_attempt(event.event_id))
                self.listener.failed(event, attempts, str(failure), delay)
                if self.stop.wait(delay):
                    return False
                delay = min(delay * 2, BACKOFF_CAP_SECONDS)
                continue
            self._outlasting(lambda: self._mark_delivered(event.event_id))
            self.listener.delivered(
                Delivery(event.event_id, event.type, event.document_id, attempts, status)
            )
            return True
        return False

    def _count_attempt(self, event_id: int) -> None:
        with self.kb.db.write() as conn:
            queries.count_delivery_attempt(conn, event_id)

    def _mark_delivered(self, event_id: int) -> None:
        with self.kb.db.write() as conn:
            queries.mark_delivered(conn, event_id, self.kb.timestamp())
