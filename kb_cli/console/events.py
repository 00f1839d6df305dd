"""`kb events` and `kb relay`: one line per event or delivery; failures on stderr."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from kb_cli.console.core import emit, log, write_json
from kb_cli.records import EventRecord

if TYPE_CHECKING:
    from kb_cli.services.relay import Delivery


def event_line(event: EventRecord) -> str:
    subject = f"document={event.document_id}"
    if event.task_id:
        subject += f" task={event.task_id}"
    data = json.dumps(event.data, ensure_ascii=False, separators=(",", ":"))
    return f"{event.event_id} {event.at} {event.type} base={event.base} {subject} {data}"


def print_event(event: EventRecord, as_json: bool) -> None:
    """One event as soon as it is read: a follower's reader sees it at once."""
    if as_json:
        write_json(event)
    else:
        emit(event_line(event))
    sys.stdout.flush()


class RelayLog:
    """Each delivery on stdout (a JSON line with --json); each failed attempt on stderr,
    naming the receiver's host only."""

    def __init__(self, host: str, as_json: bool) -> None:
        self.host = host
        self.as_json = as_json

    def delivered(self, delivery: Delivery) -> None:
        if self.as_json:
            write_json(delivery)
        else:
            emit(
                f"delivered event={delivery.event_id} type={delivery.type} "
                f"attempts={delivery.attempts} status={delivery.http_status}"
            )
        sys.stdout.flush()

    def failed(self, event: EventRecord, attempt: int, reason: str, retry_in: float) -> None:
        log(
            f"delivery failed event={event.event_id} attempt={attempt} to={self.host}: "
            f"{reason}; retrying in {retry_in:g} s"
        )

    def started(self) -> None:
        log(f"relaying events to {self.host}; Ctrl-C stops")
