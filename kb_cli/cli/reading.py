"""What a reviewer reads: `kb show`, `kb diff`, `kb export`."""

from pathlib import Path
from typing import Annotated

import typer

from kb_cli import console
from kb_cli.cli.shared import BaseOption, DocumentId, JsonFlag, open_granted, open_kb
from kb_cli.errors import UsageError
from kb_cli.permissions import READERS, Rule, Target

SHOW = Rule("show", READERS, Target.DOCUMENT)
DIFF = Rule("diff", READERS, Target.DOCUMENT)
EXPORT = Rule("export", READERS, Target.DOCUMENT)
EXPORT_BASE = Rule("export", READERS, Target.BASE)

RevisionOption = Annotated[
    str | None,
    typer.Option(
        "--revision",
        metavar="N|pending|published",
        help="Which revision: its number, the one waiting for review, or the one search "
        "serves (default: the newest kept, the pending one when one waits).",
        show_default=False,
    ),
]


def show(
    ctx: typer.Context,
    document_id: DocumentId,
    revision: RevisionOption = None,
    chunks: Annotated[
        bool,
        typer.Option(
            "--chunks", help="List each chunk: its index, page or pages, heading, length, text."
        ),
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Read a revision as search would serve it: its text with page markers and
    headings, or its chunks.

    Examples: kb show 3f2a9c; kb show 3f2a9c --revision published --chunks
    """
    from kb_cli.services import reading

    kb, grant = open_granted(ctx, SHOW, document_id)
    shown = reading.revision(kb, grant.full_id, revision)
    if chunks:
        console.print_chunks(shown.records(), json_out)
    else:
        console.print_revision(shown, json_out)


def diff(
    ctx: typer.Context,
    document_id: DocumentId,
    old: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="N|published",
            help="The revision compared against (default: the one search serves).",
            show_default=False,
        ),
    ] = None,
    new: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="N|pending",
            help="The revision compared (default: the one waiting for review).",
            show_default=False,
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Show what a revision changes against another: a unified diff of their text, and
    the chunks added, removed and kept. Lines added start with +, removed with -.

    Examples: kb diff 3f2a9c; kb diff 3f2a9c --from 2 --to 3 --json
    """
    from kb_cli.services import reading

    kb, grant = open_granted(ctx, DIFF, document_id)
    console.print_diff(reading.diff(kb, grant.full_id, old, new), json_out)


def export(
    ctx: typer.Context,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            metavar="PATH",
            help="The file to write (one document), or a folder (several, or --base).",
            show_default=False,
        ),
    ],
    document_ids: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[DOCUMENT_ID]...",
            help="Documents (ids or unique prefixes of 6+ characters).",
            show_default=False,
        ),
    ] = None,
    base: BaseOption = None,
    revision: RevisionOption = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace files that exist already.")
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Write the stored original of documents, byte for byte (its sha256 checked).

    Examples: kb export 3f2a9c --output handbook.pdf; kb export --base hr --output ./hr
    """
    from kb_cli.services import reading

    ids = document_ids or []
    if bool(ids) == (base is not None):
        raise UsageError("give DOCUMENT_ID... or --base NAME, not both (nor neither)")
    if base is None:
        kb, grant = open_granted(ctx, EXPORT, ids[0], more=ids[1:])
        chosen = grant.ids
    else:
        kb = open_kb(ctx, EXPORT_BASE, base)
        chosen = reading.documents_of(kb, base)
    exported = reading.export(kb, chosen, output, revision, force, into_folder=base is not None)
    console.print_exports(exported, json_out)
