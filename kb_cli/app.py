"""The application context: settings, the database, the object store, the providers,
the clock and the caller; and resolving the ids a caller names. Below both the services
and the worker, which receive it."""

from __future__ import annotations

import dataclasses
import difflib
import getpass
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, cast, overload

from kb_cli import queries
from kb_cli.clock import SYSTEM_CLOCK, Clock
from kb_cli.config import Settings
from kb_cli.db import Connection, Database, format_stamp
from kb_cli.embeddings import Embedder, make_embedder
from kb_cli.errors import (
    CallerRevoked,
    IdTooLong,
    InvalidInputError,
    NoKnowledgeBaseYet,
    NotFoundError,
    ObjectStoreMisconfigured,
    ObjectStoreUnreachable,
    UsageError,
    WrongObjectStore,
)
from kb_cli.lexical import LexicalIndex, make_lexical_index
from kb_cli.permissions import Actor, Scope
from kb_cli.queries import MIN_PREFIX
from kb_cli.reranking import Reranker, make_reranker
from kb_cli.store import ObjectStore, open_store
from kb_cli.vectors import VectorIndex, make_vector_index

MAX_ID_CHARS = 100


Built = TypeVar("Built")


class _BuiltOnce(Generic[Built]):
    """A provider of the context, built on first use (so commands that never embed never
    check its configuration) and then shared by every context `acting_as` makes of it:
    `kb serve` answers each request as its own caller, with the one model it loaded. A
    test or another provider is injected by assigning the attribute."""

    def __init__(self, build: Callable[[Kb], Built]) -> None:
        self.build = build
        self.__doc__ = build.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, kb: None, owner: type) -> _BuiltOnce[Built]: ...
    @overload
    def __get__(self, kb: Kb, owner: type) -> Built: ...

    def __get__(self, kb: Kb | None, owner: type) -> _BuiltOnce[Built] | Built:
        if kb is None:
            return self
        built = kb.built
        if self.name not in built:
            with _BUILDING:  # two requests at once build a model once
                if self.name not in built:
                    built[self.name] = self.build(kb)
        return cast(Built, built[self.name])

    def __set__(self, kb: Kb, value: Built) -> None:
        kb.built[self.name] = value


_BUILDING = threading.RLock()


@dataclass
class Kb:
    settings: Settings
    db: Database
    store: ObjectStore
    actor: Actor
    clock: Clock = field(default=SYSTEM_CLOCK)
    # What _BuiltOnce built, by name: the same dict in every context acting_as makes.
    built: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @_BuiltOnce
    def embedder(self) -> Embedder | None:
        """The configured embedding provider (None: embeddings off)."""
        return make_embedder(self.settings.embeddings)

    def embedder_for(self, model: str | None) -> Embedder | None:
        """The embedder of a base whose model is `model` (a provider name; None: the
        base follows KB_EMBEDDINGS, the configured one above), built once a process."""
        if model is None or model == self.settings.embeddings.provider:
            return self.embedder
        embedders = self._embedders
        if model not in embedders:
            with _BUILDING:
                if model not in embedders:
                    provider = dataclasses.replace(self.settings.embeddings, provider=model)
                    embedders[model] = make_embedder(provider)
        return embedders[model]

    def models_in(self, conn: Connection, scope: Scope) -> dict[str, list[str]]:
        """Each embedding provider of the bases in `scope`, with the bases it embeds
        (a base that follows KB_EMBEDDINGS under the configured provider), by name."""
        bases_of: dict[str, list[str]] = {}
        for base, model in sorted(queries.base_models(conn, scope).items()):
            bases_of.setdefault(model or self.settings.embeddings.provider, []).append(base)
        return bases_of

    @_BuiltOnce
    def _embedders(self) -> dict[str, Embedder | None]:
        return {}

    @_BuiltOnce
    def reranker(self) -> Reranker | None:
        """The configured reranker (None: off), built on first use like the embedder."""
        return make_reranker(self.settings.rerank)

    # The two indexes of search, each chosen by its package from the engine.
    @_BuiltOnce
    def lexical(self) -> LexicalIndex:
        """How search ranks published chunks by their words on this knowledge base."""
        return make_lexical_index(self.settings)

    @_BuiltOnce
    def vectors(self) -> VectorIndex:
        """How search finds the chunks nearest a query vector on this knowledge base, and
        what the worker, `kb doctor` and `kb reindex` keep up to date."""
        return make_vector_index(self.settings)

    # True when this open made the knowledge base (its home, or its tables).
    created: bool = False

    @classmethod
    def open(cls, settings: Settings, actor: str | None = None, create: bool = True) -> Kb:
        """Connect, creating the home directory and the schema on first use. A command
        that puts nothing in a knowledge base (`create=False`) creates nothing, and is
        refused (usage) where there is none: a newcomer in the wrong directory gets a
        message naming the home it looked in, not an empty home."""
        if settings.is_sqlite:
            _prepare_sqlite_home(settings, create)
        db = Database(settings.database_url, settings.busy_timeout_seconds, settings.wake)
        try:
            created = db.ensure_schema(create)
        except BaseException:
            db.close()
            raise
        if created is None:
            db.close()
            raise NoKnowledgeBaseYet(settings.where(), _CHOOSE_DATABASE)
        store = open_store(settings.object_store)  # opened at its first read or write
        return cls(settings, db, store, Actor(actor or _login()), created=created)

    def acting_as(self, actor: Actor) -> Kb:
        """This context for the caller the guard established (the guard never mutates a
        context: it returns the actor, and the command builds its own), sharing what
        this one built."""
        return dataclasses.replace(self, actor=actor)

    @property
    def scope(self) -> Scope:
        """Every base the caller may read."""
        return self.actor.scope()

    def timestamp(self) -> str:
        """Now by this context's clock, as a stamp: the time of everything it writes."""
        return format_stamp(self.clock.now())


