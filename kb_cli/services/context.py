"""What every service needs: settings, the database, the object store, the embedding
provider, the caller."""

from __future__ import annotations

import functools
import getpass
import os
from dataclasses import dataclass

from kb_cli import queries
from kb_cli.config import Settings
from kb_cli.db import Connection, Database
from kb_cli.embeddings import Embedder, make_embedder
from kb_cli.errors import IdTooLong, InvalidInputError, NotFoundError, UsageError
from kb_cli.store import FileObjectStore

MAX_ID_CHARS = 100


@dataclass
class Kb:
    settings: Settings
    db: Database
    store: FileObjectStore
    actor: str

    @functools.cached_property
    def embedder(self) -> Embedder | None:
        """The configured embedding provider (None: embeddings off). Built on first use,
        so commands that never embed never check its configuration; a test or another
        provider is injected by assigning this attribute."""
        return make_embedder(self.settings.embeddings)

    @classmethod
    def open(cls, settings: Settings, actor: str | None = None) -> Kb:
        """Connect, creating the home directory and the schema on first use."""
        _keep_private()
        if settings.database_url.startswith("sqlite"):
            try:
                settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise UsageError("the kb home is not a directory (--home / KB_HOME)") from None
            except OSError as error:
                raise UsageError(f"cannot create the kb home: {error.strerror}") from None
        db = Database(settings.database_url, settings.busy_timeout_seconds)
        db.ensure_schema()
        return cls(settings, db, FileObjectStore(settings.object_store), actor or _login())


def _keep_private() -> None:
    """Whatever kb creates (database, its journal, objects, directories) is readable by
    its owner only: 0600 files, 0700 directories, or tighter if the umask says so.
    Unpublished documents and token hashes are no other local account's business."""
    os.umask(os.umask(0o077) | 0o077)


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "local"


def resolve_id(conn: Connection, ref: str, *kinds: str) -> tuple[str, str]:
    """Resolve a full id or a unique prefix among `kinds` ("documents", "tasks")."""
    if len(ref) > MAX_ID_CHARS:  # no id is that long: refused before any SQL
        noun = " or ".join(kind.rstrip("s") for kind in kinds)
        raise IdTooLong(f"no {noun} with an id of {len(ref)} characters (ids have 36)")
    matches = []
    for kind in kinds:
        getter = queries.get_document if kind == "documents" else queries.get_task
        if getter(conn, ref) is not None:
            return kind, ref
        matches += [(kind, found) for found in queries.find_ids_by_prefix(conn, kind, ref)]
    if len(matches) > 1:
        raise InvalidInputError(f"id prefix {ref!r} is ambiguous; give more characters")
    if not matches:
        noun = " or ".join(kind.rstrip("s") for kind in kinds)
        raise NotFoundError(f"no {noun} with id {ref!r}")
    return matches[0]


def resolve_document_id(conn: Connection, ref: str) -> str:
    return resolve_id(conn, ref, "documents")[1]


def resolve_task_id(conn: Connection, ref: str) -> str:
    return resolve_id(conn, ref, "tasks")[1]
