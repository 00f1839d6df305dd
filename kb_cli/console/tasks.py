"""Tasks and documents: one plain line each, or on a terminal a panel for one and a
table for several."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kb_cli import metadata
from kb_cli.console.core import (
    cell,
    cell_len_of,
    confirm_many,
    counted,
    cut_name,
    cut_names,
    emit,
    human_size,
    is_fancy,
    log,
    quoted,
    rich_console,
    short,
    stage_count,
    styled,
    visible,
    warn,
    write_json_lines,
)
from kb_cli.lifecycle import DocStatus, Stage, TaskStatus
from kb_cli.records import ChunkChange, DocumentRecord, TaskRecord

if TYPE_CHECKING:
    from kb_cli.services.documents import Duplicate
    from kb_cli.services.removal import Deletion

WIDE = 110  # columns from which the document table shows every field of the latest task


def task_line(task: TaskRecord, filename: str | None = None) -> str:
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
        parts.append(f"detail={quoted(task.error_detail)}")
    if filename is not None:  # last, so that what reads the fields before is not moved
        parts.append(f"file={quoted(filename)}")
    return " ".join(parts)


def document_line(document: DocumentRecord) -> str:
    parts = [
        f"document {document.document_id}",
        f"file={quoted(document.filename)}",
        f"status={document.status}",
        f"version={document.version}",
        f"revision={document.revision}",
        f"published_revision={document.published_revision or '-'}",
        f"size={document.size_bytes}",
    ]
    if document.archived_revision is not None:
        parts.append(f"unpublished_revision={document.archived_revision}")
    if document.rejected_reason:
        parts.append(f"rejected={quoted(document.rejected_reason)}")
    if document.published_file is not None:
        parts.append(f"published_file={quoted(document.published_file['filename'])}")
    if document.chunks is not None:
        parts.append(f"chunks={document.chunks}")
    if document.ocr_pages is not None:
        parts.append(f"ocr_pages={document.ocr_pages}")
    parts += _change_words(document.change)
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


def _change_words(change: ChunkChange | None) -> list[str]:
    if change is None:
        return []
    if change.is_new:
        return ["change=new", f"chunks_added={change.chunks_added}"]
    return [
        f"change=replaces:{change.replaces_revision}",
        f"chunks_added={change.chunks_added}",
        f"chunks_removed={change.chunks_removed}",
        f"chunks_kept={change.chunks_kept}",
    ]


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


def _task_fields(task: TaskRecord, status_label: str = "status") -> list[tuple[str, str]]:
    fields = [
        (status_label, styled(task.status)),
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


def task_panel(task: TaskRecord, filename: str | None = None):
    file = [("file", cell(filename))] if filename is not None else []
    return _fields_panel(
        f"task {task.task_id}",
        [
            *file,
            ("document", task.document_id),
            ("revision", str(task.revision)),
            *_task_fields(task),
            ("created", task.created_at),
            ("updated", task.updated_at),
        ],
    )


def _published_file(document: DocumentRecord) -> list[tuple[str, str]]:
    """The served revision's file, when a replace not yet published changed it."""
    file = document.published_file
    if file is None:
        return []
    name, kind = file["filename"], file["content_type"]
    return [("serving", cell(f"{name} ({kind}), revision {document.published_revision}"))]


def _where_from(document: DocumentRecord) -> list[tuple[str, str]]:
    """The base, a synced document's path and source, and its other metadata."""
    meta = document.meta
    fields = [("base", cell(document.base))]
    if metadata.PATH in meta:
        source = meta.get(metadata.SOURCE)
        fields.append(("path", cell(meta[metadata.PATH] + (f" (in {source})" if source else ""))))
    own = [f"{key}={value}" for key, value in sorted(meta.items()) if key not in metadata.SYNCED]
    if own:
        fields.append(("metadata", cell(", ".join(own))))
    return fields


def _what_it_holds(document: DocumentRecord) -> list[tuple[str, str]]:
    """The newest revision's chunks and OCR pages, and what publishing it changes."""
    fields = []
    if document.chunks:
        read = document.ocr_pages
        ocr = f", {counted(read, 'page')} read by OCR" if read else ""
        fields.append(("chunks", f"{document.chunks} (revision {document.revision}){ocr}"))
    change = document.change
    if change is not None:
        if change.is_new:
            what = f"new: nothing served yet (kb show {short(document.document_id)})"
        else:
            what = (
                f"revision {change.replaces_revision}, served now: +{change.chunks_added} "
                f"-{change.chunks_removed} chunks, {change.chunks_kept} kept "
                f"(kb diff {short(document.document_id)})"
            )
        fields.append(("replaces" if not change.is_new else "change", what))
    return fields


