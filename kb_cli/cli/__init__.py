"""The `kb` command line: parse, call one service, render. The one error boundary.

Services, SQLAlchemy and parsers are imported inside the commands, so `kb --help`
and `kb --version` start fast and never touch the database.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kb_cli import __version__, console
from kb_cli.config import WORKER_DEFAULTS
from kb_cli.errors import KbError, UsageError, WaitTimeout
from kb_cli.lifecycle import DocStatus, ErrorCode
from kb_cli.permissions import (
    ADMINS,
    BASE_PREFIX,
    DEFAULT_BASE,
    EDITORS,
    READERS,
    REVIEWERS,
    STATUS_READERS,
    WORKERS,
    Role,
    Rule,
    Target,
)
from kb_cli.ranking import SearchMode

if TYPE_CHECKING:
    from kb_cli.app import Kb
    from kb_cli.config import Settings

HELP_SETTINGS = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    name="kb",
    help=(
        "Ingest documents into a knowledge base and answer questions from what was "
        "published.\n\n"
        "A file is uploaded as a draft, submitted as a task, processed by `kb work`, "
        "reviewed and published; only then does `kb search` serve it.\n\n"
        "Examples: kb demo; kb upload handbook.pdf --submit; kb work --drain; "
        'kb publish 3f2a9c; kb search "How long do we keep invoices?"'
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings=HELP_SETTINGS,
)

JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print JSON Lines on stdout, one record per line.")
]
DocumentId = Annotated[
    str,
    typer.Argument(
        metavar="DOCUMENT_ID", help="A document id, or a unique prefix of 6+ characters."
    ),
]


@dataclass(frozen=True)
class Globals:
    home: str | None
    database_url: str | None
    object_store: str | None


def _version(value: bool) -> None:
    if value:
        console.emit(f"kb {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    home: Annotated[
        str | None,
        typer.Option(
            "--home",
            metavar="DIR",
            envvar="KB_HOME",
            help="The directory of the SQLite database and the stored files (default ./.kb).",
        ),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            metavar="URL",
            envvar="DATABASE_URL",
            help="The database: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB "
            "(default sqlite:///HOME/kb.sqlite3).",
        ),
    ] = None,
    object_store: Annotated[
        str | None,
        typer.Option(
            "--object-store",
            metavar="DIR",
            envvar="OBJECT_STORE_ROOT",
            help="The directory where uploaded files are stored (default HOME/objects).",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    if not isinstance(ctx.obj, Invocation):  # called through Typer's own runner
        ctx.obj = Invocation()
    ctx.obj.options = Globals(home, database_url, object_store)


@dataclass(frozen=True)
class Session:
    """The command being run, so the error boundary can record a refusal."""

    kb: Kb
    command: str
    target: str | None


@dataclass
class Invocation:
    """The state of one `kb` invocation: its global options, and its session once the
    guard has run. Passed through Typer's context, never kept in a module."""

    options: Globals | None = None
    session: Session | None = None


def _invocation(ctx: typer.Context) -> Invocation:
    return ctx.find_root().obj


def _open(ctx: typer.Context, rule: Rule, target: str | None = None, create: bool = True):
    """Connect, then run the guard: the command's rule (the roles it needs, the base of
    what it names) against the caller's token. The context returned acts as the caller
    the guard established. Read-only commands pass `create=False`: they never create a
    home or a database."""
    from kb_cli.app import Kb
    from kb_cli.services import access

    settings = _settings(ctx)
    kb = Kb.open(settings, create=create)
    kb = kb.acting_as(access.authorize(kb, rule, target))
    _invocation(ctx).session = Session(kb, rule.command, target)
    return kb


def _settings(ctx: typer.Context) -> Settings:
    from kb_cli.config import resolve_settings

    options = _invocation(ctx).options
    assert options is not None  # the callback runs before every command
    return resolve_settings(options.home, options.database_url, options.object_store)


