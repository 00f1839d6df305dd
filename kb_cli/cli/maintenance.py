"""Maintenance: `kb reindex`, `kb doctor`, `kb demo` and the `kb db` sub-app."""

import contextlib
from collections.abc import Callable, Iterator
from typing import Annotated

import typer

from kb_cli import console
from kb_cli.cli.shared import HELP_SETTINGS, JsonFlag, invocation_of, open_kb, settings_of
from kb_cli.errors import UsageError
from kb_cli.permissions import ADMINS, Rule

REINDEX = Rule("reindex", ADMINS)


def reindex(
    ctx: typer.Context,
    embeddings: Annotated[
        bool,
        typer.Option(
            "--embeddings",
            help="Embed every chunk that has no vector of its base's model.",
        ),
    ] = False,
    vectors: Annotated[
        bool,
        typer.Option(
            "--vectors",
            help="Rebuild the vector index of a SQLite home from the database.",
        ),
    ] = False,
    base: Annotated[
        str | None,
        typer.Option(
            "--base",
            metavar="NAME",
            help="With --model: the base whose embedding model to switch.",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            metavar="NAME",
            help="Switch the --base to this model (local, multilingual, e5, openai, none) "
            "online: new vectors are built beside the served ones, then swapped in.",
            show_default=False,
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Switch a base's embedding model online, re-embed stored chunks, or rebuild the
    vector index (admin).

    --base NAME --model M builds a vector of M for every chunk of the base while search
    goes on serving the old ones, then swaps them in one transaction; stopped or killed,
    running it again resumes. --embeddings gives a vector of its base's model to every
    chunk that lacks one (until then it ranks by its words alone). --vectors writes a
    SQLite home's vector index anew (search uses it once it has 20,000 chunks with
    vectors; the worker keeps it current, `kb doctor` reports it stale).

    Examples: kb reindex --base handbooks --model multilingual; kb reindex --embeddings
    """
    from kb_cli.services import reindex as service

    if (base is None) != (model is None):
        raise UsageError("a model switch names both: kb reindex --base NAME --model NAME")
    if base is not None and (embeddings or vectors):
        raise UsageError("switch a base's model on its own: drop --embeddings and --vectors")
    if not embeddings and not vectors and base is None:
        raise UsageError(
            "say what to do: kb reindex --base NAME --model NAME, --embeddings, or --vectors"
        )
    kb = open_kb(ctx, REINDEX, bases=[base])
    if base is not None and model is not None:
        try:
            with _progress(json_out, f"vectors of {model} for {base}") as progress:
                switched = service.switch_model(kb, base, model, progress)
        except KeyboardInterrupt:
            console.note(f"stopped: kb reindex --base {base} --model {model} resumes it")
            raise
        console.print_switch(switched, json_out)
        return
    if embeddings:
        with _progress(json_out, "embedding") as progress:
            reports = service.reindex_embeddings(kb, progress)
        console.print_reindex(reports, json_out)
    if vectors:
        console.print_vector_index(service.rebuild_vector_index(kb), json_out)


@contextlib.contextmanager
def _progress(json_out: bool, label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on a terminal, told (done, total); nothing with --json."""
    if json_out:
        yield lambda done, total: None
        return
    progress = console.Progress(label)
    try:
        yield progress
    finally:
        progress.close()


DOCTOR = Rule("doctor", ADMINS)


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
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Also read every stored original and compare it with the sha256 recorded "
            "at upload (reads the whole store).",
        ),
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Check the invariants; exit 4 when a problem remains.

    Checks document/task status pairs, chunks only where allowed, no running task with
    an expired lease, every referenced object present, no orphan objects, every document
    in an existing knowledge base, no base access for a missing team or user; with
    --verify, also that every stored original still has the bytes it was uploaded with.

    Example: kb doctor --repair
    """
    from kb_cli.errors import ProblemsFound
    from kb_cli.services import doctor as doctor_service

    kb = open_kb(ctx, DOCTOR, create=False)
    report = doctor_service.check(kb, repair=repair, verify=verify)
    console.print_doctor(report, json_out)
    if not report.ok:
        raise ProblemsFound(f"doctor found {len(report.problems)} problem(s)")


DEMO = Rule("demo", ADMINS)


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
    exists; where there is no knowledge base yet there is no admin, and none is created."""
    from kb_cli.errors import NoKnowledgeBaseYet

    try:
        open_kb(ctx, DEMO)
    except NoKnowledgeBaseYet:
        return


db_app = typer.Typer(
    help="""Database schema maintenance (admin).

    Example: DATABASE_URL=postgresql+psycopg://kb@db/kb kb db upgrade
    """,
    no_args_is_help=True,
    context_settings=HELP_SETTINGS,
)


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
    from kb_cli.store import open_store

    settings = settings_of(ctx)
    if settings.database_url.startswith("sqlite"):
        settings.home.mkdir(parents=True, exist_ok=True)
    database = Database(settings.database_url, settings.busy_timeout_seconds)
    invocation_of(ctx).opened.append(database)
    with database.read() as conn:
        existing = database.schema_version(conn)
    if existing is not None:  # a fresh database has no users yet: open mode
        store = open_store(settings.object_store)  # named, never opened
        access.authorize(Kb(settings, database, store, Actor("kb")), Rule("db", ADMINS))
    before, after = database.upgrade()
    console.print_upgrade(before, after, json_out)
