"""Keeping a base in step with its source: `kb sync`, `kb reparse`."""

from typing import Annotated

import typer

from kb_cli import console
from kb_cli.cli.shared import JsonFlag, YesFlag, open_granted, open_kb, refuse_worker_settings
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
    yes: YesFlag = False,
    json_out: JsonFlag = False,
) -> None:
    """Make a base match a folder or a bucket prefix: new files are uploaded and
    submitted, changed ones become new revisions, unchanged ones cost nothing.

    One record per path (added, changed, unchanged, missing, skipped, failed), then a
    summary. Exit 6 when some path failed (the others are synced). Before --missing
    unpublish or delete touches a document, kb asks once on a terminal (--yes skips);
    answered no, those documents are kept and the exit code is 1.

    Examples: kb sync ./handbook --base hr; kb sync s3://docs/policies --missing delete --dry-run
    """
    from kb_cli.errors import SyncIncomplete
    from kb_cli.services import sync as service

    name = base or DEFAULT_BASE
    options = service.SyncOptions(
        name, missing, dry_run, tuple(include or ()), tuple(exclude or ()), checksum
    )
    if not dry_run:
        refuse_worker_settings(ctx)
    kb = open_kb(ctx, SYNC, name, create=not dry_run)  # a dry run writes nothing, no home
    run = service.sync(kb, source, options)
    for message in run.notes:
        console.note(message)
    summary = service.SyncSummary(source, name, dry_run)
    display = console.SyncDisplay(json_out, dry_run)
    if not yes and console.can_ask():  # piped, in cron or CI: never asked
        run.confirm = lambda how, gone: display.ask(lambda: console.confirm_missing(how, gone))
    try:
        for record in run.records(summary, display):
            display.record(record)
    finally:
        display.close()
    display.summary(summary)
    failed = summary.counts[service.FAILED]
    if failed:
        raise SyncIncomplete(
            f"{failed} of the paths failed (see their records); the rest is synced"
        )
    if run.declined:
        raise typer.Exit(1)


REPARSE = Rule("reparse", EDITORS, Target.DOCUMENT)
REPARSE_IN_BASE = Rule("reparse", EDITORS, Target.BASE)


def reparse(
    ctx: typer.Context,
    document_ids: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[DOCUMENT_ID]...",
            help="Documents to parse again (ids or unique prefixes).",
            show_default=False,
        ),
    ] = None,
    base: Annotated[
        str | None,
        typer.Option("--base", metavar="NAME", help="Instead of ids: every document of this base."),
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="Instead of ids: every document you may change.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be queued; queue nothing.")
    ] = False,
    yes: YesFlag = False,
    json_out: JsonFlag = False,
) -> None:
    """Parse stored files again with today's parsers and settings, as new revisions.

    No upload: each document's stored file is submitted again as its next revision and
    goes through review; search keeps serving the published revision meanwhile. A
    document being processed or waiting for review is left as it is (with a reason).
    --base and --all ask first on a terminal (--yes skips).

    Examples: kb reparse 3f2a9c; kb reparse --base handbook --dry-run; kb reparse --all --yes
    """
    from kb_cli.services import reparse as service

    if not dry_run:
        refuse_worker_settings(ctx)
    refs = document_ids or []
    rule, target = (REPARSE, refs[0]) if refs else (REPARSE_IN_BASE, base)
    kb, grant = open_granted(ctx, rule, target, more=refs[1:])
    planned = service.plan(kb, grant.ids if refs else [], base, every)
    bulk = not refs
    if not dry_run and bulk and planned and not yes and not console.confirm_reparse(planned):
        raise typer.Exit(1)
    done = planned if dry_run else service.reparse(kb, planned)
    console.print_reparse(done, json_out, dry_run)
