"""`print_records` and the renderer table it dispatches through: for each kind of record,
the module beside it that draws it as a plain line, and on a terminal as a panel or a
table. The table sits above the renderers and imports them; no renderer imports it, so
adding a kind of record is one row here and no import circle.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

from kb_cli.console.answers import search_line
from kb_cli.console.core import Record, emit, is_fancy, rich_console, write_json_lines
from kb_cli.console.history import audit_line, print_history_table
from kb_cli.console.tasks import (
    document_line,
    document_panel,
    document_table,
    task_line,
    task_panel,
    task_table,
)
from kb_cli.records import AuditRecord, DocumentRecord, SearchHit, TaskRecord

# A record as one plain line; `filenames` (by document id) names a task's file. Each
# renderer takes the one kind of record its row names (Any: a callable of one record
# type is not one of every record type; the table's key is what keeps them apart).
LineRenderer = Callable[[Any, dict[str, str]], str]
# Records of one kind on a terminal: a panel for one, a table for several.
TerminalRenderer = Callable[[list[Any], dict[str, str]], None]


def _task_line(task: TaskRecord, filenames: dict[str, str]) -> str:
    return task_line(task, filenames.get(task.document_id))


def _print_tasks(tasks: list[TaskRecord], filenames: dict[str, str]) -> None:
    console = rich_console()
    console.print(
        task_panel(tasks[0], filenames.get(tasks[0].document_id))
        if len(tasks) == 1
        else task_table(tasks, filenames, console.width)
    )


def _print_documents(documents: list[DocumentRecord], _filenames: dict[str, str]) -> None:
    console = rich_console()
    console.print(
        document_panel(documents[0])
        if len(documents) == 1
        else document_table(documents, console.width)
    )


LINES: dict[type, LineRenderer] = {
    TaskRecord: _task_line,
    DocumentRecord: lambda document, _filenames: document_line(document),
    SearchHit: lambda hit, _filenames: search_line(hit),
    AuditRecord: lambda event, _filenames: audit_line(event),
}
# Kinds without a row here are plain lines on a terminal too.
ON_TERMINAL: dict[type, TerminalRenderer] = {
    TaskRecord: _print_tasks,
    DocumentRecord: _print_documents,
    AuditRecord: lambda events, _filenames: print_history_table(events),
}


def print_records(
    records: Iterable[Record], as_json: bool, filenames: dict[str, str] | None = None
) -> None:
    """Print records as JSON Lines; otherwise one readable line each, or on a terminal
    a small panel for one task or document and a table for several. `filenames` (by
    document id) names the file of each task; JSON records stay as the contract has
    them."""
    records = list(records)
    names = filenames or {}
    if as_json:
        write_json_lines(records)
        return
    kinds = {type(record) for record in records}
    on_terminal = ON_TERMINAL.get(kinds.pop()) if len(kinds) == 1 else None
    if on_terminal is not None and is_fancy(sys.stdout):
        on_terminal(records, names)
        return
    for record in records:
        line = LINES.get(type(record))
        emit(line(record, names) if line else str(record))
