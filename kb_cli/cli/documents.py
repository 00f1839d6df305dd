"""Documents and their review: `kb upload`, `kb submit`, `kb publish`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kb_cli import console
from kb_cli.cli.shared import DocumentId, JsonFlag, open_kb
from kb_cli.errors import UsageError
from kb_cli.permissions import DEFAULT_BASE, EDITORS, REVIEWERS, Rule, Target

UPLOAD = Rule("upload", EDITORS, Target.BASE)
REPLACE = Rule("upload", EDITORS, Target.DOCUMENT)


def upload(
    ctx: typer.Context,
    files: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE...",
            help="Files to upload: .pdf, .docx, .txt or .md.",
            show_default=False,
        ),
    ],
    submit: Annotated[
        bool,
        typer.Option("--submit", help="Also submit each document, and print its task instead."),
    ] = False,
    replace: Annotated[
        str | None,
        typer.Option(
            "--replace",
            metavar="DOCUMENT_ID",
            help="Replace the file of this draft, failed or published document (one FILE).",
        ),
    ] = None,
    base: Annotated[
        str | None,
        typer.Option(
            "--base",
            metavar="NAME",
            help=f"Knowledge base to upload into (default: {DEFAULT_BASE}).",
            show_default=False,
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Upload files as draft documents.

    Every file is checked before any is stored: one unsupported file stores nothing.

    Example: kb upload report.pdf notes.md --submit --base engineering
    """
    from kb_cli.services import documents

    if replace is not None:
        if len(files) != 1 or submit or base is not None:
            raise UsageError(
                "--replace takes exactly one file and no --submit or --base; "
                "submit or retry afterwards"
            )
        kb = open_kb(ctx, REPLACE, replace)
        records = [documents.replace_file(kb, files[0], replace)]
    else:
        kb = open_kb(ctx, UPLOAD, base or DEFAULT_BASE)
        records = documents.upload_files(kb, files, submit=submit, base=base or DEFAULT_BASE)
    console.print_records(records, json_out)


SUBMIT = Rule("submit", EDITORS, Target.DOCUMENT)


def submit(
    ctx: typer.Context,
    document_id: DocumentId,
    json_out: JsonFlag = False,
) -> None:
    """Queue a draft document for ingestion and print its task.

    Example: kb submit 3f2a9c
    """
    from kb_cli.services import documents

    console.print_records(
        [documents.submit_document(open_kb(ctx, SUBMIT, document_id), document_id)], json_out
    )


PUBLISH = Rule("publish", REVIEWERS, Target.DOCUMENT)


def publish(
    ctx: typer.Context,
    document_id: DocumentId,
    if_version: Annotated[
        int | None,
        typer.Option(
            "--if-version",
            metavar="N",
            help="Publish only if the document is still at this version (else exit 4).",
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Publish a reviewed document: search serves it from now on.

    Example: kb publish 3f2a9c --if-version 4
    """
    from kb_cli.services import documents

    record = documents.publish_document(open_kb(ctx, PUBLISH, document_id), document_id, if_version)
    console.print_records([record], json_out)
