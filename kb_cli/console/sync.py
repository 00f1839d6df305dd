"""`kb sync`: a line (or JSON) per path as it is decided, a summary, and on a terminal a
live bar of files scanned, hashed and uploaded."""

from __future__ import annotations

import sys
from json.encoder import encode_basestring as _json_string  # what write_json's encoder uses
from typing import TYPE_CHECKING

from kb_cli.console.core import _escaped, emit, is_fancy, quoted, write_json

if TYPE_CHECKING:
    from kb_cli.services.reparse import Reparse
    from kb_cli.services.sync import Counters, SyncRecord, SyncSummary


class SyncProgress:
    """Counts on stderr while a sync runs, on a terminal only. The records go to stdout,
    never through it: where stdout is a terminal too, the counts step aside for each
    record's line and are drawn again below it."""

    def __init__(self) -> None:
        self._live = None
        self._steps_aside = False
        if is_fancy(sys.stderr):
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._live = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
                redirect_stdout=False,  # a record drawn by the display is lost to a pipe
            )
            self._steps_aside = sys.stdout.isatty()
            self._live.start()
            self._task = self._live.add_task("scanning", total=None)

    def __call__(self, counters: Counters) -> None:
        if self._live is not None:
            self._live.update(
                self._task,
                description=f"scanned {counters.scanned}  hashed {counters.hashed}  "
                f"uploaded {counters.uploaded}",
            )

    def print_record(self, record: SyncRecord, as_json: bool) -> None:
        """A record on stdout, the counts erased first when they share its terminal."""
        if not self._steps_aside or self._live is None:
            print_sync_record(record, as_json)
            return
        self._live.stop()  # transient: the counts' line is erased
        print_sync_record(record, as_json)
        self._live.start()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()


def print_sync_record(record: SyncRecord, as_json: bool) -> None:
    if as_json:
        emit(sync_json(record))
        return
    line = f"{record.action} {quoted(record.path)}"
    if record.document_id:
        line += f" document={record.document_id}"
    if record.reason:
        line += f" reason={quoted(record.reason)}"
    emit(line)


def sync_json(record: SyncRecord) -> str:
    """A sync record's JSON line, the same as write_json's, built from its four fields:
    a sync of an unchanged tree prints one per file, and this is most of its time."""
    return _escaped(
        f'{{"path": {_json_string(record.path)}, "action": {_json_string(record.action)}, '
        f'"document_id": {_text(record.document_id)}, "reason": {_text(record.reason)}}}'
    )


def _text(value: str | None) -> str:
    return "null" if value is None else _json_string(value)


def print_sync_summary(summary: SyncSummary, as_json: bool) -> None:
    if as_json:
        write_json(summary)
        return
    counts = " ".join(f"{action}={count}" for action, count in summary.counts.items())
    verb = "would sync" if summary.dry_run else "synced"
    emit(f"{verb} {quoted(summary.source)} into base {summary.base}: {counts}")


def confirm_reparse(planned: list[Reparse]) -> bool:
    from kb_cli.console.core import confirm_many, counted

    what = counted(len(planned), "document")
    return confirm_many(planned, f"parse {what} again as new revisions?", "nothing queued")


def print_reparse(items: list[Reparse], as_json: bool) -> None:
    from kb_cli.console.core import log, visible

    for item in items:
        if as_json:
            write_json(item)
        elif item.queued:
            emit(
                f"queued {item.document_id} {visible(item.filename)} revision={item.revision} "
                f"task={item.task_id}"
            )
        elif item.reason is None:
            emit(f"would queue {item.document_id} {visible(item.filename)} ({item.status})")
        else:
            emit(f"left {item.document_id} {visible(item.filename)}: {item.reason}")
    if not items:
        log("kb: nothing to reparse")
