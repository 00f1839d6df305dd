"""A database knows its own identity: `kb_meta` holds a random `database_id`.

The object store keeps the same id in a marker file, so `kb doctor --repair` can tell
a store that belongs to this database from one that belongs to another (a wrong
--home or --database-url over the same store) and refuse to touch the latter.

Revision ID: 0005_hardening
Revises: 0004
"""

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0005_hardening"
down_revision = "0004"


def upgrade() -> None:
    meta = op.create_table(
        "kb_meta",
        sa.Column("key", sa.String(100), primary_key=True),
        sa.Column("value", sa.String(500), nullable=False),
    )
    op.bulk_insert(meta, [{"key": "database_id", "value": uuid.uuid4().hex}])


def downgrade() -> None:
    op.drop_table("kb_meta")
