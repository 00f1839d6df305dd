"""The guard of every request: the knowledge base the server keeps open, entered as the
caller the request's bearer token names, exactly as a command is (services/access.py)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from starlette.requests import Request

from kb_cli.app import Kb
from kb_cli.config import Settings
from kb_cli.errors import KbError, NotFoundError
from kb_cli.permissions import Rule
from kb_cli.services import access
from kb_cli.services.access import Grant


class Home:
    """The knowledge base every request is answered from: opened by the first request
    that finds it (or the first upload, which makes it) and kept, so that its
    connections, its vector index and its embedding models are made once, not per
    request. Each request acts in it as its own caller (`access.enter_as`).

    A SQLite home is checked at every request: when its database file is gone or is
    another file (the home deleted, restored from a backup, moved), the kept one is
    dropped and the home opened again as a command would open it, so that no request
    reads or writes a database nobody else sees any more."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._kb: Kb | None = None
        self._identity: tuple[int, int] | None = None
        self._opening = threading.Lock()
        self._file = self._database_file(settings)

    def open(self, rule: Rule, target: str | None, create: bool, bases: Sequence[str | None]) -> Kb:
        kept = self._kb
        if kept is not None and self._identity == self._current_identity():
            return kept
        with self._opening:
            if self._kb is None or self._identity != self._current_identity():
                self._kb = None  # its connections close as each thread's are collected
                named = access.named_bases(rule, target, bases)
                self._kb = access.open_home(self.settings, create, named)
                self._identity = self._current_identity()
            return self._kb

    def close_thread(self) -> None:
        """This thread's connections, at the end of a thread of its own (an event
        stream's); the pool's threads keep theirs for the next request."""
        if self._kb is not None:
            self._kb.db.close()

    @staticmethod
    def _database_file(settings: Settings) -> Path | None:
        if not settings.is_sqlite:
            return None
        from kb_cli.engines.sqlite import database_path

        return Path(database_path(settings.database_url))

    def _current_identity(self) -> tuple[int, int] | None:
        """(device, inode) of the SQLite database file; None when it is missing, and on
        PostgreSQL, whose database is the server's to keep."""
        if self._file is None:
            return None
        try:
            status = self._file.stat()
        except OSError:
            return None
        return status.st_dev, status.st_ino


def token_of(request: Request) -> str:
    """The request's bearer token ("" when it sends none): the server's own KB_TOKEN is
    never a caller's."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


@contextlib.contextmanager
def guarded(
    home: Home,
    request: Request,
    rule: Rule,
    target: str | None = None,
    create: bool = False,
    bases: Sequence[str | None] = (),
    kind: tuple[str, ...] | str | None = None,
) -> Iterator[tuple[Kb, Grant]]:
    """The knowledge base as the request's caller, once the guard let it in (`kind`:
    what the target must be, "documents", "tasks" or "deleted"; another is not found,
    as an id of nothing). A refusal a service raises after the guard let the
    caller in is written to the audit trail, as the command line's error boundary does."""
    opened = home.open(rule, target, create, bases)
    kb, grant = access.enter_as(opened, rule, target, (), bases, token=token_of(request))
    kinds = (kind,) if isinstance(kind, str) else kind
    if kinds is not None and grant.kind not in kinds:
        noun = "ingestion task" if kinds == ("tasks",) else "document"
        raise NotFoundError(f"no {noun} with id {target}")
    try:
        yield kb, grant
    except KbError as error:
        if error.is_refusal:
            access.record_refusal(kb, kb.actor.name, rule.command, target, error.message)
        raise
