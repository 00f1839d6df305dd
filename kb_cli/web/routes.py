"""The routes of `kb serve` (docs/interface.md, "HTTP"): each one the command it
stands for, through the same guard and the same service.

Every request acts in the one knowledge base the server keeps open (web/guard.py), as
the caller its bearer token names. Routes that touch the database are plain
functions, which FastAPI runs on its thread pool; only the upload reads its body
itself, and the event stream follows on a thread of its own (web/events.py)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi import Body, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp

from kb_cli import __version__
from kb_cli.config import Settings
from kb_cli.errors import KbError, NoKnowledgeBaseYet, ObjectTooLarge
from kb_cli.lifecycle import ErrorCode, ListedDocStatus, TaskStatus
from kb_cli.permissions import (
    CANCEL,
    DELETE,
    HISTORY,
    PUBLISH,
    REJECT,
    RETRY,
    SEARCH,
    STATUS,
    SUBMIT,
    UNPUBLISH,
    UPLOAD,
)
from kb_cli.ranking import SearchMode
from kb_cli.web import errors, events, uploads
from kb_cli.web.guard import Home, guarded

Records = list[dict[str, Any]]
BASES = Query(None, description="Only this base (repeatable), as `--base`.")
WHERE = Query(None, description="KEY=VALUE or KEY^=PREFIX (repeatable), as `--where`.")


def build(settings: Settings, scratch: Path, streams: events.Streams | None = None) -> ASGIApp:
    """The ASGI application: the routes, inside the bound on a request's body (the upload
    limit, KB_MAX_UPLOAD_BYTES, plus the form's framing); uploads are received under
    `scratch`."""
    app = FastAPI(
        title="kb",
        version=__version__,
        summary="The ingestion lifecycle of a knowledge base, over HTTP",
    )
    home = Home(settings)
    hidden = (str(settings.home), settings.where(short=False))
    _errors(app, hidden)
    _document_routes(app, home, scratch)
    _review_routes(app, home)
    _task_routes(app, home)
    _search_route(app, home)
    events.add_route(app, home, hidden, streams or events.Streams())
    return uploads.BoundedBody(app, settings.max_upload_bytes + uploads.FORM_OVERHEAD_BYTES)


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
        # A body FastAPI could not parse (400) is a malformed request: `usage`, 422.
        status = 422 if error.status_code == 400 else error.status_code
        return JSONResponse(
            errors.for_status(status, detail), status_code=status, headers=error.headers
        )

    async def crashed(request: Request, error: Exception) -> JSONResponse:
        return JSONResponse(errors.unexpected(error), status_code=500)

    app.add_exception_handler(KbError, kb_error)
    app.add_exception_handler(uploads.BodyTooLarge, too_large)
    app.add_exception_handler(RequestValidationError, malformed)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, crashed)


def _error_response(error: KbError, hidden: tuple[str, ...]) -> JSONResponse:
    return JSONResponse(
        errors.body_of(error, hidden),
        status_code=errors.status_of(error),
        headers=errors.headers_of(error),
    )


# Each route returns its records as they are (response_model=None): a response model
# would validate them again on the thread pool, queued behind every request waiting
# there (200 searches at once answered only at the end of the burst).


def _document_routes(app: FastAPI, home: Home, scratch: Path) -> None:
    settings = home.settings

    @app.get("/api/health", response_model=None)
    def health() -> dict[str, Any]:
        """The server answers. Asks no token and reads no database."""
        return {"status": "ok", "version": __version__}

    @app.post("/api/documents", status_code=201, response_model=None)
    async def upload(request: Request) -> JSONResponse:
        """`kb upload`: multipart field `files` (repeat it for several); optional fields
        `base`, `meta` (KEY=VALUE, repeatable) and `submit` (true: each document is
        submitted too, and its task record answered instead). 201 with one record per
        file; every file is checked before any is stored."""
        await run_in_threadpool(_may_upload, home, request)
        with received_in(scratch) as directory:
            asked = await uploads.received(request, directory, settings.max_upload_bytes)
            records = await run_in_threadpool(_upload, home, request, asked)
        return JSONResponse(records, status_code=201)

    @app.get("/api/documents", response_model=None)
    def documents_listed(
        request: Request,
        base: list[str] | None = BASES,
        status: ListedDocStatus | None = Query(None, description="As `--status`."),
        error_code: ErrorCode | None = Query(None, description="As `--error-code`."),
        where: list[str] | None = WHERE,
        limit: int | None = Query(None, ge=1, description="The newest N only."),
    ) -> Records:
        """`kb status`: the documents of the caller's bases, newest first."""
        return [
            record.to_dict()
            for record in _listed(home, request, base, status, error_code, where, limit)
        ]

    @app.get("/api/documents/{document_id}", response_model=None)
    def document(document_id: str, request: Request) -> dict[str, Any]:
        """`kb status DOCUMENT_ID`: the document record."""
        from kb_cli.services import tasks

        with guarded(home, request, STATUS, document_id, kind="documents") as (kb, grant):
            return tasks.get_record(kb, grant.full_id, grant.kind).to_dict()

    @app.post("/api/documents/{document_id}/submit", status_code=202, response_model=None)
    def submit(document_id: str, request: Request) -> dict[str, Any]:
        """`kb submit`: 202 with the queued task's record; `kb work` processes it."""
        from kb_cli.services import documents

        with guarded(home, request, SUBMIT, document_id) as (kb, grant):
            return documents.submit_document(kb, grant.full_id).to_dict()

    @app.post("/api/documents/{document_id}/retry", response_model=None)
    def retry(document_id: str, request: Request) -> dict[str, Any]:
        """`kb retry DOCUMENT_ID`: its failed task queued again; 409 unless it failed."""
        from kb_cli.services import tasks

        with guarded(home, request, RETRY, document_id, kind="documents") as (kb, grant):
            return tasks.retry_task(kb, grant.full_id, grant.kind).to_dict()

    @app.delete("/api/documents/{document_id}", response_model=None)
    def delete(document_id: str, request: Request) -> dict[str, Any]:
        """`kb delete DOCUMENT_ID --yes`: the document with its revisions, chunks, tasks
        and stored file (a running task is cancelled first); its trail stays."""
        from kb_cli.services import removal

        with guarded(home, request, DELETE, document_id) as (kb, grant):
            [deleted] = removal.delete(kb, removal.plan(kb, [grant.full_id]))
            return deleted.to_dict()

    @app.get("/api/documents/{document_id}/history", response_model=None)
    def document_history(document_id: str, request: Request) -> Records:
        """`kb history DOCUMENT_ID`: its audit trail with its tasks', oldest first (a
        deleted document's too)."""
        return _history(home, request, document_id, ("documents", "deleted"))


