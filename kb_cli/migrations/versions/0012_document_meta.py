"""Document metadata (`kb upload --meta`, `kb sync`), filtered before ranking.

- `documents.meta`: a JSON object of string keys and string values (`{}` when none).
  PostgreSQL keeps it as `jsonb` with a GIN index (`jsonb_path_ops`), so an equality
  filter (`meta @> '{"k": "v"}'`) is an index lookup; SQLite keeps JSON text and reads
  it with `json_extract`.
- `ux_documents_path`: at most one live document per (base, metadata `path`). This is
  what makes `kb sync` idempotent and safe to run twice at once: the second insert of
  a path fails in the database, not in a check that could race. A document being
  deleted no longer holds its path.

Revision ID: 0012_document_meta
Revises: 0010_events
"""

import sqlalchemy as sa
from alembic import op

revision = "0012_document_meta"
down_revision = "0011_revision_files"

SQLITE = (
    "ALTER TABLE documents ADD COLUMN meta TEXT NOT NULL DEFAULT '{}'",
    "CREATE UNIQUE INDEX ux_documents_path ON documents "
    "(base, json_extract(meta, '$.path')) WHERE status <> 'deleting'",
)
POSTGRESQL = (
    "ALTER TABLE documents ADD COLUMN meta jsonb NOT NULL DEFAULT '{}'::jsonb",
    "CREATE INDEX ix_documents_meta ON documents USING gin (meta jsonb_path_ops)",
    "CREATE UNIQUE INDEX ux_documents_path ON documents "
    "(base, (meta ->> 'path')) WHERE status <> 'deleting'",
)


def upgrade() -> None:
    for statement in SQLITE if op.get_bind().dialect.name == "sqlite" else POSTGRESQL:
        op.execute(sa.text(statement))


def downgrade() -> None:
    op.execute(sa.text("DROP INDEX ux_documents_path"))
    if op.get_bind().dialect.name != "sqlite":
        op.execute(sa.text("DROP INDEX ix_documents_meta"))
    op.drop_column("documents", "meta")
