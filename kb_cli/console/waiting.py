"""`kb status --wait`: a hint when no worker claims the task, or its live stages on a
terminal."""

from __future__ import annotations

import time

from kb_cli.console.core import log
from kb_cli.console.stages import LiveStages, outcome_lines, task_title
from kb_cli.lifecycle import Stage
from kb_cli.records import TaskRecord

NO_WORKER_HINT_SECONDS = 5.0
NO_WORKER_HINT = (
    "no worker has claimed it for {seconds:.0f} s: start one in another terminal "
    "with `kb work --loop`"
)


class WaitHint:
    """`kb status --wait` without a terminal: quiet, except one line on stderr when no
    worker has claimed the task for a while."""

    def __init__(self) -> None:
        self._queued_since: float | None = None
        self._said = False

    def started(self, task: TaskRecord, filename: str, size: int) -> None:
        pass

    def __call__(self, task: TaskRecord) -> None:
        seconds = self.unclaimed_for(task)
        if seconds >= NO_WORKER_HINT_SECONDS and not self._said:
            self._said = True
            log(f"waiting for task {task.task_id}: " + NO_WORKER_HINT.format(seconds=seconds))

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

    def __call__(self, task: TaskRecord) -> None:
        live = self.live
        if live is None:  # not started
            return
        if self.attempt is not None and task.attempt != self.attempt:
            live.reset()
        self.attempt = task.attempt
        seconds = self.unclaimed_for(task)
        if seconds >= NO_WORKER_HINT_SECONDS and not self._said:
            self._said = True
            live.print(f"[yellow]{NO_WORKER_HINT.format(seconds=seconds)}[/yellow]")
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
