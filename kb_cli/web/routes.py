"""The routes of `kb serve` (docs/interface.md, "HTTP"): each one the command it
stands for, through the same guard and the same service.

A request opens the knowledge base as a command does (`access.open_as`, with the
request's bearer token instead of KB_TOKEN) and closes it when answered. A refusal a
service raises after the guard let the caller in is written to the audit trail, as the
command line's error boundary does. Routes that touch the database are plain functions,
which FastAPI runs on its thread pool; only the upload reads its body itself."""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kb_cli import __version__
from kb_cli.app import Kb
from kb_cli.config import Settings
from kb_cli.errors import KbError, NotFoundError, ObjectTooLarge, UsageError
from kb_cli.permissions import (
    CANCEL,
    DEFAULT_BASE,
    EVENTS,
    PUBLISH,
    RETRY,
    SEARCH,
    STATUS,
    SUBMIT,
    UPLOAD,
    Rule,
)
from kb_cli.services.access import Grant, open_as
from kb_cli.web import errors

MAX_FILES = 100  # files of one upload request
FORM_OVERHEAD_BYTES = 1024 * 1024  # the multipart framing and the small fields around the files
CHUNK_BYTES = 1024 * 1024


class BodyTooLarge(Exception):
    """The request's body went past the server's bound."""


class Streams:
    """The event streams open now: each ends when its client goes, or when the server
    stops (`stop_all`, before uvicorn waits for open connections)."""

    def __init__(self) -> None:
        self.open: set[threading.Event] = set()

    def stop_all(self) -> None:
        for stop in list(self.open):
            stop.set()


def build(settings: Settings, streams: Streams | None = None) -> ASGIApp:
    """The ASGI application: the routes, inside the bound on a request's body (the upload
    limit, KB_MAX_UPLOAD_BYTES, plus the form's framing)."""
    app = FastAPI(
        title="kb",
        version=__version__,
        summary="The ingestion lifecycle of a knowledge base, over HTTP",
    )
    hidden = (str(settings.home), settings.where(short=False))
    _errors(app, hidden)
    _routes(app, settings, hidden)
    _event_route(app, settings, hidden, streams or Streams())
    return _BoundedBody(app, settings.max_upload_bytes + FORM_OVERHEAD_BYTES)


def _errors(app: FastAPI, hidden: tuple[str, ...]) -> None:
    async def kb_error(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, KbError)
        return _error_response(error, hidden)

    async def too_large(request: Request, error: Exception) -> JSONResponse:
        return _error_response(ObjectTooLarge("request body too large"), hidden)

    async def malformed(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem.get('loc', ()))}: {problem.get('msg', '')}"
            for problem in error.errors()
        )
        return JSONResponse(errors.for_status(422, f"bad request: {problems}"), status_code=422)

    async def http_error(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, HTTPException)
        detail = str(error.detail) if error.status_code != 404 else "no such route"
        return JSONResponse(
            errors.for_status(error.status_code, detail),
            status_code=error.status_code,
            headers=error.headers,
        )

    async def crashed(request: Request, error: Exception) -> JSONResponse:
        return JSONResponse(errors.unexpected(error), status_code=500)

    app.add_exception_handler(KbError, kb_error)
    app.add_exception_handler(BodyTooLarge, too_large)
    app.add_exception_handler(RequestValidationError, malformed)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, crashed)


def _error_response(error: KbError, hidden: tuple[str, ...]) -> JSONResponse:
    return JSONResponse(
        errors.body_of(error, hidden),
        status_code=errors.status_of(error),
        headers=errors.headers_of(error),
    )