def require_caller(conn: Connection, actor: Actor) -> None:
    """CallerRevoked when the user a long-running command authenticated as may not go
    on: disabled, or its token replaced (`kb user token`), since the command started.
    Checked on every wake-up, by one lookup by primary key; the messages are the
    guard's own (services.access). Open mode (no role) has nothing to check."""
    if actor.role is None:
        return
    user = queries.caller_state(conn, actor.name)
    if actor.token_id is not None:  # the token the guard accepted (a request's, for kb serve)
        token_id = [actor.token_id]
    else:
        token_id = os.environ.get("KB_TOKEN", "").split("_")[1:2]
    if user is None or [user.token_id] != token_id:
        raise CallerRevoked("forbidden: KB_TOKEN is not a valid token")
    if user.disabled_at is not None:
        raise CallerRevoked(
            f"forbidden: user {actor.name} is disabled "
            f"(an admin can run: kb user enable {actor.name})"
        )


_CHOOSE_DATABASE = "--database-url or DATABASE_URL (or `kb db upgrade` to create its tables)"


def require_own_store(kb: Kb) -> None:
    """WrongObjectStore when the configured object store is not this knowledge base's:
    it names another database as its owner, or it names none and lacks the newest
    document's object. A worker checks this before it claims anything, so a wrong
    --object-store is one clear refusal, not object_read_error on every task."""
    try:
        owner = kb.store.owner()
    except (ObjectStoreUnreachable, ObjectStoreMisconfigured):
        return  # cannot be checked now; each task's download says what is wrong
    with kb.db.read() as conn:
        check_store_owner(conn, kb, owner)


def check_store_owner(conn: Connection, kb: Kb, owner: str | None) -> None:
    """require_own_store's check in the caller's transaction, for the `owner` its store
    names (an upload reads it on its way to writing)."""
    if owner == queries.database_id(conn):
        return
    if owner is None:
        sample = queries.newest_object_key(conn)
        if sample is None or kb.store.exists(sample):
            return
    recorded = queries.recorded_object_store(conn)
    here = kb.settings.store_where(short=False)
    used = f" (its objects are in {recorded})" if recorded and recorded != here else ""
    raise WrongObjectStore(
        f"the object store {here} is not this knowledge base's{used}: point --object-store "
        "or OBJECT_STORE_ROOT at the store it uses"
    )


