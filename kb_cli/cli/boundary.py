"""The one error boundary: every `kb` invocation runs inside it, and every failure
leaves it as one line on stderr and an exit code."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import typer

from kb_cli import console
from kb_cli.cli import commandline
from kb_cli.cli.shared import Invocation
from kb_cli.errors import KbError


def _report(code: str, message: str, exit_code: int, as_json: bool) -> int:
    console.report_error(code, message, as_json)
    return exit_code


def main(app: typer.Typer, argv: list[str] | None = None) -> None:
    """Run `app` on argv (default: the process's arguments) and exit with its code."""
    args = sys.argv[1:] if argv is None else argv
    with _private_files():
        code = _run(app, args)
    _flush_stdout()
    sys.exit(code)


def _run(app: typer.Typer, args: list[str]) -> int:
    """One invocation inside the error boundary: its exit code."""
    as_json = "--json" in args
    invocation = Invocation()
    try:
        return _invoke(app, args, invocation, as_json)
    finally:
        invocation.close()


def _invoke(app: typer.Typer, args: list[str], invocation: Invocation, as_json: bool) -> int:
    debug = os.environ.get("KB_DEBUG") == "1"
    try:
        command = commandline.build(app)
        result = command.main(args=args, prog_name="kb", standalone_mode=False, obj=invocation)
        if invocation.created is not None:
            console.note(f"created a new knowledge base in {invocation.created}")
        return result if isinstance(result, int) else 0
    except typer.Exit as done:
        return done.exit_code
    except console.OutputClosed:
        return 0  # the reader stopped early: not kb's failure
    except (typer.Abort, KeyboardInterrupt):
        return _report("interrupted", "interrupted", 130, as_json)
    except typer.TyperException as error:  # the argument parser's usage errors
        help_context = getattr(error, "ctx", None)
        if type(error).__name__ == "NoArgsIsHelpError" and help_context is not None:
            console.emit(help_context.get_help())
            return 2
        message = " ".join(error.format_message().split())
        if type(error).__name__ == "NoSuchOption":
            longer = _options_starting(error)
            hint = f"did you mean {' or '.join(longer)}?" if longer else ""
            message += f"; {hint or commandline.GLOBAL_OPTIONS_HINT}"
        return _report("usage", message, 2, as_json)
    except KbError as error:
        if debug:
            raise
        if error.is_refusal and invocation.session is not None:
            from kb_cli.services import access

            session = invocation.session
            actor = session.kb.actor.name
            access.record_refusal(session.kb, actor, session.command, session.target, error.message)
        return _report(error.code, error.message, error.exit_code, as_json)
    except Exception as error:
        if debug:
            raise
        message = f"unexpected {type(error).__name__}; run with KB_DEBUG=1 for details"
        return _report("internal_error", message, 1, as_json)


def _options_starting(error: typer.TyperException) -> list[str]:
    """The command's options that the unknown one is the start of (`--all` for
    `--all-reviewed`): the parser suggests only options spelt alike."""
    given = getattr(error, "option_name", "") or ""
    command = getattr(getattr(error, "ctx", None), "command", None)
    if not given.startswith("--") or command is None:
        return []
    names = [name for param in command.params for name in getattr(param, "opts", [])]
    return sorted(name for name in names if name.startswith(given) and name != given)


@contextlib.contextmanager
def _private_files() -> Iterator[None]:
    """Whatever kb creates (database, its journal, objects, directories) is readable by
    its owner only: 0600 files, 0700 directories, or tighter if the umask says so.
    Unpublished documents and token hashes are no other local account's business. The
    umask is the invocation's and is put back afterwards: the process is the caller's."""
    previous = os.umask(0o077)
    os.umask(previous | 0o077)
    try:
        yield
    finally:
        os.umask(previous)


def _flush_stdout() -> None:
    """Flush now, so a reader that went away cannot turn a success into a failure."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
