"""Lifecycle events from the outbox (`kb events`, `kb relay`).

- `outbox_events.document_id` / `task_id` / `base`: what an event is about, and the
  base that decides who may read it.
- `outbox_events.attempts`: how often the relay tried to deliver it;
  `dispatched_at` (from 0001) is when a webhook acknowledged it.
- The queue's topic `ingestion_task.queued` is now the event type `task.queued`.
  Rows written before this revision are marked delivered: a relay started for the
  first time delivers what happens from now on (`kb events --since 0` lists them all).

Revision ID: 0010_events
Revises: 0009_stage_artefacts
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0010_events"
down_revision = "0009_stage_artefacts"

ID, STAMP, NAME = sa.String(36), sa.String(27), sa.String(100)
UNDELIVERED = sa.text("dispatched_at IS NULL")


def upgrade() -> None:
    with op.batch_alter_table("outbox_events") as table:
        table.add_column(sa.Column("document_id", ID, nullable=True))
        table.add_column(sa.Column("task_id", ID, nullable=True))
        table.add_column(sa.Column("base", NAME, nullable=True))
        table.add_column(sa.Column("attempts", sa.Integer, nullable=False, server_default="0"))
    op.execute(
        "UPDATE outbox_events SET topic = 'task.queued', task_id = entity_id, document_id = "
        "(SELECT t.document_id FROM ingestion_tasks AS t WHERE t.id = outbox_events.entity_id) "
        "WHERE topic = 'ingestion_task.queued'"
    )
    op.execute("UPDATE outbox_events SET document_id = entity_id WHERE topic = 'document.deleted'")
    _documents_of_deleted_tasks()
    op.execute(
        "UPDATE outbox_events SET base = coalesce("
        "(SELECT d.base FROM documents AS d WHERE d.id = outbox_events.document_id), "
        "(SELECT g.base FROM deleted_documents AS g WHERE g.id = outbox_events.document_id))"
    )
    op.execute("UPDATE outbox_events SET dispatched_at = created_at WHERE dispatched_at IS NULL")
    op.create_index(
        "ix_outbox_undelivered",
        "outbox_events",
        ["id"],
        sqlite_where=UNDELIVERED,
        postgresql_where=UNDELIVERED,
    )
    op.create_index("ix_outbox_document", "outbox_events", ["document_id"])


def _documents_of_deleted_tasks() -> None:
    """A queued event whose task is gone (its document was deleted) still names the
    document in its payload: without it the event would have no base, and nobody
    restricted to some bases would ever see it."""
    conn = op.get_bind()
    orphans = conn.execute(
        sa.text(
            "SELECT id, payload FROM outbox_events "
            "WHERE topic = 'task.queued' AND document_id IS NULL"
        )
    ).all()
    for event_id, payload in orphans:
        document_id = json.loads(payload).get("document_id")
        conn.execute(
            sa.text("UPDATE outbox_events SET document_id = :document WHERE id = :id"),
            {"document": document_id, "id": event_id},
        )


def downgrade() -> None:
    op.drop_index("ix_outbox_document", table_name="outbox_events")
    op.drop_index("ix_outbox_undelivered", table_name="outbox_events")
    with op.batch_alter_table("outbox_events") as table:
        for column in ("attempts", "base", "task_id", "document_id"):
            table.drop_column(column)
    op.execute(
        "UPDATE outbox_events SET topic = 'ingestion_task.queued' WHERE topic = 'task.queued'"
    )
