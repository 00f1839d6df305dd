"""Keeping a base in step with its source: `kb sync`, `kb reparse`."""

from __future__ import annotations

from typing import Annotated

import typer

from kb_cli import console
from kb_cli.cli.shared import JsonFlag, open_kb
from kb_cli.permissions import DEFAULT_BASE, EDITORS, Rule, Target

SYNC = Rule("sync", EDITORS, Target.BASE)


def sync(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(metavar="SOURCE", help="A folder, or s3://BUCKET/PREFIX (AWS_* variables)."),
    ],
    base: Annotated[
        str | None,
        typer.Option(
            "--base",
            metavar="NAME",
            help=f"Knowledge base to keep in step (default: {DEFAULT_BASE}).",
            show_default=False,
        ),
    ] = None,
    missing: Annotated[
        str,
        typer.Option(
            "--missing",
            metavar="keep|unpublish|delete",
            help="What happens to a document whose file is gone from SOURCE.",
        ),
    ] = "keep",
    include: Annotated[
        list[str] | None,
        typer.Option(
            "--include",
            metavar="GLOB",
            help="Only paths (or file names) matching a pattern (repeatable).",
            show_default=False,
        ),
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            "--exclude",
            metavar="GLOB",
            help="Leave out paths (or file names) matching a pattern (repeatable).",
            show_default=False,
        ),
    ] = None,
    checksum: Annotated[
        bool,
        typer.Option(
            "--checksum", help="Compare every file's content, not only its size and time."
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would happen; change nothing.")
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Make a base match a folder or a bucket prefix: new files are uploaded and
    submitted, changed ones become new revisions, unchanged ones cost nothing.

    One record per path (added, changed, unchanged, missing, skipped, failed), then a
    summary. Exit 6 when some path failed (the others are synced).

    Examples: kb sync ./handbook --base hr; kb sync s3://docs/policies --missing delete --dry-run
    """
    from kb_cli.errors import SyncIncomplete
    from kb_cli.services import sync as service

    name = base or DEFAULT_BASE
    options = service.SyncOptions(
        name, missing, dry_run, tuple(include or ()), tuple(exclude or ()), checksum
    )
    kb = open_kb(ctx, SYNC, name)
    service.check_options(kb, options)
    summary = service.SyncSummary(source, name, dry_run)
    progress = console.SyncProgress()
    try:
        for record in service.sync(kb, source, options, summary, progress):
            console.print_sync_record(record, json_out)
    finally:
        progress.close()
    console.print_sync_summary(summary, json_out)
    failed = summary.counts[service.FAILED]
    if failed:
        raise SyncIncomplete(
            f"{failed} of the paths failed (see their records); the rest is synced"
        )
