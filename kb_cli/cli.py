"""The `kb` command line: parse, call one service, render. The one error boundary.

Services, SQLAlchemy and parsers are imported inside the commands, so `kb --help`
and `kb --version` start fast and never touch the database.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from kb_cli import __version__, console
from kb_cli.errors import KbError, UsageError

app = typer.Typer(
    name="kb",
    help="Ingest documents into a knowledge base: upload, submit, work, review, publish.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON Lines on stdout.")]


@dataclass(frozen=True)
class Globals:
    home: str | None
    database_url: str | None
    object_store: str | None


def _version(value: bool) -> None:
    if value:
        print(f"kb {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    home: Annotated[
        str | None,
        typer.Option("--home", envvar="KB_HOME", help="State directory (default ./.kb)."),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            envvar="DATABASE_URL",
            help="Database URL (default sqlite:///HOME/kb.sqlite3).",
        ),
    ] = None,
    object_store: Annotated[
        str | None,
        typer.Option(
            "--object-store",
            envvar="OBJECT_STORE_ROOT",
            help="Object store directory (default HOME/objects).",
        ),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    ctx.obj = Globals(home, database_url, object_store)


@dataclass
class _Session:
    """The command being run, so the error boundary can record a refusal."""

    kb: object
    command: str
    target: str | None


_session: _Session | None = None


def _open(ctx: typer.Context, target: str | None = None, command: str | None = None):
    """Connect, then check the caller's token against this command (section 8)."""
    global _session
    from kb_cli.config import resolve_settings
    from kb_cli.services import access
    from kb_cli.services.context import Kb

    options: Globals = ctx.find_root().obj
    kb = Kb.open(resolve_settings(options.home, options.database_url, options.object_store))
    command = command or ctx.command.name
    access.authorize(kb, command, target)
    _session = _Session(kb, command, target)
    return kb


# --- commands ------------------------------------------------------------------------


