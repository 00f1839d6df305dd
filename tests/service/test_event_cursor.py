"""Reading events by id when ids commit out of order (PostgreSQL takes an id at insert,
and transactions commit in any order): an id skipped over is read when it appears."""

from __future__ import annotations

import json

from kb_cli.services.events import EventCursor, list_events
from tests.helpers import db_execute


def insert_event(event_id: int, base: str = "default") -> None:
    db_execute(
        "INSERT INTO outbox_events (id, topic, entity_id, document_id, base, payload, "
        "created_at) VALUES (:id, 'document.published', :doc, :doc, :base, :payload, "
        "'2026-01-01T00:00:00.000000Z')",
        id=event_id,
        doc=f"doc-{event_id}",
        base=base,
        payload=json.dumps({"n": event_id}),
    )


def test_an_event_committed_after_a_newer_one_is_still_read(kb):
    cursor = EventCursor(0, kb, ())
    insert_event(1)
    insert_event(3)
    assert [e.event_id for e in cursor.read(kb, ())] == [1, 3]
    assert set(cursor.gaps) == {2}
    insert_event(2)  # the slower transaction commits
    insert_event(4)
    assert [e.event_id for e in cursor.read(kb, ())] == [2, 4]
    assert cursor.gaps == {}
    assert cursor.read(kb, ()) == []


def test_events_a_caller_may_not_read_are_no_gaps(kb):
    db_execute(
        "INSERT INTO bases (name, created_at) VALUES ('secret', '2026-01-01T00:00:00.000000Z')"
    )
    db_execute("INSERT INTO base_teams (base, team) VALUES ('secret', 'spies')")
    for event_id, base in [(1, "default"), (2, "secret"), (3, "default")]:
        insert_event(event_id, base)
    from kb_cli.permissions import Actor, Role

    reader = kb.acting_as(Actor("outsider", Role.VIEWER))
    cursor = EventCursor(0, reader, ())
    assert [e.event_id for e in cursor.read(reader, ())] == [1, 3]
    assert cursor.gaps == {} and cursor.after == 3
    assert [e.event_id for e in list_events(kb, 0)] == [1, 2, 3]