def _prepare_sqlite_home(settings: Settings, create: bool) -> None:
    from kb_cli.engines.sqlite import database_path

    home = settings.home
    if home.exists() and not home.is_dir():
        raise UsageError("the kb home is not a directory (--home / KB_HOME)")
    database = Path(database_path(settings.database_url))
    if database.exists():
        return
    if not database.parent.is_dir() and database.parent.resolve() != home.resolve():
        raise UsageError(
            "cannot open the SQLite database file: its directory does not exist "
            "(check --database-url / DATABASE_URL)"
        )
    if not create:
        raise NoKnowledgeBaseYet(settings.where(short=False))
    if not home.parent.is_dir():
        # docs/operations.md: a missing directory is exit 2. A typo in --home must not
        # build a whole tree of directories; only the home itself is created.
        raise UsageError(
            f"cannot create the kb home {home}: its parent directory does not exist "
            "(create it first, or choose another with --home DIR or KB_HOME)"
        )
    try:
        home.mkdir(mode=0o700, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the kb home: {error.strerror}") from None


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "local"


# How a kind of id is named in a refusal; a deleted document is simply not found.
_NOUNS = {"documents": "document", "tasks": "task", "deleted": ""}


def resolve_id(
    conn: Connection, scope: Scope, ref: str, *kinds: str, verb: str | None = None
) -> tuple[str, str]:
    """Resolve a full id or a unique prefix among `kinds` ("documents", "tasks",
    "deleted": what remains of deleted documents) in
    `scope`: a row the caller may not read is not found, and never makes a prefix
    ambiguous; nor does one outside the bases the scope names (`--base`). `verb`: the
    command that named it, for the hint of a refusal."""
    noun = " or ".join(_NOUNS[kind] for kind in kinds if _NOUNS[kind])
    if len(ref) > MAX_ID_CHARS:  # no id is that long: refused before any SQL
        raise IdTooLong(f"no {noun} with an id of {len(ref)} characters (ids have 36)")
    matches = []
    for kind in kinds:
        found = queries.find_ids(conn, kind, ref, scope)
        if ref in found:
            return kind, ref
        matches += [(kind, found_id) for found_id in found]
    if len(matches) > 1:
        raise InvalidInputError(f"id prefix {ref!r} is ambiguous; give more characters")
    if not matches:
        hint = _what_it_names(conn, scope, ref, kinds, verb)
        if not hint and len(ref) < MIN_PREFIX:
            hint = f": a prefix needs at least {MIN_PREFIX} characters"
        bases = scope.bases
        where = f" in base{'s' if len(bases) > 1 else ''} {', '.join(bases)}" if bases else ""
        raise NotFoundError(f"no {noun} with id {ref!r}{where}{hint}")
    return matches[0]


# Commands whose one argument is a document id: a task id given to one is answered
# with the same command for the task's document.
_ONE_DOCUMENT_VERBS = frozenset({"submit", "publish", "unpublish", "delete", "reparse"})


def _what_it_names(
    conn: Connection, scope: Scope, ref: str, kinds: tuple[str, ...], verb: str | None
) -> str:
    """A hint when `ref`, which is no id of `kinds`, names something the caller may read:
    a task where a document is wanted (or the reverse), or a document's file name."""
    if "tasks" not in kinds and (task := _only(queries.find_ids(conn, "tasks", ref, scope))):
        document_id = queries.existing_task(conn, task).document_id
        if queries.find_ids(conn, "documents", document_id, scope):
            again = f" (kb {verb} {document_id})" if verb in _ONE_DOCUMENT_VERBS else ""
            return f"; {task} is a task: did you mean its document {document_id}{again}?"
    if "documents" not in kinds and (
        document := _only(queries.find_ids(conn, "documents", ref, scope))
    ):
        latest = queries.existing_document(conn, document).latest_task_id
        if latest:
            return f"; {document} is a document: did you mean its latest task {latest}?"
    name = Path(ref).name
    named = queries.documents_named(conn, name, scope) if name else []
    if len(named) == 1:
        return f"; the document named {name} is {named[0]}"
    if named:
        return f"; more than one document is named {name}: kb status lists their ids"
    return ""


def _only(found: list[str]) -> str | None:
    return found[0] if len(found) == 1 else None


def resolve_document_id(conn: Connection, scope: Scope, ref: str) -> str:
    return resolve_id(conn, scope, ref, "documents")[1]


def resolve_task_id(conn: Connection, scope: Scope, ref: str) -> str:
    return resolve_id(conn, scope, ref, "tasks")[1]


def require_base(conn: Connection, scope: Scope, name: str) -> None:
    """A base the caller may read, or not_found exactly as if it did not exist: the
    hint names a near name among the bases the caller may read, never another."""
    if not queries.base_exists(conn, name, scope):
        raise no_such_base(name, queries.base_names(conn, Scope(scope.reader)))


def no_such_base(
    name: str, readable: Sequence[str], missing: NoKnowledgeBaseYet | None = None
) -> NotFoundError:
    """not_found for a knowledge base `name`: a near name among `readable` (what the
    caller may read), and how a base is made (`missing`: where there is no knowledge
    base at all yet)."""
    near = difflib.get_close_matches(name, readable, n=1)
    guess = f"did you mean {near[0]}? Else " if near else ""
    if missing is not None:
        return NotFoundError(
            f"no knowledge base named {name!r}: there is no knowledge base in "
            f"{missing.where} yet; {guess}kb base create {name} makes one there with that "
            f"base, or choose another with {missing.choose}"
        )
    listed = "" if near else "kb base list shows the bases you may read, and "
    return NotFoundError(
        f"no knowledge base named {name!r}; {guess}{listed}an admin makes it with: "
        f"kb base create {name}"
    )
