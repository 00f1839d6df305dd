"""`POST /api/documents`: the multipart form read into a scratch directory, every file
and the whole body bounded as the bytes arrive (docs/limits.md, "What a request to
`kb serve` may send")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kb_cli import metadata
from kb_cli.errors import ObjectTooLarge, UsageError
from kb_cli.permissions import DEFAULT_BASE
from kb_cli.web import errors

MAX_FILES = 100  # files of one upload request
MAX_FIELDS = 40  # base, submit, and a meta field for each key a document may have
FORM_OVERHEAD_BYTES = 1024 * 1024  # the multipart framing and the small fields around the files
CHUNK_BYTES = 1024 * 1024
MAX_NAME_BYTES = 255  # a file name on the file systems kb runs on
_YES, _NO = ("true", "1", "yes", "on"), ("false", "0", "no", "off", "")


class BodyTooLarge(Exception):
    """The request's body went past the server's bound."""


@dataclass(frozen=True)
class Upload:
    """What a form asked for: its files (in the scratch directory), the base, the
    metadata of each document, and whether to submit them as they are stored."""

    paths: list[Path]
    base: str
    meta: dict[str, str]
    submit: bool


async def received(request: Request, scratch: Path, limit: int) -> Upload:
    """The uploaded files, each written to `scratch` under its own name (no directory
    of it: a name is only a name), each at most `limit` bytes; and the form's fields:
    `base`, `meta` (KEY=VALUE, repeatable), `submit` (true or false)."""
    try:
        form = await request.form(max_files=MAX_FILES, max_fields=MAX_FIELDS)
    except BodyTooLarge:
        raise ObjectTooLarge(f"request body too large (limit {limit} bytes of files)") from None
    except HTTPException as error:  # the form's own bounds (too many files or fields)
        raise UsageError(f"bad upload: {error.detail}") from None
    try:
        base = _text(form.get("base"), "base") or DEFAULT_BASE
        meta = metadata.parse_pairs(_text(value, "meta") for value in form.getlist("meta"))
        submit = _yes_or_no(_text(form.get("submit"), "submit"))
        uploads = form.getlist("files")
        if not uploads:
            raise UsageError("give at least one file in the multipart field files")
        paths = []
        for n, upload in enumerate(uploads):
            if not isinstance(upload, UploadFile):
                raise UsageError("the field files takes files, not text")
            name = _file_name(upload.filename)
            path = scratch / str(n) / name
            path.parent.mkdir()
            await _copy(upload, path, limit)
            paths.append(path)
        return Upload(paths, base, meta, submit)
    finally:
        await form.close()


def _file_name(sent: str | None) -> str:
    """The last part of the name a client sent (no directory of it: a name is only a
    name), one a file system can hold."""
    name = PurePosixPath((sent or "").replace("\\", "/")).name
    if name in ("", ".", ".."):
        raise UsageError("every file needs a file name")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES or "\x00" in name:
        raise UsageError(f"a file name is at most {MAX_NAME_BYTES} bytes, without NUL")
    return name


def _text(value: object, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UsageError(f"the field {field} is text, not a file")
    return value


def _yes_or_no(value: str) -> bool:
    if value.lower() not in _YES + _NO:
        raise UsageError(f"the field submit is true or false, not {value[:20]!r}")
    return value.lower() in _YES


async def _copy(upload: UploadFile, path: Path, limit: int) -> None:
    written = 0
    with path.open("wb") as out:
        while chunk := await upload.read(CHUNK_BYTES):
            written += len(chunk)
            if written > limit:
                raise ObjectTooLarge(f"file too large: {path.name} (limit {limit} bytes)")
            out.write(chunk)


class BoundedBody:
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
