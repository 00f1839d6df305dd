"""HTTP: `kb serve`."""

import sys
from typing import Annotated

import typer

from kb_cli import console
from kb_cli.cli.shared import JsonFlag, settings_of
from kb_cli.errors import UsageError


def serve(
    ctx: typer.Context,
    host: Annotated[
        str, typer.Option("--host", metavar="HOST", help="The address to listen on.")
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            "--port", metavar="PORT", min=0, max=65535, help="The port (0: any free port)."
        ),
    ] = 8000,
    json_out: JsonFlag = False,
) -> None:
    """Serve the knowledge base over HTTP until Ctrl-C or SIGTERM (docs/interface.md).

    Each request carries its caller's token (Authorization: Bearer TOKEN) and is
    checked as the command it stands for; tasks are processed by `kb work`, never by
    the server. Prints where it listens (--json: {"url", "host", "port"}).

    Examples: kb serve; kb serve --host 0.0.0.0 --port 8080
    """
    from kb_cli.web import server

    settings = settings_of(ctx)
    try:
        sock = server.listen(host, port)
    except OSError as error:
        raise UsageError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    record = {"url": f"http://{shown}:{bound}", "host": host, "port": bound}

    def ready() -> None:
        if json_out:
            console.write_json(record)
        else:
            console.emit(record["url"])
        sys.stdout.flush()
        console.note("serving; Ctrl-C stops it (tasks are processed by kb work)")

    with sock:
        server.serve(settings, sock, ready)
