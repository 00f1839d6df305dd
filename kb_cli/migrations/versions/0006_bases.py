"""Knowledge bases: every document belongs to one base; teams and grants decide readers.

`bases` lists the bases; one named `default` always exists and receives every existing
document. A base with no row in `base_teams` is readable by the whole company; with
rows, only by members of those teams (`user_teams`) and by users granted it
(`base_grants`). Teams are just names (`teams`), created by naming them. User and team
references carry no foreign key on purpose: `kb doctor` reports a grant or team
restriction that points at nobody, instead of a delete failing half-way.

Revision ID: 0006_bases
Revises: 0004
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0006_bases"
down_revision = "0005_hardening"

NAME, STAMP = sa.String(100), sa.String(27)


def upgrade() -> None:
    bases = op.create_table(
        "bases",
        sa.Column("name", NAME, primary_key=True),
        sa.Column("created_at", STAMP, nullable=False),
    )
    op.create_table(
        "teams",
        sa.Column("name", NAME, primary_key=True),
        sa.Column("created_at", STAMP, nullable=False),
    )
    op.create_table(
        "user_teams",
        sa.Column("user_name", NAME, primary_key=True),
        sa.Column("team", NAME, primary_key=True, index=True),
    )
    op.create_table(
        "base_teams",
        sa.Column("base", NAME, sa.ForeignKey("bases.name"), primary_key=True),
        sa.Column("team", NAME, primary_key=True),
    )
    op.create_table(
        "base_grants",
        sa.Column("base", NAME, sa.ForeignKey("bases.name"), primary_key=True),
        sa.Column("user_name", NAME, primary_key=True, index=True),
    )
    # SQLite cannot add a column with a foreign key and a default: `kb doctor` checks
    # that every document's base exists.
    op.add_column("documents", sa.Column("base", NAME, nullable=False, server_default="default"))
    op.create_index("ix_documents_base", "documents", ["base"])
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    op.bulk_insert(bases, [{"name": "default", "created_at": now}])


def downgrade() -> None:
    raise NotImplementedError("documents cannot leave their knowledge bases")
