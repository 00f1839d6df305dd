"""The file of each revision (`document_revisions`).

A document row names its newest file only; after `kb upload --replace`, search still
serves the published revision, and its hits must name that revision's file. A row per
revision: its file name and content type, written by upload and replace. Documents
made before this revision get a row for their newest revision; an older published
revision whose file was replaced before the upgrade is named by the document row, as
before.

Revision ID: 0011_revision_files
Revises: 0010_events
"""

import sqlalchemy as sa
from alembic import op

revision = "0011_revision_files"
down_revision = "0010_events"

ID, STAMP = sa.String(36), sa.String(27)


def upgrade() -> None:
    op.create_table(
        "document_revisions",
        sa.Column("document_id", ID, primary_key=True),
        sa.Column("revision", sa.Integer, primary_key=True),
        sa.Column("filename", sa.String(512), nullable=False),
        sa.Column("content_type", sa.String(128), nullable=False),
        sa.Column("created_at", STAMP, nullable=False),
    )
    op.execute(
        "INSERT INTO document_revisions (document_id, revision, filename, content_type, "
        "created_at) SELECT id, revision, filename, content_type, updated_at FROM documents"
    )


def downgrade() -> None:
    op.drop_table("document_revisions")
