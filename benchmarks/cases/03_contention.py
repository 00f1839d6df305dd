"""Contention: many workers draining tiny documents against one worker; no lock error and
every task claimed exactly once."""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.harness import PY, Context, LockProbe, Row, env_for, upload_tiny

TITLE = "contention"


def run(ctx: Context) -> list[Row]:
    work, sizes = ctx.work, ctx.sizes

    def drain(workers: int) -> tuple[float, float, int, bool]:
        home = Path(tempfile.mkdtemp(dir=work)) / "home"
        task_ids = upload_tiny(home, sizes.tiny_docs)
        probe = LockProbe(home / "kb.sqlite3")
        probe.start()
        start = time.perf_counter()
        procs = [
            subprocess.Popen(
                [PY, "-m", "kb_cli", "work", "--drain", "--json", "--worker-id", f"w{i}"],
                env=env_for(home),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(workers)
        ]
        outputs = [proc.communicate() for proc in procs]
        elapsed = time.perf_counter() - start
        probe.stop()
        lock_errors = sum(err.count("locked") + err.count('"busy"') for _, err in outputs)
        lock_errors += sum(proc.returncode != 0 for proc in procs)
        claimed = [
            json.loads(line)["task_id"]
            for out, _ in outputs
            for line in out.splitlines()
            if json.loads(line)["claimed"]
        ]
        exactly_once = sorted(claimed) == sorted(task_ids)
        return sizes.tiny_docs / elapsed, probe.worst_ms, lock_errors, exactly_once

    results, singles = [], []
    for _ in range(sizes.runs):  # interleaved: noise falls on both sides alike
        results.append(drain(sizes.contention_workers))
        singles.append(drain(1)[0])
    single = statistics.median(singles)
    rate = statistics.median(r[0] for r in results)
    return [
        Row(
            f"{sizes.contention_workers} workers, {sizes.tiny_docs} tiny docs, vs 1 worker",
            rate,
            single,
            "tasks/s",
            ">= 0.8x, 0 lock errors",
            f"worst write-lock wait seen by a probe {max(r[1] for r in results):.1f} ms; "
            f"lock errors {sum(r[2] for r in results)}; every task exactly once: "
            f"{all(r[3] for r in results)}",
            {
                "lock_errors": sum(r[2] for r in results),
                "worst_lock_wait_ms": max(r[1] for r in results),
                "exactly_once": all(r[3] for r in results),
            },
        )
    ]
