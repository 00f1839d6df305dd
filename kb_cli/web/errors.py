"""kb's errors as HTTP answers: a status for each error class, and one JSON body
everywhere, `{"error": CODE, "message": TEXT}` (the body `--json` writes on stderr).

No answer carries a traceback, SQL, a token or a path of the server's: an unexpected
failure says only its class, and the home's path is taken out of every message."""

from __future__ import annotations

import re

from kb_cli.errors import (
    BusyError,
    DocumentTooLarge,
    KbError,
    NoKnowledgeBaseYet,
    ObjectTooLarge,
    ProviderUnavailable,
    StorageUnavailable,
    TokenMissing,
)

# By the error's code (errors.py); a class listed in _BY_CLASS comes first.
_BY_CODE = {
    "not_found": 404,
    "conflict": 409,
    "forbidden": 403,
    "usage": 422,
    "invalid_input": 422,
    "busy": 503,
    "internal_error": 500,
}
_BY_CLASS: tuple[tuple[type[KbError], int], ...] = (
    (TokenMissing, 401),  # users exist and no token was sent: send one
    (ObjectTooLarge, 413),
    (DocumentTooLarge, 422),
    (ProviderUnavailable, 503),
    (StorageUnavailable, 503),
)
RETRY_AFTER_SECONDS = 1  # a busy database: safe to send the request again

NO_HOME = "no knowledge base yet: POST /api/documents creates one"


def status_of(error: KbError) -> int:
    for cls, status in _BY_CLASS:
        if isinstance(error, cls):
            return status
    return _BY_CODE.get(error.code, 500)


def headers_of(error: KbError) -> dict[str, str]:
    if isinstance(error, TokenMissing):
        return {"WWW-Authenticate": "Bearer"}
    if isinstance(error, BusyError | ProviderUnavailable | StorageUnavailable):
        return {"Retry-After": str(RETRY_AFTER_SECONDS)}
    return {}


def body_of(error: KbError, hidden: tuple[str, ...] = ()) -> dict[str, str]:
    """The JSON body of an error: its code, and its message without the paths in
    `hidden` (the home, the upload's scratch directory)."""
    if isinstance(error, NoKnowledgeBaseYet):  # its message names the home's path
        return {"error": error.code, "message": NO_HOME}
    message = _in_http_terms(error.message)
    if isinstance(error, TokenMissing):
        message = "forbidden: no token: send Authorization: Bearer <token>"
    for path in hidden:
        if path:
            message = message.replace(path, "…")
    return {"error": error.code, "message": message}


# The options a route takes as parameters of the same name: a message that names
# `--limit` names `limit` over HTTP. Other options in a message are a command's (a hint
# to run `kb work --drain`, say), and stay as they are.
_PARAMETERS = re.compile(
    r"(?<![\w-])--(limit|context|where|meta|reason|since|mode|per-document|if-version"
    r"|status|error-code|base)\b"
)


def _in_http_terms(message: str) -> str:
    message = message.replace("KB_TOKEN", "the bearer token")
    return _PARAMETERS.sub(lambda named: named.group(1).replace("-", "_"), message)


def unexpected(error: BaseException) -> dict[str, str]:
    return {"error": "internal_error", "message": f"unexpected {type(error).__name__}"}


def for_status(status: int, detail: str) -> dict[str, str]:
    """The body of a refusal by the HTTP layer itself (no such route, wrong method, a
    malformed request)."""
    code = {404: "not_found", 413: "invalid_input", 401: "forbidden", 403: "forbidden"}.get(
        status, "usage" if 400 <= status < 500 else "internal_error"
    )
    return {"error": code, "message": detail}