def _open_to_read(ctx: typer.Context, rule: Rule, json_out: bool, target: str | None = None):
    """For commands that list or search: with no knowledge base yet there is nothing to
    show, which is said on stderr (not in --json mode); None then."""
    from kb_cli.errors import NoKnowledgeBaseYet

    try:
        return _open(ctx, rule, target, create=False)
    except NoKnowledgeBaseYet as nothing:
        if not json_out:
            console.log(f"kb: {nothing.message}")
        return None


BaseOption = Annotated[
    str | None,
    typer.Option("--base", metavar="NAME", help="Only this knowledge base.", show_default=False),
]


# --- commands ------------------------------------------------------------------------
# Each command declares its Rule beside it: the roles that may run it, and what it acts
# on (the base of the document or task it names, or a base). `_open` runs the guard.


UPLOAD = Rule("upload", EDITORS, Target.BASE)
REPLACE = Rule("upload", EDITORS, Target.DOCUMENT)


@app.command()
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
        kb = _open(ctx, REPLACE, replace)
        records = [documents.replace_file(kb, files[0], replace)]
    else:
        kb = _open(ctx, UPLOAD, base or DEFAULT_BASE)
        records = documents.upload_files(kb, files, submit=submit, base=base or DEFAULT_BASE)
    console.print_records(records, json_out)


SUBMIT = Rule("submit", EDITORS, Target.DOCUMENT)


@app.command()
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
        [documents.submit_document(_open(ctx, SUBMIT, document_id), document_id)], json_out
    )


STATUS = Rule("status", STATUS_READERS, Target.TASK_OR_DOCUMENT)