def _review_routes(app: FastAPI, home: Home) -> None:
    @app.post("/api/documents/{document_id}/publish", response_model=None)
    def publish(
        document_id: str,
        request: Request,
        if_version: int | None = Query(None, description="`--if-version`: else 409."),
    ) -> dict[str, Any]:
        """`kb publish`: the published document's record."""
        from kb_cli.services import documents

        with guarded(home, request, PUBLISH, document_id) as (kb, grant):
            return documents.publish_document(kb, grant.full_id, if_version).to_dict()

    @app.post("/api/documents/{document_id}/reject", response_model=None)
    def reject(
        document_id: str,
        request: Request,
        reason: str = Body(..., embed=True, description="Why (kept, shown in history)."),
    ) -> dict[str, Any]:
        """`kb reject --reason`: a JSON body `{"reason": TEXT}`; the document's record."""
        from kb_cli.services import review

        with guarded(home, request, REJECT, document_id) as (kb, grant):
            return review.reject_document(kb, grant.full_id, reason).to_dict()

    @app.post("/api/documents/{document_id}/unpublish", response_model=None)
    def unpublish(document_id: str, request: Request) -> dict[str, Any]:
        """`kb unpublish`: search stops serving it at once; the document's record."""
        from kb_cli.services import review

        with guarded(home, request, UNPUBLISH, document_id) as (kb, grant):
            return review.unpublish_document(kb, grant.full_id).to_dict()


def _task_routes(app: FastAPI, home: Home) -> None:
    @app.get("/api/ingestion-tasks", response_model=None)
    def tasks_listed(
        request: Request,
        base: list[str] | None = BASES,
        status: TaskStatus | None = Query(None, description="Only tasks in this status."),
        error_code: ErrorCode | None = Query(None, description="As `--error-code`."),
        where: list[str] | None = WHERE,
        limit: int | None = Query(None, ge=1, description="The newest N only."),
    ) -> Records:
        """The latest task of each document `GET /api/documents` lists, newest document
        first (a document never submitted has none)."""
        listed = _listed(home, request, base, None, error_code, where, None)
        latest = [
            record.latest_task
            for record in listed
            if record.latest_task is not None
            and (status is None or record.latest_task.status == status)
        ]
        return [task.to_dict() for task in latest[:limit]]

    @app.get("/api/ingestion-tasks/{task_id}", response_model=None)
    def task(task_id: str, request: Request) -> dict[str, Any]:
        """`kb status TASK_ID`: the task record."""
        from kb_cli.services import tasks

        with guarded(home, request, STATUS, task_id, kind="tasks") as (kb, grant):
            return tasks.get_record(kb, grant.full_id, grant.kind).to_dict()

    @app.delete("/api/ingestion-tasks/{task_id}", response_model=None)
    def cancel(task_id: str, request: Request) -> dict[str, Any]:
        """`kb cancel`: the cancelled task's record; 409 when it is not cancellable."""
        from kb_cli.services import tasks

        with guarded(home, request, CANCEL, task_id, kind="tasks") as (kb, grant):
            return tasks.cancel_task(kb, grant.full_id, grant.kind).to_dict()

    @app.get("/api/ingestion-tasks/{task_id}/history", response_model=None)
    def task_history(task_id: str, request: Request) -> Records:
        """`kb history TASK_ID`: the task's audit trail, oldest first."""
        return _history(home, request, task_id, ("tasks",))


