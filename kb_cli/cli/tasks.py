"""Tasks and workers: `kb status` (with `--wait`), `kb cancel`, `kb retry`, `kb work`
(with its signal handling), `kb history`."""

import dataclasses
import os
import sys
import threading
from typing import Annotated

import typer

from kb_cli import console
from kb_cli.cli.shared import (
    BasesOption,
    JsonFlag,
    WhereOption,
    finite_number,
    open_granted,
    open_kb,
    print_with_filenames,
    refuse_worker_settings,
)
from kb_cli.config import WORKER_DEFAULTS
from kb_cli.errors import UsageError, WaitTimeout
from kb_cli.lifecycle import ErrorCode, ListedDocStatus
from kb_cli.permissions import (
    BASE_PREFIX,
    CANCEL,
    HISTORY,
    READERS,
    RETRY,
    STATUS,
    WORKERS,
    Rule,
    Target,
)


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
            callback=finite_number,
            help="With --wait: give up after this many seconds (exit 7).",
        ),
    ] = None,
    status_filter: Annotated[
        ListedDocStatus | None,
        typer.Option(
            "--status",
            metavar="STATUS",
            help=f"List only the documents with this status: {', '.join(ListedDocStatus)}.",
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
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            metavar="N",
            min=1,
            help="List only the newest N documents.",
            show_default=False,
        ),
    ] = None,
    where: WhereOption = None,
    base: BasesOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Show a task, a document, or every document (newest first).

    With --base, only the documents of that base (repeat for several); an ID of
    another base is not found.

    Examples: kb status; kb status 3f2a9c --wait --timeout 60; kb status --status failed;
    kb status --base hr --base finance
    """
    from kb_cli import metadata
    from kb_cli.services import documents, tasks

    filters = metadata.parse_where(where or [])
    bases = tuple(base or ())
    if entity_id is None:
        if wait:
            raise UsageError("--wait needs a task or document id: kb status ID --wait")
        kb = open_kb(ctx, STATUS, bases=bases)
        records = documents.list_document_records(
            kb, status_filter, error_code, filters, bases, limit
        )
        shown = records[:limit] if limit else records
        if json_out:
            console.print_records(shown, True)
        else:
            footer = kb.settings.embeddings.describe()
            console.print_document_table(shown, footer=footer, of=len(records))
        return
    if status_filter or error_code or limit or filters:
        raise UsageError(
            "--status, --error-code, --where and --limit filter the list; give no id with them"
        )
    if timeout is not None and not wait:
        raise UsageError("--timeout only applies with --wait")
    kb, grant = open_granted(ctx, STATUS, entity_id, bases=bases)
    if not wait:
        print_with_filenames([tasks.get_record(kb, grant.full_id, grant.kind)], json_out)
        return
    _wait(kb, grant, timeout, json_out)


def _wait(kb, grant, timeout: float | None, json_out: bool) -> None:
    """`status --wait`: live stages on a terminal, then the record; exit 8 when the task
    did not succeed, 7 when the timeout ran out."""
    from kb_cli.errors import TaskUnsuccessful
    from kb_cli.services import tasks

    watcher = None
    if not json_out:
        watcher = console.LiveWait() if console.is_fancy(sys.stderr) else console.WaitHint()
    try:
        record = tasks.wait_for_task(kb, grant.full_id, grant.kind, timeout, watcher)
    except WaitTimeout as timed_out:
        if watcher:
            watcher.close(None)
        print_with_filenames([timed_out.record], json_out)
        raise
    if watcher:
        watcher.close(record)
    print_with_filenames([record], json_out)
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

    kb, grant = open_granted(ctx, CANCEL, task_id)
    print_with_filenames([tasks.cancel_task(kb, grant.full_id, grant.kind)], json_out)


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
    refuse_worker_settings(ctx)
    kb, grant = open_granted(ctx, RETRY, entity_id)
    if entity_id is None:
        records = tasks.retry_all_failed(kb, error_code)
    else:
        records = [tasks.retry_task(kb, grant.full_id, grant.kind)]
    print_with_filenames(records, json_out)
    if not records:  # said like publish --all-reviewed's
        with_code = f" with {error_code}" if error_code else ""
        console.note(f"nothing to retry: no failed task{with_code} you may retry")


WORK = Rule("work", WORKERS, Target.TASK)


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
        bool,
        typer.Option(
            "--loop",
            help="Keep running tasks until stopped (Ctrl-C); an idle worker is woken at "
            "once when a task is queued.",
        ),
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
            callback=finite_number,
            help="Pause this long after each progress step, to watch, cancel or race a task.",
        ),
    ] = WORKER_DEFAULTS.stage_delay,
    lease_seconds: Annotated[
        float,
        typer.Option(
            "--lease-seconds",
            metavar="SECONDS",
            min=0.5,
            callback=finite_number,
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
            callback=finite_number,
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
            callback=finite_number,
            envvar="KB_POLL_SECONDS",
            help="With --loop: the longest an idle worker waits before looking again, "
            "should a wake-up be lost.",
        ),
    ] = WORKER_DEFAULTS.poll_seconds,
    base: Annotated[
        list[str] | None,
        typer.Option(
            "--base",
            metavar="NAME",
            help="Claim only the tasks of documents in this knowledge base (repeat for "
            "several); a TASK_ID of another base is not found.",
            show_default=False,
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Claim tasks and run them: download, parse, embedding, indexing, finalizing.

    Exit code 0 whether the task succeeded, failed or was cancelled, and when there
    was nothing to claim or another worker won the race. The first SIGINT/SIGTERM
    releases the current task at the next safe point; a second one exits at once.

    Examples: kb work --drain; kb work --loop --worker-id A --stage-delay 0.5;
    kb work --loop --base hr
    """
    from kb_cli.worker import Worker, WorkerOptions, default_worker_id, stop_on_signals

    # Workers run side by side, one per core: a BLAS pool of its own in each (numpy is
    # loaded at the first embedding, after this) only spins against the others.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

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
    with stop_on_signals(stop, console.stopping):
        kb, grant = open_granted(ctx, WORK, task_id, bases=base or ())
        if not json_out:
            listener.started(kb.settings.where(), kb.settings.store_where())
        worker = Worker(kb, dataclasses.replace(options, bases=grant.bases), listener, stop)
        limit = None if (loop or drain) else (max_tasks or 1)
        worked = False
        try:
            for result in worker.run(grant.id, max_tasks=limit, loop=loop):
                worked = worked or result.task is not None
                if json_out:
                    console.write_json(result)
                elif result.task is not None and not (fancy and console.is_fancy(sys.stdout)):
                    # Where stdout is the terminal the live display showed how it ended;
                    # anywhere else the record is the script's.
                    console.emit(console.task_line(result.task))
        finally:
            listener.close()
    if not worked and task_id is None and not json_out:
        _hint_drafts(kb, grant.bases)


def _hint_drafts(kb, bases: tuple[str, ...]) -> None:
    """Nothing was claimable: uploads without --submit are drafts no worker takes."""
    from kb_cli.services import documents

    drafts = documents.list_document_records(kb, "draft", bases=bases)
    if drafts:
        console.print_drafts_waiting(len(drafts), drafts[0].document_id)


BASE_HISTORY = Rule("history", READERS, Target.BASE)


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
        kb, grant = open_granted(ctx, HISTORY, entity_id, create=False)
        records = history_service(kb, grant.full_id, grant.kind)
    else:
        records = history_service(open_kb(ctx, BASE_HISTORY, base, create=False), entity_id)
    console.print_records(records, json_out)
