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
    from rich.cells import cell_len

    console = rich_console()
    console.print(f"{counted(len(events), 'event')}, oldest first", style="bold")
    for event in events:
        change = f"{event.from_status or '-'} → {event.to_status or '-'}"
        head = (
            f"{event.at[:19].replace('T', ' ')}  {event.actor[:16]:<8}  {event.action:<9} "
            f"{short(event.entity_id)}  {change}"
        )
        detail = event.detail or ""
        line = f"{cell(head)}"
        if detail and cell_len(head) + 2 + cell_len(detail) <= console.width:
            line += f"  [dim]{cell(detail)}[/dim]"
        elif detail:
            line += f"\n    [dim]{cell(detail)}[/dim]"
        console.print(line, overflow="fold")
