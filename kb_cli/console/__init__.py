"""Everything the user sees: JSON Lines, plain lines, or rich tables and live progress.

Rich is used only when the stream is a terminal and neither CI=true nor NO_COLOR is
set; otherwise output is plain lines with no escape codes, for scripts and logs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from kb_cli.lifecycle import Stage

if TYPE_CHECKING:  # rich is loaded only when a terminal shows something
    from rich.live import Live
    from rich.progress import TaskID
from kb_cli.records import AuditRecord, DocumentRecord, SearchHit, TaskRecord

STAGES = list(Stage)
PLAIN_PROGRESS_INTERVAL = 0.5


def is_fancy(stream: TextIO) -> bool:
    """True when rich colour and live progress are allowed on this stream."""
    if os.environ.get("NO_COLOR") is not None or os.environ.get("CI", "").lower() == "true":
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    return stream.isatty()


class OutputClosed(Exception):
    """Whoever read stdout stopped reading (`kb status --json | head -1`)."""


def emit(line: str) -> None:
    """One line on stdout."""
    try:
        sys.stdout.write(line + "\n")
    except BrokenPipeError:
        raise OutputClosed() from None


# One encoder for every line: json.dumps with options builds a new one per call.
# NaN and Infinity are not JSON: a record holding one is a bug, never a line on stdout.
_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def write_json(record: Any) -> None:
    data = record.to_dict() if hasattr(record, "to_dict") else record
    emit(_JSON.encode(data))


def log(message: str) -> None:
    """A log line on stderr."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def short(identifier: str | None) -> str:
    return identifier[:8] if identifier else "-"


# --- plain lines ---------------------------------------------------------------------


def task_line(task: TaskRecord) -> str:
    parts = [
        f"task {task.task_id}",
        f"document={task.document_id}",
        f"status={task.status}",
        f"stage={task.stage}",
        f"progress={task.completed}/{task.total}",
        f"attempt={task.attempt}",
    ]
    if task.worker_id:
        parts.append(f"worker={task.worker_id}")
    if task.lease_expires_at and task.status == "running":
        parts.append(f"lease_expires_at={task.lease_expires_at}")
    if task.retry_at:
        parts.append(f"retry_at={task.retry_at}")
    if task.error_code:
        parts.append(f"error={task.error_code}")
        parts.append(f"detail={json.dumps(task.error_detail, ensure_ascii=False)}")
    return " ".join(parts)


def document_line(document: DocumentRecord) -> str:
    parts = [
        f"document {document.document_id}",
        f"file={json.dumps(document.filename, ensure_ascii=False)}",
        f"status={document.status}",
        f"version={document.version}",
        f"revision={document.revision}",
        f"published_revision={document.published_revision or '-'}",
        f"size={document.size_bytes}",
    ]
    task = document.latest_task
    if task:
        parts += [
            f"task={task.task_id}",
            f"task_status={task.status}",
            f"stage={task.stage}",
            f"progress={task.completed}/{task.total}",
            f"attempt={task.attempt}",
        ]
        if task.error_code:
            parts.append(f"error={task.error_code}")
    return " ".join(parts)


def print_records(records: Iterable[Any], as_json: bool) -> None:
    """Print records as JSON Lines; otherwise one readable line each, or on a terminal
    a small panel for one task or document and a table for several."""
    records = list(records)
    if not as_json and records and is_fancy(sys.stdout) and _print_on_terminal(records):
        return
    for record in records:
        if as_json:
            write_json(record)
        elif isinstance(record, TaskRecord):
            emit(task_line(record))
        elif isinstance(record, DocumentRecord):
            emit(document_line(record))
        elif isinstance(record, SearchHit):
            emit(search_line(record))
        elif isinstance(record, AuditRecord):
            emit(audit_line(record))
        else:
            emit(str(record))


def search_line(hit: SearchHit) -> str:
    place = f" page={hit.page}" if hit.page else ""
    place += f" heading={json.dumps(hit.heading, ensure_ascii=False)}" if hit.heading else ""
    snippet = " ".join(hit.snippet.split())
    ranks = "".join(
        f" {name}#{rank}"
        for name, rank in (("words", hit.lexical_rank), ("meaning", hit.vector_rank))
        if rank is not None
    )
    chunks = f" chunks={hit.passage[0]}-{hit.passage[1]}" if hit.passage else ""
    return (
        f"{hit.score:.3f} {visible(hit.filename)} rev={hit.revision} "
        f"chunk={hit.chunk_index}{place}{ranks}{chunks}\n"
        f"    {snippet}"
    )


