"""Tasks and documents: one plain line each, or on a terminal a panel for one and a
table for several."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

from kb_cli.console.core import (
    cell,
    emit,
    human_size,
    is_fancy,
    log,
    print_records,
    rich_console,
    short,
    stage_count,
    styled,
    visible,
)
from kb_cli.records import DocumentRecord, TaskRecord

WIDE = 110  # columns from which the document table shows every field of the latest task


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
    if document.archived_revision is not None:
        parts.append(f"unpublished_revision={document.archived_revision}")
    if document.rejected_reason:
        parts.append(f"rejected={json.dumps(document.rejected_reason, ensure_ascii=False)}")
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
        ("status", styled(task.status)),
        ("stage", f"{task.stage} {stage_count(task.stage, task.completed, task.total)}".rstrip()),
        ("attempt", str(task.attempt)),
    ]
    if task.error_code:
        fields.append(("error", f"[red]{task.error_code}[/red]"))
        fields.append(("detail", cell(task.error_detail or "")))
    if task.worker_id:
        fields.append(("worker", cell(task.worker_id)))
    if task.status == "running" and task.lease_expires_at:
        fields.append(("lease until", task.lease_expires_at))
    if task.retry_at:
        fields.append(("retry at", task.retry_at))
    return fields


def task_panel(task: TaskRecord):
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


def document_panel(document: DocumentRecord):
    published = document.published_revision
    fields = [
        ("file", cell(document.filename)),
        ("status", styled(document.status)),
        ("size", f"{human_size(document.size_bytes)} ({document.content_type})"),
        ("sha256", document.sha256[:16] + "…"),
        ("version", str(document.version)),
        ("revision", f"{document.revision} (published: {published or 'none yet'})"),
        ("created", document.created_at),
        ("updated", document.updated_at),
    ]
    if document.archived_revision is not None:
        fields.append(("unpublished", f"revision {document.archived_revision} (kb publish)"))
    if document.rejected_reason:
        fields.append(("rejected", cell(document.rejected_reason)))
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


def document_table(records: list[DocumentRecord], width: int):
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
                cell(document.filename),
                styled(document.status),
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
        styled(task.status),
        task.stage,
        stage_count(task.stage, task.completed, task.total),
        str(task.attempt),
        f"[red]{task.error_code}[/red]" if task.error_code else "",
    ]


def _task_summary(task: TaskRecord | None) -> str:
    """The latest task in one short cell: its status, and what matters in that status."""
    if task is None:
        return "-"
    if task.error_code:
        return f"{styled(task.status)} [red]{task.error_code}[/red]"
    if task.status == "running":
        progress = stage_count(task.stage, task.completed, task.total)
        return f"{styled(task.status)} {task.stage} {progress}".rstrip()
    return styled(task.status)


def task_table(records: list[TaskRecord]):
    table = _table(f"{len(records)} tasks")
    for name in ("task", "document", "status", "stage", "attempt", "error"):
        table.add_column(name, no_wrap=True)
    for task in records:
        table.add_row(
            short(task.task_id),
            short(task.document_id),
            styled(task.status),
            task.stage,
            str(task.attempt),
            f"[red]{task.error_code}[/red]" if task.error_code else "",
        )
    return table


def print_document_table(records: list[DocumentRecord], footer: str = "") -> None:
    """`kb status` without an id: a table on a terminal (with a footer line), plain
    lines otherwise."""
    if not is_fancy(sys.stdout):
        print_records(records, as_json=False)
        return
    console = rich_console()
    console.print(document_table(records, console.width))
    if footer:
        console.print(f"[dim]{cell(footer)}[/dim]")


def _age(stamp: str, now: datetime) -> str:
    seconds = now - datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    total = int(seconds.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if total >= size:
            return f"{total // size}{unit}"
    return f"{total}s"


def confirm_deletion(planned: list[Any]) -> bool:
    """On a terminal, ask before deleting; elsewhere (a script, a pipe) do not ask."""
    if not (sys.stdin.isatty() and is_fancy(sys.stderr)):
        return True
    for deletion in planned[:10]:
        log(f"  {deletion.document_id}  {visible(deletion.filename)}  ({deletion.status})")
    if len(planned) > 10:
        log(f"  ... and {len(planned) - 10} more")
    noun = "document" if len(planned) == 1 else "documents"
    sys.stderr.write(f"delete {len(planned)} {noun} with their chunks and files? [y/N] ")
    sys.stderr.flush()
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        log("nothing deleted")
        return False
    return True


def print_deletions(deletions: list[Any], as_json: bool) -> None:
    if as_json:
        print_records(deletions, True)
        return
    for deletion in deletions:
        verb = "deleted" if deletion.deleted else "would delete"
        emit(
            f"{verb} {deletion.document_id} {visible(deletion.filename)} ({deletion.status}; "
            f"{deletion.chunks} chunks, {deletion.tasks} tasks)"
        )
    if not deletions:
        log("kb: nothing to delete")
