"""A PostgreSQL home for benchmarks/scale.py, copied row for row from a SQLite home.

The SQLite home was built by the product's own pipeline (scale.py's real pipeline, or
bulk_home.py's bulk write path for 1M chunks); building the same text again through
the pipeline on PostgreSQL would take hours on a shared 2-core machine and give the
same rows. So: `kb db upgrade` makes the database (every migration, pgvector's halfvec
column and HNSW index where the server has the extension), then every table's rows are
copied with COPY in foreign-key order, then the ids' sequences move past the copied
ids and ANALYZE gives the planner its statistics. The database's own triggers derive
what PostgreSQL keeps beside the rows (the halfvec copy of each vector).

The objects are copied too (publish, unpublish and delete are measured on the home),
and the manifest says which home it was copied from:

    KB_BENCH_POSTGRES_URL=postgresql+psycopg://kb@127.0.0.1:PORT/postgres \
        uv run --group bench python benchmarks/pg_home.py --sizes 10k 100k
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import PY
from benchmarks.homes import DATA, database_url, home_of, kb_env, log
from kb_cli.migrations import pgvector

# SQLite's own: the FTS5 index and its shadow tables, the schema version of a SQLite home.
SKIPPED = ("chunks_terms", "kb_schema_version", "alembic_version")


def build(size: str, admin_url: str, source: str | None = None) -> dict:
    origin = DATA / (source or f"sqlite-{size}")
    if not (origin / "scale-manifest.json").exists() and not (origin / "READY").exists():
        raise SystemExit(f"{origin} is not a finished home")
    home = home_of("postgresql", size)
    manifest_path = home / "scale-manifest.json"
    if manifest_path.exists():
        return json.loads(manifest_path.read_text())
    url = database_url("postgresql", size, admin_url)
    assert url is not None
    home.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    env = kb_env(home, url)
    done = subprocess.run(
        [PY, "-m", "kb_cli", "db", "upgrade"], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"kb db upgrade failed: {done.stderr[-800:]}")
    copied = copy_rows(origin / "kb.sqlite3", url)
    if not (home / "objects").exists():
        shutil.copytree(origin / "objects", home / "objects")
    manifest = json.loads((origin / "scale-manifest.json").read_text())
    manifest |= {
        "engine": "postgresql",
        "built": f"{manifest.get('built', 'pipeline')}, copied from {origin.name}",
        "copy_seconds": round(time.perf_counter() - started, 1),
        "rows": copied,
    }
    manifest_path.write_text(json.dumps(manifest, indent=1))
    log(f"postgresql-{size}: {copied.get('chunks')} chunks in {manifest['copy_seconds']} s")
    return manifest


def copy_rows(sqlite_path: Path, url: str) -> dict[str, int]:
    import psycopg
    from sqlalchemy import Boolean, MetaData, create_engine

    engine = create_engine(url)
    metadata = MetaData()
    with warnings.catch_warnings():  # halfvec, a type SQLAlchemy does not know
        warnings.simplefilter("ignore")
        metadata.reflect(engine)
    engine.dispose()
    source = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
    present = {row[0] for row in source.execute("SELECT name FROM sqlite_master")}
    counts = {}
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as target:
        for table in metadata.sorted_tables:
            if table.name in SKIPPED or table.name not in present:
                continue
            theirs = {row[1] for row in source.execute(f'PRAGMA table_info("{table.name}")')}
            columns = [column for column in table.columns if column.name in theirs]
            names = [column.name for column in columns]
            flags = [isinstance(column.type, Boolean) for column in columns]
            target.execute(f'DELETE FROM "{table.name}"')
            if table.name == "chunks":
                drop_vector_indexes(target)
            quoted = ", ".join(f'"{name}"' for name in names)
            rows = source.execute(f'SELECT {quoted} FROM "{table.name}"')
            count = 0
            with target.cursor().copy(f'COPY "{table.name}" ({quoted}) FROM STDIN') as copy:
                for row in rows:
                    pairs = zip(row, flags, strict=True)
                    copy.write_row([bool(v) if flag and v is not None else v for v, flag in pairs])
                    count += 1
            counts[table.name] = count
            log(f"  {table.name}: {count} rows")
            for column in columns:
                sequence = target.execute(
                    "SELECT pg_get_serial_sequence(%s, %s)", (table.name, column.name)
                ).fetchone()[0]
                if sequence and count:
                    target.execute(
                        f'SELECT setval(%s, (SELECT max("{column.name}") FROM "{table.name}"))',
                        (sequence,),
                    )
        log("  the vector indexes")
        for model, dim in pgvector.models_in_use(target):
            pgvector.ensure_index(target, model, dim)
        target.commit()
        target.autocommit = True
        target.execute("VACUUM ANALYZE")
    return counts


def drop_vector_indexes(target) -> None:
    """HNSW indexes are built once after the copy: inserting 100k rows one by one into
    them took ten times as long. (The copy's trigger fills distinct_vectors.)"""
    for name in vector_indexes(target):
        target.execute(f'DROP INDEX "{name}"')


def vector_indexes(conn) -> list[str]:
    found = conn.execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef LIKE '%%hnsw%%'",
        (pgvector.DISTINCT,),
    )
    return [name for (name,) in found.fetchall()]


def hnsw_build_seconds(url: str) -> float:
    """The time to build the HNSW indexes again from the vectors (REINDEX), as a new
    model's index or `kb db upgrade` after installing pgvector would."""
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
        conn.execute(f"SET maintenance_work_mem = '{pgvector.BUILD_MEMORY}'")
        started = time.perf_counter()
        for name in vector_indexes(conn):
            conn.execute(f'REINDEX INDEX "{name}"')
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["10k", "100k"])
    parser.add_argument("--source", help="the SQLite home's folder name (default sqlite-SIZE)")
    args = parser.parse_args()
    admin_url = os.environ.get("KB_BENCH_POSTGRES_URL")
    if not admin_url:
        raise SystemExit("KB_BENCH_POSTGRES_URL must name the benchmark's server (an admin URL)")
    for size in args.sizes:
        build(size, admin_url, args.source)


if __name__ == "__main__":
    main()
