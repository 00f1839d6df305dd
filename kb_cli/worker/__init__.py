"""The worker: claim a task, run its stages, end the attempt; fenced against every race.

- `loop`: the run loop (claim, run, end; drain or loop; a stop request).
- `claim`: taking a task and every write of task state after that (lease, progress,
  chunk batches, completion, failure, release), each fenced on the claim.
- `pipeline`: the stages (download, parse, embedding, indexing); reports progress and
  raises, never writes task state.
- `retry`: the pure decision whether and when a failed attempt is tried again.
- `heartbeat`: renews the lease in the background.
- `signals`: the first SIGINT/SIGTERM stops at the next safe point, a second at once.
"""

from kb_cli.config import WorkerOptions
from kb_cli.worker.claim import Claim, Claimant, take
from kb_cli.worker.loop import Attempt, SilentListener, Worker, WorkerListener, default_worker_id
from kb_cli.worker.pipeline import Pipeline, describe_error
from kb_cli.worker.retry import RetryPolicy
from kb_cli.worker.signals import stop_on_signals

__all__ = [
    "Attempt",
    "Claim",
    "Claimant",
    "Pipeline",
    "RetryPolicy",
    "SilentListener",
    "Worker",
    "WorkerListener",
    "WorkerOptions",
    "default_worker_id",
    "describe_error",
    "stop_on_signals",
    "take",
]
