"""Where the scale benchmark's homes live (benchmarks/scale.py, benchmarks/bulk_home.py,
benchmarks/pg_home.py), and how a `kb` process is pointed at one and run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import PY, env_for

DATA = Path(os.environ.get("KB_BENCH_SCALE_DATA", "/work/bench-data/scale"))


def home_of(engine: str, size: str) -> Path:
    """The home of a size; the one benchmarks/bulk_home.py built, once it has (1m)."""
    bulk = DATA / f"{engine}-{size}-bulk"
    return bulk if (bulk / "scale-manifest.json").exists() else DATA / f"{engine}-{size}"


def database_url(engine: str, size: str, admin_url: str | None) -> str | None:
    """PostgreSQL: one database per size on the benchmark's server, created once."""
    if engine == "sqlite":
        return None
    from sqlalchemy import create_engine, text

    name = f"kbscale_{size}"
    engine_ = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine_.connect() as conn:
        exists = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name})
        if exists.first() is None:
            conn.execute(text(f"CREATE DATABASE {name}"))
    engine_.dispose()
    return admin_url.rsplit("/", 1)[0] + f"/{name}"


# One BLAS thread per process: the built-in model's batch product otherwise spins a
# thread per core, and on a shared 2-core machine that tripled the embedding time.
ONE_THREAD = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}


def kb_env(home: Path, url: str | None, **extra: str) -> dict[str, str]:
    env = env_for(home, KB_EMBEDDINGS="local", **ONE_THREAD, **extra)
    if url:
        env["DATABASE_URL"] = url
    return env


def kb_run(env: dict[str, str], *args: str, nice: bool = False) -> str:
    prefix = ["nice", "-n", "10"] if nice else []
    done = subprocess.run(
        [*prefix, PY, "-m", "kb_cli", *args], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"kb {' '.join(args[:2])} failed: {done.stderr[-800:]}")
    return done.stdout


def log(message: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"[{stamp}] {message}", file=sys.stderr, flush=True)