def document_panel(document: DocumentRecord):
    published = document.published_revision
    fields = [
        ("file", cell(document.filename)),
        *_where_from(document),
        ("status", styled(document.status)),
        ("size", f"{human_size(document.size_bytes)} ({document.content_type})"),
        ("sha256", document.sha256[:16] + "…"),
        ("version", str(document.version)),
        ("revision", f"{document.revision} (published: {published or 'none yet'})"),
        *_published_file(document),
        *_what_it_holds(document),
        ("created", document.created_at),
        ("updated", document.updated_at),
    ]
    if document.archived_revision is not None:
        fields.append(("unpublished", f"revision {document.archived_revision} (kb publish)"))
    if document.rejected_reason:
        fields.append(("rejected", cell(document.rejected_reason)))
    task = document.latest_task
    if task is not None:
        # "task status": the panel's first status is the document's.
        fields += [("latest task", task.task_id), *_task_fields(task, "task status")]
    return _fields_panel(f"document {document.document_id}", fields)


def _table(title: str):
    from rich import box
    from rich.table import Table

    # Two spaces between columns, not three: at 80 columns the file's name needs them.
    return Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        expand=False,
        collapse_padding=True,
    )


# Columns whose width never depends on how far a task has got, so that the wide table
# keeps its shape while work runs: the widest value each can hold.
_TASK_STATUS_CELLS = max(len(status) for status in TaskStatus)
_STAGE_CELLS = max(len(stage) for stage in Stage)
_PROGRESS_CELLS = len("1023.9 KB/1023.9 KB")
_AGE_CELLS = 4  # "59m", "23h", "365d"
# Below WIDE, the task's status, stage and progress share one cell: a running stage
# with its count ("running embedding 12/40") when the file's name leaves room for it;
# a longer count is left out.
_TASK_SUMMARY_CELLS = 22
_MIN_FILE_CELLS = 8
_FILE_CELLS_BEFORE_WIDE = 24  # the task's fields get columns only when the file keeps this
_ID_CELLS = 8  # a short id


def shown_name(document: DocumentRecord) -> str:
    """What the file column shows: a synced document's path under its source (two
    README.md of two folders differ), any other document's file name."""
    return visible(document.meta.get(metadata.PATH) or document.filename)


def document_table(records: list[DocumentRecord], width: int, of: int | None = None):
    """Short id, file (a synced document's path), the base (when more than one is
    shown), document status and the latest task: below WIDE columns the task's status,
    stage, progress and error share one column. Columns are as wide as what they show,
    the file's name first: the task's cell gives up its count, then its stage, before
    a name is cut; a name that does not fit is cut in the middle (`…`, the extension
    kept) so that different names stay different, never wrapped."""
    now = datetime.now(UTC)
    shown = [shown_name(record) for record in records]
    longest = max((cell_len_of(name) for name in shown), default=0)
    wide = width >= WIDE
    columns = _document_columns(records, wide)
    room = _file_room(width, columns)
    if wide and room < min(longest, _FILE_CELLS_BEFORE_WIDE):
        wide = False  # the task's fields would leave the file too little room
        columns = _document_columns(records, wide)
        room = _file_room(width, columns)
    file_cells = max(min(longest, room), _MIN_FILE_CELLS, len("file"))
    if not wide:  # the task's cell widens into what the file's name leaves
        summaries = [_summary_cells(r.latest_task, r.status) for r in records]
        least = columns[-2][1]
        cells = max(least, min(max(summaries, default=0), least + room - file_cells))
        columns[-2] = ("task", cells)
    names = cut_names(shown, file_cells)
    title = f"{counted(len(records), 'document')}, newest first"
    if of is not None and of > len(records):
        title = f"the newest {len(records)} of {counted(of, 'document')} (--limit)"
    table = _table(title)
    table.add_column("id", no_wrap=True, width=_ID_CELLS)
    table.add_column("file", no_wrap=True, width=file_cells)
    for name, cells in columns:
        justify = "right" if name == "age" else "left"
        table.add_column(name, no_wrap=True, width=cells, justify=justify, overflow="ellipsis")
    with_base = columns[0][0] == "base"
    with_change = any(name == "change" for name, _ in columns)
    for document, name in zip(records, shown, strict=True):
        task = document.latest_task
        table.add_row(
            short(document.document_id),
            cell(names[name]),
            *([cell(document.base)] if with_base else []),
            styled(document.status),
            *([_change_cell(document.change)] if with_change else []),
            *(
                _task_cells(task)
                if wide
                else [_task_summary(task, document.status, columns[-2][1])]
            ),
            _age(document.created_at, now),
        )
    return table


