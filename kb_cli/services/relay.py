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

import hashlib
import hmac
import http.client
import json
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Protocol

from kb_cli import queries
from kb_cli.app import Kb
from kb_cli.engines import EVENTS_CHANNEL
from kb_cli.errors import UsageError
from kb_cli.records import EventRecord

SIGNATURE_HEADER = "X-Kb-Signature"  # "sha256=" + hex HMAC-SHA256(secret, body)
EVENT_ID_HEADER = "X-Kb-Event-Id"
BATCH = 200
IDLE_POLL_SECONDS = 5.0
FIRST_BACKOFF_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 60.0


@dataclass(frozen=True)
class Webhook:
    url: str
    secret: str | None = None
    timeout_seconds: float = 10.0

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError("--webhook must be an http:// or https:// URL")
        if parts.username or parts.password:  # http.client would never send them
            raise UsageError(
                "--webhook must not carry a user or password: the receiver checks "
                "the X-Kb-Signature header (--secret) instead"
            )
        try:
            parts.port  # noqa: B018 (parsing it is the check)
        except ValueError:
            raise UsageError("--webhook has a port that is not a number") from None

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
    """POSTs to one webhook over a kept-alive connection, opened again after any error."""

    def __init__(self, webhook: Webhook) -> None:
        self.webhook = webhook
        self._parts = urllib.parse.urlsplit(webhook.url)
        self._connection: http.client.HTTPConnection | None = None

    def post(self, event: EventRecord) -> int:
        """The receiver's 2xx status, or DeliveryFailed."""
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
        try:
            connection = self._connect()
            connection.request("POST", path, body, headers)
            answer = connection.getresponse()
            answer.read()
        except TimeoutError:
            self.close()
            raise DeliveryFailed(f"no answer within {self.webhook.timeout_seconds:g} s") from None
        except (OSError, http.client.HTTPException) as error:
            self.close()
            raise DeliveryFailed(f"cannot reach the receiver ({type(error).__name__})") from None
        if not 200 <= answer.status < 300:
            if answer.will_close:
                self.close()
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
        `stop` is set."""
        watch = self.kb.db.watch(EVENTS_CHANNEL)
        try:
            while not self.stop.is_set():
                with self.kb.db.read() as conn:
                    pending = queries.undelivered_events(conn, BATCH)
                if not pending:
                    watch.wait(IDLE_POLL_SECONDS, self.stop)
                for row in pending:
                    if not self.deliver(EventRecord.from_row(row), row.attempts):
                        return
        finally:
            watch.close()
            self.poster.close()

    def deliver(self, event: EventRecord, attempts: int) -> bool:
        """Post `event` until the receiver acknowledges it, then mark it delivered;
        False when told to stop first (it stays undelivered)."""
        delay = FIRST_BACKOFF_SECONDS
        while not self.stop.is_set():
            attempts += 1
            try:
                status = self.poster.post(event)
            except DeliveryFailed as failure:
                with self.kb.db.write() as conn:
                    queries.count_delivery_attempt(conn, event.event_id)
                self.listener.failed(event, attempts, str(failure), delay)
                if self.stop.wait(delay):
                    return False
                delay = min(delay * 2, BACKOFF_CAP_SECONDS)
                continue
            with self.kb.db.write() as conn:
                queries.mark_delivered(conn, event.event_id, self.kb.timestamp())
            self.listener.delivered(
                Delivery(event.event_id, event.type, event.document_id, attempts, status)
            )
            return True
        return False