class Progress:
    """done/total of one long job: a rich bar on a terminal, a line now and then
    otherwise (on stderr, so stdout keeps only the result)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._bar = None
        self._last = 0.0
        if is_fancy(sys.stderr):
            from rich.console import Console
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(console=Console(stderr=True))
            self._bar.start()
            self._task = self._bar.add_task(label, total=None)

    def __call__(self, done: int, total: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total)
        elif done == total or time.monotonic() - self._last >= PLAIN_PROGRESS_INTERVAL:
            self._last = time.monotonic()
            log(f"{self.label} {done}/{total}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def print_eval(results: list[Any], summary: Any) -> None:
    """One line per question (rank of the first expected document), then the scores."""
    for result in results:
        rank = f"#{result.first_expected_rank}" if result.first_expected_rank else "miss"
        leak = f"  LEAK {', '.join(result.forbidden_returned)}" if result.forbidden_returned else ""
        emit(f"{rank:>4}  {result.question}  -> {', '.join(result.expected)}{leak}")
    emit(
        f"{summary.questions} questions, k={summary.k}: hit@1 {summary.hit_at_1:.2f}  "
        f"hit@{summary.k} {summary.hit_at_k:.2f}  recall@{summary.k} {summary.recall_at_k:.2f}  "
        f"MRR {summary.mrr:.2f}  forbidden returned {summary.forbidden_leaks}"
    )


def audit_line(event: AuditRecord) -> str:
    change = f"{event.from_status or '-'} -> {event.to_status or '-'}"
    detail = f" {json.dumps(event.detail, ensure_ascii=False)}" if event.detail else ""
    return f"{event.at} {event.actor} {event.action} {event.entity_id} {change}{detail}"


# --- rich renderers (terminal only) --------------------------------------------------

WIDE = 110  # columns from which the document table shows every field of the latest task


def _console():
    from rich.console import Console

    return Console(highlight=False)


def _cell(text: object) -> str:
    """Text from the database, safe in a rich cell: markup escaped, and control
    characters shown as escapes, so a file name can neither drive the terminal (ESC
    sequences) nor forge a table row (a newline)."""
    from rich.markup import escape

    return escape(visible(str(text)))


def _print_on_terminal(records: list[Any]) -> bool:
    kinds = {type(record) for record in records}
    if kinds == {AuditRecord}:
        _print_history(records)
    elif kinds == {DocumentRecord}:
        console = _console()
        console.print(
            _document_panel(records[0])
            if len(records) == 1
            else _document_table(records, console.width)
        )
    elif kinds == {TaskRecord}:
        _console().print(_task_panel(records[0]) if len(records) == 1 else _task_table(records))
    else:
        return False
    return True


def _fields_panel(title: str, fields: list[tuple[str, str]]):
    from rich import box
    from rich.panel import Panel
    from rich.table import Table

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, value in fields:
        grid.add_row(label, value)
    return Panel(grid, title=title, title_align="left", box=box.ROUNDED, expand=False)


def _task_fields(task: TaskRecord) -> list[tuple[str, str]]:
    fields = [
        ("status", _styled(task.status)),
        ("stage", f"{task.stage} {_count(task.stage, task.completed, task.total)}".rstrip()),
        ("attempt", str(task.attempt)),
    ]
    if task.error_code:
        fields.append(("error", f"[red]{task.error_code}[/red]"))
        fields.append(("detail", _cell(task.error_detail or "")))
    if task.worker_id:
        fields.append(("worker", _cell(task.worker_id)))
    if task.status == "running" and task.lease_expires_at:
        fields.append(("lease until", task.lease_expires_at))
    if task.retry_at:
        fields.append(("retry at", task.retry_at))
    return fields


def _task_panel(task: TaskRecord):
    return _fields_panel(
        f"task {task.task_id}",
        [
            ("document", task.document_id),
            ("revision", str(task.revision)),
            *_task_fields(task),
            ("created", task.created_at),
            ("updated", task.updated_at),
        ],
    )


def _document_panel(document: DocumentRecord):
    published = document.published_revision
    fields = [
        ("file", _cell(document.filename)),
        ("status", _styled(document.status)),
        ("size", f"{_size(document.size_bytes)} ({document.content_type})"),
        ("sha256", document.sha256[:16] + "…"),
        ("version", str(document.version)),
        ("revision", f"{document.revision} (published: {published or 'none yet'})"),
        ("created", document.created_at),
        ("updated", document.updated_at),
    ]
    task = document.latest_task
    if task is not None:
        fields += [("latest task", task.task_id), *_task_fields(task)]
    return _fields_panel(f"document {document.document_id}", fields)


def _table(title: str):
    from rich import box
    from rich.table import Table

    return Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, expand=False
    )


def _document_table(records: list[DocumentRecord], width: int):
    """Short id, file, document status and the latest task: below WIDE columns the
    task's status, stage, progress and error share one column; the file takes the room
    that is left and is cut to fit, never wrapped."""
    wide = width >= WIDE
    now = datetime.now(UTC)
    rows = []
    for document in records:
        task = document.latest_task
        cells = _task_cells(task) if wide else [_task_summary(task)]
        rows.append(
            [
                short(document.document_id),
                _cell(document.filename),
                _styled(document.status),
                *cells,
                _age(document.created_at, now),
            ]
        )
    names = ["id", "file", "document"]
    names += ["task", "stage", "progress", "attempt", "error"] if wide else ["task"]
    names.append("age")
    table = _table(f"{len(records)} documents, newest first")
    widths = [
        max([len(name)] + [_cell_width(row[i]) for row in rows]) for i, name in enumerate(names)
    ]
    room = width - (sum(widths) - widths[1]) - 3 * len(names)
    for name in names:
        if name == "file":
            table.add_column(name, no_wrap=True, overflow="ellipsis", max_width=max(room, 8))
        else:
            table.add_column(name, no_wrap=True, justify="right" if name == "age" else "left")
    for row in rows:
        table.add_row(*row)
    return table


def _cell_width(markup: str) -> int:
    from rich.text import Text

    return Text.from_markup(markup).cell_len


def _task_cells(task: TaskRecord | None) -> list[str]:
    if task is None:
        return ["-", "", "", "", ""]
    return [
        _styled(task.status),
        task.stage,
        _count(task.stage, task.completed, task.total),
        str(task.attempt),
        f"[red]{task.error_code}[/red]" if task.error_code else "",
    ]


def _task_summary(task: TaskRecord | None) -> str:
    """The latest task in one short cell: its status, and what matters in that status."""
    if task is None:
        return "-"
    if task.error_code:
        return f"{_styled(task.status)} [red]{task.error_code}[/red]"
    if task.status == "running":
        progress = _count(task.stage, task.completed, task.total)
        return f"{_styled(task.status)} {task.stage} {progress}".rstrip()
    return _styled(task.status)


def _task_table(records: list[TaskRecord]):
    table = _table(f"{len(records)} tasks")
    for name in ("task", "document", "status", "stage", "attempt", "error"):
        table.add_column(name, no_wrap=True)
    for task in records:
        table.add_row(
            short(task.task_id),
            short(task.document_id),
            _styled(task.status),
            task.stage,
            str(task.attempt),
            f"[red]{task.error_code}[/red]" if task.error_code else "",
        )
    return table


def _print_history(events: list[AuditRecord]) -> None:
    """One line per event (time, actor, action, entity, change), and its detail after
    it on the same line when it fits, else on the next line, indented."""
    from rich.cells import cell_len

    console = _console()
    console.print(f"{len(events)} events, oldest first", style="bold")
    for event in events:
        change = f"{event.from_status or '-'} → {event.to_status or '-'}"
        head = (
            f"{event.at[:19].replace('T', ' ')}  {event.actor[:16]:<8}  {event.action:<9} "
            f"{short(event.entity_id)}  {change}"
        )
        detail = event.detail or ""
        line = f"{_cell(head)}"
        if detail and cell_len(head) + 2 + cell_len(detail) <= console.width:
            line += f"  [dim]{_cell(detail)}[/dim]"
        elif detail:
            line += f"\n    [dim]{_cell(detail)}[/dim]"
        console.print(line, overflow="fold")


def print_document_table(records: list[DocumentRecord], footer: str = "") -> None:
    """`kb status` without an id: a table on a terminal (with a footer line), plain
    lines otherwise."""
    if not is_fancy(sys.stdout):
        print_records(records, as_json=False)
        return
    console = _console()
    console.print(_document_table(records, console.width))
    if footer:
        console.print(f"[dim]{_cell(footer)}[/dim]")


def _count(stage: str, done: int, total: int) -> str:
    """Progress of a stage: bytes for the download, items for the others."""
    if stage == Stage.DOWNLOAD:
        return f"{_size(done)}/{_size(total)}" if total else ""
    return f"{done}/{total}" if total else ""


def _size(size: float) -> str:
    for unit in ("B", "KB", "MB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


_STATUS_STYLE = {
    "succeeded": "green",
    "published": "bold green",
    "review_pending": "cyan",
    "running": "yellow",
    "processing": "yellow",
    "queued": "blue",
    "retry_wait": "magenta",
    "failed": "bold red",
    "cancelled": "dim",
    "draft": "dim",
}


def visible(text: str) -> str:
    """Control and format characters (C0, C1, DEL, bidi overrides, line separators)
    as backslash escapes; everything printable, Chinese included, as it is."""
    if text.isprintable():
        return text
    import unicodedata

    return "".join(
        char.encode("unicode_escape").decode("ascii")
        if unicodedata.category(char) in _INVISIBLE
        else char
        for char in text
    )


_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _styled(status: str) -> str:
    style = _STATUS_STYLE.get(status)
    return f"[{style}]{status}[/{style}]" if style else status


def _age(stamp: str, now: datetime) -> str:
    seconds = now - datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    total = int(seconds.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if total >= size:
            return f"{total // size}{unit}"
    return f"{total}s"


# --- worker and wait displays --------------------------------------------------------


class PlainWorkerLog:
    """The contract's log lines on stderr; stage lines throttled within a stage, and an
    idle worker says so once, not once per poll."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self._last: tuple[str, int, int] | None = None
        self._last_at = 0.0
        self._idle = False

    def claimed(self, task: TaskRecord, filename: str, reclaimed_from: str | None) -> None:
        self._idle = False
        if reclaimed_from:
            log(f"reclaimed task={task.task_id} from={reclaimed_from} worker={self.worker_id}")
        log(
            f"claimed task={task.task_id} worker={self.worker_id} status={task.status} "
            f"attempt={task.attempt}"
        )
        log(
            f"document={task.document_id} file={json.dumps(filename, ensure_ascii=False)} "
            f"revision={task.revision}"
        )
        self._last = None

    def missed(self, task_id: str | None) -> None:
        if task_id:
            log(f"claim missed task={task_id} worker={self.worker_id}")
        elif not self._idle:
            self._idle = True
            log(f"no claimable task worker={self.worker_id}")

    def progress(self, task_id: str, stage: Stage, done: int, total: int) -> None:
        now = time.monotonic()
        new_stage = self._last is None or self._last[0] != stage
        finished = total > 0 and done >= total
        due = new_stage or finished or now - self._last_at >= PLAIN_PROGRESS_INTERVAL
        if due and self._last != (stage, done, total):
            log(f"stage={stage} {done}/{total}")
            self._last, self._last_at = (stage, done, total), now

    def finished(self, task: TaskRecord) -> None:
        line = f"finished task={task.task_id} status={task.status} attempt={task.attempt}"
        if task.error_code:
            line += f" error={task.error_code} detail={json.dumps(task.error_detail)}"
        log(line)

    def released(self, task_id: str) -> None:
        log(f"released task={task_id} worker={self.worker_id}")

    def lost(self, task_id: str) -> None:
        log(
            f"claim lost task={task_id} worker={self.worker_id}: cancelled or reclaimed; "
            "stopped without writing"
        )

    def gave_up(self, task_id: str, reason: str) -> None:
        log(f"failed task={task_id} error=worker_lost detail={json.dumps(reason)}")

    def close(self) -> None:
        pass


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
        self.live = Live(
            self.progress, console=self.console, refresh_per_second=10, transient=False
        )
        self.bars: dict[str, TaskID] = {}
        self.started: dict[str, float] = {}

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

    def update(self, stage: str, done: int, total: int, failed: bool = False) -> None:
        """Show `stage` at done/total; every earlier stage is complete by then."""
        for earlier in STAGES[: STAGES.index(Stage(stage))]:
            self._ensure(earlier)
            task = self.progress.tasks[self._position(earlier)]
            if not task.finished:
                whole = task.total or 1
                self.progress.update(self.bars[earlier], total=whole, completed=whole, mark=_DONE)
        self._ensure(stage)
        elapsed = max(time.monotonic() - self.started[stage], 1e-6)
        rate = f"{done / elapsed:,.0f}/s" if done and stage != Stage.DOWNLOAD else ""
        finished = total > 0 and done >= total
        mark = _FAILED if failed else _DONE if finished else "[yellow]…[/yellow]"
        self.progress.update(
            self.bars[stage],
            total=max(total, 1) if total else None,
            completed=done,
            count=_count(stage, done, total),
            rate=rate,
            mark=mark,
        )

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


