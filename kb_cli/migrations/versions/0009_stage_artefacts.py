"""Stage artefacts: a revision's parse result, kept between attempts of its task.

- `parse_artefacts`: the chunks a parse made of one document revision (zlib-compressed
  JSON), with the object's sha256 and the parser key (parser version, content type and
  the settings that shape the chunks) they were made with. A retry, an automatic retry
  or a reclaim whose revision, sha256 and key match starts at the embedding stage. No
  foreign key: a delete removes them in its own step, before the document row.

Revision ID: 0009_stage_artefacts
Revises: 0008_lifecycle
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_stage_artefacts"
down_revision = "0008_lifecycle"


def upgrade() -> None:
    op.create_table(
        "parse_artefacts",
        sa.Column("document_id", sa.String(36), primary_key=True),
        sa.Column("revision", sa.Integer, primary_key=True),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("parser_key", sa.String(200), nullable=False),
        sa.Column("chunks", sa.Integer, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("task_id", sa.String(36), nullable=False),
        sa.Column("created_at", sa.String(27), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("parse_artefacts")
