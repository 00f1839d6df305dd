"""`kb events` and `kb relay`: one line per event or delivery; failures on stderr."""

from __future__ import annotations

import shutil
import sys
from typing import TYPE_CHECKING

from kb_cli.console.core import (
    cell_len_of,
    cut_name,
    cut_to,
    emit,
    is_fancy,
    log,
    quoted,
    short,
    visible,
    write_json,
)
from kb_cli.records import EventRecord

if TYPE_CHECKING:
    from collections.abc import Callable

    from kb_cli.services.relay import Delivery


def event_line(event: EventRecord) -> str:
    subject = f"document={event.document_id}"
    if event.task_id:
        subject += f" task={event.task_id}"
    data = quoted(event.data, compact=True)
    return f"{event.event_id} {event.at} {event.type} base={event.base} {subject} {data}"


def terminal_event_line(event: EventRecord, width: int, filename: str | None = None) -> str:
    """The same event for a person: its time of day, short document id, its file and
    what changed, in the terminal's width: the file name is cut (never the status, the
    last field); the full record is `--json` or piped output."""
    head = f"{event.event_id} {event.at[11:19]} {event.type} {event.base} "
    head += short(event.document_id)
    status = str(event.data.get("error_code") or event.data.get("status") or "")
    room = width - cell_len_of(head) - len(status) - 2
    name = cut_name(visible(filename), room) if filename and room >= _MIN_NAME_CELLS else ""
    line = " ".join(part for part in (visible(head), name, status) if part)
    return cut_to(line, width)


_MIN_NAME_CELLS = 6


def print_event(
    event: EventRecord, as_json: bool, name_of: Callable[[str | None], str | None] | None = None
) -> None:
    """One event as soon as it is read: a follower's reader sees it at once."""
    if as_json:
        write_json(event)
    elif is_fancy(sys.stdout):
        filename = name_of(event.document_id) if name_of else None
        emit(terminal_event_line(event, shutil.get_terminal_size().columns, filename))
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
