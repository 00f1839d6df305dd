"""Lifecycle events for scripts: `kb events`, oldest first, and following them as
they are written (woken by the commit that writes one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from kb_cli import queries
from kb_cli.app import Kb, require_base, require_caller
from kb_cli.config import LARGEST_INTEGER
from kb_cli.db import outlasting_outages
from kb_cli.engines import EVENTS_CHANNEL
from kb_cli.errors import StopRequested, UsageError
from kb_cli.records import EventRecord, EventRow

PAGE = 500
# Ids are taken at insert and transactions commit in any order (on PostgreSQL), so an
# id below the newest one read may still appear: such a gap is read again for this
# long, longer than any kb transaction lasts (a rolled-back one leaves it for good).
GAP_SECONDS = 60.0
# A follower that missed a wake-up looks again after this long at the latest; sooner
# while a gap may still fill.
FOLLOW_POLL_SECONDS = 5.0
GAP_POLL_SECONDS = 0.5


class EventCursor:
    """Where a reader is: the newest id read, and the ids below it not seen yet."""

    def __init__(self, after: int, kb: Kb, bases: tuple[str, ...], following: bool = False) -> None:
        if not 0 <= after <= LARGEST_INTEGER:
            raise UsageError(f"--since is an event id, from 0 to {LARGEST_INTEGER}")
        if bases:
            with kb.db.read() as conn:
                for base in bases:
                    require_base(conn, kb.scope, base)
        self.after = after
        self.following = following  # long-running: each read checks the caller again
        self.gaps: dict[int, float] = {}  # id -> when to stop looking for it

    def read(self, kb: Kb, bases: tuple[str, ...]) -> list[EventRecord]:
        """The next events the caller may read, oldest first (at most a page); when
        following, refused once the caller was disabled or its token replaced."""
        now = time.monotonic()
        self.gaps = {i: until for i, until in self.gaps.items() if until > now}
        with kb.db.read() as conn:
            if self.following:
                require_caller(conn, kb.actor)
            scope = kb.actor.scope(*bases)
            rows = queries.events_after(conn, scope, self.after, list(self.gaps), PAGE)
        return [
            EventRecord.from_row(row) for row, readable in rows if self._advance(row, readable, now)
        ]

    def _advance(self, row: EventRow, readable: bool, now: float) -> bool:
        """Move past `row`; whether the caller may see it."""
        if self.gaps.pop(row.id, None) is None:
            self.gaps.update({i: now + GAP_SECONDS for i in range(self.after + 1, row.id)})
            self.after = row.id
        return readable


def list_events(kb: Kb, since: int, bases: tuple[str, ...] = ()) -> Iterator[EventRecord]:
    """Every event after `since` of the readable bases (or of `bases`), oldest first."""
    cursor = EventCursor(since, kb, bases)
    while True:
        before = cursor.after
        yield from cursor.read(kb, bases)
        if cursor.after == before:
            return


def follow_events(
    kb: Kb, since: int, bases: tuple[str, ...], stop: threading.Event
) -> Iterator[EventRecord]:
    """As list_events, then every new event as it commits, until `stop` is set. Each
    look checks the caller again, and a lost database server is reconnected to
    (db.outlasting_outages)."""
    cursor = EventCursor(since, kb, bases, following=True)
    watch = kb.db.watch(EVENTS_CHANNEL)
    try:
        while not stop.is_set():
            before = cursor.after
            try:
                events = outlasting_outages(
                    lambda: cursor.read(kb, bases), stop, kb.settings.reconnect_seconds
                )
            except StopRequested:
                return
            yield from events
            if cursor.after == before:  # nothing new: wait for a commit
                watch.wait(GAP_POLL_SECONDS if cursor.gaps else FOLLOW_POLL_SECONDS, stop)
    finally:
        watch.close()


def file_names(kb: Kb) -> Callable[[str | None], str | None]:
    """The file name of an event's document, read once per document (a deleted one has
    none): what a person on a terminal reads an event by."""
    known: dict[str, str | None] = {}

    def name_of(document_id: str | None) -> str | None:
        if document_id is None:
            return None
        if document_id not in known:
            with kb.db.read() as conn:
                row = queries.get_document(conn, document_id)
            known[document_id] = row.filename if row is not None else None
        return known[document_id]

    return name_of