def _file_room(width: int, columns: list[tuple[str, int]]) -> int:
    """The cells left for the file column beside the id and `columns`: two between
    columns, and the edges."""
    gaps = 2 * (len(columns) + 1) + 2
    return width - _ID_CELLS - sum(cells for _, cells in columns) - gaps


def _document_columns(records: list[DocumentRecord], wide: bool) -> list[tuple[str, int]]:
    """The columns after id and file, with their widths: below WIDE, the task's column
    as narrow as its cells can be (`_least_summary_cells`), widened by the caller."""
    codes = [r.latest_task.error_code for r in records if r.latest_task is not None]
    longest_code = max((len(code) for code in codes if code), default=0)
    statuses = max((len(r.status) for r in records), default=0)
    columns = [("document", max(statuses, len("document")))]
    changes = [_change_cell(r.change) for r in records if r.change is not None]
    if changes:  # listing review_pending documents: what publishing each would change
        columns.append(("change", max(len("change"), *(len(change) for change in changes))))
    bases = {r.base for r in records}
    if len(bases) > 1:  # same-named files of two bases would look alike
        columns.insert(0, ("base", max(len("base"), *(cell_len_of(visible(b)) for b in bases))))
    if wide:
        columns += [
            ("task", _TASK_STATUS_CELLS),
            ("stage", _STAGE_CELLS),
            ("progress", _PROGRESS_CELLS),
            ("attempt", len("attempt")),
            ("error", max(longest_code, len("error"))),
        ]
    else:
        least = [_least_summary_cells(r.latest_task, r.status) for r in records]
        columns.append(("task", max([len("task"), *least])))
    return [*columns, ("age", _AGE_CELLS)]


def _change_cell(change: ChunkChange | None) -> str:
    if change is None:
        return ""
    if change.is_new:
        return "new"
    return f"+{change.chunks_added} -{change.chunks_removed}, {change.chunks_kept} kept"


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


def _summary_words(task: TaskRecord, document_status: str) -> list[str]:
    """The latest task in words, most telling first: a failed task's error code (the
    document's column says failed), a waiting task's status and code, a running task's
    status, stage and count; what does not fit is left out from the end."""
    if task.error_code:
        if task.status == TaskStatus.FAILED and document_status == DocStatus.FAILED:
            return [task.error_code]
        return [task.status, task.error_code]
    if task.status == TaskStatus.RUNNING:
        return [task.status, task.stage, stage_count(task.stage, task.completed, task.total)]
    return [task.status]


def _least_summary_cells(task: TaskRecord | None, document_status: str) -> int:
    """The fewest cells a task's summary is shown in: an error code whole (it is what
    to search for), a running task's status alone."""
    if task is None:
        return 1
    words = _summary_words(task, document_status)
    return len(" ".join(words if task.error_code else words[:1]))


def _summary_cells(task: TaskRecord | None, document_status: str) -> int:
    """The cells the whole summary takes, up to _TASK_SUMMARY_CELLS."""
    if task is None:
        return 1
    whole = " ".join(word for word in _summary_words(task, document_status) if word)
    return min(len(whole), max(_TASK_SUMMARY_CELLS, _least_summary_cells(task, document_status)))


def _task_summary(task: TaskRecord | None, document_status: str, cells: int) -> str:
    """The latest task in one cell of `cells` columns: the words of `_summary_words`
    that fit whole, the status coloured and an error code red."""
    if task is None:
        return "-"
    words = [word for word in _summary_words(task, document_status) if word]
    while len(words) > 1 and len(" ".join(words)) > cells:
        words.pop()
    marked = [
        f"[red]{word}[/red]" if word == task.error_code else styled(word) if i == 0 else word
        for i, word in enumerate(words)
    ]
    return " ".join(marked)


