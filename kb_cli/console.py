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
from typing import Any, TextIO

from kb_cli.lifecycle import Stage
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
_JSON = json.JSONEncoder(ensure_ascii=False)


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
    """Print records as JSON Lines, or one readable line each."""
    for record in records:
        if as_json:
            write_json(record)
        elif isinstance(record, TaskRecord):
            emit(task_line(record))
        elif isinstance(record, DocumentRecord):
            emit(document_line(record))
        elif isinstance(record, SearchHit):
            emit(search_line(record))
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
    return (
        f"{hit.score:.3f} {visible(hit.filename)} rev={hit.revision} "
        f"chunk={hit.chunk_index}{place}{ranks}\n"
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


def print_document_table(records: list[DocumentRecord], footer: str = "") -> None:
    """`kb status` without an id: a table on a terminal (with a footer line), plain
    lines otherwise."""
    if not is_fancy(sys.stdout):
        print_records(records, as_json=False)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(records)} documents, newest first", title_justify="left")
    for column in (
        "id",
        "file",
        "document",
        "task",
        "stage",
        "progress",
        "attempt",
        "error",
        "age",
    ):
        table.add_column(column, no_wrap=column in ("id", "progress"))
    now = datetime.now(UTC)
    for document in records:
        task = document.latest_task
        table.add_row(
            short(document.document_id),
            _escape(document.filename),
            _styled(document.status),
            _styled(task.status) if task else "-",
            task.stage if task else "-",
            f"{task.completed}/{task.total}" if task else "-",
            str(task.attempt) if task else "-",
            f"[red]{task.error_code}[/red]" if task and task.error_code else "",
            _age(document.created_at, now),
        )
    Console().print(table)
    if footer:
        Console().print(f"[dim]{_escape(footer)}[/dim]")


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