def _token(request: Request) -> str:
    """The request's bearer token ("" when it sends none): the server's own KB_TOKEN is
    never a caller's."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


@contextlib.contextmanager
def _guarded(
    settings: Settings,
    request: Request,
    rule: Rule,
    target: str | None = None,
    create: bool = False,
    bases: Sequence[str | None] = (),
    kind: str | None = None,
) -> Iterator[tuple[Kb, Grant]]:
    """The knowledge base as the request's caller, once the guard let it in (`kind`:
    the target must be a document, "documents", or a task, "tasks"; the other is not
    found, as an id of nothing); closed when the route is done."""
    opened: list[Kb] = []
    try:
        kb, grant = open_as(
            settings, rule, target, create, (), bases, token=_token(request), on_open=opened.append
        )
        if kind is not None and grant.kind != kind:
            noun = "document" if kind == "documents" else "ingestion task"
            raise NotFoundError(f"no {noun} with id {target}")
        try:
            yield kb, grant
        except KbError as error:
            if error.is_refusal:
                from kb_cli.services import access

                access.record_refusal(kb, kb.actor.name, rule.command, target, error.message)
            raise
    finally:
        for each in opened:
            each.db.close()


def _routes(app: FastAPI, settings: Settings, hidden: tuple[str, ...]) -> None:
    @app.get("/api/health")
    def health() -> dict[str, Any]:
        """The server answers. Asks no token and reads no database."""
        return {"status": "ok", "version": __version__}

    @app.post("/api/documents", status_code=201)
    async def upload(request: Request) -> JSONResponse:
        """`kb upload`: multipart field `files` (repeat it for several), optional field
        `base`. 201 with one document record per file."""
        with tempfile.TemporaryDirectory(prefix="kb-upload-") as scratch:
            paths, base = await _received(request, Path(scratch), settings.max_upload_bytes)
            records = await run_in_threadpool(_upload, settings, request, paths, base)
        return JSONResponse(records, status_code=201)

    @app.post("/api/documents/{document_id}/submit", status_code=202)
    def submit(document_id: str, request: Request) -> dict[str, Any]:
        """`kb submit`: 202 with the queued task's record; `kb work` processes it."""
        from kb_cli.services import documents

        with _guarded(settings, request, SUBMIT, document_id) as (kb, grant):
            return documents.submit_document(kb, grant.full_id).to_dict()

    @app.get("/api/documents/{document_id}")
    def document(document_id: str, request: Request) -> dict[str, Any]:
        """`kb status DOCUMENT_ID`: the document record."""
        from kb_cli.services import tasks

        with _guarded(settings, request, STATUS, document_id, kind="documents") as (kb, grant):
            return tasks.get_record(kb, grant.full_id, grant.kind).to_dict()

    @app.get("/api/ingestion-tasks/{task_id}")
    def task(task_id: str, request: Request) -> dict[str, Any]:
        """`kb status TASK_ID`: the task record."""
        from kb_cli.services import tasks

        with _guarded(settings, request, STATUS, task_id, kind="tasks") as (kb, grant):
            return tasks.get_record(kb, grant.full_id, grant.kind).to_dict()

    @app.delete("/api/ingestion-tasks/{task_id}")
    def cancel(task_id: str, request: Request) -> dict[str, Any]:
        """`kb cancel`: the cancelled task's record; 409 when it is not cancellable."""
        from kb_cli.services import tasks

        with _guarded(settings, request, CANCEL, task_id, kind="tasks") as (kb, grant):
            return tasks.cancel_task(kb, grant.full_id, grant.kind).to_dict()

    @app.post("/api/documents/{document_id}/retry")
    def retry(document_id: str, request: Request) -> dict[str, Any]:
        """`kb retry DOCUMENT_ID`: its failed task queued again; 409 unless it failed."""
        from kb_cli.services import tasks

        with _guarded(settings, request, RETRY, document_id, kind="documents") as (kb, grant):
            return tasks.retry_task(kb, grant.full_id, grant.kind).to_dict()

    @app.post("/api/documents/{document_id}/publish")
    def publish(
        document_id: str,
        request: Request,
        if_version: int | None = Query(None, description="`--if-version`: else 409."),
    ) -> dict[str, Any]:
        """`kb publish`: the published document's record."""
        from kb_cli.services import documents

        with _guarded(settings, request, PUBLISH, document_id) as (kb, grant):
            return documents.publish_document(kb, grant.full_id, if_version).to_dict()

    @app.get("/api/search")
    def search(
        request: Request,
        q: str = Query(..., description="The question or words, as `kb search QUERY`."),
        limit: int = Query(10, ge=1, le=1000),
        base: str | None = Query(None),
        mode: str | None = Query(None, description="lexical, semantic or hybrid"),
    ) -> dict[str, Any]:
        """`kb search`: the hits (each the record `--json` prints), best first, with the
        ranking that ran, warnings, and why nothing was found when nothing was."""
        from kb_cli.services import search as search_service

        asked = search_service.SearchRequest(q, limit, mode, base=base)  # type: ignore[arg-type]
        with _guarded(settings, request, SEARCH, base) as (kb, _grant):
            result = search_service.search(kb, asked)
        return {
            "hits": [hit.to_dict() for hit in result.hits],
            "mode": str(result.mode),
            "warnings": result.warnings,
            "nothing_because": result.nothing_because,
            "hints": result.hints,
        }