def _task_title(task: TaskRecord, filename: str) -> str:
    name = _cell(filename)
    return f"task [cyan]{short(task.task_id)}[/cyan] [bold]{name}[/bold] rev {task.revision}"


def _outcome_lines(task: TaskRecord) -> list[str]:
    """How a task ended, in colour: the status, and the error code with its detail."""
    colour = {"succeeded": "green", "failed": "red"}.get(task.status, "yellow")
    status = f"[{colour}]{task.status}[/{colour}]"
    lines = [f"{status} task {short(task.task_id)} attempt {task.attempt}"]
    if task.error_code:
        where = f" at {task.stage}" if task.status == "failed" else ""
        lines.append(f"[red]{task.error_code}{where}: {_cell(task.error_detail or '')}[/red]")
    return lines


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

    def claimed(self, task: TaskRecord, filename: str, reclaimed_from: str | None) -> None:
        self._stop_idle()
        self.last = f"{_cell(filename)} at {datetime.now().strftime('%H:%M:%S')}"
        self.live = LiveStages()
        note = ""
        if reclaimed_from:
            note = f" [magenta](reclaimed from {_cell(reclaimed_from)})[/magenta]"
        self.live.start(
            f"[bold]claimed[/bold] {_task_title(task, filename)} "
            f"worker [cyan]{_cell(self.worker_id)}[/cyan] attempt {task.attempt}{note}"
        )

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

        if self.idle is None:
            self.idle_since = datetime.now()
            self.idle = Live(console=self.console, transient=True, refresh_per_second=4)
            self.idle.start()
        last = f" · last claim: {self.last}" if self.last else ""
        self.idle.update(
            f"[dim]worker {_cell(self.worker_id)} waiting for tasks since "
            f"{self.idle_since:%H:%M:%S} · {self.done} done{last} · Ctrl-C to stop[/dim]"
        )

    def _stop_idle(self) -> None:
        if self.idle is not None:
            self.idle.stop()
            self.idle = None

    def progress(self, task_id: str, stage: Stage, done: int, total: int) -> None:
        if self.live:
            self.live.update(stage, done, total)

    def finished(self, task: TaskRecord) -> None:
        if not self.live:
            return
        if task.status == "failed":
            self.live.update(task.stage, task.completed, task.total, failed=True)
        self.live.stop()
        for line in _outcome_lines(task):
            self.live.print(line)
        self.live = None
        self.done += 1

    def released(self, task_id: str) -> None:
        self._after(f"[yellow]released[/yellow] task {short(task_id)}: back in the queue")

    def lost(self, task_id: str) -> None:
        self._after(
            f"[yellow]claim lost[/yellow] task {short(task_id)}: cancelled or "
            "reclaimed; stopped without writing"
        )

    def gave_up(self, task_id: str, reason: str) -> None:
        self.console.print(f"[red]worker_lost[/red] task {short(task_id)}: {_cell(reason)}")

    def close(self) -> None:
        self._stop_idle()
        if self.loop:
            name = _cell(self.worker_id)
            self.console.print(f"[dim]worker {name} stopped: {self.done} done[/dim]")

    def _after(self, message: str) -> None:
        if self.live:
            self.live.print(message)


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
        self.live.start(f"[bold]waiting[/bold] for {_task_title(task, filename)}")

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
            for line in _outcome_lines(task):
                self.live.print(line)


