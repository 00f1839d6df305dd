"""What every renderer uses: stdout and stderr lines, JSON Lines, the terminal check,
safe cells and status colours. The renderers import it; it imports none of them
(`print_records` and its renderer table are in renderers.py, above them).

Rich is used only when the stream is a terminal and neither CI=true nor NO_COLOR is
set; otherwise output is plain lines with no escape codes, for scripts and logs.
"""

from __future__ import annotations

import json
import os
import sys
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, TextIO

from kb_cli.errors import OutputClosed
from kb_cli.lifecycle import Stage

PLAIN_PROGRESS_INTERVAL = 0.5


def is_fancy(stream: TextIO) -> bool:
    """True when rich colour and live progress are allowed on this stream."""
    if os.environ.get("NO_COLOR") is not None or os.environ.get("CI", "").lower() == "true":
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    return stream.isatty()


def emit(line: str) -> None:
    """One line on stdout."""
    try:
        sys.stdout.write(line + "\n")
    except BrokenPipeError:
        raise OutputClosed() from None


# One encoder for every line: json.dumps with options builds a new one per call.
# NaN and Infinity are not JSON: a record holding one is a bug, never a line on stdout.
_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
_COMPACT_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))

# What a name is never printed with: control characters (C0, DEL, C1), format characters
# (Cf: the bidirectional overrides, embeddings and isolates U+202A-U+202E and
# U+2066-U+2069, the marks U+200E, U+200F and U+061C, zero-width characters), line and
# paragraph separators, surrogates, private-use and unassigned code points. They drive a
# terminal, reorder what it shows (a right-to-left override makes "gpj.exe" read
# "exe.jpg") or show nothing at all. Every other character, Chinese included, is shown.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _invisible(char: str) -> bool:
    return unicodedata.category(char) in _INVISIBLE


def _escaped(encoded: str) -> str:
    """JSON text with every invisible character as a \\u escape (a pair of them past
    U+FFFF): still JSON, the same string once read, never raw on a terminal. JSON itself
    escapes only the C0 controls."""
    if encoded.isprintable():  # the invisible are among what is not printable
        return encoded
    return "".join(_json_escape(char) if _invisible(char) else char for char in encoded)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


class Record(Protocol):
    """What a command prints: every record says what its JSON is."""

    def to_dict(self) -> dict[str, Any]: ...


def write_json(record: Record | dict[str, Any]) -> None:
    data = record if isinstance(record, dict) else record.to_dict()
    emit(_escaped(_JSON.encode(data)))


def quoted(value: object, compact: bool = False) -> str:
    """A value as JSON for a field of a plain line (file="a b.txt"): every invisible
    character escaped (newline, ESC, DEL, C1, bidirectional controls), everything
    printable as it is."""
    return _escaped((_COMPACT_JSON if compact else _JSON).encode(value))


def write_json_lines(records: Iterable[Record]) -> None:
    for record in records:
        write_json(record)


def log(message: str) -> None:
    """A log line on stderr."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def note(message: str) -> None:
    """Something the user should know that is not an error, on stderr."""
    log_wrapped(f"kb: {message}")


def warn(message: str) -> None:
    """Something that worked but is probably not what the user meant, on stderr."""
    log_wrapped(f"kb: warning: {message}")


def report_error(code: str, message: str, as_json: bool) -> None:
    """The one line a failed command leaves on stderr."""
    if as_json:
        log(json.dumps({"error": code, "message": message}))
    else:
        log_wrapped(f"kb: error: {message}")


def log_wrapped(message: str) -> None:
    """A message for a person on stderr, any name in it made visible: on a terminal
    wrapped at word boundaries to its width (the terminal itself would cut words in
    two); elsewhere one line."""
    message = visible(message)
    if not is_fancy(sys.stderr):
        log(message)
        return
    from rich.console import Console
    from rich.text import Text

    Console(stderr=True, highlight=False).print(Text(message))


def counted(count: int, noun: str) -> str:
    """`1 document`, `2 documents`: nouns that take an s."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def stopping(signal_name: str) -> None:
    """A worker told to stop by a signal."""
    log(f"stopping at the next safe point ({signal_name}); send again to exit at once")


def short(identifier: str | None) -> str:
    return identifier[:8] if identifier else "-"


# --- shared by the renderers -------------------------------------------------------


def rich_console():
    from rich.console import Console

    return Console(highlight=False)


def cell(text: object) -> str:
    """Text from the database, safe in a rich cell: markup escaped, and control
    characters shown as escapes, so a file name can neither drive the terminal (ESC
    sequences) nor forge a table row (a newline)."""
    from rich.markup import escape

    return escape(visible(str(text)))


def stage_count(stage: str, done: int, total: int) -> str:
    """Progress of a stage: bytes for the download, items for the others."""
    if stage == Stage.DOWNLOAD:
        return f"{human_size(done)}/{human_size(total)}" if total else ""
    return f"{done}/{total}" if total else ""