def _search_route(app: FastAPI, home: Home) -> None:
    @app.get("/api/search", response_model=None)
    def search(
        request: Request,
        q: str = Query(..., description="The question or words, as `kb search QUERY`."),
        limit: int = Query(10, ge=1, description="At most this many hits (`--limit`)."),
        mode: SearchMode | None = Query(None, description="lexical, vector or hybrid."),
        per_document: bool = Query(False, description="One hit per document."),
        context: int = Query(0, ge=0, description="Neighbouring chunks merged (`--context`)."),
        base: str | None = Query(None, description="Only this base (`--base`)."),
        where: list[str] | None = WHERE,
    ) -> JSONResponse:
        """`kb search`: the hits (each the record `--json` prints), best first, with the
        ranking that ran, warnings, and why nothing was found when nothing was."""
        from kb_cli import metadata
        from kb_cli.services import search as search_service

        asked = search_service.SearchRequest(
            q,
            limit,
            mode,
            per_document=per_document,
            base=base,
            context=context,
            where=metadata.parse_where(where or []),
        )
        with guarded(home, request, SEARCH, base) as (kb, _grant):
            result = search_service.search(kb, asked)
        # A response of its own: FastAPI's encoder would walk every hit again (0.34 ms
        # of a search's 3 ms over HTTP at 80k chunks, where json.dumps takes 0.07 ms).
        return JSONResponse(
            {
                "hits": [hit.to_dict() for hit in result.hits],
                "mode": str(result.mode),
                "warnings": result.warnings,
                "nothing_because": result.nothing_because,
                "hints": result.hints,
            }
        )


def _listed(
    home: Home,
    request: Request,
    base: list[str] | None,
    status: ListedDocStatus | None,
    error_code: ErrorCode | None,
    where: list[str] | None,
    limit: int | None,
) -> list[Any]:
    from kb_cli import metadata
    from kb_cli.services import documents

    filters = metadata.parse_where(where or [])
    bases = tuple(base or ())
    with guarded(home, request, STATUS, bases=bases) as (kb, _grant):
        records = documents.list_document_records(kb, status, error_code, filters, bases, limit)
    return records[:limit] if limit else records


def _history(home: Home, request: Request, entity_id: str, kinds: tuple[str, ...]) -> Records:
    from kb_cli.services.history import history

    with guarded(home, request, HISTORY, entity_id, kind=kinds) as (kb, grant):
        return [event.to_dict() for event in history(kb, grant.full_id, grant.kind)]


def _may_upload(home: Home, request: Request) -> None:
    """The caller's role, before the body is read: a caller who may not upload is
    refused at once, not after sending its files (the base it names is checked once
    the form is read). Nothing to check where there is no knowledge base yet: the first
    upload makes it, in open mode."""
    try:
        with guarded(home, request, UPLOAD):
            pass
    except NoKnowledgeBaseYet:
        pass


def _upload(home: Home, request: Request, asked: uploads.Upload) -> Records:
    from kb_cli.services import documents

    checked = documents.check_files(asked.paths, home.settings.max_upload_bytes)
    with guarded(home, request, UPLOAD, asked.base, create=True) as (kb, _grant):
        uploaded = documents.upload(
            kb, asked.paths, submit=asked.submit, base=asked.base, meta=asked.meta, checked=checked
        )
    return [record.to_dict() for record in uploaded.records]


@contextlib.contextmanager
def received_in(scratch: Path) -> Iterator[Path]:
    """A directory of this request's own in the server's scratch, removed when it is
    answered; the scratch made again if something removed it (a cleaner of the
    temporary directory, or a server of another process namespace that took this one
    for dead)."""
    scratch.mkdir(mode=0o700, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as directory:
        yield Path(directory)
