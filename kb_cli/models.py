"""Database tables, as SQLAlchemy Core tables.

Core rather than ORM classes: `kb` never loads objects, and leaving `sqlalchemy.orm`
unimported takes about a third off the start-up of every command. Timestamps are
fixed-width RFC 3339 UTC strings, so they sort as text on every engine.
"""

from __future__ import annotations

from sqlalchemy import (
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()


def _id(name: str = "id", *constraints, **options) -> Column:
    return Column(name, String(36), *constraints, **options)


def _stamp(name: str, **options) -> Column:
    return Column(name, String(27), **options)


documents = Table(
    "documents",
    metadata,
    _id(primary_key=True),
    Column("filename", String(512), nullable=False),
    Column("content_type", String(128), nullable=False),
    Column("size_bytes", Integer, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("object_key", String(128), nullable=False),
    Column("status", String(20), nullable=False, index=True),
    Column("version", Integer, nullable=False, default=1),
    Column("revision", Integer, nullable=False, default=1),
    Column("published_revision", Integer),
    _id("latest_task_id"),
    _stamp("created_at", nullable=False, index=True),
    _stamp("updated_at", nullable=False),
)

tasks = Table(
    "ingestion_tasks",
    metadata,
    _id(primary_key=True),
    # Deliberately no foreign key: a task whose document row vanished must still be
    # claimable so it can end `failed` with `document_not_found` instead of hanging.
    _id("document_id", nullable=False, index=True),
    Column("revision", Integer, nullable=False),
    Column("status", String(20), nullable=False),
    Column("stage", String(20), nullable=False),
    Column("completed", Integer, nullable=False, default=0),
    Column("total", Integer, nullable=False, default=0),
    Column("attempt", Integer, nullable=False, default=0),
    Column("error_code", String(40)),
    Column("error_detail", String(500)),
    Column("worker_id", String(200)),
    _stamp("lease_expires_at"),
    _stamp("retry_at"),
    _stamp("created_at", nullable=False),
    _stamp("updated_at", nullable=False),
    Index("ix_tasks_claim", "status", "created_at"),
)

chunks = Table(
    "chunks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    _id("document_id", ForeignKey("documents.id"), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("chunk_index", Integer, nullable=False),
    _id("task_id", nullable=False, index=True),
    Column("text", Text, nullable=False),
    Column("page", Integer),
    Column("heading", String(500)),
    UniqueConstraint("document_id", "revision", "chunk_index"),
)

# Events for systems outside `kb`, written in the transaction that caused them.
outbox = Table(
    "outbox_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("topic", String(60), nullable=False),
    _id("entity_id", nullable=False),
    Column("payload", Text, nullable=False),
    _stamp("created_at", nullable=False),
    _stamp("dispatched_at"),
)

# Every state change and every refused command, oldest first by id.
audit = Table(
    "audit_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    _stamp("at", nullable=False),
    Column("actor", String(200), nullable=False),
    Column("action", String(40), nullable=False),
    Column("entity_id", String(200), nullable=False, index=True),
    Column("from_status", String(20)),
    Column("to_status", String(20)),
    Column("detail", String(500)),
)

users = Table(
    "users",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("role", String(20), nullable=False, index=True),
    # Tokens are "kb_<token_id>_<secret>": the id finds the row, the secret is checked.
    Column("token_id", String(32), nullable=False, unique=True),
    Column("token_salt", String(64), nullable=False),
    Column("token_hash", String(128), nullable=False),
    _stamp("created_at", nullable=False),
)