@app.command()
def upload(
    ctx: typer.Context,
    files: Annotated[
        list[Path],
        typer.Argument(help="Files to upload: .pdf, .docx, .txt, .md.", show_default=False),
    ],
    submit: Annotated[
        bool, typer.Option("--submit", help="Also submit each document; print task records.")
    ] = False,
    replace: Annotated[
        str | None,
        typer.Option(
            "--replace",
            metavar="DOCUMENT_ID",
            help="Replace the file of this draft, failed or published document.",
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Upload files as draft documents.

    Every file is checked before any is stored: one unsupported file stores nothing.

    Example: kb upload report.pdf notes.md --submit
    """
    from kb_cli.services import documents

    kb = _open(ctx, replace)
    if replace is not None:
        if len(files) != 1 or submit:
            raise UsageError("--replace takes exactly one file and no --submit")
        records = [documents.replace_file(kb, files[0], replace)]
    else:
        records = documents.upload_files(kb, files, submit=submit)
    console.print_records(records, json_out)


@app.command()
def submit(
    ctx: typer.Context,
    document_id: Annotated[str, typer.Argument(help="Document id or unique prefix.")],
    json_out: JsonFlag = False,
) -> None:
    """Queue a draft document for ingestion and print its task.

    Example: kb submit 3f2a9c
    """
    from kb_cli.services import documents

    console.print_records(
        [documents.submit_document(_open(ctx, document_id), document_id)], json_out
    )


@app.command()
def status(
    ctx: typer.Context,
    entity_id: Annotated[
        str | None,
        typer.Argument(
            metavar="[ID]",
            help="Task or document id (or unique prefix). Omit to list documents.",
            show_default=False,
        ),
    ] = None,
    wait: Annotated[
        bool,
        typer.Option("--wait", help="Block until the task ends (succeeded, failed, cancelled)."),
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout", metavar="SECONDS", min=0, help="Give up waiting after this long."
        ),
    ] = None,
    status_filter: Annotated[
        str | None,
        typer.Option("--status", metavar="S", help="List only documents with this status."),
    ] = None,
    error_code: Annotated[
        str | None,
        typer.Option(
            "--error-code", metavar="C", help="List only documents whose latest task failed so."
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Show a task, a document, or every document (newest first).

    Examples: kb status; kb status 3f2a9c --wait --timeout 60; kb status --status failed
    """
    from kb_cli.lifecycle import DocStatus
    from kb_cli.services import documents, tasks

    if entity_id is None:
        if wait:
            raise UsageError("--wait needs a task or document id")
        if status_filter is not None and status_filter not in set(DocStatus):
            raise UsageError(f"unknown --status {status_filter!r}; one of: {', '.join(DocStatus)}")
        kb = _open(ctx)
        records = documents.list_document_records(kb, status_filter, error_code)
        if json_out:
            console.print_records(records, True)
        else:
            console.print_document_table(records, footer=kb.settings.embeddings.describe())
        return
    if status_filter or error_code:
        raise UsageError("--status and --error-code filter the list; give no id with them")
    if timeout is not None and not wait:
        raise UsageError("--timeout only applies with --wait")
    kb = _open(ctx, entity_id)
    if not wait:
        console.print_records([tasks.get_record(kb, entity_id)], json_out)
        return
    live = console.LiveWait() if not json_out and console.is_fancy(sys.stderr) else None
    try:
        record = tasks.wait_for_task(kb, entity_id, timeout, on_change=live)
    except tasks.WaitTimeout as timed_out:
        console.print_records([timed_out.record], json_out)
        raise
    finally:
        if live:
            live.close()
    console.print_records([record], json_out)


@app.command()
def cancel(
    ctx: typer.Context,
    task_id: Annotated[str, typer.Argument(help="Task id or unique prefix.")],
    json_out: JsonFlag = False,
) -> None:
    """Cancel a queued, running or waiting task; its document goes back to draft.

    Example: kb cancel 9b1e77
    """
    from kb_cli.services import tasks

    console.print_records([tasks.cancel_task(_open(ctx, task_id), task_id)], json_out)


@app.command()
def retry(
    ctx: typer.Context,
    entity_id: Annotated[
        str | None,
        typer.Argument(
            metavar="[ID]",
            help="Failed task id, or a document id meaning its latest task.",
            show_default=False,
        ),
    ] = None,
    all_failed: Annotated[
        bool, typer.Option("--all-failed", help="Requeue every failed task.")
    ] = False,
    error_code: Annotated[
        str | None,
        typer.Option("--error-code", metavar="C", help="With --all-failed: only tasks failed so."),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Requeue a failed task (same task row, attempt kept) after fixing the cause.

    Examples: kb retry 9b1e77; kb retry --all-failed --error-code parse_error
    """
    from kb_cli.services import tasks

    if all_failed == (entity_id is not None):
        raise UsageError("give either an ID or --all-failed")
    if error_code and not all_failed:
        raise UsageError("--error-code only applies with --all-failed")
    kb = _open(ctx, entity_id)
    records = (
        tasks.retry_all_failed(kb, error_code) if all_failed else [tasks.retry_task(kb, entity_id)]
    )
    console.print_records(records, json_out)


@app.command()
def work(
    ctx: typer.Context,
    task_id: Annotated[
        str | None,
        typer.Argument(
            metavar="[TASK_ID]",
            help="Claim this task instead of the oldest claimable one.",
            show_default=False,
        ),
    ] = None,
    worker_id: Annotated[
        str | None,
        typer.Option(
            "--worker-id", metavar="NAME", help="Name in logs and records (default HOST-PID)."
        ),
    ] = None,
    loop: Annotated[bool, typer.Option("--loop", help="Poll for tasks until stopped.")] = False,
    drain: Annotated[
        bool, typer.Option("--drain", help="Run tasks until none is claimable.")
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
            help="Pause after each progress step (for demos and tests).",
        ),
    ] = 0.0,
    lease_seconds: Annotated[
        float,
        typer.Option(
            "--lease-seconds",
            metavar="N",
            min=0.5,
            help="How long a claim stays valid without a heartbeat.",
        ),
    ] = 60.0,
    max_attempts: Annotated[
        int,
        typer.Option(
            "--max-attempts",
            metavar="N",
            min=1,
            help="Attempts before a lost or transiently failing task ends failed.",
        ),
    ] = 3,
    backoff_seconds: Annotated[
        float,
        typer.Option(
            "--backoff-seconds",
            metavar="SECONDS",
            min=0,
            envvar="KB_BACKOFF_SECONDS",
            help="Base of the exponential retry delay after a transient error.",
        ),
    ] = 5.0,
    poll_seconds: Annotated[
        float,
        typer.Option(
            "--poll-seconds",
            metavar="SECONDS",
            min=0.05,
            help="With --loop: how long to sleep when no task is claimable.",
        ),
    ] = 1.0,
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
    listener = (console.LiveWorkerDisplay if fancy else console.PlainWorkerLog)(options.worker_id)
    stop = threading.Event()
    _stop_on_signals(stop)
    worker = Worker(_open(ctx, task_id), options, listener, stop)
    limit = None if (loop or drain) else (max_tasks or 1)
    for result in worker.run(task_id, max_tasks=limit, loop=loop):
        if json_out:
            console.write_json(result)
        elif result.task is not None:
            console.emit(console.task_line(result.task))


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


@app.command()
def publish(
    ctx: typer.Context,
    document_id: Annotated[str, typer.Argument(help="Document id or unique prefix.")],
    if_version: Annotated[
        int | None,
        typer.Option(
            "--if-version", metavar="N", help="Only if the document is still at this version."
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Publish a reviewed document: search serves it from now on.

    Example: kb publish 3f2a9c --if-version 4
    """
    from kb_cli.services import documents

    record = documents.publish_document(_open(ctx, document_id), document_id, if_version)
    console.print_records([record], json_out)


@app.command()
def search(
    ctx: typer.Context,
    query: Annotated[
        str,
        typer.Argument(help='A question or words; a "quoted phrase" must match exactly.'),
    ],
    limit: Annotated[int, typer.Option("--limit", metavar="K", min=1, help="Most hits.")] = 10,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            metavar="hybrid|lexical|vector",
            help="Ranking: words (BM25), meaning (vectors), or both fused "
            "(default: hybrid when the chunks have vectors).",
            show_default=False,
        ),
    ] = None,
    per_document: Annotated[
        bool,
        typer.Option("--per-document", help="One hit per document: its best chunk."),
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Search published documents, best hit first. Questions are ranked, not filtered.

    Examples: kb search "How do I reset my VPN password?"; kb search 出差报销 --per-document
    """
    from kb_cli.services import search as search_service

    result = search_service.search(_open(ctx), query, limit, mode, per_document)
    for warning in result.warnings:
        console.log(f"kb: warning: {warning}")
    console.print_records(result.hits, json_out)
    if not result.hits and not json_out and console.is_fancy(sys.stderr):
        console.log("no hits; search covers published revisions only (kb publish DOCUMENT_ID)")


@app.command("eval")
def eval_command(
    ctx: typer.Context,
    questions_file: Annotated[
        Path,
        typer.Argument(
            metavar="QUESTIONS_FILE",
            help='JSON Lines: {"question": ..., "expected": [FILE or ID], "forbidden": [...]}.',
        ),
    ],
    k: Annotated[int, typer.Option("--k", metavar="K", min=1, help="Hits that count.")] = 3,
    min_hit_rate: Annotated[
        float | None,
        typer.Option(
            "--min-hit-rate",
            metavar="X",
            min=0,
            max=1,
            help="Exit 4 when hit@k is below X (0 to 1).",
        ),
    ] = None,
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
    results, summary = evaluation.evaluate(_open(ctx), questions, k)
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


@app.command()
def reindex(
    ctx: typer.Context,
    embeddings: Annotated[
        bool,
        typer.Option(
            "--embeddings", help="Embed every chunk that has no vector of the configured model."
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
    kb = _open(ctx)
    progress = console.Progress("embedding") if not json_out else None
    try:
        report = reindex_embeddings(kb, progress or (lambda done, total: None))
    finally:
        if progress:
            progress.close()
    if json_out:
        console.write_json(report)
    else:
        console.emit(
            f"embedded {report.chunks} chunks of {report.revisions} revisions with {report.model}"
        )


@app.command()
def doctor(
    ctx: typer.Context,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair", help="Fix what is safe: orphan objects, stray chunks, dead workers' tasks."
        ),
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Check the invariants; exit 4 when a problem remains.

    Checks document/task status pairs, chunks only where allowed, no running task with
    an expired lease, every referenced object present, no orphan objects.

    Example: kb doctor --repair
    """
    from kb_cli.errors import ProblemsFound
    from kb_cli.services import doctor as doctor_service

    report = doctor_service.check(_open(ctx), repair=repair)
    if json_out:
        console.write_json(report)
    else:
        for fix in report.repaired:
            console.emit(f"repaired {fix.kind} {fix.id}: {fix.detail}")
        for problem in report.problems:
            console.emit(f"problem {problem.kind} {problem.id}: {problem.detail}")
        if report.ok:
            console.emit("ok: every invariant holds")
    if not report.ok:
        raise ProblemsFound(f"doctor found {len(report.problems)} problem(s)")


@app.command()
def history(
    ctx: typer.Context,
    entity_id: Annotated[str, typer.Argument(metavar="ID", help="Document or task id.")],
    json_out: JsonFlag = False,
) -> None:
    """The audit trail of a document (with its tasks) or a task, oldest first.

    Every state change, every publish and every refused command is an event.

    Example: kb history 3f2a9c
    """
    from kb_cli.services.history import history as history_service

    events = history_service(_open(ctx, entity_id), entity_id)
    if json_out:
        console.print_records(events, True)
    else:
        for event in events:
            console.emit(console.audit_line(event))


user_app = typer.Typer(help="Manage users and their roles (admin only once an admin exists).")
app.add_typer(user_app, name="user")


@user_app.command("add")
def user_add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="User name.")],
    role: Annotated[str, typer.Option("--role", help="viewer, editor, reviewer, worker or admin.")],
    json_out: JsonFlag = False,
) -> None:
    """Create a user and print its token, once; only its hash is stored.

    The first user must be an admin; from then on every command needs KB_TOKEN.

    Example: kb user add alice --role admin
    """
    from kb_cli.services import access

    new_user = access.add_user(_open(ctx, name, command="user"), name, role)
    if json_out:
        console.write_json(new_user)
    else:
        console.emit(f"user {new_user.user} role={new_user.role}")
        console.emit(f"token {new_user.token}")
        console.log("the token is shown only once: store it now (export KB_TOKEN=...)")


@app.command()
def demo(
    ctx: typer.Context,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the temporary home to explore it afterwards.")
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
    from kb_cli.config import resolve_settings

    options: Globals = ctx.find_root().obj
    settings = resolve_settings(options.home, options.database_url, options.object_store)
    url = settings.database_url
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return
    _open(ctx)


db_app = typer.Typer(help="Database schema maintenance.")
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """Upgrade the database schema to this version of kb (admin).

    SQLite upgrades itself on first use; run this once for a shared PostgreSQL
    database after installing a new kb on the hosts.

    Example: DATABASE_URL=postgresql+psycopg://kb@db/kb kb db upgrade
    """
    from kb_cli.config import resolve_settings
    from kb_cli.db import Database
    from kb_cli.services import access
    from kb_cli.services.context import Kb

    options: Globals = ctx.find_root().obj
    settings = resolve_settings(options.home, options.database_url, options.object_store)
    if settings.database_url.startswith("sqlite"):
        settings.home.mkdir(parents=True, exist_ok=True)
    database = Database(settings.database_url, settings.busy_timeout_seconds)
    with database.read() as conn:
        existing = database.schema_version(conn)
    if existing is not None:  # a fresh database has no users yet: open mode
        access.authorize(Kb(settings, database, None, "kb"), "db")
    before, after = database.upgrade()
    result = {"from_revision": before, "to_revision": after}
    if json_out:
        console.write_json(result)
    else:
        console.emit(
            f"schema at revision {after}" + (f" (was {before})" if before != after else "")
        )


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
    as_json = "--json" in args
    debug = os.environ.get("KB_DEBUG") == "1"
    try:
        result = app(args=args, prog_name="kb", standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except typer.Exit as done:
        code = done.exit_code
    except console.OutputClosed:
        code = 0  # the reader stopped early: not kb's failure
    except (typer.Abort, KeyboardInterrupt):
        code = _report("interrupted", "interrupted", 130, as_json)
    except typer.TyperException as error:  # the argument parser's usage errors
        help_context = getattr(error, "ctx", None)
        if type(error).__name__ == "NoArgsIsHelpError" and help_context is not None:
            print(help_context.get_help())
            code = 2
        else:
            message = " ".join(error.format_message().split())
            code = _report("usage", message, 2, as_json)
    except KbError as error:
        if debug:
            raise
        if error.is_refusal and _session is not None:
            from kb_cli.services import access

            access.record_refusal(_session.kb, _session.command, _session.target, error.message)
        code = _report(error.code, error.message, error.exit_code, as_json)
    except Exception as error:
        if debug:
            raise
        code = _report(
            "internal_error",
            f"unexpected {type(error).__name__}; run with KB_DEBUG=1 for details",
            1,
            as_json,
        )
    _flush_stdout()
    sys.exit(code)


def _flush_stdout() -> None:
    """Flush now, so a reader that went away cannot turn a success into a failure."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