def _event_route(
    app: FastAPI, settings: Settings, hidden: tuple[str, ...], streams: Streams
) -> None:
    @app.get("/api/events", response_class=StreamingResponse)
    async def events(
        request: Request,
        since: int = Query(0, ge=0, description="Only events after this id (`--since`)."),
        base: list[str] | None = Query(None, description="Only this base (repeatable)."),
    ) -> StreamingResponse:
        """`kb events --follow` as Server-Sent Events: each event `id: EVENT_ID`, `event:
        TYPE`, `data: RECORD`; a client that reconnects with `Last-Event-ID` resumes after
        it. A refusal once streaming (the caller disabled, its token replaced) is an
        `event: error` with the error body, and the end of the stream."""
        last = request.headers.get("last-event-id")
        if last is not None:
            if not last.strip().isdigit():
                raise UsageError("Last-Event-ID is an event id: a whole number")
            since = int(last)
        bases = tuple(base or ())
        stop, events = threading.Event(), asyncio.Queue[Any]()
        loop = asyncio.get_running_loop()

        def post(item: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: the server stopped
                loop.call_soon_threadsafe(events.put_nowait, item)

        threading.Thread(
            target=_follow,
            args=(settings, request, since, bases, stop, post),
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


_END = object()  # the follow ended (stopped, or after an error sent before it)


def _follow(
    settings: Settings,
    request: Request,
    since: int,
    bases: tuple[str, ...],
    stop: threading.Event,
    post: Callable[[Any], None],
) -> None:
    """One stream's thread: the guard, then services.events.follow_events until `stop`,
    each event posted to the stream; the knowledge base is opened, read and closed on
    this thread only (SQLite's watch connection belongs to the thread that made it).
    Posts first True (let in) or the guard's error, then events, then an error that ends
    the stream if one does, then _END."""
    from kb_cli.services import events as events_service

    started = False
    try:
        with _guarded(settings, request, EVENTS, bases=bases) as (kb, _grant):
            post(True)
            started = True
            for event in events_service.follow_events(kb, since, bases, stop):
                post(event)
    except Exception as error:
        post(error)
    finally:
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


def _upload(
    settings: Settings, request: Request, paths: list[Path], base: str
) -> list[dict[str, Any]]:
    from kb_cli.services import documents

    checked = documents.check_files(paths, settings.max_upload_bytes)
    with _guarded(settings, request, UPLOAD, base, create=True) as (kb, _grant):
        uploaded = documents.upload(kb, paths, base=base, checked=checked)
    return [record.to_dict() for record in uploaded.records]


async def _received(request: Request, scratch: Path, limit: int) -> tuple[list[Path], str]:
    """The uploaded files, each written to `scratch` under its own name (no directory
    of it: a name is only a name), each at most `limit` bytes; and the `base` field."""
    try:
        form = await request.form(max_files=MAX_FILES, max_fields=10)
    except BodyTooLarge:
        raise ObjectTooLarge(f"request body too large (limit {limit} bytes of files)") from None
    except HTTPException as error:  # the form's own bounds (too many files or fields)
        raise UsageError(f"bad upload: {error.detail}") from None
    try:
        base = form.get("base") or DEFAULT_BASE
        if not isinstance(base, str):
            raise UsageError("the field base is a name, not a file")
        uploads = form.getlist("files")
        if not uploads:
            raise UsageError("give at least one file in the multipart field files")
        paths = []
        for n, upload in enumerate(uploads):
            if not isinstance(upload, UploadFile):
                raise UsageError("the field files takes files, not text")
            name = PurePosixPath((upload.filename or "").replace("\\", "/")).name
            if name in ("", ".", ".."):
                raise UsageError("every file needs a file name")
            path = scratch / str(n) / name
            path.parent.mkdir()
            await _copy(upload, path, limit)
            paths.append(path)
        return paths, base
    finally:
        await form.close()


async def _copy(upload: UploadFile, path: Path, limit: int) -> None:
    written = 0
    with path.open("wb") as out:
        while chunk := await upload.read(CHUNK_BYTES):
            written += len(chunk)
            if written > limit:
                raise ObjectTooLarge(f"file too large: {path.name} (limit {limit} bytes)")
            out.write(chunk)


class _BoundedBody:
    """At most `limit` bytes of a request's body: a larger Content-Length is answered
    413 before anything is read; a body that grows past it (chunked) stops the read."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit() or int(length) > self.limit:
            response = JSONResponse(
                errors.body_of(ObjectTooLarge(f"request body too large (limit {self.limit})")),
                status_code=413 if length.isdigit() else 400,
            )
            await response(scope, receive, send)
            return
        await self.app(scope, _counted(receive, self.limit), send)


def _counted(receive: Receive, limit: int) -> Callable[[], Awaitable[Message]]:
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge
        return message

    return counted
