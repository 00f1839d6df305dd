"""Lifecycle events: `kb events` (read or follow them), `kb relay` (deliver them to a
webhook)."""

import threading
from typing import Annotated

import typer

from kb_cli import console
from kb_cli.cli.shared import BasesOption, JsonFlag, finite_number, open_kb
from kb_cli.permissions import EVENTS, WORKERS, Rule


def events(
    ctx: typer.Context,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Keep printing new events as they happen, until Ctrl-C."
        ),
    ] = False,
    since: Annotated[
        int,
        typer.Option(
            "--since",
            metavar="ID",
            min=0,
            help="Only events after this event id (the last one a script has seen).",
        ),
    ] = 0,
    base: BasesOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Lifecycle events of the bases you may read, oldest first: a task succeeded,
    failed or was cancelled; a document is waiting for review, published, unpublished
    or deleted.

    Exit code 0, also when --follow is stopped by SIGINT/SIGTERM.

    Examples: kb events --since 120 --json; kb events --follow --base handbooks --base hr
    """
    from kb_cli.services import events as events_service

    bases = tuple(base or ())
    kb = open_kb(ctx, EVENTS, bases=bases)
    name_of = events_service.file_names(kb)
    if not follow:
        for event in events_service.list_events(kb, since, bases):
            console.print_event(event, json_out, name_of)
        return
    from kb_cli.worker import stop_on_signals

    stop = threading.Event()
    with stop_on_signals(stop, lambda _signal: None):
        for event in events_service.follow_events(kb, since, bases, stop):
            console.print_event(event, json_out, name_of)


RELAY = Rule("relay", WORKERS)


def relay(
    ctx: typer.Context,
    webhook: Annotated[
        str,
        typer.Option(
            "--webhook",
            metavar="URL",
            help="Where to POST each event (http:// or https://).",
            show_default=False,
        ),
    ],
    secret: Annotated[
        str | None,
        typer.Option(
            "--secret",
            metavar="S",
            envvar="KB_RELAY_SECRET",
            help="Sign each body with HMAC-SHA256 under this secret (header X-Kb-Signature); "
            "better given as KB_RELAY_SECRET than on the command line.",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            min=0.1,
            callback=finite_number,
            help="The longest one delivery (connect, send, answer) may take; past it the "
            "attempt failed, and is retried.",
        ),
    ] = 10.0,
    json_out: JsonFlag = False,
) -> None:
    """Deliver lifecycle events to a webhook: at least once, in order, each marked
    delivered after the receiver's 2xx; failures are retried with growing pauses,
    never skipped. Receivers deduplicate by event_id.

    Runs until SIGINT/SIGTERM (exit 0). Run one relay per database.

    Example: KB_RELAY_SECRET=s3cret kb relay --webhook https://hooks.example.com/kb
    """
    from kb_cli.services.relay import Relay, Webhook
    from kb_cli.worker import stop_on_signals

    target = Webhook(webhook, secret or None, timeout)
    kb = open_kb(ctx, RELAY)
    stop = threading.Event()
    log = console.RelayLog(target.host, json_out)
    with stop_on_signals(stop, console.stopping):
        log.started()
        Relay(kb, target, log, stop).run()
