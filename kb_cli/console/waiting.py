"""`kb status --wait`: the task's place in the queue, a hint when no worker is there to
claim it, and its live stages on a terminal."""

from __future__ import annotations

import time

from kb_cli.config import WORKER_DEFAULTS
from kb_cli.console.core import counted, log
from kb_cli.console.stages import LiveStages, outcome_lines, task_title
from kb_cli.lifecycle import Stage
from kb_cli.records import QueuePlace, TaskRecord

# An idle worker claims a new task at once (woken by the commit); only a lost wake-up
# makes it wait for its fallback poll (--poll-seconds, 5 s by default). So the hint
# comes after one such poll and a second, as docs/workers.md says.
NO_WORKER_HINT_SECONDS = WORKER_DEFAULTS.poll_seconds + 1
NO_WORKER_HINT = (
    "no worker has claimed it for {seconds:.0f} s and none is running: start one in "
    "another terminal with `kb work --loop`"
)


def queue_line(place: QueuePlace) -> str:
    """`12 tasks ahead, 2 workers busy`."""
    ahead = f"{counted(place.ahead, 'task')} ahead" if place.ahead else "next in line"
    busy = counted(place.busy_workers, "worker") if place.busy_workers else "no workers"
    return f"queued: {ahead}, {busy} busy"


class WaitHint:
    """`kb status --wait` without a terminal: quiet, except one line on stderr with the
    task's place when others are ahead of it or workers are busy, and one when it stays
    unclaimed while no worker holds a claim (a worker that polls would have taken it)."""

    def __init__(self) -> None:
        self._queued_since: float | None = None
        self._said_place = False
        self._said_hint = False

    def started(self, task: TaskRecord, filename: str, size: int) -> None:
        pass

    def __call__(self, task: TaskRecord, queue: QueuePlace | None) -> None:
        for line in self.notes(task, queue):
            log(f"waiting for task {task.task_id}: {line}")

    def notes(self, task: TaskRecord, queue: QueuePlace | None) -> list[str]:
        """What to say now about a task still waiting for a worker, each thing once."""
        seconds = self.unclaimed_for(task)
        if queue is None:
            return []
        notes = []
        if not self._said_place and (queue.ahead or queue.busy_workers):
            self._said_place = True
            notes.append(queue_line(queue))
        if seconds >= NO_WORKER_HINT_SECONDS and not queue.busy_workers and not self._said_hint:
            self._said_hint = True
            notes.append(NO_WORKER_HINT.format(seconds=seconds))
        return notes

    def unclaimed_for(self, task: TaskRecord) -> float:
        """Seconds the task has waited for a claim, 0 once a worker holds it."""
        if task.status != "queued":
            self._queued_since = None
            return 0.0
        if self._queued_since is None:
            self._queued_since = time.monotonic()
        return time.monotonic() - self._queued_since

    def close(self, task: TaskRecord | None = None) -> None:
        pass


class LiveWait(WaitHint):
    """`kb status --wait` on a terminal: the task's stages, read from the database."""

    def __init__(self) -> None:
        super().__init__()
        self.live: LiveStages | None = None
        self.attempt: int | None = None
        self.download_size = 0

    def started(self, task: TaskRecord, filename: str, size: int) -> None:
        self.download_size = size
        self.live = LiveStages()
        self.live.start(f"[bold]waiting[/bold] for {task_title(task, filename)}")

    def __call__(self, task: TaskRecord, queue: QueuePlace | None) -> None:
        live = self.live
        if live is None:  # not started
            return
        stopped = task.status == "queued" and live.bars  # a worker released it
        if stopped or (self.attempt is not None and task.attempt != self.attempt):
            live.reset()  # another worker starts it over: no stage of the last run is done
        self.attempt = task.attempt
        for line in self.notes(task, queue):
            live.print(f"[yellow]{line}[/yellow]")
        if task.status in ("queued", "cancelled") and not task.total:
            return
        if task.stage != Stage.DOWNLOAD and Stage.DOWNLOAD not in live.bars:
            size = self.download_size
            live.update(Stage.DOWNLOAD, size, size)
        live.update(task.stage, task.completed, task.total, failed=task.status == "failed")

    def close(self, task: TaskRecord | None = None) -> None:
        if self.live is None:
            return
        self.live.stop()
        if task is not None and task.status != "succeeded":
            for line in outcome_lines(task):
                self.live.print(line)
