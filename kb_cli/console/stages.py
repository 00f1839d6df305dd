"""Live stage bars of one task, shared by `kb work` and `kb status --wait`, and how
a task ended."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from kb_cli.console.core import cell, short, stage_count
from kb_cli.lifecycle import Stage
from kb_cli.records import TaskRecord

if TYPE_CHECKING:  # rich is loaded only when a terminal shows something
    from rich.progress import TaskID

STAGES = list(Stage)
_RATE_MIN_ITEMS = 2
_RATE_MIN_SECONDS = 0.5


class LiveStages:
    """One rich progress bar per stage, for one task at a time, on stderr."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True, highlight=False)
        self.progress = Progress(
            TextColumn("{task.fields[mark]} {task.description:<10}"),
            BarColumn(bar_width=24),
            TextColumn("{task.fields[count]:>17}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[rate]}"),
            console=self.console,
        )
        # stdout is the script's: a record printed meanwhile goes there, not into the bars.
        self.live = Live(
            self.progress,
            console=self.console,
            refresh_per_second=10,
            transient=False,
            redirect_stdout=False,
        )
        self.bars: dict[str, TaskID] = {}
        self.started: dict[str, float] = {}
        self.notes: dict[str, str] = {}  # shown in a stage's row instead of its rate

    def start(self, header: str) -> None:
        self.console.print(header)
        self.live.start()

    def stop(self) -> None:
        self.live.stop()

    def reset(self) -> None:
        for bar in self.bars.values():
            self.progress.remove_task(bar)
        self.bars.clear()
        self.started.clear()
        self.notes.clear()

    def update(self, stage: str, done: int, total: int, failed: bool = False) -> None:
        """Show `stage` at done/total; every earlier stage is complete by then."""
        for earlier in STAGES[: STAGES.index(Stage(stage))]:
            self._ensure(earlier)
            task = self.progress.tasks[self._position(earlier)]
            if not task.finished:
                whole = task.total or 1
                # Its count too: a stage seen at 0/540 that another look found past
                # reads 540/540 once ticked, never "✓ indexing 0/540".
                count = stage_count(earlier, int(whole), int(whole)) if task.total else ""
                self.progress.update(
                    self.bars[earlier], total=whole, completed=whole, mark=_DONE, count=count
                )
        self._ensure(stage)
        elapsed = time.monotonic() - self.started[stage]
        # A rate says something only over several items and a measurable time: one
        # item done in a millisecond is not "1,000/s".
        meaningful = done >= _RATE_MIN_ITEMS and elapsed >= _RATE_MIN_SECONDS
        rate = f"{done / elapsed:,.0f}/s" if meaningful and stage != Stage.DOWNLOAD else ""
        rate = self.notes.get(stage, rate)
        finished = total > 0 and done >= total
        mark = _FAILED if failed else _DONE if finished else "[yellow]…[/yellow]"
        self.progress.update(
            self.bars[stage],
            total=max(total, 1) if total else None,
            completed=done,
            count=stage_count(stage, done, total),
            rate=rate,
            mark=mark,
        )

    def note(self, stage: str, text: str) -> None:
        """A few words in `stage`'s own row, where its rate would be (what read its
        pages, say), so that they stay beside it, never above the bars."""
        self._ensure(stage)
        self.notes[stage] = text
        self.progress.update(self.bars[stage], rate=text)

    def _position(self, stage: str) -> int:
        return [task.id for task in self.progress.tasks].index(self.bars[stage])

    def _ensure(self, stage: str) -> None:
        if stage not in self.bars:
            self.bars[stage] = self.progress.add_task(
                stage, total=None, mark=" ", rate="", count=""
            )
            self.started[stage] = time.monotonic()

    def print(self, message: str) -> None:
        self.console.print(message)


_DONE = "[green]✓[/green]"
_FAILED = "[red]✗[/red]"


def task_title(task: TaskRecord, filename: str) -> str:
    name = cell(filename)
    return f"task [cyan]{short(task.task_id)}[/cyan] [bold]{name}[/bold] rev {task.revision}"


def outcome_lines(task: TaskRecord) -> list[str]:
    """How a task ended, in colour: the status, and the error code with its detail."""
    colour = {"succeeded": "green", "failed": "red"}.get(task.status, "yellow")
    status = f"[{colour}]{task.status}[/{colour}]"
    lines = [f"{status} task {short(task.task_id)} attempt {task.attempt}"]
    if task.error_code:
        where = f" at {task.stage}" if task.status == "failed" else ""
        lines.append(f"[red]{task.error_code}{where}: {cell(task.error_detail or '')}[/red]")
    return lines
