"""Knowledge bases: the `kb base` sub-app."""

import dataclasses
from typing import Annotated

import typer

from kb_cli import console
from kb_cli.cli.shared import (
    HELP_SETTINGS,
    JsonFlag,
    TeamOption,
    open_granted,
    open_kb,
    settings_of,
)
from kb_cli.permissions import ADMINS, BASE_PREFIX, STATUS_READERS, Rule, Target

base_app = typer.Typer(
    help="""Knowledge bases: who reads which documents. Every document is in one base.

    Example: kb base create engineering --team engineering && kb base grant engineering alice
    """,
    no_args_is_help=True,
    context_settings=HELP_SETTINGS,
)
BASE_CREATE = Rule("base", ADMINS)
BASE_LIST = Rule("base", STATUS_READERS, Target.BASE)
BASE_MOVE = Rule("base", ADMINS, Target.DOCUMENT)
BaseName = Annotated[str, typer.Argument(metavar="NAME", help="Knowledge base name.")]


ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        metavar="NAME",
        help="The base's embedding model: local, multilingual, e5, openai or none "
        "(default: it follows KB_EMBEDDINGS).",
        show_default=False,
    ),
]


@base_app.command("create")
def base_create(
    ctx: typer.Context,
    name: BaseName,
    teams: TeamOption = None,
    model: ModelOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Create a knowledge base (admin): readable by everyone, or only by the teams named;
    embedded by the model named (without --model: whatever KB_EMBEDDINGS says).

    Example: kb base create handbooks-zh --model multilingual --team support
    """
    from kb_cli.embeddings import check_model, make_embedder
    from kb_cli.services import bases

    if model is not None:  # a name, and a provider this process can build: before anything is made
        embeddings = settings_of(ctx).embeddings
        make_embedder(dataclasses.replace(embeddings, provider=check_model(model)))
    kb = open_kb(ctx, BASE_CREATE, create=True)
    console.print_bases([bases.create_base(kb, name, teams or [], model)], json_out)


@base_app.command("list")
def base_list(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """List the knowledge bases you may read, with their teams, grants and documents.

    Example: kb base list --json
    """
    from kb_cli.services import bases

    console.print_bases(bases.list_bases(open_kb(ctx, BASE_LIST)), json_out)


@base_app.command("show")
def base_show(ctx: typer.Context, name: BaseName, json_out: JsonFlag = False) -> None:
    """Describe one knowledge base: who reads it and how many documents it holds.

    Example: kb base show engineering
    """
    from kb_cli.services import bases

    console.print_bases(bases.list_bases(open_kb(ctx, BASE_LIST, name), name), json_out)


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

    console.print_bases([bases.grant_base(open_kb(ctx, BASE_CREATE), name, user)], json_out)


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

    kb, grant = open_granted(ctx, BASE_MOVE, document_id)
    record = bases.move_document(kb, grant.full_id, name)
    console.print_records([record], json_out)


@base_app.command("revoke")
def base_revoke(
    ctx: typer.Context,
    name: BaseName,
    user: Annotated[str, typer.Argument(metavar="USER", help="User name.")],
    json_out: JsonFlag = False,
) -> None:
    """Take one user's grant on a base away, at once (admin). A grant that does not exist
    is a conflict.

    Example: kb base revoke engineering carol
    """
    from kb_cli.services import bases

    kb = open_kb(ctx, BASE_CREATE, BASE_PREFIX + name)  # a refusal goes to base:NAME's trail
    console.print_bases([bases.revoke_base(kb, name, user)], json_out)
