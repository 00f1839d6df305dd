"""What every command uses: the option types they share, the state of one invocation,
and opening the knowledge base with the guard.

Each command declares its Rule beside it: the roles that may run it, and what it acts
on (the base of the document or task it names, or a base). `open_kb` runs the guard.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kb_cli import console
from kb_cli.config import MAX_SECONDS
from kb_cli.errors import UsageError
from kb_cli.permissions import Rule

if TYPE_CHECKING:
    from collections.abc import Sequence

    from kb_cli.app import Kb
    from kb_cli.config import Settings
    from kb_cli.db import Database
    from kb_cli.services.access import Grant

HELP_SETTINGS = {"help_option_names": ["-h", "--help"]}

JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print JSON Lines on stdout, one record per line.")
]
YesFlag = Annotated[
    bool, typer.Option("--yes", "-y", help="Do not ask on a terminal (for scripts).")
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
    # Closed when the invocation ends, so that no connection outlives its command (an
    # in-process caller, such as the tests, keeps running after it).
    opened: list[Database] = field(default_factory=list)
    # Where this invocation created a new knowledge base, if it did.
    created: str | None = None

    def close(self) -> None:
        for database in self.opened:
            database.close()


def invocation_of(ctx: typer.Context) -> Invocation:
    invocation: Invocation = ctx.find_root().obj
    return invocation


def open_kb(
    ctx: typer.Context,
    rule: Rule,
    target: str | None = None,
    create: bool = False,
    bases: Sequence[str | None] = (),
):
    """Connect, then run the guard: the command's rule (the roles it needs, the base of
    what it names) against the caller's token. The context returned acts as the caller
    the guard established. Only the commands that put something in a knowledge base
    (upload, sync, `user add`, `base create`) pass `create=True`; every other one is refused
    where there is none, and creates nothing."""
    return open_granted(ctx, rule, target, create, bases=bases)[0]


def open_granted(
    ctx: typer.Context,
    rule: Rule,
    target: str | None = None,
    create: bool = False,
    more: Sequence[str] = (),
    bases: Sequence[str | None] = (),
) -> tuple[Kb, Grant]:
    """`open_kb`, and what the guard resolved: the full id (and kind) of the `target` a
    command names, and of the `more` ids it names, for the command to pass down;
    `bases` keep the command to those bases (`--base`; None: not given)."""
    from kb_cli.services import access

    settings = settings_of(ctx)
    invocation = invocation_of(ctx)

    def opened(kb: Kb) -> None:
        invocation.opened.append(kb.db)
        if kb.created:  # said once the command succeeded (boundary), so a home made in the
            invocation.created = settings.where()  # wrong directory is noticed

    kb, grant = access.open_as(settings, rule, target, create, more, bases, on_open=opened)
    invocation.session = Session(kb, rule.command, target)
    return kb, grant


def settings_of(ctx: typer.Context) -> Settings:
    from kb_cli.config import resolve_settings

    options = invocation_of(ctx).options
    assert options is not None  # the callback runs before every command
    return resolve_settings(options.home, options.database_url, options.object_store)


def refuse_worker_settings(ctx: typer.Context) -> None:
    """A command about to queue tasks, run with a worker's limits set (KB_PARSE_TIMEOUT,
    KB_MAX_PAGES, ...): refused before anything is made, rather than queued with the
    limits silently ignored (a task does not carry them: the worker that runs it uses
    its own). Only a value other than the default counts: a shell that exports the
    defaults (or nothing) is not refused."""
    names = settings_of(ctx).worker_variables()
    if not names:
        return
    many = len(names) > 1
    listed = f"{', '.join(names[:-1])} and {names[-1]}" if many else names[0]
    them = "them" if many else "it"
    raise UsageError(
        f"{listed}: a worker's limit{'s' if many else ''}, which a task does not carry (the "
        f"worker that runs it uses its own): set {them} where kb work runs, and run this "
        f"command without {them}"
    )


def print_with_filenames(records: list[Any], json_out: bool) -> None:
    """Records as console.print_records prints them, each task's file (as the service
    that made the record read it) named on a screen or in a plain line (JSON records
    stay as the contract has them)."""
    from kb_cli.records import TaskRecord

    names = {
        record.document_id: record.filename
        for record in records
        if isinstance(record, TaskRecord) and record.filename is not None
    }
    console.print_records(records, json_out, names)


def finite_number(ctx: typer.Context, param: typer.CallbackParam, value: float | None):
    """The one check of every float option (after its own range): a finite number of
    at most MAX_SECONDS. `nan` passes any range check, and `inf` or 1e308 seconds
    would make a wait that never ends or cannot be set up."""
    import math

    if value is not None and not (math.isfinite(value) and abs(value) <= MAX_SECONDS):
        raise typer.BadParameter(
            f"{value!r} is not a usable number: give a finite number of at most {MAX_SECONDS:.0f}",
            ctx=ctx,
            param=param,
        )
    return value


BaseOption = Annotated[
    str | None,
    typer.Option("--base", metavar="NAME", help="Only this knowledge base.", show_default=False),
]

BasesOption = Annotated[
    list[str] | None,
    typer.Option(
        "--base",
        metavar="NAME",
        help="Only this knowledge base (repeat for several).",
        show_default=False,
    ),
]

TeamOption = Annotated[
    list[str] | None,
    typer.Option("--team", metavar="TEAM", help="A team (repeat for several).", show_default=False),
]

WhereOption = Annotated[
    list[str] | None,
    typer.Option(
        "--where",
        metavar="KEY=VALUE",
        help="Only documents whose metadata KEY equals VALUE (KEY^=PREFIX: starts with "
        "PREFIX); repeat to require several.",
        show_default=False,
    ),
]
