"""`kb demo`: each step as it happens, then what happened to each file."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from kb_cli.console.core import cell, cell_len_of, cut_to, emit, is_fancy, rich_console, styled

if TYPE_CHECKING:
    from kb_cli.services.demo import DemoEvent, DocumentOutcome

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
            self.console = rich_console()

    def __call__(self, event: DemoEvent) -> None:
        if not self.fancy:
            emit(f"{event.step}: {event.message}")
            sys.stdout.flush()
            return
        style = _DEMO_STYLES.get(event.step, "white")
        self.console.print(_indented(f"[{style}]{event.step:>8}[/{style}]", cell(event.message)))


def _indented(label: str, text: str):
    """`label  text`, the text wrapping under itself rather than under the label."""
    from rich.table import Table

    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(label, text)
    return grid


def print_demo_summary(outcomes: list[DocumentOutcome]) -> None:
    if not is_fancy(sys.stdout):
        for o in outcomes:  # one line per file, each a step line as those before it
            emit(
                f"summary: {o.filename}: document={o.status} task={o.task_status} "
                f"attempt={o.attempt} error={o.error_code or '-'} "
                f"claimed_by={','.join(o.won_by) or '-'} outcome={'; '.join(o.notes)}"
            )
        return
    console = rich_console()
    console.print("\n[bold]kb demo: what happened to each file[/bold]")
    name_width = min(max(cell_len_of(o.filename) for o in outcomes), 28)
    for o in outcomes:
        error = f" [red]{o.error_code}[/red]" if o.error_code else ""
        name = cell(cut_to(o.filename, name_width))
        padding = " " * (name_width - cell_len_of(cut_to(o.filename, name_width)))
        status_padding = " " * (len("review_pending") - len(o.status))
        console.print(
            f"[bold]{name}[/bold]{padding}  {styled(o.status)}{status_padding}  task "
            f"{styled(o.task_status)}{error}, attempt {o.attempt}"
        )
        story = " → ".join(o.notes)
        claimed = f" ({claims(o.won_by)})" if o.won_by else ""
        console.print(_indented("  ", f"[dim]{cell(story + claimed)}[/dim]"))


def claims(winners: list[str]) -> str:
    """Who won each claim of a task: `claimed by worker-A twice`, `claimed by worker-A,
    then worker-B`."""
    if len(set(winners)) == 1 and len(winners) > 1:
        times = "twice" if len(winners) == 2 else f"{len(winners)} times"
        return f"claimed by {winners[0]} {times}"
    return "claimed by " + ", then ".join(winners)
