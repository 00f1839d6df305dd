"""The command line is built once per process, from annotations Typer need not evaluate."""

import inspect

from kb_cli.cli import app
from kb_cli.cli.commandline import build


def _registered(typer_app) -> list:
    commands = [info.callback for info in typer_app.registered_commands]
    for group in typer_app.registered_groups:
        commands.extend(_registered(group.typer_instance))
    return [command for command in commands if command is not None]


def test_every_command_keeps_its_annotations_as_objects():
    """A string annotation (`from __future__ import annotations` in a command module)
    costs Typer an eval and a compile per parameter on every start of `kb`."""
    commands = _registered(app)
    assert len(commands) > 20
    as_strings = {
        f"{command.__module__}.{command.__name__}"
        for command in commands
        if any(isinstance(hint, str) for hint in inspect.get_annotations(command).values())
    }
    assert not as_strings


def test_the_command_line_is_built_once():
    assert build(app) is build(app)