def task_table(records: list[TaskRecord], filenames: dict[str, str], width: int):
    """Several tasks, each with the name of its document's file (what tells 14 tasks
    of one upload apart); names cut in the middle to fit, like the document table's."""
    table = _table(counted(len(records), "task"))
    columns = [("status", _TASK_STATUS_CELLS), ("stage", _STAGE_CELLS), ("attempt", 7)]
    codes = [len(task.error_code) for task in records if task.error_code]
    columns.append(("error", max(codes, default=len("error"))))
    shown = [visible(filenames.get(task.document_id, "-")) for task in records]
    longest = max((cell_len_of(name) for name in shown), default=0)
    file_cells = max(min(longest, _file_room(width, columns)), _MIN_FILE_CELLS, len("file"))
    names = cut_names(shown, file_cells)
    table.add_column("task", no_wrap=True, width=_ID_CELLS)
    table.add_column("file", no_wrap=True, width=file_cells)
    for name, cells in columns:
        table.add_column(name, no_wrap=True, width=cells)
    for task, name in zip(records, shown, strict=True):
        table.add_row(
            short(task.task_id),
            cell(names[name]),
            styled(task.status),
            task.stage,
            str(task.attempt),
            f"[red]{task.error_code}[/red]" if task.error_code else "",
        )
    return table


def print_document_table(
    records: list[DocumentRecord], footer: str = "", of: int | None = None
) -> None:
    """`kb status` without an id: a table on a terminal (with a footer line), plain
    lines otherwise. `of`: how many there were before --limit kept `records`."""
    left_out = (of or 0) - len(records)
    if not is_fancy(sys.stdout):
        for record in records:
            emit(document_line(record))
        if left_out > 0:
            log(f"kb: {counted(left_out, 'older document')} not shown (--limit)")
        return
    console = rich_console()
    console.print(document_table(records, console.width, of))
    if footer:
        console.print(f"[dim]{cell(footer)}[/dim]")


def _age(stamp: str, now: datetime) -> str:
    seconds = now - datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    total = int(seconds.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if total >= size:
            return f"{total // size}{unit}"
    return f"{total}s"


def warn_duplicates(duplicates: list[Duplicate]) -> None:
    """A document just uploaded with the content of an earlier one: stored as asked,
    but probably not what was meant; one warning each, on stderr."""
    for duplicate in duplicates:
        name, other = visible(duplicate.filename), visible(duplicate.same_as_filename)
        where = "in this upload" if duplicate.in_this_upload else "already in this base"
        warn(
            f"{name} has the same content as {other} ({short(duplicate.same_as_id)}) "
            f"{where}; stored anyway as document {short(duplicate.document_id)} "
            f"(kb delete {short(duplicate.document_id)} removes it; upload --skip-existing "
            "leaves such files out)"
        )


def note_skipped(skipped: list[Duplicate]) -> None:
    """`upload --skip-existing`: each file left out, and the document that has it."""
    for skip in skipped:
        name, other = visible(skip.filename), visible(skip.same_as_filename)
        where = f"{other} ({short(skip.same_as_id)})" if skip.same_as_id else f"{other} above"
        log(f"kb: skipped {name}: same content as {where}")


def confirm_deletion(planned: list[Deletion]) -> bool:
    what = counted(len(planned), "document")
    return confirm_many(planned, f"delete {what} with their chunks and files?", "nothing deleted")


def print_deletions(deletions: list[Deletion], as_json: bool) -> None:
    if as_json:
        write_json_lines(deletions)
        return
    # On a terminal each line fits its width: a short id, the file name cut to the
    # room left (never a line wrapped mid-word); piped lines stay whole, for scripts.
    width = rich_console().width if is_fancy(sys.stdout) else None
    for deletion in deletions:
        verb = "deleted" if deletion.deleted else "would delete"
        what = (
            f"({deletion.status}; {counted(deletion.chunks, 'chunk')}, "
            f"{counted(deletion.tasks, 'task')})"
        )
        name = visible(deletion.filename)
        if width is None:
            emit(f"{verb} {deletion.document_id} {name} {what}")
            continue
        head = f"{verb} {short(deletion.document_id)}"
        room = width - 1 - len(head) - 2 - cell_len_of(what)
        emit(f"{head} {cut_name(name, max(room, 8))} {what}")
    if not deletions:
        log("kb: nothing to delete")
