"""Users: the `kb user` sub-app."""

from __future__ import annotations

from typing import Annotated

import typer

from kb_cli import console
from kb_cli.cli.shared import HELP_SETTINGS, JsonFlag, TeamOption, open_kb
from kb_cli.permissions import ADMINS, Role, Rule

user_app = typer.Typer(
    help="""Manage users and their roles (admin only, once an admin exists).

    Example: kb user add alice --role admin && kb user add bob --role editor
    """,
    no_args_is_help=True,
    context_settings=HELP_SETTINGS,
)


USER = Rule("user", ADMINS)


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

    new_user = access.add_user(open_kb(ctx, USER, name), name, role.value, teams)
    console.print_new_user(new_user, json_out)