def human_size(size: float) -> str:
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
    """Invisible characters (control and format characters, bidirectional controls,
    line separators) as backslash escapes; everything printable, Chinese included, as
    it is."""
    if text.isprintable():
        return text
    return "".join(
        char.encode("unicode_escape").decode("ascii") if _invisible(char) else char for char in text
    )


def styled(status: str) -> str:
    style = _STATUS_STYLE.get(status)
    return f"[{style}]{status}[/{style}]" if style else status


def cell_len_of(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def cut_name(name: str, width: int, keep_end: int | None = None) -> str:
    """A file name cut to `width` cells with `…` in the middle: its start and its end
    (where numbers and the extension are) stay readable. `keep_end` cells of the end
    are kept (default: a third of the width)."""
    if cell_len_of(name) <= width:
        return name
    if width < 2:
        return "…"[:width]
    end_cells = min(keep_end if keep_end is not None else width // 3, width - 1)
    end = _last_cells(name, end_cells)
    start = _first_cells(name, width - 1 - cell_len_of(end))
    return f"{start}…{end}"


def cut_names(names: list[str], width: int) -> dict[str, str]:
    """Each name cut to `width` cells (cut_name), and two different names still told
    apart where the width allows: names cut alike move the `…`, nearest first, until
    their cuts differ; names that share a long start and a long end (r…-password.pdf)
    then show the middle part where they differ, between two `…`."""
    cuts = {name: cut_name(name, width) for name in names}
    default = width // 3
    shifts = sorted(range(1, width - 1), key=lambda keep_end: abs(keep_end - default))
    for keep_end in shifts:
        alike = _cut_alike(cuts)
        if not alike:
            return cuts
        for name in alike:
            cuts[name] = cut_name(name, width, keep_end)
    for group in _groups_alike(cuts):
        differ = _shared_start(group)
        for name in group:
            cuts[name] = _cut_around(name, width, differ)
    return cuts


def _cut_around(name: str, width: int, at: int) -> str:
    """`width` cells of `name` that show it from a little before index `at`: its first
    character, `…`, the part from there, `…`, and its last few cells (the extension)."""
    if width < 7:
        return cut_name(name, width)
    end = _last_cells(name, min(5, width // 4))
    start = name[:1]
    middle_from = max(1, at - 2)
    room = width - cell_len_of(start) - cell_len_of(end) - 2
    middle = _first_cells(name[middle_from : len(name) - len(end)], room)
    if middle_from + len(middle) >= len(name) - len(end):
        return cut_name(name, width, cell_len_of(name) - middle_from)
    return f"{start}…{middle}…{end}"


def _shared_start(names: list[str]) -> int:
    """How many characters every one of `names` starts with alike."""
    first, last = min(names), max(names)  # the two that differ soonest
    return next(
        (i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), len(first)
    )


def _groups_alike(cuts: dict[str, str]) -> list[list[str]]:
    seen: dict[str, list[str]] = {}
    for name, cut in cuts.items():
        seen.setdefault(cut, []).append(name)
    return [group for group in seen.values() if len(group) > 1]


def _cut_alike(cuts: dict[str, str]) -> list[str]:
    return [name for group in _groups_alike(cuts) for name in group]


def _first_cells(text: str, cells: int) -> str:
    taken, used = [], 0
    for char in text:
        used += cell_len_of(char)
        if used > cells:
            break
        taken.append(char)
    return "".join(taken)


def _last_cells(text: str, cells: int) -> str:
    return _first_cells(text[::-1], cells)[::-1]


def cut_to(text: str, width: int) -> str:
    from rich.text import Text

    cut = Text(text)
    cut.truncate(width, overflow="ellipsis")
    return cut.plain


class Planned(Protocol):
    """A document a bulk verb is about to change, as the question lists it."""

    document_id: str
    filename: str
    status: str


def can_ask() -> bool:
    """Whether a question can be asked: stdin and stderr a terminal (a person there)."""
    return sys.stdin.isatty() and is_fancy(sys.stderr)


def confirm_many(planned: Sequence[Planned], question: str, declined: str) -> bool:
    """On a terminal, list the documents `planned` (the first ten, by short id) and ask
    `question` ("delete 3 documents ...?"); elsewhere (a script, a pipe) do not ask. Saying no logs
    `declined`. Ctrl-C or Ctrl-D ends the prompt's line, so the shell's starts on its own."""
    if not can_ask():
        return True
    from rich.console import Console

    width = Console(stderr=True).width
    for item in planned[:10]:  # a line each, short ids, on a terminal's width
        status = f"({item.status})"
        room = max(width - 2 - 8 - 2 - 2 - len(status), 12)
        name = cut_name(visible(item.filename), room)
        log(f"  {short(item.document_id)}  {name}  {status}")
    if len(planned) > 10:
        log(f"  ... and {len(planned) - 10} more")
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    try:
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        raise
    if not answer.endswith("\n"):  # Ctrl-D: the line was never ended
        sys.stderr.write("\n")
    if answer.strip().lower() not in ("y", "yes"):
        log(declined)
        return False
    return True
