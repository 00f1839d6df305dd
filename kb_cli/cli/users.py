"""Users: the `kb user` sub-app."""

from typing import Annotated

import typer

from kb_cli import console
from kb_cli.cli.shared import HELP_SETTINGS, JsonFlag, TeamOption, open_kb
from kb_cli.permissions import ADMINS, Role, Rule

user_app = typer.Typer(
    help="""Manage users, their roles, teams and tokens (admin only, once an admin exists).

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

    new_user = access.add_user(open_kb(ctx, USER, name, create=True), name, role.value, teams)
    console.print_new_user(new_user, json_out)


# --- a user's life: list, disable, enable, token, teams --------------------------------

UserName = Annotated[str, typer.Argument(metavar="NAME", help="The user's name.")]


@user_app.command("list")
def user_list(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """List the users: role, teams, state (active or disabled), created, last used.

    Never shows a token or its hash. Admin only once an admin exists.

    Example: kb user list --json
    """
    from kb_cli.services import users

    console.print_users(users.list_users(open_kb(ctx, USER)), json_out)


@user_app.command("disable")
def user_disable(ctx: typer.Context, name: UserName, json_out: JsonFlag = False) -> None:
    """Disable a user: its token is refused at once, for every command, and its running
    workers release their task and stop. The last active admin cannot be disabled.

    Example: kb user disable bob
    """
    from kb_cli.services import users

    console.print_users([users.disable_user(open_kb(ctx, USER, name), name)], json_out)


@user_app.command("enable")
def user_enable(ctx: typer.Context, name: UserName, json_out: JsonFlag = False) -> None:
    """Enable a disabled user: its token works again.

    Example: kb user enable bob
    """
    from kb_cli.services import users

    console.print_users([users.enable_user(open_kb(ctx, USER, name), name)], json_out)


@user_app.command("token")
def user_token(ctx: typer.Context, name: UserName, json_out: JsonFlag = False) -> None:
    """Give a user a new token, printed once; the old one stops working at once.

    Example: kb user token bob
    """
    from kb_cli.services import users

    console.print_new_user(users.new_token(open_kb(ctx, USER, name), name), json_out)


@user_app.command("teams")
def user_teams(
    ctx: typer.Context,
    name: UserName,
    add: Annotated[
        list[str] | None,
        typer.Option(
            "--add", metavar="TEAM", help="Join this team (repeat for several).", show_default=False
        ),
    ] = None,
    remove: Annotated[
        list[str] | None,
        typer.Option(
            "--remove",
            metavar="TEAM",
            help="Leave this team (repeat for several).",
            show_default=False,
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Change which teams a user is in (and so which bases it reads), at once.

    Naming a new team creates it. Removing a team the user is not in changes nothing
    and is a conflict.

    Example: kb user teams bob --add finance --remove sales
    """
    from kb_cli.services import users

    kb = open_kb(ctx, USER, name)
    console.print_users([users.change_teams(kb, name, add or [], remove or [])], json_out)
