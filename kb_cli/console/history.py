"""The audit trail: one line per event, or on a terminal aligned columns."""

from __future__ import annotations

from kb_cli.console.core import cell, counted, quoted, rich_console, short
from kb_cli.records import AuditRecord


def audit_line(event: AuditRecord) -> str:
    change = f"{event.from_status or '-'} -> {event.to_status or '-'}"
    detail = f" {quoted(event.detail)}" if event.detail else ""
    return f"{event.at} {event.actor} {event.action} {event.entity_id} {change}{detail}"


def print_history_table(events: list[AuditRecord]) -> None:
    """One line per event (time, actor, action, entity, change), and its detail after
    it on the same line when it fits, else on the next line, indented."""
    import textwrap

    from rich.cells import cell_len

    console = rich_console()
    console.print(f"{counted(len(events), 'event')}, oldest first", style="bold")
    # Columns as wide as their longest value (an actor cut at 16), so that an action
    # such as reuse_parse keeps the ids after it in line.
    actors = max((len(event.actor[:16]) for event in events), default=0)
    actions = max((len(event.action) for event in events), default=0)
    for event in events:
        change = f"{event.from_status or '-'} → {event.to_status or '-'}"
        head = (
            f"{event.at[:19].replace('T', ' ')}  {event.actor[:16]:<{actors}}  "
            f"{event.action:<{actions}}  {short(event.entity_id)}  {change}"
        )
        detail = event.detail or ""
        line = f"{cell(head)}"
        if detail and cell_len(head) + 2 + cell_len(detail) <= console.width:
            line += f"  [dim]{cell(detail)}[/dim]"
        elif detail:  # on lines of its own, each indented: never back at column 0
            wrapped = textwrap.wrap(detail, max(console.width - 4, 20), break_on_hyphens=False)
            line += "".join(f"\n    [dim]{cell(part)}[/dim]" for part in wrapped)
        console.print(line, overflow="fold")