# --- the demo ------------------------------------------------------------------------


_DEMO_STYLES = {
    "race": "cyan",
    "cancel": "yellow",
    "retry": "magenta",
    "publish": "green",
    "search": "blue",
    "done": "bold green",
}


class DemoLog:
    """Each demo step as one line: coloured on a terminal (wrapped lines stay aligned
    under the message), plain otherwise."""

    def __init__(self) -> None:
        self.fancy = is_fancy(sys.stdout)
        if self.fancy:
            self.console = _console()

    def __call__(self, event: Any) -> None:
        if not self.fancy:
            emit(f"{event.step}: {event.message}")
            sys.stdout.flush()
            return
        style = _DEMO_STYLES.get(event.step, "white")
        self.console.print(_indented(f"[{style}]{event.step:>8}[/{style}]", _cell(event.message)))


def _indented(label: str, text: str):
    """`label  text`, the text wrapping under itself rather than under the label."""
    from rich.table import Table

    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(label, text)
    return grid


def print_demo_summary(outcomes: list[Any]) -> None:
    if not is_fancy(sys.stdout):
        emit("summary:")
        for o in outcomes:
            emit(
                f"  {o.filename}: document={o.status} task={o.task_status} "
                f"attempt={o.attempt} error={o.error_code or '-'} "
                f"claimed_by={','.join(o.won_by) or '-'} outcome={'; '.join(o.notes)}"
            )
        return
    console = _console()
    console.print("\n[bold]kb demo: what happened to each file[/bold]")
    name_width = min(max(cell_len_of(o.filename) for o in outcomes), 28)
    for o in outcomes:
        error = f" [red]{o.error_code}[/red]" if o.error_code else ""
        name = _cell(_cut(o.filename, name_width))
        padding = " " * (name_width - cell_len_of(_cut(o.filename, name_width)))
        status_padding = " " * (len("review_pending") - len(o.status))
        console.print(
            f"[bold]{name}[/bold]{padding}  {_styled(o.status)}{status_padding}  task "
            f"{_styled(o.task_status)}{error}, attempt {o.attempt}"
        )
        story = " → ".join(o.notes)
        claimed = f" (claimed by {' then '.join(o.won_by)})" if o.won_by else ""
        console.print(_indented("  ", f"[dim]{_cell(story + claimed)}[/dim]"))


