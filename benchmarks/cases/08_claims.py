"""Claims per second, per engine: claim transactions only, from 1, 2, 4 and 8 processes
(PostgreSQL too when KB_BENCH_POSTGRES_URL names a server); and one process kept to a
base (`kb work --base`) whose tasks are queued behind as many of another base."""

from __future__ import annotations

import subprocess
import time

from benchmarks.harness import (
    PY,
    Context,
    Row,
    bench_engines,
    env_for,
    fill_queue,
    fresh_home,
    kb,
)

TITLE = "claims/s"


CLAIMER = """
import sys, time
from kb_cli.config import resolve_settings
from kb_cli.app import Kb
from kb_cli.worker import Worker, WorkerOptions
kb = Kb.open(resolve_settings(sys.argv[1], sys.argv[2], None), actor="bench")
worker = Worker(kb, WorkerOptions(worker_id=sys.argv[3], bases=tuple(sys.argv[4:])))
claims = 0
while worker.claim(None) is not None:
    claims += 1
print(claims)
"""


def run(ctx: Context) -> list[Row]:
    """Claim transactions only (no parsing): how fast N processes can take tasks."""
    work, sizes = ctx.work, ctx.sizes
    tasks = max(200, sizes.tiny_docs)
    rows = []
    for engine, admin_url in bench_engines():
        rates = {}
        for workers in (1, 2, 4, 8):
            home, url = fresh_home(work, admin_url)
            extra = {"DATABASE_URL": url}
            fill_queue(home, tasks, extra)
            start = time.perf_counter()
            procs = [
                subprocess.Popen(
                    [PY, "-c", CLAIMER, str(home), url, f"c{i}"],
                    env=env_for(home, **extra),
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for i in range(workers)
            ]
            claimed = sum(int(proc.communicate()[0]) for proc in procs)
            elapsed = time.perf_counter() - start
            if claimed != tasks:
                raise RuntimeError(f"{engine}: {claimed} claims for {tasks} tasks")
            rates[workers] = tasks / elapsed
        kept = _kept_to_a_base(work, admin_url, tasks)
        rows.append(
            Row(
                f"{engine}, 1 process kept to a base, {tasks} of another queued ahead",
                kept,
                rates[1],
                "claims/s",
                "reported",
                "kb work --base: the claim reads the index of claimable tasks by base",
            )
        )
        for workers, rate in rates.items():
            rows.append(
                Row(
                    f"{engine}, {workers} claiming processes",
                    rate,
                    rates[1],
                    "claims/s",
                    "reported",
                    "claim transactions only; includes process start-up",
                )
            )
    return rows


def _kept_to_a_base(work, admin_url: str | None, tasks: int) -> float:
    """Claims per second of one process kept to base `b`, whose `tasks` tasks were
    queued after as many of the default base (first in claim order)."""
    home, url = fresh_home(work, admin_url)
    extra = {"DATABASE_URL": url}
    fill_queue(home, tasks, extra)
    kb(home, "base", "create", "b", **extra)
    fill_queue(home, tasks, extra, base="b")
    start = time.perf_counter()
    done = subprocess.run(
        [PY, "-c", CLAIMER, str(home), url, "kept", "b"],
        env=env_for(home, **extra),
        capture_output=True,
        text=True,
        check=True,
    )
    elapsed = time.perf_counter() - start
    if int(done.stdout) != tasks:
        raise RuntimeError(f"{done.stdout.strip()} claims for {tasks} tasks of base b")
    return tasks / elapsed
