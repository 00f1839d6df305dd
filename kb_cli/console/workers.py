"""`kb work`: the worker's plain log on stderr, or its live display on a terminal."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from kb_cli.console.core import (
    PLAIN_PROGRESS_INTERVAL,
    cell,
    cell_len_of,
    counted,
    cut_name,
    cut_to,
    log,
    note,
    quoted,
    short,
    visible,
)
from kb_cli.console.stages import LiveStages, outcome_lines, task_title
from kb_cli.lifecycle import Stage
from kb_cli.records import TaskRecord

if TYPE_CHECKING:  # rich is loaded only when a terminal shows something
    from rich.live import Live

_MIN_NAME_CELLS = 12  # below this a cut file name says too little to be worth showing


class PlainWorkerLog:
    """The contract's log lines on stderr; stage lines throttled within a stage, and an
    idle worker says so once, not once per poll."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self._last: tuple[str, int, int] | None = None
        self._last_at = 0.0
        self._idle = False
        self.where = ""  # the knowledge base and store served, once started() named them
        self.store = ""
        self._held: list[str] | None = None  # lines kept to be written at once

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Keep the lines logged meanwhile and write them at once at the end (a batch of
        small tasks is told after it ended: one write, not one per line)."""
        self._held = []
        try:
            yield
        finally:
            lines, self._held = self._held, None
            if lines:
                log("\n".join(lines))

    def _log(self, line: str) -> None:
        if self._held is None:
            log(line)
        else:
            self._held.append(line)

    def started(self, where: str, store: str) -> None:
        """Which knowledge base and object store this worker serves: named by its idle
        line (the contract's lines stay as they are, a claim's first)."""
        self.where, self.store = where, store

    def claimed(self, task: TaskRecord, filename: str, reclaimed_from: str | None) -> None:
        self._idle = False
        if reclaimed_from:
            self._log(
                f"reclaimed task={task.task_id} from={reclaimed_from} worker={self.worker_id}"
            )
        self._log(
            f"claimed task={task.task_id} worker={self.worker_id} status={task.status} "
            f"attempt={task.attempt}"
        )
        self._log(f"document={task.document_id} file={quoted(filename)} revision={task.revision}")
        self._last = None

    def missed(self, task_id: str | None) -> None:
        if task_id:
            self._log(f"claim missed task={task_id} worker={self.worker_id}")
        elif not self._idle:
            self._idle = True
            serving = f" kb={quoted(self.where)} store={quoted(self.store)}" if self.where else ""
            self._log(f"no claimable task worker={self.worker_id}{serving}")

    def progress(self, task_id: str, stage: Stage, done: int, total: int) -> None:
        now = time.monotonic()
        new_stage = self._last is None or self._last[0] != stage
        finished = total > 0 and done >= total
        due = new_stage or finished or now - self._last_at >= PLAIN_PROGRESS_INTERVAL
        if due and self._last != (stage, done, total):
            self._log(f"stage={stage} {done}/{total}")
            self._last, self._last_at = (stage, done, total), now

    def reused(self, task_id: str, revision: int, chunks: int) -> None:
        self._log(f"reused parse task={task_id} revision={revision} chunks={chunks}")
        self._last = None

    def read_by_ocr(self, task_id: str, pages: int, engine: str | None) -> None:
        if engine:
            self._log(f"ocr engine={quoted(engine)} worker={self.worker_id}")
        self._log(f"ocr task={task_id} pages={pages}")

    def finished(self, task: TaskRecord) -> None:
        line = f"finished task={task.task_id} status={task.status} attempt={task.attempt}"
        if task.error_code:
            line += f" error={task.error_code} detail={json.dumps(task.error_detail)}"
        self._log(line)

    def released(self, task_id: str) -> None:
        self._log(f"released task={task_id} worker={self.worker_id}")

    def lost(self, task_id: str) -> None:
        self._log(
            f"claim lost task={task_id} worker={self.worker_id}: cancelled or reclaimed; "
            "stopped without writing"
        )

    def gave_up(self, task_id: str, reason: str) -> None:
        self._log(f"failed task={task_id} error=worker_lost detail={json.dumps(reason)}")

    def stranded(self, task_id: str, reason: str) -> None:
        self._log(f"interrupted task={task_id} worker={self.worker_id}: {reason}")

    def close(self) -> None:
        pass


class LiveWorkerDisplay(PlainWorkerLog):
    """`kb work` on a terminal: the same events, drawn as live bars; between tasks of a
    --loop, one status line updated in place."""

    def __init__(self, worker_id: str, loop: bool = False) -> None:
        super().__init__(worker_id)
        from rich.console import Console

        self.console = Console(stderr=True, highlight=False)
        self.loop = loop
        self.live: LiveStages | None = None
        self.idle: Live | None = None  # the waiting line
        self.idle_since: datetime | None = None
        self.done = 0
        self.last: str | None = None
        self.below_bars: list[str] = []  # printed once the task's bars stop

    def started(self, where: str, store: str) -> None:
        self.where, self.store = where, store
        name = visible(self.worker_id)
        line = f"worker {name} serving {visible(where)} · objects in {visible(store)}"
        self.console.print(cut_to(line, self.console.width), style="dim", markup=False)

    def claimed(self, task: TaskRecord, filename: str, reclaimed_from: str | None) -> None:
        from rich.text import Text

        self._stop_idle()
        self.last = visible(filename)
        self.live = LiveStages()
        note = ""
        if reclaimed_from:
            note = f" [magenta](reclaimed from {cell(reclaimed_from)})[/magenta]"
        rest = f" worker [cyan]{cell(self.worker_id)}[/cyan] attempt {task.attempt}{note}"
        # The whole line fits the terminal: the file name is cut (`…`), never wrapped.
        without_name = f"[bold]claimed[/bold] {task_title(task, '')}{rest}"
        room = self.console.width - cell_len_of(Text.from_markup(without_name).plain)
        name = cut_name(visible(filename), max(room, _MIN_NAME_CELLS))
        self.live.start(f"[bold]claimed[/bold] {task_title(task, name)}{rest}")

    def missed(self, task_id: str | None) -> None:
        if task_id:
            self.console.print(
                f"[yellow]claim missed[/yellow]: task {short(task_id)} was taken by "
                "another worker or is not claimable"
            )
        elif self.loop:
            self._show_idle()
        else:
            self.console.print("[dim]no claimable task[/dim]")

    def _show_idle(self) -> None:
        from rich.live import Live
        from rich.text import Text

        if self.idle is None:
            self.idle_since = datetime.now()
            self.idle = Live(
                console=self.console,
                transient=True,
                refresh_per_second=4,
                redirect_stdout=False,  # the records printed meanwhile are stdout's
            )
            self.idle.start()
        self.idle.update(Text(self._idle_line(self.console.width), style="dim"))

    def _idle_line(self, width: int) -> str:
        """One line of at most `width` cells: the last claim's file (cut to fit) only
        when there is room for it, and a very long worker name cut as a last resort."""
        since = f"{self.idle_since:%H:%M:%S}" if self.idle_since else ""
        head = f"worker {visible(self.worker_id)} waiting since {since} · {self.done} done"
        tail = " · Ctrl-C to stop"
        room = width - cell_len_of(head + tail) - len(" · ")
        if self.where and room >= _MIN_NAME_CELLS:  # which knowledge base it waits on
            head += f" · {cut_name(visible(self.where), room)}"
        room = width - cell_len_of(head + tail) - len(" · last: ")
        if self.last and room >= min(cell_len_of(self.last), _MIN_NAME_CELLS):
            head += f" · last: {cut_name(self.last, room)}"
        return cut_to(head + tail, width)

    def _stop_idle(self) -> None:
        if self.idle is not None:
            self.idle.stop()
            self.idle = None

    def progress(self, task_id: str, stage: Stage, done: int, total: int) -> None:
        if self.live:
            self.live.update(stage, done, total)

    def reused(self, task_id: str, revision: int, chunks: int) -> None:
        message = (
            f"[cyan]reused[/cyan] the parse of revision {revision} ({chunks} chunks): "
            "no download or parse this attempt"
        )
        if self.live:  # a line above the bars, which go on drawing
            self.live.print(message)
        else:
            self.console.print(message)

    def read_by_ocr(self, task_id: str, pages: int, engine: str | None) -> None:
        """In the parse row (`OCR 3 pages`), and the engine, on its first use, below the
        bars once they stop: a line printed now would land above the download bar."""
        message = f"[cyan]OCR[/cyan] read {pages} scanned page{'s' if pages > 1 else ''}"
        if engine:  # kb's own words: no markup in them
            message += f" with {engine}"
        if not self.live:
            self.console.print(message)
            return
        self.live.note(Stage.PARSE, f"[cyan]OCR[/cyan] {counted(pages, 'page')}")
        if engine:
            self.below_bars.append(message)

    def finished(self, task: TaskRecord) -> None:
        if not self.live:
            return
        if task.status == "failed":
            self.live.update(task.stage, task.completed, task.total, failed=True)
        self.live.stop()
        for line in [*self._take_below_bars(), *outcome_lines(task)]:
            self.live.print(line)
        self.live = None
        self.done += 1

    def _take_below_bars(self) -> list[str]:
        lines, self.below_bars = self.below_bars, []
        return lines

    def released(self, task_id: str) -> None:
        self._end(f"[yellow]released[/yellow] task {short(task_id)}: back in the queue")

    def lost(self, task_id: str) -> None:
        self._end(
            f"[yellow]claim lost[/yellow] task {short(task_id)}: cancelled or "
            "reclaimed; stopped without writing"
        )

    def gave_up(self, task_id: str, reason: str) -> None:
        self.console.print(f"[red]worker_lost[/red] task {short(task_id)}: {cell(reason)}")

    def stranded(self, task_id: str, reason: str) -> None:
        self._end(f"[yellow]interrupted[/yellow] task {short(task_id)}: {cell(reason)}")

    def close(self) -> None:
        self._stop_idle()
        if self.loop:
            name = cell(self.worker_id)
            self.console.print(f"[dim]worker {name} stopped: {self.done} done[/dim]")

    def _end(self, message: str) -> None:
        """An attempt ended without an outcome of its own: the bars stop where they
        were, then the message, and nothing of this task is drawn after it."""
        if self.live:
            self.live.stop()
            for line in [*self._take_below_bars(), message]:
                self.live.print(line)
            self.live = None


def print_drafts_waiting(count: int, newest_id: str) -> None:
    """Nothing was claimable while drafts wait: the command that queues them."""
    wait = "waits" if count == 1 else "wait"
    note(
        f"{counted(count, 'draft')} {wait} to be submitted: kb submit {short(newest_id)} "
        "queues one (kb status --status draft lists them; kb upload --submit does both)"
    )
