"""Each knowledge base chooses its embedding model, and switches it online.

`bases.model` is the base's embedding provider (`local`, `multilingual`, `e5`, `openai`,
`none`): every worker embeds the base's chunks with it and search asks it the question,
whatever the process's KB_EMBEDDINGS says. Null: the base follows KB_EMBEDDINGS, as every
base did before (so nothing changes for a base until it is given a model).

`bases.model_next` is the model a switch (`kb reindex --base NAME --model M`) is building
vectors of; `vector_builds` holds those vectors, one per chunk, beside the chunk's own,
which search keeps serving. When every chunk of the base has one, a single transaction
copies them into the chunks and sets `model`; the rows here are then dropped. A chunk
deleted meanwhile takes its rows with it. A row is keyed by chunk and model: a switch to
another model begun meanwhile never finds its vector's place taken.

Revision ID: 0019_base_models
Revises: 0018_review_facts
"""

import sqlalchemy as sa
from alembic import op

revision = "0019_base_models"
down_revision = "0018_review_facts"

PROVIDER = sa.String(40)


def upgrade() -> None:
    op.add_column("bases", sa.Column("model", PROVIDER, nullable=True))
    op.add_column("bases", sa.Column("model_next", PROVIDER, nullable=True))
    op.create_table(
        "vector_builds",
        sa.Column(
            "chunk_id",
            sa.Integer,
            sa.ForeignKey("chunks.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("model", sa.String(200), primary_key=True),
        sa.Column("base", sa.String(100), nullable=False),
        sa.Column("embedding", sa.LargeBinary, nullable=False),
        sa.Column("embedding_dim", sa.Integer, nullable=False),
    )
    op.create_index("ix_vector_builds_base", "vector_builds", ["base", "model"])


def downgrade() -> None:
    op.drop_index("ix_vector_builds_base", "vector_builds")
    op.drop_table("vector_builds")
    op.drop_column("bases", "model_next")
    op.drop_column("bases", "model")
