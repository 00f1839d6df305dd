"""Who may run what, and where (docs/access.md, "Users, roles and the audit trail" and
"Knowledge bases"), as data.

A command declares a `Rule`: the roles that may run it and what it acts on (a
document, a task, either, or a base it names). The guard in `services.access`
checks both before anything changes and returns the `Actor`; queries take the
actor's `Scope`, so every read path filters to readable bases inside its SQL.

Kept free of heavy imports: `kb --help` builds every command's rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from kb_cli.errors import UsageError
from kb_cli.metadata import MetaFilter


class Role(StrEnum):
    VIEWER = "viewer"
    EDITOR = "editor"
    REVIEWER = "reviewer"
    WORKER = "worker"
    ADMIN = "admin"


READERS = frozenset({Role.VIEWER, Role.EDITOR, Role.REVIEWER, Role.ADMIN})
EDITORS = frozenset({Role.EDITOR, Role.REVIEWER, Role.ADMIN})
REVIEWERS = frozenset({Role.REVIEWER, Role.ADMIN})
WORKERS = frozenset({Role.WORKER, Role.ADMIN})
ADMINS = frozenset({Role.ADMIN})
STATUS_READERS = READERS | {Role.WORKER}
# Roles whose work spans every base: admins manage everything, workers process the
# tasks of every base.
READ_EVERY_BASE = frozenset({Role.ADMIN, Role.WORKER})
DEFAULT_BASE = "default"
BASE_PREFIX = "base:"  # how a base is named in the audit trail (and in `kb history`)


class Target(StrEnum):
    """What the id a command names refers to; its base decides where it acts."""

    DOCUMENT = "document"
    TASK = "task"
    TASK_OR_DOCUMENT = "task_or_document"
    TRAIL = "trail"  # a task, a document, or a deleted document (history)
    BASE = "base"


@dataclass(frozen=True)
class Rule:
    command: str
    roles: frozenset[Role]
    acts_on: Target | None = None


@dataclass(frozen=True)
class Scope:
    """Which bases a read may see: `reader` None means every base; `bases` narrows to
    those (none named: no narrowing); `where` keeps the documents whose metadata
    matches every filter (`--where`)."""

    reader: str | None = None
    bases: tuple[str, ...] = ()
    where: tuple[MetaFilter, ...] = ()


@dataclass(frozen=True)
class Actor:
    """The caller, as the guard established it. `role` None: open mode (no admin yet)."""

    name: str
    role: Role | None = None
    # The id of the token the guard accepted: a long-running caller (`kb events
    # --follow`, a stream of `kb serve`) is refused once its token is replaced.
    token_id: str | None = None

    @property
    def reads_every_base(self) -> bool:
        return self.role is None or self.role in READ_EVERY_BASE

    def scope(self, *bases: str | None) -> Scope:
        """The bases the actor may read, narrowed to `bases` (a None among them names
        none: `scope(None)` is every readable base)."""
        named = tuple(dict.fromkeys(base for base in bases if base is not None))
        return Scope(None if self.reads_every_base else self.name, named)


# The rules a command shares with its `kb serve` route (each command declares the rest
# beside itself): one rule for both, so the HTTP adapter checks exactly what the command does.
UPLOAD = Rule("upload", EDITORS, Target.BASE)
SUBMIT = Rule("submit", EDITORS, Target.DOCUMENT)
PUBLISH = Rule("publish", REVIEWERS, Target.DOCUMENT)
STATUS = Rule("status", STATUS_READERS, Target.TASK_OR_DOCUMENT)
CANCEL = Rule("cancel", EDITORS, Target.TASK_OR_DOCUMENT)
RETRY = Rule("retry", EDITORS, Target.TASK_OR_DOCUMENT)
SEARCH = Rule("search", READERS, Target.BASE)
EVENTS = Rule("events", READERS)
REJECT = Rule("reject", REVIEWERS, Target.DOCUMENT)
UNPUBLISH = Rule("unpublish", REVIEWERS, Target.DOCUMENT)
DELETE = Rule("delete", EDITORS, Target.DOCUMENT)
HISTORY = Rule("history", READERS, Target.TRAIL)

# Names that read well in a shell: no spaces, quotes or leading dash.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_names(names: list[str], noun: str) -> list[str]:
    """Base and team names, deduplicated in order; a bad one is a usage error."""
    for name in names:
        if not _NAME.fullmatch(name):
            raise UsageError(
                f"a {noun} name is 1 to 100 letters, digits, '.', '_' or '-', "
                f"starting with a letter or digit: {name!r}"
            )
    return list(dict.fromkeys(names))
