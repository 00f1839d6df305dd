"""Waking idle workers: the latency from a submit's commit to the claim, and what an idle
worker costs the database."""

from __future__ import annotations

import json
import os
import subprocess

from benchmarks.harness import PY, Context, Row, bench_engines, env_for, fresh_home

TITLE = "wake-up"


# One idle `kb work --loop` (a process of its own); each task submitted here, in this
# process, after a random pause; the latency is from the submit's commit to the claim
# (the claim's audit time: same clock). Runs with whatever kb_cli PYTHONPATH gives, so
# KB_BENCH_BEFORE=DIR measures another checkout (main) the same way.
WAKE_LATENCY = """
import json, os, random, subprocess, sys, tempfile, time
from datetime import datetime, timezone
from pathlib import Path
from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from kb_cli.services.documents import submit_document, upload_files
home, url, count, poll = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
kb = Kb.open(resolve_settings(home, url, None), actor="bench")
worker = subprocess.Popen(
    [sys.executable, "-m", "kb_cli", "work", "--loop", "--worker-id", "idle",
     "--poll-seconds", poll],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
time.sleep(2.0)
folder = Path(tempfile.mkdtemp())
latencies = []
for i in range(count):
    path = folder / f"w{i}.txt"
    path.write_text(f"wake {i}")
    [document] = upload_files(kb, [path])
    time.sleep(random.uniform(0.05, 0.6))
    task = submit_document(kb, document.document_id)
    committed = time.time()
    while True:
        with kb.db.read() as conn:
            claim = conn.execute(
                "SELECT at FROM audit_events WHERE entity_id = :id AND action = 'claim'",
                {"id": task.task_id},
            ).scalar()
            status = conn.execute(
                "SELECT status FROM ingestion_tasks WHERE id = :id", {"id": task.task_id}
            ).scalar()
        if claim and status == "succeeded":
            break
        time.sleep(0.02)
    at = datetime.strptime(claim, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    latencies.append(max(0.0, at.timestamp() - committed))
worker.terminate()
worker.wait()
print(json.dumps(latencies))
"""

# One idle worker in this process for a while, every statement and transaction it
# runs counted (and SQLite's data_version looks, where the tree has them). The one place
# in the benchmarks that wraps kb's internals (Connection.execute, Database._begin,
# DataVersionWatch._version) rather than using Database.on_transaction: it counts
# statements and looks, which no hook reports, and it must count the same way in another
# checkout (KB_BENCH_BEFORE) that predates the hook.
IDLE_QUERIES = """
import json, sys, threading, time
from kb_cli import db
from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from kb_cli.worker import Worker, WorkerOptions
home, url, seconds, poll = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
counts = {"statements": 0, "transactions": 0, "looks": 0}
execute, begin = db.Connection.execute, db.Database._begin
def counted_execute(self, sql, params=None):
    counts["statements"] += 1
    return execute(self, sql, params)
def counted_begin(self, *args):  # (write) before a brief write's lock wait, then both
    counts["transactions"] += 1
    return begin(self, *args)
db.Connection.execute, db.Database._begin = counted_execute, counted_begin
try:
    from kb_cli.engines import sqlite
    look = sqlite.DataVersionWatch._version
    def counted_look(self):
        counts["looks"] += 1
        return look(self)
    sqlite.DataVersionWatch._version = counted_look
except (ImportError, AttributeError):
    pass
kb = Kb.open(resolve_settings(home, url, None), actor="bench")
stop = threading.Event()
worker = Worker(kb, WorkerOptions(worker_id="idle", poll_seconds=poll), stop=stop)
thread = threading.Thread(target=lambda: list(worker.run(max_tasks=None, loop=True)))
thread.start()
time.sleep(1.0)
counts = dict.fromkeys(counts, 0)
time.sleep(seconds)
idle = dict(counts)
stop.set()
thread.join()
print(json.dumps({key: value * 60 / seconds for key, value in idle.items()}))
"""


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def run(ctx: Context) -> list[Row]:
    """Claim latency after submit and an idle worker's queries: woken by the commit
    (default, 5 s fallback poll) against poll-only at 1 s (KB_WAKE=poll: the previous
    behaviour's timing), and against another checkout with KB_BENCH_BEFORE=DIR."""
    work, sizes = ctx.work, ctx.sizes
    count = 5 if sizes.runs == 1 else 40
    idle_seconds = 3.0 if sizes.runs == 1 else 30.0
    variants = [("woken", {}, "5"), ("poll-only 1 s", {"KB_WAKE": "poll"}, "1")]
    if os.environ.get("KB_BENCH_BEFORE"):
        variants.append(("before", {"PYTHONPATH": os.environ["KB_BENCH_BEFORE"]}, "1"))
    rows = []
    for engine, admin_url in bench_engines():
        measured = {}
        for label, extra, poll in variants:
            home, url = fresh_home(work, admin_url)
            env = env_for(home, DATABASE_URL=url, KB_EMBEDDINGS="none", **extra)
            # Run outside the repository: its kb_cli would come first on sys.path.
            run = {"env": env, "cwd": work, "capture_output": True, "text": True, "check": True}
            latency = subprocess.run(
                [PY, "-c", WAKE_LATENCY, str(home), url, str(count), poll], **run
            )
            idle = subprocess.run(
                [PY, "-c", IDLE_QUERIES, str(home), url, str(idle_seconds), poll], **run
            )
            measured[label] = (json.loads(latency.stdout), json.loads(idle.stdout))
        (woken, woken_idle), (polled, polled_idle) = measured["woken"], measured["poll-only 1 s"]
        before = measured.get("before")
        for share, name in ((0.5, "p50"), (0.99, "p99")):
            note = f"{count} submits; reference: poll-only 1 s"
            if before:
                note += f"; before: {percentile(before[0], share) * 1000:.0f} ms"
            rows.append(
                Row(
                    f"{engine}, claim latency after submit, {name}",
                    percentile(woken, share) * 1000,
                    percentile(polled, share) * 1000,
                    "ms",
                    "<= 100 ms",
                    note,
                )
            )
        note = (
            f"{woken_idle['statements']:.0f} statements/min; "
            f"{woken_idle['looks']:.0f} data_version looks/min (~12 us each); "
            f"reference: poll-only 1 s, {polled_idle['statements']:.0f} statements/min"
        )
        if before:
            note += (
                f"; before: {before[1]['transactions']:.0f} transactions, "
                f"{before[1]['statements']:.0f} statements/min"
            )
        rows.append(
            Row(
                f"{engine}, transactions per idle worker per minute",
                woken_idle["transactions"],
                polled_idle["transactions"],
                "/min",
                "reported",
                note,
                {"woken": woken_idle, "poll_only": polled_idle, "before": before and before[1]},
            )
        )
    return rows
