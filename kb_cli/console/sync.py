"""`kb sync`: a line (or JSON) per path as it is decided, a summary, and on a terminal a
live bar of files scanned, hashed and uploaded."""

from __future__ import annotations

import sys
from json.encoder import encode_basestring as _json_string  # what write_json's encoder uses
from typing import TYPE_CHECKING

from kb_cli.console.core import (
    _escaped,
    cell_len_of,
    cut_name,
    emit,
    is_fancy,
    quoted,
    rich_console,
    short,
    write_json,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from kb_cli.services.reparse import Reparse
    from kb_cli.services.sync import Counters, Gone, SyncRecord, SyncSummary


# A dry run's record says what the sync would do (its JSON keeps the action's name).
_WOULD = {"added": "would add", "changed": "would change", "skipped": "would skip"}
_MIN_PATH_CELLS = 12  # below this a cut path says too little: the line wraps instead


class SyncDisplay:
    """What `kb sync` shows: each record on stdout as it is decided (a JSON line, a
    plain line, or on a terminal a line for a person: short ids, a long path cut in
    the middle, wrapped between words), the summary, and while it runs a live count on
    stderr when that is a terminal. The count never carries a record: where stdout is
    the same terminal it steps aside for each record's line and is drawn again below."""

    def __init__(self, as_json: bool, dry_run: bool) -> None:
        self.as_json, self.dry_run = as_json, dry_run
        self._person = None if as_json or not is_fancy(sys.stdout) else rich_console()
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

    def record(self, record: SyncRecord) -> None:
        if self.as_json:
            self._stdout(sync_json(record))
            return
        verb = _WOULD.get(record.action, record.action) if self.dry_run else record.action
        whole_id = f" document={record.document_id}" if record.document_id else ""
        reason = f" reason={quoted(record.reason)}" if record.reason else ""
        if self._person is None:
            self._stdout(f"{verb} {quoted(record.path)}{whole_id}{reason}")
            return
        short_id = f" document={short(record.document_id)}" if record.document_id else ""
        room = self._person.width - len(verb) - 1 - len(short_id)
        self._stdout(f"{verb} {_quoted_within(record.path, room)}{short_id}{reason}")

    def ask(self, question: Callable[[], bool]) -> bool:
        """The answer to `question` (a confirm_many), the count set aside meanwhile."""
        if self._live is not None:
            self._live.stop()
        try:
            return question()
        finally:
            if self._live is not None:
                self._live.start()

    def summary(self, summary: SyncSummary) -> None:
        self.close()
        if self.as_json:
            write_json(summary)
            return
        counts = " ".join(f"{action}={count}" for action, count in summary.counts.items())
        verb = "would sync" if summary.dry_run else "synced"
        source = quoted(summary.source)
        if self._person is not None:
            source = _quoted_within(summary.source, self._person.width // 2)
        self._stdout(f"{verb} {source} into base {summary.base}: {counts}")

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _stdout(self, line: str) -> None:
        """One line on stdout: for a person wrapped between words at the terminal's
        width (the terminal itself would break words in two)."""
        live = self._live if self._steps_aside else None
        if live is not None:
            live.stop()  # transient: the count's line is erased
        if self._person is None:
            emit(line)
        else:
            from rich.text import Text

            self._person.print(Text(line))
        if live is not None:
            live.start()


def _quoted_within(path: str, cells: int) -> str:
    """`path` quoted, cut in the middle to fit `cells` when that leaves enough of it."""
    whole = quoted(path)
    overhead = cell_len_of(whole) - cell_len_of(path)  # the quotes and escapes
    if cell_len_of(whole) <= cells or cells - overhead < _MIN_PATH_CELLS:
        return whole
    return quoted(cut_name(path, cells - overhead))


def sync_json(record: SyncRecord) -> str:
    """A sync record's JSON line, the same as write_json's, built from its four fields:
    a sync of an unchanged tree prints one per file, and this is most of its time."""
    return _escaped(
        f'{{"path": {_json_string(record.path)}, "action": {_json_string(record.action)}, '
        f'"document_id": {_text(record.document_id)}, "reason": {_text(record.reason)}}}'
    )


def _text(value: str | None) -> str:
    return "null" if value is None else _json_string(value)


_DONE = {"delete": "deleted", "unpublish": "unpublished"}


def confirm_missing(how: str, gone: list[Gone]) -> bool:
    """Before `--missing unpublish|delete` touches the documents whose files are gone."""
    from kb_cli.console.core import confirm_many, counted

    question = f"{how} {counted(len(gone), 'document')} whose files are gone?"
    return confirm_many(gone, question, f"nothing {_DONE[how]}: those documents are kept")


def confirm_reparse(planned: list[Reparse]) -> bool:
    """Ask about the documents that will be queued, saying how many are left as they
    are; nothing to queue, nothing to ask."""
    from kb_cli.console.core import confirm_many, counted

    queued = [item for item in planned if item.reason is None]
    if not queued:
        return True
    others = len(planned) - len(queued)
    left = f" ({counted(others, 'other')} left as they are)" if others else ""
    question = f"parse {counted(len(queued), 'document')} again as new revisions{left}?"
    return confirm_many(queued, question, "nothing queued")


def print_reparse(items: list[Reparse], as_json: bool, dry_run: bool) -> None:
    """One line per document: piped with whole ids; on a terminal with short ids, the
    file name cut to the width left, a reason wrapped between words."""
    from kb_cli.console.core import log, visible

    person = None if as_json or not is_fancy(sys.stdout) else rich_console()
    for item in items:
        if as_json:
            write_json(item)
            continue
        shown = _whole if person is None else short
        if item.queued:
            verb, tail = "queued", f" revision={item.revision} task={shown(item.task_id)}"
        elif item.reason is None:
            verb, tail = "would queue", f" ({item.status})"
        else:
            verb, tail = ("would leave" if dry_run else "left"), f": {visible(item.reason)}"
        head, name = f"{verb} {shown(item.document_id)}", visible(item.filename)
        if person is None:
            emit(f"{head} {name}{tail}")
            continue
        on_first_line = ":" if item.reason else tail  # a reason wraps between words
        room = person.width - cell_len_of(head) - 1 - cell_len_of(on_first_line)
        if room >= _MIN_PATH_CELLS:
            name = cut_name(name, room)
        from rich.text import Text

        person.print(Text(f"{head} {name}{tail}"))
    if not items:
        log("kb: nothing to reparse")


def _whole(identifier: str | None) -> str:
    return identifier or "-"
