"""Schema migrations (Alembic), for SQLite and PostgreSQL alike.

Every command checks the schema version with one cheap query; SQLAlchemy and Alembic
are imported only when a database must be created or upgraded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Connection

# Oldest first. A database at a revision not listed here was made by a newer kb.
REVISIONS = (
    "0001",
    "0002",
    "0003",
    "0004",
    "0005_hardening",
    "0006_bases",
    "0007_chunk_context",
    "0008_lifecycle",
    "0009_stage_artefacts",
    "0010_events",
    "0011_revision_files",
    "0012_document_meta",
    "0013_pgvector",
    "0014_pending_objects",
    "0015_lexical_index",
    "0016_chunk_runs",
    "0017_task_requests",
    "0018_review_facts",
    "0019_base_models",
    "0020_distinct_vectors",
)
HEAD = REVISIONS[-1]
VERSION_TABLE = "kb_schema_version"


def upgrade(conn: Connection, target: str = HEAD) -> None:
    """Run the migrations up to `target` inside the caller's transaction."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent))
    config.attributes["connection"] = conn
    command.upgrade(config, target)
