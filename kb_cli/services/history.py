"""`kb history`: the audit trail of a document (with its tasks, also once it was
deleted), of a task, or of a knowledge base (`base:NAME`: its creation, grants, and
refused uploads into it)."""

from __future__ import annotations

import json

from kb_cli import queries
from kb_cli.app import Kb, require_base
from kb_cli.permissions import BASE_PREFIX
from kb_cli.records import AuditRecord


def history(kb: Kb, entity_id: str, kind: str | None = None) -> list[AuditRecord]:
    """The trail of `entity_id`: a full id of `kind` ("documents", "tasks" or
    "deleted"), or `base:NAME`."""
    with kb.db.read() as conn:
        ids = [entity_id]
        if entity_id.startswith(BASE_PREFIX):
            require_base(conn, kb.scope, entity_id.removeprefix(BASE_PREFIX))
        elif kind == "documents":
            ids += queries.task_ids_of_document(conn, entity_id)
        elif kind == "deleted":  # the trail outlives the document
            tombstone = queries.get_tombstone(conn, entity_id)
            ids += json.loads(tombstone.task_ids) if tombstone else []
        rows = queries.list_audit_events(conn, ids)
    return [AuditRecord.from_row(row) for row in rows]
