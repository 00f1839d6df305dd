"""The `kb` command line: parse, call one service, render. The one error boundary.

Services, SQLAlchemy and parsers are imported inside the commands, so `kb --help`
and `kb --version` start fast and never touch the database.

This module builds `app` and registers every command, in the order `kb --help` lists
them. The commands live by concern: `documents` (upload, submit, publish), `tasks`
(status, cancel, retry, work, history), `events` (events, relay), `answers` (search,
eval), `reading` (show, diff, export), `serve` (HTTP), `users`, `bases`,
`maintenance` (reindex, doctor, demo, db); `shared` holds what they all use and
`boundary` the error boundary.
"""

from __future__ import annotations

from typing import Annotated

import typer

from kb_cli import __version__, console
from kb_cli.cli import (
    answers,
    bases,
    boundary,
    documents,
    events,
    maintenance,
    reading,
    serve,
    sync,
    tasks,
    users,
)
from kb_cli.cli.shared import HELP_SETTINGS, Globals, Invocation

__all__ = ["app", "main"]

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
            metavar="DIR|URL",
            envvar="OBJECT_STORE_ROOT",
            help="Where uploaded files are stored: a directory (default HOME/objects) or "
            "s3://BUCKET/PREFIX (endpoint and keys from the AWS_* variables).",
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


app.command()(documents.upload)
app.command()(documents.submit)
app.command()(tasks.status)
app.command()(tasks.cancel)
app.command()(tasks.retry)
app.command()(tasks.work)
app.command()(documents.publish)
app.command()(documents.reject)
app.command()(documents.unpublish)
app.command()(documents.delete)
app.command()(sync.sync)
app.command()(sync.reparse)
app.command()(answers.search)
app.command("eval")(answers.eval_command)
app.command()(maintenance.reindex)
app.command()(maintenance.doctor)
app.command()(tasks.history)
app.command()(reading.show)
app.command()(reading.diff)
app.command()(reading.export)
app.command()(events.events)
app.command()(events.relay)
app.command()(serve.serve)
app.add_typer(users.user_app, name="user")
app.add_typer(bases.base_app, name="base")
app.command()(maintenance.demo)
app.add_typer(maintenance.db_app, name="db")


def main(argv: list[str] | None = None) -> None:
    """The `kb` entry point: run the app inside the one error boundary."""
    boundary.main(app, argv)
