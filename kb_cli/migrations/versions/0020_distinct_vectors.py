"""pgvector's HNSW index over each distinct vector once (`distinct_vectors`), instead of
over every chunk: many equal vectors (a module kept in several versions) leave the graph
unable to tell them apart, and its recall falls (kb_cli/migrations/pgvector.py). Where
the database has pgvector's column (migration 0013), the table, its triggers and the
chunks' key index are made and filled, and the indexes on the chunks are dropped.
Nothing on SQLite, nor on a server without pgvector.

Revision ID: 0020_distinct_vectors
Revises: 0019_base_models
"""

from alembic import op

from kb_cli.migrations import pgvector

revision = "0020_distinct_vectors"
down_revision = "0019_base_models"


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql" and pgvector.enabled(pgvector.driver(bind)):
        pgvector.enable(pgvector.driver(bind))


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql" or not pgvector.enabled(pgvector.driver(bind)):
        return
    raw = pgvector.driver(bind)
    pgvector.drop_distinct(raw)
    raw.execute(f"SET LOCAL maintenance_work_mem = '{pgvector.BUILD_MEMORY}'")
    for model, dim in sorted(set(pgvector.models_in_use(raw)) | {pgvector.BUILT_IN_MODEL}):
        literal = "'" + model.replace("'", "''") + "'"
        raw.execute(
            f"CREATE INDEX {_index_before(model, dim)} ON chunks USING hnsw"
            f" ((embedding_hv::halfvec({int(dim)})) halfvec_ip_ops)"
            f" WHERE embedding_model = {literal} AND embedding_dim = {int(dim)}"
        )


def _index_before(model: str, dim: int) -> str:
    import hashlib

    return f"ix_chunks_hv_{int(dim)}_{hashlib.sha256(model.encode()).hexdigest()[:10]}"