@app.command()
def status(
    ctx: typer.Context,
    entity_id: Annotated[
        str | None,
        typer.Argument(
            metavar="[ID]",
            help="A task or document id (or a unique prefix of 6+ characters). "
            "Without one, every document is listed.",
            show_default=False,
        ),
    ] = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Block until the task (or the document's latest task) ends; exit 0 when it "
            "succeeded, 8 when it failed or was cancelled.",
        ),
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            min=0,
            help="With --wait: give up after this many seconds (exit 7).",
        ),
    ] = None,
    status_filter: Annotated[
        DocStatus | None,
        typer.Option(
            "--status",
            metavar="STATUS",
            help=f"List only the documents with this status: {', '.join(DocStatus)}.",
        ),
    ] = None,
    error_code: Annotated[
        ErrorCode | None,
        typer.Option(
            "--error-code",
            metavar="CODE",
            help="List only the documents whose latest task failed with this error code: "
            f"{', '.join(ErrorCode)}.",
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Show a task, a document, or every document (newest first).

    Examples: kb status; kb status 3f2a9c --wait --timeout 60; kb status --status failed
    """
    from kb_cli.services import documents, tasks

    if entity_id is None:
        if wait:
            raise UsageError("--wait needs a task or document id: kb status ID --wait")
        kb = _open_to_read(ctx, STATUS, json_out)
        records = documents.list_document_records(kb, status_filter, error_code) if kb else []
        if json_out:
            console.print_records(records, True)
        elif kb:
            console.print_document_table(records, footer=kb.settings.embeddings.describe())
        return
    if status_filter or error_code:
        raise UsageError("--status and --error-code filter the list; give no id with them")
    if timeout is not None and not wait:
        raise UsageError("--timeout only applies with --wait")
    kb = _open(ctx, STATUS, entity_id, create=False)
    if not wait:
        console.print_records([tasks.get_record(kb, entity_id)], json_out)
        return
    _wait(kb, entity_id, timeout, json_out)


def _wait(kb, entity_id: str, timeout: float | None, json_out: bool) -> None:
    """`status --wait`: live stages on a terminal, then the record; exit 8 when the task
    did not succeed, 7 when the timeout ran out."""
    from kb_cli.errors import TaskUnsuccessful
    from kb_cli.services import tasks

    watcher = None
    if not json_out:
        watcher = console.LiveWait() if console.is_fancy(sys.stderr) else console.WaitHint()
    try:
        record = tasks.wait_for_task(kb, entity_id, timeout, watcher)
    except WaitTimeout as timed_out:
        if watcher:
            watcher.close(None)
        console.print_records([timed_out.record], json_out)
        raise
    if watcher:
        watcher.close(record)
    console.print_records([record], json_out)
    task = console.short(record.task_id)
    if record.status == "failed":
        raise TaskUnsuccessful(
            f"task {task} failed with {record.error_code}; after a fix: kb retry {task}"
        )
    if record.status == "cancelled":
        raise TaskUnsuccessful(
            f"task {task} was cancelled; kb submit {console.short(record.document_id)} "
            "processes its document again"
        )


CANCEL = Rule("cancel", EDITORS, Target.TASK_OR_DOCUMENT)


@app.command()
def cancel(
    ctx: typer.Context,
    task_id: Annotated[
        str,
        typer.Argument(
            metavar="ID",
            help="A task id, or a document id meaning its latest task (or a unique prefix "
            "of 6+ characters).",
        ),
    ],
    json_out: JsonFlag = False,
) -> None:
    """Cancel a queued, running or waiting task; its document goes back to draft.

    A running worker stops at its next check and removes what it wrote.

    Example: kb cancel 9b1e77
    """
    from kb_cli.services import tasks

    console.print_records([tasks.cancel_task(_open(ctx, CANCEL, task_id), task_id)], json_out)


RETRY = Rule("retry", EDITORS, Target.TASK_OR_DOCUMENT)


@app.command()
def retry(
    ctx: typer.Context,
    entity_id: Annotated[
        str | None,
        typer.Argument(
            metavar="[ID]",
            help="A failed task id, or a document id meaning its latest task (or a unique "
            "prefix of 6+ characters).",
            show_default=False,
        ),
    ] = None,
    all_failed: Annotated[
        bool,
        typer.Option("--all-failed", help="Requeue every failed task, instead of one ID."),
    ] = False,
    error_code: Annotated[
        ErrorCode | None,
        typer.Option(
            "--error-code",
            metavar="CODE",
            help="With --all-failed: requeue only the tasks that failed with this error code: "
            f"{', '.join(ErrorCode)}.",
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Requeue a failed task (same task row, attempt kept) after fixing the cause.

    Examples: kb retry 9b1e77; kb retry --all-failed --error-code parse_error
    """
    from kb_cli.services import tasks

    if all_failed == (entity_id is not None):
        raise UsageError("give either an ID or --all-failed: kb retry ID / kb retry --all-failed")
    if error_code and not all_failed:
        raise UsageError("--error-code only applies with --all-failed")
    kb = _open(ctx, RETRY, entity_id)
    if entity_id is None:
        records = tasks.retry_all_failed(kb, error_code)
    else:
        records = [tasks.retry_task(kb, entity_id)]
    console.print_records(records, json_out)


WORK = Rule("work", WORKERS, Target.TASK)


@app.command()
def work(
    ctx: typer.Context,
    task_id: Annotated[
        str | None,
        typer.Argument(
            metavar="[TASK_ID]",
            help="Claim this task (id or unique prefix) instead of the oldest claimable one.",
            show_default=False,
        ),
    ] = None,
    worker_id: Annotated[
        str | None,
        typer.Option(
            "--worker-id",
            metavar="NAME",
            help="The name this worker has in logs and task records (default HOST-PID).",
        ),
    ] = None,
    loop: Annotated[
        bool, typer.Option("--loop", help="Keep polling for tasks until stopped (Ctrl-C).")
    ] = False,
    drain: Annotated[
        bool, typer.Option("--drain", help="Run tasks until none is claimable, then stop.")
    ] = False,
    max_tasks: Annotated[
        int | None,
        typer.Option("--max-tasks", metavar="N", min=1, help="Run at most N tasks, then stop."),
    ] = None,
    stage_delay: Annotated[
        float,
        typer.Option(
            "--stage-delay",
            metavar="SECONDS",
            min=0,
            help="Pause this long after each progress step, to watch, cancel or race a task.",
        ),
    ] = WORKER_DEFAULTS.stage_delay,
    lease_seconds: Annotated[
        float,
        typer.Option(
            "--lease-seconds",
            metavar="SECONDS",
            min=0.5,
            help="How long a claim stays valid without a heartbeat; the worker renews it.",
        ),
    ] = WORKER_DEFAULTS.lease_seconds,
    max_attempts: Annotated[
        int,
        typer.Option(
            "--max-attempts",
            metavar="N",
            min=1,
            help="How many attempts a task whose worker was lost, or that failed transiently, "
            "gets before it ends failed.",
        ),
    ] = WORKER_DEFAULTS.max_attempts,
    backoff_seconds: Annotated[
        float,
        typer.Option(
            "--backoff-seconds",
            metavar="SECONDS",
            min=0,
            envvar="KB_BACKOFF_SECONDS",
            help="The base of the exponential delay before retrying after a transient error.",
        ),
    ] = WORKER_DEFAULTS.backoff_seconds,
    poll_seconds: Annotated[
        float,
        typer.Option(
            "--poll-seconds",
            metavar="SECONDS",
            min=0.05,
            help="With --loop: how long to sleep when no task is claimable.",
        ),
    ] = WORKER_DEFAULTS.poll_seconds,
    json_out: JsonFlag = False,
) -> None:
    """Claim tasks and run them: download, parse, embedding, indexing, finalizing.

    Exit code 0 whether the task succeeded, failed or was cancelled, and when there
    was nothing to claim or another worker won the race. The first SIGINT/SIGTERM
    releases the current task at the next safe point; a second one exits at once.

    Examples: kb work --drain; kb work --loop --worker-id A --stage-delay 0.5
    """
    from kb_cli.worker import Worker, WorkerOptions, default_worker_id

    if worker_id is not None and not (0 < len(worker_id) <= 100 and worker_id.isprintable()):
        raise UsageError("a --worker-id is 1 to 100 printable characters")
    if sum([loop, drain, max_tasks is not None]) > 1:
        raise UsageError("choose one of --loop, --drain, --max-tasks")
    if task_id is not None and (loop or drain or max_tasks is not None):
        raise UsageError("a TASK_ID runs that one task; drop --loop/--drain/--max-tasks")
    options = WorkerOptions(
        worker_id=worker_id or default_worker_id(),
        lease_seconds=lease_seconds,
        max_attempts=max_attempts,
        stage_delay=stage_delay,
        backoff_seconds=backoff_seconds,
        poll_seconds=poll_seconds,
    )
    fancy = not json_out and console.is_fancy(sys.stderr)
    listener: console.LiveWorkerDisplay | console.PlainWorkerLog
    if fancy:
        listener = console.LiveWorkerDisplay(options.worker_id, loop=loop)
    else:
        listener = console.PlainWorkerLog(options.worker_id)
    stop = threading.Event()
    _stop_on_signals(stop)
    worker = Worker(_open(ctx, WORK, task_id), options, listener, stop)
    limit = None if (loop or drain) else (max_tasks or 1)
    try:
        for result in worker.run(task_id, max_tasks=limit, loop=loop):
            if json_out:
                console.write_json(result)
            elif result.task is not None and not fancy:  # the live display showed it
                console.emit(console.task_line(result.task))
    finally:
        listener.close()


def _stop_on_signals(stop: threading.Event) -> None:
    """First SIGINT/SIGTERM: stop at the next safe point. Second: exit at once."""

    def handle(signum, _frame) -> None:
        if stop.is_set():
            os._exit(128 + signum)
        stop.set()
        console.log(
            f"stopping at the next safe point ({signal.Signals(signum).name}); "
            "send again to exit at once"
        )

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)


PUBLISH = Rule("publish", REVIEWERS, Target.DOCUMENT)


@app.command()
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

    record = documents.publish_document(_open(ctx, PUBLISH, document_id), document_id, if_version)
    console.print_records([record], json_out)


SEARCH = Rule("search", READERS, Target.BASE)


@app.command()
def search(
    ctx: typer.Context,
    query: Annotated[
        str,
        typer.Argument(
            metavar="QUERY", help='A question or words; a "quoted phrase" must match exactly.'
        ),
    ],
    limit: Annotated[
        int, typer.Option("--limit", metavar="K", min=1, help="Print at most K hits.")
    ] = 10,
    mode: Annotated[
        SearchMode | None,
        typer.Option(
            "--mode",
            metavar="MODE",
            help="The ranking: lexical (words, BM25), vector (meaning), or hybrid (both "
            "fused; the default when the chunks have vectors).",
            show_default=False,
        ),
    ] = None,
    per_document: Annotated[
        bool,
        typer.Option("--per-document", help="Print one hit per document: its best chunk."),
    ] = False,
    context: Annotated[
        int,
        typer.Option(
            "--context",
            metavar="N",
            help="Merge each hit with up to N (0-10) neighbouring chunks of its section on "
            "each side (a passage for a language model); the record names its chunk range.",
        ),
    ] = 0,
    base: BaseOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Search published documents, best hit first. Questions are ranked, not filtered.

    Examples: kb search "How do I reset my VPN password?"; kb search 出差报销 --per-document;
    kb search "invoice retention" --context 1 --json
    """
    from kb_cli.services import search as search_service

    kb = _open_to_read(ctx, SEARCH, json_out, base)
    if kb is None:
        return
    result = search_service.search(
        kb, query, limit, mode and mode.value, per_document, base, context
    )
    console.print_search(result, json_out)


EVAL = Rule("eval", READERS, Target.BASE)


@app.command("eval")
def eval_command(
    ctx: typer.Context,
    questions_file: Annotated[
        Path,
        typer.Argument(
            metavar="QUESTIONS_FILE",
            help='A JSON Lines file, one {"question": ..., "expected": [FILE or ID, ...], '
            '"forbidden": [...]} per line.',
        ),
    ],
    k: Annotated[
        int,
        typer.Option("--k", metavar="K", min=1, help="How many hits count as found (hit@K)."),
    ] = 3,
    min_hit_rate: Annotated[
        float | None,
        typer.Option(
            "--min-hit-rate",
            metavar="X",
            min=0,
            max=1,
            help="Exit 4 when hit@K is below X (a rate from 0 to 1).",
        ),
    ] = None,
    base: BaseOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Score search on a fixed question set: hit@1, hit@k, recall@k, MRR, leaks.

    Each question is searched as the caller, one hit per document. Exits 4 when hit@k
    is below --min-hit-rate or any forbidden document was returned.

    Example: kb eval sample_docs/knowledge/questions.jsonl --k 3 --min-hit-rate 0.9
    """
    from kb_cli.errors import QualityBelowThreshold
    from kb_cli.services import evaluation

    questions = evaluation.load_questions(questions_file)
    results, summary = evaluation.evaluate(_open(ctx, EVAL, base, create=False), questions, k, base)
    if json_out:
        console.print_records([*results, summary], True)
    else:
        console.print_eval(results, summary)
    if summary.forbidden_leaks:
        raise QualityBelowThreshold(f"{summary.forbidden_leaks} forbidden document(s) returned")
    if min_hit_rate is not None and summary.hit_at_k < min_hit_rate:
        raise QualityBelowThreshold(
            f"hit@{k} {summary.hit_at_k:.2f} is below --min-hit-rate {min_hit_rate:g}"
        )


REINDEX = Rule("reindex", ADMINS)


@app.command()
def reindex(
    ctx: typer.Context,
    embeddings: Annotated[
        bool,
        typer.Option(
            "--embeddings",
            help="Embed every chunk that has no vector of the configured model.",
        ),
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Re-embed stored chunks after the embedding model changed (admin).

    Search compares only vectors of the configured model, so until this has run, chunks
    embedded by another model rank by their words alone. Works in batches; stopped with
    Ctrl-C, running it again resumes where it stopped.

    Example: KB_EMBEDDINGS=openai kb reindex --embeddings
    """
    from kb_cli.services.reindex import reindex_embeddings

    if not embeddings:
        raise UsageError("say what to rebuild: kb reindex --embeddings")
    kb = _open(ctx, REINDEX, create=False)
    progress = console.Progress("embedding") if not json_out else None
    try:
        report = reindex_embeddings(kb, progress or (lambda done, total: None))
    finally:
        if progress:
            progress.close()
    console.print_reindex(report, json_out)


DOCTOR = Rule("doctor", ADMINS)


@app.command()
def doctor(
    ctx: typer.Context,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Fix what is safe to fix (orphan objects, stray chunks, dead workers' tasks) "
            "and report each fix.",
        ),
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Check the invariants; exit 4 when a problem remains.

    Checks document/task status pairs, chunks only where allowed, no running task with
    an expired lease, every referenced object present, no orphan objects, every document
    in an existing knowledge base, no base access for a missing team or user.

    Example: kb doctor --repair
    """
    from kb_cli.errors import ProblemsFound
    from kb_cli.services import doctor as doctor_service

    report = doctor_service.check(_open(ctx, DOCTOR, create=False), repair=repair)
    console.print_doctor(report, json_out)
    if not report.ok:
        raise ProblemsFound(f"doctor found {len(report.problems)} problem(s)")


HISTORY = Rule("history", READERS, Target.TASK_OR_DOCUMENT)
BASE_HISTORY = Rule("history", READERS, Target.BASE)


@app.command()
def history(
    ctx: typer.Context,
    entity_id: Annotated[
        str,
        typer.Argument(
            metavar="ID",
            help="A document or task id (or a unique prefix of 6+ characters), or base:NAME "
            "for a knowledge base.",
        ),
    ],
    json_out: JsonFlag = False,
) -> None:
    """The audit trail of a document (with its tasks) or of a task, oldest first.

    Every state change, every publish and every refused command is an event.

    Example: kb history 3f2a9c
    """
    from kb_cli.services.history import history as history_service

    base = entity_id.removeprefix(BASE_PREFIX) if entity_id.startswith(BASE_PREFIX) else None
    if base is None:
        kb = _open(ctx, HISTORY, entity_id, create=False)
    else:
        kb = _open(ctx, BASE_HISTORY, base, create=False)
    console.print_records(history_service(kb, entity_id), json_out)


user_app = typer.Typer(
    help="""Manage users and their roles (admin only, once an admin exists).

    Example: kb user add alice --role admin && kb user add bob --role editor
    """,
    no_args_is_help=True,
    context_settings=HELP_SETTINGS,
)
app.add_typer(user_app, name="user")


USER = Rule("user", ADMINS)
TeamOption = Annotated[
    list[str] | None,
    typer.Option("--team", metavar="TEAM", help="A team (repeat for several).", show_default=False),
]


@user_app.command("add")
def user_add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The user's name.")],
    role: Annotated[
        Role,
        typer.Option(
            "--role",
            metavar="ROLE",
            help=f"What the user may do: {', '.join(Role)}. The first user must be an admin.",
        ),
    ],
    teams: TeamOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Create a user and print its token, once; only its hash is stored.

    The first user must be an admin; from then on every command needs KB_TOKEN. Teams
    decide which knowledge bases the user reads; naming a team creates it.

    Example: kb user add alice --role admin; kb user add bob --role editor --team finance
    """
    from kb_cli.services import access

    new_user = access.add_user(_open(ctx, USER, name), name, role.value, teams)
    console.print_new_user(new_user, json_out)


base_app = typer.Typer(
    help="""Knowledge bases: who reads which documents. Every document is in one base.

    Example: kb base create engineering --team engineering && kb base grant engineering alice
    """,
    no_args_is_help=True,
    context_settings=HELP_SETTINGS,
)
app.add_typer(base_app, name="base")
BASE_CREATE = Rule("base", ADMINS)
BASE_LIST = Rule("base", STATUS_READERS, Target.BASE)
BASE_MOVE = Rule("base", ADMINS, Target.DOCUMENT)
BaseName = Annotated[str, typer.Argument(metavar="NAME", help="Knowledge base name.")]


@base_app.command("create")
def base_create(
    ctx: typer.Context, name: BaseName, teams: TeamOption = None, json_out: JsonFlag = False
) -> None:
    """Create a knowledge base (admin): readable by everyone, or only by the teams named.

    Example: kb base create engineering --team engineering
    """
    from kb_cli.services import bases

    console.print_bases([bases.create_base(_open(ctx, BASE_CREATE), name, teams or [])], json_out)


@base_app.command("list")
def base_list(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """List the knowledge bases you may read, with their teams, grants and documents.

    Example: kb base list --json
    """
    from kb_cli.services import bases

    console.print_bases(bases.list_bases(_open(ctx, BASE_LIST)), json_out)


@base_app.command("show")
def base_show(ctx: typer.Context, name: BaseName, json_out: JsonFlag = False) -> None:
    """Describe one knowledge base: who reads it and how many documents it holds.

    Example: kb base show engineering
    """
    from kb_cli.services import bases

    console.print_bases(bases.list_bases(_open(ctx, BASE_LIST, name), name), json_out)


@base_app.command("grant")
def base_grant(
    ctx: typer.Context,
    name: BaseName,
    user: Annotated[str, typer.Argument(metavar="USER", help="User name.")],
    json_out: JsonFlag = False,
) -> None:
    """Let one user read a base, and write there as far as their role allows (admin).

    Example: kb base grant engineering carol
    """
    from kb_cli.services import bases

    console.print_bases([bases.grant_base(_open(ctx, BASE_CREATE), name, user)], json_out)


@base_app.command("move")
def base_move(
    ctx: typer.Context,
    document_id: Annotated[
        str, typer.Argument(metavar="DOCUMENT_ID", help="Document id or unique prefix.")
    ],
    name: BaseName,
    json_out: JsonFlag = False,
) -> None:
    """Move a document, with its revisions and tasks, to another base (admin; audited).

    Example: kb base move 3f2a9c company
    """
    from kb_cli.services import bases

    record = bases.move_document(_open(ctx, BASE_MOVE, document_id), document_id, name)
    console.print_records([record], json_out)


DEMO = Rule("demo", ADMINS)


@app.command()
def demo(
    ctx: typer.Context,
    keep: Annotated[
        bool,
        typer.Option("--keep", help="Keep the temporary home, to explore it afterwards."),
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Run the whole lifecycle on the bundled samples in a fresh temporary home.

    Two worker processes race for every task, a damaged PDF fails and is retried after a
    fix, one task is cancelled mid-run, the rest is published and searched. Your own
    documents are not touched; once an admin exists, the demo needs an admin token.

    Example: kb demo
    """
    from kb_cli.services.demo import run_demo

    _authorize_demo(ctx)
    show = console.write_json if json_out else console.DemoLog()
    outcomes = run_demo(show, keep=keep)
    if json_out:
        console.print_records(outcomes, True)
    else:
        console.print_demo_summary(outcomes)


def _authorize_demo(ctx: typer.Context) -> None:
    """Like every command, the demo needs the caller's permission (admin) once an admin
    exists; a SQLite database that does not exist yet has none, and is not created."""
    url = _settings(ctx).database_url
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return
    _open(ctx, DEMO)


db_app = typer.Typer(
    help="""Database schema maintenance (admin).

    Example: DATABASE_URL=postgresql+psycopg://kb@db/kb kb db upgrade
    """,
    no_args_is_help=True,
    context_settings=HELP_SETTINGS,
)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """Upgrade the database schema to this version of kb (admin).

    SQLite upgrades itself on first use; run this once for a shared PostgreSQL
    database after installing a new kb on the hosts.

    Example: DATABASE_URL=postgresql+psycopg://kb@db/kb kb db upgrade
    """
    from kb_cli.app import Kb
    from kb_cli.db import Database
    from kb_cli.permissions import Actor
    from kb_cli.services import access
    from kb_cli.store import FileObjectStore

    settings = _settings(ctx)
    if settings.database_url.startswith("sqlite"):
        settings.home.mkdir(parents=True, exist_ok=True)
    database = Database(settings.database_url, settings.busy_timeout_seconds)
    with database.read() as conn:
        existing = database.schema_version(conn)
    if existing is not None:  # a fresh database has no users yet: open mode
        store = FileObjectStore(settings.object_store)  # named, never opened
        access.authorize(Kb(settings, database, store, Actor("kb")), Rule("db", ADMINS))
    before, after = database.upgrade()
    console.print_upgrade(before, after, json_out)


# --- the error boundary --------------------------------------------------------------


def _report(code: str, message: str, exit_code: int, as_json: bool) -> int:
    if as_json:
        sys.stderr.write(json.dumps({"error": code, "message": message}) + "\n")
    else:
        sys.stderr.write(f"kb: error: {message}\n")
    sys.stderr.flush()
    return exit_code


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    with _private_files():
        code = _run(args)
    _flush_stdout()
    sys.exit(code)


def _run(args: list[str]) -> int:
    """One invocation inside the error boundary: its exit code."""
    as_json = "--json" in args
    debug = os.environ.get("KB_DEBUG") == "1"
    invocation = Invocation()
    try:
        result = app(args=args, prog_name="kb", standalone_mode=False, obj=invocation)
        return result if isinstance(result, int) else 0
    except typer.Exit as done:
        return done.exit_code
    except console.OutputClosed:
        return 0  # the reader stopped early: not kb's failure
    except (typer.Abort, KeyboardInterrupt):
        return _report("interrupted", "interrupted", 130, as_json)
    except typer.TyperException as error:  # the argument parser's usage errors
        help_context = getattr(error, "ctx", None)
        if type(error).__name__ == "NoArgsIsHelpError" and help_context is not None:
            console.emit(help_context.get_help())
            return 2
        return _report("usage", " ".join(error.format_message().split()), 2, as_json)
    except KbError as error:
        if debug:
            raise
        if error.is_refusal and invocation.session is not None:
            from kb_cli.services import access

            session = invocation.session
            actor = session.kb.actor.name
            access.record_refusal(session.kb, actor, session.command, session.target, error.message)
        return _report(error.code, error.message, error.exit_code, as_json)
    except Exception as error:
        if debug:
            raise
        message = f"unexpected {type(error).__name__}; run with KB_DEBUG=1 for details"
        return _report("internal_error", message, 1, as_json)


@contextlib.contextmanager
def _private_files() -> Iterator[None]:
    """Whatever kb creates (database, its journal, objects, directories) is readable by
    its owner only: 0600 files, 0700 directories, or tighter if the umask says so.
    Unpublished documents and token hashes are no other local account's business. The
    umask is the invocation's and is put back afterwards: the process is the caller's."""
    previous = os.umask(0o077)
    os.umask(previous | 0o077)
    try:
        yield
    finally:
        os.umask(previous)


def _flush_stdout() -> None:
    """Flush now, so a reader that went away cannot turn a success into a failure."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
