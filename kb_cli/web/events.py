"""`GET /api/events`: `kb events --follow` as Server-Sent Events, resumed after the
`Last-Event-ID` a client reconnects with."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import StreamingResponse

from kb_cli.config import LARGEST_INTEGER
from kb_cli.errors import KbError, UsageError
from kb_cli.permissions import EVENTS
from kb_cli.web import errors
from kb_cli.web.guard import Home, guarded

_END = object()  # the follow ended (stopped, or after an error sent before it)


class Streams:
    """The event streams open now: each ends when its client goes, or when the server
    stops (`stop_all`, before uvicorn waits for open connections)."""

    def __init__(self) -> None:
        self.open: set[threading.Event] = set()

    def stop_all(self) -> None:
        for stop in list(self.open):
            stop.set()


def add_route(app: FastAPI, home: Home, hidden: tuple[str, ...], streams: Streams) -> None:
    @app.get("/api/events", response_class=StreamingResponse)
    async def events(
        request: Request,
        since: int = Query(0, ge=0, description="Only events after this id."),
        base: list[str] | None = Query(None, description="Only this base (repeatable)."),
    ) -> StreamingResponse:
        """`kb events --follow` as Server-Sent Events: each event `id: EVENT_ID`, `event:
        TYPE`, `data: RECORD`; a client that reconnects with `Last-Event-ID` resumes after
        it. A refusal once streaming (the caller disabled, its token replaced) is an
        `event: error` with the error body, and the end of the stream."""
        last = request.headers.get("last-event-id")
        if last is not None:
            if not last.strip().isdigit() or len(last.strip()) > 19:
                raise UsageError("Last-Event-ID is an event id: a whole number")
            since = int(last)
        if since > LARGEST_INTEGER:  # refused before the stream starts, not in it
            raise UsageError(f"since is an event id, from 0 to {LARGEST_INTEGER}")
        bases = tuple(base or ())
        stop, events = threading.Event(), asyncio.Queue[Any]()
        loop = asyncio.get_running_loop()

        def post(item: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: the server stopped
                loop.call_soon_threadsafe(events.put_nowait, item)

        threading.Thread(
            target=_follow,
            args=(home, request, since, bases, stop, post),
            name="kb-events",
            daemon=True,
        ).start()
        opened = await events.get()  # the guard's answer, before any byte is sent
        if isinstance(opened, BaseException):
            stop.set()
            raise opened
        return StreamingResponse(
            _stream(events, stop, streams, hidden),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )


def _follow(
    home: Home,
    request: Request,
    since: int,
    bases: tuple[str, ...],
    stop: threading.Event,
    post: Callable[[Any], None],
) -> None:
    """One stream's thread: the guard, then services.events.follow_events until `stop`,
    each event posted to the stream; its connections are this thread's, closed when it
    ends (SQLite's watch connection belongs to the thread that made it). Posts first
    True (let in) or the guard's error, then events, then an error that ends the stream
    if one does, then _END."""
    from kb_cli.services import events as events_service

    started = False
    try:
        with guarded(home, request, EVENTS, bases=bases) as (kb, _grant):
            post(True)
            started = True
            for event in events_service.follow_events(kb, since, bases, stop):
                post(event)
    except Exception as error:
        post(error)
    finally:
        home.close_thread()
        if started:
            post(_END)


async def _stream(
    events: asyncio.Queue[Any],
    stop: threading.Event,
    streams: Streams,
    hidden: tuple[str, ...],
) -> AsyncIterator[str]:
    """The events the stream's thread posts, as Server-Sent Events; when the client goes
    or the server stops, the thread is told to stop (it closes what it opened)."""
    streams.open.add(stop)
    try:
        yield ": kb events\n\n"  # the headers go out now, not with the first event
        while (item := await events.get()) is not _END:
            if isinstance(item, KbError):
                yield f"event: error\ndata: {json.dumps(errors.body_of(item, hidden))}\n\n"
            elif isinstance(item, BaseException):
                yield f"event: error\ndata: {json.dumps(errors.unexpected(item))}\n\n"
            else:
                data = json.dumps(item.to_dict(), ensure_ascii=False)
                yield f"id: {item.event_id}\nevent: {item.type}\ndata: {data}\n\n"
    finally:
        stop.set()
        streams.open.discard(stop)
