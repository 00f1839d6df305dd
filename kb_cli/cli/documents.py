"""Documents and their review: `kb upload`, `kb submit`, `kb publish`, `kb reject`,
`kb unpublish`, `kb delete`."""

from pathlib import Path
from typing import Annotated, Any

import typer

from kb_cli import console
from kb_cli.cli.shared import (
    BaseOption,
    DocumentId,
    JsonFlag,
    YesFlag,
    open_granted,
    open_kb,
    print_with_filenames,
    refuse_worker_settings,
    settings_of,
)
from kb_cli.errors import UsageError
from kb_cli.lifecycle import ACTIVE_DOCUMENT_STATUSES
from kb_cli.permissions import (
    DEFAULT_BASE,
    DELETE,
    EDITORS,
    PUBLISH,
    REJECT,
    SUBMIT,
    UNPUBLISH,
    UPLOAD,
    Rule,
    Target,
)

REPLACE = Rule("upload", EDITORS, Target.DOCUMENT)


def upload(
    ctx: typer.Context,
    files: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE...",
            help="Files: PDF, DOCX, PPTX, XLSX, CSV/TSV, HTML, EML, EPUB, Markdown, text.",
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
            help="Replace the file of this draft, failed, published or unpublished document "
            "(one FILE).",
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
    skip_existing: Annotated[
        bool,
        typer.Option(
            "--skip-existing",
            help="Leave out a file whose content a document of the base already has "
            "(uploading a folder again stores only what is new).",
        ),
    ] = False,
    meta: Annotated[
        list[str] | None,
        typer.Option(
            "--meta",
            metavar="KEY=VALUE",
            help="Metadata to store on each document (repeatable; see `kb search --where`).",
            show_default=False,
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Upload files as draft documents.

    Every file is checked before any is stored: one unsupported file stores nothing.

    Examples: kb upload report.pdf notes.md --submit --base engineering;
    kb upload q3.pdf --meta team=finance --meta year=2026
    """
    from kb_cli import metadata
    from kb_cli.services import documents

    pairs = metadata.parse_pairs(meta or [])
    if replace is not None:
        if len(files) != 1 or submit or base is not None:
            raise UsageError(
                "--replace takes exactly one file and no --submit or --base; "
                "submit or retry afterwards"
            )
        kb, grant = open_granted(ctx, REPLACE, replace)
        replaced = documents.replace(kb, files[0], grant.full_id, pairs)
        if replaced.renamed:
            console.warn(f"the new file differs in name or type: {replaced.renamed}")
        records: list[Any] = [replaced.record]
    else:
        if submit:
            refuse_worker_settings(ctx)
        # Checked before the knowledge base is opened: a refused upload creates no home.
        checked = documents.check_files(files, settings_of(ctx).max_upload_bytes)
        kb = open_kb(ctx, UPLOAD, base or DEFAULT_BASE, create=True)
        # A bar for a bulk upload, on a terminal only: piped output stays as it was.
        progress = console.Progress("storing files", plain=False) if len(files) >= 20 else None
        try:
            uploaded = documents.upload(
                kb,
                files,
                submit=submit,
                base=base or DEFAULT_BASE,
                meta=pairs,
                skip_existing=skip_existing,
                on_progress=progress,
                checked=checked,
            )
        finally:
            if progress is not None:
                progress.close()
        console.warn_duplicates(uploaded.duplicates)
        console.note_skipped(uploaded.skipped)
        records = uploaded.records
    print_with_filenames(records, json_out)


def submit(
    ctx: typer.Context,
    document_id: DocumentId,
    json_out: JsonFlag = False,
) -> None:
    """Queue a draft document for ingestion and print its task.

    Example: kb submit 3f2a9c
    """
    from kb_cli.services import documents

    refuse_worker_settings(ctx)
    kb, grant = open_granted(ctx, SUBMIT, document_id)
    record = documents.submit_document(kb, grant.full_id)
    print_with_filenames([record], json_out)


def publish(
    ctx: typer.Context,
    document_id: Annotated[
        str | None,
        typer.Argument(
            metavar="[DOCUMENT_ID]",
            help="A document id, or a unique prefix of 6+ characters.",
            show_default=False,
        ),
    ] = None,
    all_reviewed: Annotated[
        bool,
        typer.Option(
            "--all-reviewed",
            help="Publish every document waiting for review that you may publish, "
            "instead of one DOCUMENT_ID.",
        ),
    ] = False,
    if_version: Annotated[
        int | None,
        typer.Option(
            "--if-version",
            metavar="N",
            help="Publish only if the document is still at this version (else exit 4).",
        ),
    ] = None,
    base: BaseOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Publish a reviewed document: search serves it from now on.

    With --base, only documents of that base: --all-reviewed publishes those, and a
    DOCUMENT_ID of another base is not found.

    Examples: kb publish 3f2a9c --if-version 4; kb publish --all-reviewed --base hr
    """
    from kb_cli.services import documents

    if all_reviewed == (document_id is not None):
        raise UsageError(
            "give either a DOCUMENT_ID or --all-reviewed: "
            "kb publish DOCUMENT_ID / kb publish --all-reviewed"
        )
    if all_reviewed and if_version is not None:
        raise UsageError("--if-version applies to one DOCUMENT_ID, not --all-reviewed")
    kb, grant = open_granted(ctx, PUBLISH, document_id, bases=[base])
    if document_id is not None:
        record = documents.publish_document(kb, grant.full_id, if_version)
        console.print_records([record], json_out)
        return
    published = []
    try:
        for record in documents.publish_all_reviewed(kb, grant.bases):
            published.append(record)
    finally:  # what was published before an error (busy, Ctrl-C) is still reported
        console.print_records(published, json_out)
    if not published:
        console.note("nothing to publish: no document you may publish is review_pending")


def reject(
    ctx: typer.Context,
    document_id: DocumentId,
    reason: Annotated[
        str,
        typer.Option(
            "--reason", metavar="TEXT", help="Why it is turned down (kept, shown in history)."
        ),
    ],
    base: BaseOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Turn a document waiting for review down: it goes back to draft, or keeps serving
    its published revision when the rejected one was to replace it.

    Example: kb reject 3f2a9c --reason "wrong year in the tables"
    """
    from kb_cli.services import review

    kb, grant = open_granted(ctx, REJECT, document_id, bases=[base])
    record = review.reject_document(kb, grant.full_id, reason)
    console.print_records([record], json_out)


def unpublish(
    ctx: typer.Context,
    document_id: DocumentId,
    base: BaseOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Stop serving a document in search at once; `kb publish` serves it again.

    Example: kb unpublish 3f2a9c --base hr
    """
    from kb_cli.services import review

    kb, grant = open_granted(ctx, UNPUBLISH, document_id, bases=[base])
    record = review.unpublish_document(kb, grant.full_id)
    console.print_records([record], json_out)


_LISTED_STATUSES = [str(status) for status in ACTIVE_DOCUMENT_STATUSES]
DELETE_IN_BASE = Rule("delete", EDITORS, Target.BASE)


def delete(
    ctx: typer.Context,
    document_ids: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[DOCUMENT_ID]...",
            help="Documents to delete (ids or unique prefixes).",
            show_default=False,
        ),
    ] = None,
    status: Annotated[
        str | None,
        typer.Option(
            "--status", metavar="S", help="Instead of ids: every document in this status."
        ),
    ] = None,
    base: BaseOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be deleted; delete nothing.")
    ] = False,
    yes: YesFlag = False,
    json_out: JsonFlag = False,
) -> None:
    """Delete documents with their revisions, chunks, tasks and stored files.

    A running task is cancelled first. Afterwards the documents are not found, and
    `kb history ID` still shows their trail. On a terminal, kb asks first (--yes skips).
    With ids, --base keeps them to that base: an id of another is not found.

    Examples: kb delete 3f2a9c; kb delete --status failed --base finance --dry-run
    """
    from kb_cli.services import removal

    refs = document_ids or []
    if status is not None and status not in _LISTED_STATUSES:
        raise UsageError(f"--status is one of: {', '.join(_LISTED_STATUSES)}")
    rule, target = (DELETE, refs[0]) if refs else (DELETE_IN_BASE, base)
    # With --status as well, `plan` refuses the mix before the other ids are looked up.
    more = refs[1:] if status is None else []
    kb, grant = open_granted(ctx, rule, target, more=more, bases=[base] if refs else [])
    planned = removal.plan(kb, grant.ids, status, None if refs else base)
    if not dry_run and planned and not yes and not console.confirm_deletion(planned):
        raise typer.Exit(1)
    done = planned if dry_run else removal.delete(kb, planned)
    console.print_deletions(done, json_out)
