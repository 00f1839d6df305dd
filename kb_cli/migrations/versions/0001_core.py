"""The core tables: documents, tasks, chunks, outbox, audit events, users.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None

ID, STAMP = sa.String(36), sa.String(27)


def upgrade() -> None:
    op.create_table(
        "documents",
        sa.Column("id", ID, primary_key=True),
        sa.Column("filename", sa.String(512), nullable=False),
        sa.Column("content_type", sa.String(128), nullable=False),
        sa.Column("size_bytes", sa.Integer, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("object_key", sa.String(128), nullable=False),
        sa.Column("status", sa.String(20), nullable=False, index=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("published_revision", sa.Integer),
        sa.Column("latest_task_id", ID),
        sa.Column("created_at", STAMP, nullable=False, index=True),
        sa.Column("updated_at", STAMP, nullable=False),
    )
    op.create_table(
        "ingestion_tasks",
        sa.Column("id", ID, primary_key=True),
        sa.Column("document_id", ID, nullable=False, index=True),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("stage", sa.String(20), nullable=False),
        sa.Column("completed", sa.Integer, nullable=False),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("error_code", sa.String(40)),
        sa.Column("error_detail", sa.String(500)),
        sa.Column("worker_id", sa.String(200)),
        sa.Column("lease_expires_at", STAMP),
        sa.Column("retry_at", STAMP),
        sa.Column("created_at", STAMP, nullable=False),
        sa.Column("updated_at", STAMP, nullable=False),
    )
    op.create_index("ix_tasks_claim", "ingestion_tasks", ["status", "created_at"])
    op.create_table(
        "chunks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("document_id", ID, sa.ForeignKey("documents.id"), nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("chunk_index", sa.Integer, nullable=False),
        sa.Column("task_id", ID, nullable=False, index=True),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("page", sa.Integer),
        sa.Column("heading", sa.String(500)),
        sa.UniqueConstraint("document_id", "revision", "chunk_index"),
    )
    op.create_table(
        "outbox_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("topic", sa.String(60), nullable=False),
        sa.Column("entity_id", ID, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("created_at", STAMP, nullable=False),
        sa.Column("dispatched_at", STAMP),
    )
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", STAMP, nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("action", sa.String(40), nullable=False),
        sa.Column("entity_id", sa.String(200), nullable=False, index=True),
        sa.Column("from_status", sa.String(20)),
        sa.Column("to_status", sa.String(20)),
        sa.Column("detail", sa.String(500)),
    )
    op.create_table(
        "users",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("role", sa.String(20), nullable=False, index=True),
        sa.Column("token_id", sa.String(32), nullable=False, unique=True),
        sa.Column("token_salt", sa.String(64), nullable=False),
        sa.Column("token_hash", sa.String(128), nullable=False),
        sa.Column("created_at", STAMP, nullable=False),
    )


def downgrade() -> None:
    for table in (
        "users",
        "audit_events",
        "outbox_events",
        "chunks",
        "ingestion_tasks",
        "documents",
    ):
        op.drop_table(table)