def cell_len_of(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def _cut(text: str, width: int) -> str:
    from rich.text import Text

    cut = Text(text)
    cut.truncate(width, overflow="ellipsis")
    return cut.plain


# --- the records of single commands -------------------------------------------------


def print_search(result: Any, as_json: bool) -> None:
    for warning in result.warnings:
        log(f"kb: warning: {warning}")
    print_records(result.hits, as_json)
    if not result.hits and not as_json and is_fancy(sys.stderr):
        log(
            "no hits: search serves published revisions only; "
            "`kb status --status review_pending` lists what waits for `kb publish`"
        )


def print_reindex(report: Any, as_json: bool) -> None:
    if as_json:
        write_json(report)
    else:
        emit(f"embedded {report.chunks} chunks of {report.revisions} revisions with {report.model}")


def print_doctor(report: Any, as_json: bool) -> None:
    if as_json:
        write_json(report)
        return
    for fix in report.repaired:
        emit(f"repaired {fix.kind} {fix.id}: {fix.detail}")
    for problem in report.problems:
        emit(f"problem {problem.kind} {problem.id}: {problem.detail}")
    if report.ok:
        emit("ok: every invariant holds")


def print_new_user(new_user: Any, as_json: bool) -> None:
    if as_json:
        write_json(new_user)
        return
    teams_shown = f" teams={','.join(new_user.teams)}" if new_user.teams else ""
    emit(f"user {new_user.user} role={new_user.role}{teams_shown}")
    emit(f"token {new_user.token}")
    log("the token is shown only once: store it now (export KB_TOKEN=...)")


def print_bases(records: list[Any], as_json: bool) -> None:
    if as_json:
        print_records(records, True)
        return
    for record in records:
        readers = "teams " + ", ".join(record.teams) if record.teams else "everyone"
        grants = f"; granted to {', '.join(record.grants)}" if record.grants else ""
        count = f"{record.documents} document" + ("" if record.documents == 1 else "s")
        emit(f"{record.base}: {count}; read by {readers}{grants}")


def print_upgrade(before: str | None, after: str, as_json: bool) -> None:
    if as_json:
        write_json({"from_revision": before, "to_revision": after})
    else:
        emit(f"schema at revision {after}" + (f" (was {before})" if before != after else ""))
