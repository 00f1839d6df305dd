"""Database tables. Timestamps are fixed-width RFC 3339 UTC strings, so they sort as text."""

from __future__ import annotations

from sqlalchemy import ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

ID = String(36)
STAMP = String(27)


class Base(DeclarativeBase):
    pass


class Document(Base):
    __tablename__ = "documents"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    filename: Mapped[str] = mapped_column(String(512))
    content_type: Mapped[str] = mapped_column(String(128))
    size_bytes: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    object_key: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(20), index=True)
    version: Mapped[int] = mapped_column(Integer, default=1)
    revision: Mapped[int] = mapped_column(Integer, default=1)
    published_revision: Mapped[int | None] = mapped_column(Integer)
    latest_task_id: Mapped[str | None] = mapped_column(ID)
    created_at: Mapped[str] = mapped_column(STAMP, index=True)
    updated_at: Mapped[str] = mapped_column(STAMP)


class IngestionTask(Base):
    __tablename__ = "ingestion_tasks"
    __table_args__ = (Index("ix_tasks_claim", "status", "created_at"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    # Deliberately no foreign key: a task whose document row vanished must still be
    # claimable so it can end `failed` with `document_not_found` instead of hanging.
    document_id: Mapped[str] = mapped_column(ID, index=True)
    revision: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20))
    stage: Mapped[str] = mapped_column(String(20))
    completed: Mapped[int] = mapped_column(Integer, default=0)
    total: Mapped[int] = mapped_column(Integer, default=0)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    error_code: Mapped[str | None] = mapped_column(String(40))
    error_detail: Mapped[str | None] = mapped_column(String(500))
    worker_id: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[str | None] = mapped_column(STAMP)
    retry_at: Mapped[str | None] = mapped_column(STAMP)
    created_at: Mapped[str] = mapped_column(STAMP)
    updated_at: Mapped[str] = mapped_column(STAMP)


class Chunk(Base):
    __tablename__ = "chunks"
    __table_args__ = (UniqueConstraint("document_id", "revision", "chunk_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    document_id: Mapped[str] = mapped_column(ID, ForeignKey("documents.id"))
    revision: Mapped[int] = mapped_column(Integer)
    chunk_index: Mapped[int] = mapped_column(Integer)
    task_id: Mapped[str] = mapped_column(ID, index=True)
    text: Mapped[str] = mapped_column(Text)
    page: Mapped[int | None] = mapped_column(Integer)
    heading: Mapped[str | None] = mapped_column(String(500))


class OutboxEvent(Base):
    """Events for systems outside `kb`, written in the transaction that caused them."""

    __tablename__ = "outbox_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    topic: Mapped[str] = mapped_column(String(60))
    entity_id: Mapped[str] = mapped_column(ID)
    payload: Mapped[str] = mapped_column(Text)
    created_at: Mapped[str] = mapped_column(STAMP)
    dispatched_at: Mapped[str | None] = mapped_column(STAMP)


class AuditEvent(Base):
    """Every state change and every refused command, oldest first by id."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[str] = mapped_column(STAMP)
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(40))
    entity_id: Mapped[str] = mapped_column(String(200), index=True)
    from_status: Mapped[str | None] = mapped_column(String(20))
    to_status: Mapped[str | None] = mapped_column(String(20))
    detail: Mapped[str | None] = mapped_column(String(500))


class User(Base):
    __tablename__ = "users"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    role: Mapped[str] = mapped_column(String(20), index=True)
    # Tokens are "kb_<token_id>_<secret>": the id finds the row, the secret is checked.
    token_id: Mapped[str] = mapped_column(String(32), unique=True)
    token_salt: Mapped[str] = mapped_column(String(64))
    token_hash: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[str] = mapped_column(STAMP)


documents = Document.__table__
tasks = IngestionTask.__table__
chunks = Chunk.__table__
outbox = OutboxEvent.__table__
audit = AuditEvent.__table__
users = User.__table__
