"""The command line behind `app`, as click runs it: global options accepted after the
command too, and help texts reflowed so that they wrap at the terminal's width.

The contract puts global options before the command (`kb --home DIR status`). People
type them after it as well (`kb status --home DIR`), so every command also takes them,
unlisted in its help, unless it has an option of that name itself: a command's own
option always wins, and nothing about the order before the command changes.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Iterator
from typing import Any

import typer
from typer.core import TyperOption

GLOBAL_OPTIONS = ("--home", "--database-url", "--object-store")
GLOBAL_OPTIONS_HINT = (
    f"global options ({', '.join(GLOBAL_OPTIONS)}) go before or after the command; "
    "kb --help lists them"
)


@functools.cache
def build(app: typer.Typer):
    """The command `app` stands for, ready to run (Typer's own click: typer.core); built
    once per process, as click commands keep no state between runs (tests run many).

    Typer reads the type hints of every command's every parameter here: the command
    modules keep their annotations as objects (no `from __future__ import annotations`),
    since string annotations cost an eval and a compile each, three times the build."""
    root = typer.main.get_command(app)
    globals_ = [
        param
        for param in root.params
        if isinstance(param, TyperOption) and set(param.opts) & set(GLOBAL_OPTIONS)
    ]
    for command in _every_command(root):
        _reflow_help(command)
        if command is root:
            continue
        own = {name for param in command.params for name in param.opts}
        command.params.extend(
            _after_the_command(option) for option in globals_ if not set(option.opts) & own
        )
    return root


def _every_command(command: Any) -> Iterator[Any]:  # Typer's own click's commands
    yield command
    for sub in getattr(command, "commands", {}).values():  # a group's commands
        yield from _every_command(sub)


def _after_the_command(option: TyperOption) -> TyperOption:
    return TyperOption(
        param_decls=option.opts,
        metavar=option.metavar,
        hidden=True,
        expose_value=False,
        callback=_override_global,
    )


def _override_global(ctx: typer.Context, param, value: str | None) -> None:
    """A global option given after the command beats the same one before it and the
    environment: the root's callback has run by now (click runs a group's callback
    before it parses the command's arguments)."""
    if value is None or param.name is None:
        return
    invocation = ctx.find_root().obj
    invocation.options = dataclasses.replace(invocation.options, **{param.name: value})


def _reflow_help(command) -> None:
    """Typer keeps the single line breaks of a docstring's later paragraphs, which
    then show as stray breaks once the terminal wraps the lines: join them."""
    if command.help:
        paragraphs = inspect.cleandoc(command.help).split("\n\n")
        command.help = "\n\n".join(" ".join(part.split("\n")) for part in paragraphs)
