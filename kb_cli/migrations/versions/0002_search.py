"""The search indexes over chunk text (engine-specific), filled from existing chunks.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

from kb_cli.engines import for_url

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    bind = op.get_bind()
    engine = for_url(bind.engine.url.drivername)
    for statement in engine.SEARCH_SCHEMA:
        op.execute(statement)


def downgrade() -> None:
    raise NotImplementedError("the search index is needed by every kb version")