def _escape(text: str) -> str:
    """Text as rich markup that shows exactly its characters: markup escaped, and
    control characters visible, so that a file name can neither drive the terminal
    (ESC sequences) nor forge a table row (a newline)."""
    from rich.markup import escape

    return escape(visible(text))


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
    """The contract's log lines on stderr; stage lines throttled within a stage."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self._last: tuple[str, int, int] | None = None
        self._last_at = 0.0

    def claimed(self, task: TaskRecord, reclaimed_from: str | None) -> None:
        if reclaimed_from:
            log(f"reclaimed task={task.task_id} from={reclaimed_from} worker={self.worker_id}")
        log(
            f"claimed task={task.task_id} worker={self.worker_id} status={task.status} "
            f"attempt={task.attempt}"
        )
        self._last = None

    def missed(self, task_id: str | None) -> None:
        if task_id:
            log(f"claim missed task={task_id} worker={self.worker_id}")
        else:
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


class LiveStages:
    """One rich progress bar per stage, for one task at a time, on stderr."""

    def __init__(self, title: str) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.console = Console(stderr=True)
        self.title = title
        self.progress = Progress(
            TextColumn("{task.fields[mark]} {task.description:<10}"),
            BarColumn(bar_width=30),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[rate]}"),
            console=self.console,
        )
        self.live = Live(
            self.progress, console=self.console, refresh_per_second=10, transient=False
        )
        self.bars: dict[str, int] = {}
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

    def update(self, stage: str, done: int, total: int) -> None:
        for earlier in STAGES[: STAGES.index(Stage(stage))]:
            self._ensure(earlier)
            bar = self.bars[earlier]
            task = self.progress.tasks[[t.id for t in self.progress.tasks].index(bar)]
            if not task.finished:
                self.progress.update(
                    bar, total=task.total or 1, completed=task.total or 1, mark="[green]✓[/green]"
                )
        self._ensure(stage)
        elapsed = max(time.monotonic() - self.started[stage], 1e-6)
        rate = f"{done / elapsed:,.0f}/s" if done else ""
        finished = total > 0 and done >= total
        self.progress.update(
            self.bars[stage],
            total=max(total, 1) if total else None,
            completed=done,
            rate=rate,
            mark="[green]✓[/green]" if finished else "[yellow]…[/yellow]",
        )

    def _ensure(self, stage: str) -> None:
        if stage not in self.bars:
            self.bars[stage] = self.progress.add_task(stage, total=None, mark=" ", rate="")
            self.started[stage] = time.monotonic()

    def print(self, message: str) -> None:
        self.console.print(message)


class LiveWorkerDisplay(PlainWorkerLog):
    """`kb work` on a terminal: the same events, drawn as live bars."""

    def __init__(self, worker_id: str) -> None:
        super().__init__(worker_id)
        self.live: LiveStages | None = None

    def claimed(self, task: TaskRecord, reclaimed_from: str | None) -> None:
        self.live = LiveStages(task.task_id)
        note = (
            f" [magenta](reclaimed from {_escape(reclaimed_from)})[/magenta]"
            if reclaimed_from
            else ""
        )
        self.live.start(
            f"[bold]claimed[/bold] task [cyan]{short(task.task_id)}[/cyan] "
            f"worker [cyan]{_escape(self.worker_id)}[/cyan] attempt {task.attempt}{note}"
        )

    def missed(self, task_id: str | None) -> None:
        from rich.console import Console

        message = (
            f"[yellow]claim missed[/yellow]: task {short(task_id)} was taken by "
            "another worker or is not claimable"
            if task_id
            else "[dim]no claimable task[/dim]"
        )
        Console(stderr=True).print(message)

    def progress(self, task_id: str, stage: Stage, done: int, total: int) -> None:
        if self.live:
            self.live.update(stage, done, total)

    def finished(self, task: TaskRecord) -> None:
        if not self.live:
            return
        self.live.stop()
        colour = {"succeeded": "green", "failed": "red"}.get(task.status, "yellow")
        self.live.print(
            f"[{colour}]{task.status}[/{colour}] task {short(task.task_id)} attempt {task.attempt}"
        )
        if task.error_code:
            self.live.print(f"[red]{task.error_code}: {_escape(task.error_detail or '')}[/red]")
        self.live = None

    def released(self, task_id: str) -> None:
        self._after(f"[yellow]released[/yellow] task {short(task_id)}: back in the queue")

    def lost(self, task_id: str) -> None:
        self._after(
            f"[yellow]claim lost[/yellow] task {short(task_id)}: cancelled or "
            "reclaimed; stopped without writing"
        )

    def gave_up(self, task_id: str, reason: str) -> None:
        from rich.console import Console

        Console(stderr=True).print(
            f"[red]worker_lost[/red] task {short(task_id)}: {_escape(reason)}"
        )

    def _after(self, message: str) -> None:
        if self.live:
            self.live.print(message)


class LiveWait:
    """`kb status --wait` on a terminal: the task's stages, read from the database."""

    def __init__(self) -> None:
        self.live: LiveStages | None = None
        self.attempt: int | None = None

    def __call__(self, task: TaskRecord) -> None:
        if self.live is None:
            self.live = LiveStages(task.task_id)
            self.live.start(f"[bold]waiting[/bold] for task [cyan]{short(task.task_id)}[/cyan]")
        if self.attempt is not None and task.attempt != self.attempt:
            self.live.reset()
        self.attempt = task.attempt
        if task.status in ("running", "succeeded", "failed") and task.total:
            self.live.update(task.stage, task.completed, task.total)
        elif task.status == "running":
            self.live.update(task.stage, task.completed, 0)

    def close(self) -> None:
        if self.live:
            self.live.stop()


# --- the demo ------------------------------------------------------------------------


class DemoLog:
    """Each demo step as one line: coloured on a terminal, plain otherwise."""

    def __init__(self) -> None:
        self.fancy = is_fancy(sys.stdout)
        if self.fancy:
            from rich.console import Console

            self.console = Console()

    def __call__(self, event: Any) -> None:
        if not self.fancy:
            emit(f"{event.step}: {event.message}")
            sys.stdout.flush()
            return
        style = {
            "race": "cyan",
            "cancel": "yellow",
            "retry": "magenta",
            "publish": "green",
            "search": "blue",
            "done": "bold green",
        }.get(event.step, "white")
        self.console.print(f"[{style}]{event.step:>8}[/{style}]  {_escape(event.message)}")


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
    from rich.console import Console
    from rich.table import Table

    table = Table(title="kb demo: what happened", title_justify="left")
    for column in ("file", "document", "task", "attempt", "error", "claimed by", "outcome"):
        table.add_column(column)
    for o in outcomes:
        table.add_row(
            _escape(o.filename),
            _styled(o.status),
            _styled(o.task_status),
            str(o.attempt),
            f"[red]{o.error_code}[/red]" if o.error_code else "",
            ", ".join(o.won_by),
            "; ".join(o.notes),
        )
    Console().print(table)
