"""Identity and roles (docs/access.md, "Users, roles and the audit trail"): tokens,
permissions, recorded refusals.

Open mode until the first admin exists. Tokens look like `kb_<id>_<secret>`; only a
salted SHA-256 of the secret is stored. The secret has 256 bits of entropy, so a slow
KDF would add latency to every command without adding security.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from kb_cli import queries
from kb_cli.app import MAX_ID_CHARS, Kb, no_such_base, require_base, resolve_id
from kb_cli.config import Settings
from kb_cli.db import Connection, format_stamp
from kb_cli.errors import (
    ConflictError,
    ForbiddenError,
    InternalError,
    KbError,
    NoKnowledgeBaseYet,
    NotFoundError,
    TokenMissing,
    UsageError,
)
from kb_cli.permissions import (
    ADMINS,
    BASE_PREFIX,
    DEFAULT_BASE,
    Actor,
    Role,
    Rule,
    Scope,
    Target,
    check_names,
)
from kb_cli.records import UserRow
from kb_cli.transitions import audit_event

ROLES = tuple(Role)
EVERY_BASE = Scope()
_KINDS = {
    Target.DOCUMENT: ("documents",),
    Target.TASK: ("tasks",),
    Target.TASK_OR_DOCUMENT: ("tasks", "documents"),
    Target.TRAIL: ("tasks", "documents", "deleted"),
}


@dataclass(frozen=True)
class NewUser:
    user: str
    role: str
    token: str
    teams: list[str]

    def to_dict(self) -> dict[str, object]:
        return {"user": self.user, "role": self.role, "token": self.token, "teams": self.teams}


@dataclass(frozen=True)
class Grant:
    """What the guard established before a command acts: the caller, and what the
    command names, resolved once: the full `id` and its `kind` ("documents", "tasks" or
    "deleted"), or the `base` it names (the guard read no row, so it carries none); and
    the `bases` the command is kept to (`--base`), each one the caller may read. A
    command passes these down; the services take full ids and resolve nothing again."""

    actor: Actor
    kind: str | None = None
    id: str | None = None
    base: str | None = None
    more_ids: tuple[str, ...] = ()  # the further ids of a command that names several
    bases: tuple[str, ...] = ()

    @property
    def full_id(self) -> str:
        """The full id of what the command named, for a rule that acts on an id."""
        if self.id is None:
            raise InternalError("the guard resolved no id for this command")
        return self.id

    @property
    def ids(self) -> list[str]:
        """Every id the command named, resolved, in its order (repeats dropped)."""
        return list(dict.fromkeys(([self.id] if self.id else []) + list(self.more_ids)))


Refusal = tuple[str | None, KbError, str]  # (the hidden entity, the error, why)


def authorize(
    kb: Kb,
    rule: Rule,
    target: str | None = None,
    more: Sequence[str] = (),
    bases: Sequence[str] = (),
    token: str | None = None,
) -> Grant:
    """The one guard, run before a command changes anything: the caller's role must be
    one of the rule's, and what the command names (a document, a task, a base) must lie
    in a base the caller may read. `bases` keep the command to those bases (`--base`):
    each must be one the caller may read, and an id outside them is not found. Returns
    the caller and the target resolved (`more`: further ids of the rule's kind, resolved
    as not_found where the caller may not read them, unaudited). A refusal is written to
    the audit trail (who, what, why) and raised: `forbidden` for the role, `not_found`
    for a base the caller may not read, exactly as if the target did not exist.
    `token`: the caller's token (None: KB_TOKEN, as a command has it; `kb serve` passes
    each request's own)."""
    open_mode = False
    given = os.environ.get("KB_TOKEN", "") if token is None else token
    bases = tuple(dict.fromkeys(bases))
    try:
        with kb.db.read() as conn:
            open_mode = not queries.admin_exists(conn)
            if open_mode:  # a single person on a laptop reads every base
                for name in bases:
                    require_base(conn, kb.scope, name)
                grant = _resolve(conn, kb.actor, rule.acts_on, target, bases, rule.command)
                return _with_more(conn, grant, rule.acts_on, more, rule.command)
            user = _user_for_token(conn, given)
            actor, refusal = _check_role(user, rule, given)
            grant = Grant(actor, bases=bases)
            for name in bases if refusal is None else ():
                refusal = _base_refusal(conn, actor, name)
                if refusal is not None:
                    break
            if refusal is None and rule.acts_on is not None and target is not None:
                grant, refusal = _resolve_visible(
                    conn, actor, rule.acts_on, target, more, bases, rule.command
                )
    except KbError as failure:
        if open_mode and failure.is_refusal:  # an overlong id: audited, as a service's refusal is
            record_refusal(kb, kb.actor.name, rule.command, target, failure.message)
        raise
    use_due = refusal is None and user is not None and _use_due(kb, user)
    if refusal is None:
        if use_due:
            note_use(kb, actor.name)
        return grant
    entity, error, why = refusal
    if entity is not None:  # the hidden target, already resolved: no second lookup
        record_refusal(kb, actor.name, rule.command, entity, why, resolved=True)
        raise error
    if target is not None:
        entity = BASE_PREFIX + target if rule.acts_on == Target.BASE else target
    elif bases:  # a command kept to bases names those
        entity = BASE_PREFIX + bases[0]
    record_refusal(kb, actor.name, rule.command, entity, why)
    raise error


def open_as(
    settings: Settings,
    rule: Rule,
    target: str | None = None,
    create: bool = False,
    more: Sequence[str] = (),
    bases: Sequence[str | None] = (),
    token: str | None = None,
    on_open: Callable[[Kb], None] | None = None,
) -> tuple[Kb, Grant]:
    """Connect, then run the guard: the rule (the roles it needs, the base of what it
    names) against the caller's `token` (None: KB_TOKEN). What every command opens a
    knowledge base with. The context returned acts as the caller the guard
    established. Only what puts something in a knowledge base passes `create=True`;
    anything else is refused where there is none, and creates nothing. `bases` keep the
    caller to those bases (None: not given); `on_open` sees the context as soon as it
    is open (before the guard), so that its caller can close it."""
    kb = open_home(settings, create, named_bases(rule, target, bases))
    if on_open is not None:
        on_open(kb)
    return enter_as(kb, rule, target, more, bases, token)


def enter_as(
    kb: Kb,
    rule: Rule,
    target: str | None = None,
    more: Sequence[str] = (),
    bases: Sequence[str | None] = (),
    token: str | None = None,
) -> tuple[Kb, Grant]:
    """The guard on a knowledge base already open (`kb serve` keeps one for every
    request): the context as the caller `token` names, and what it may act on."""
    grant = authorize(kb, rule, target, more, [base for base in bases if base is not None], token)
    return kb.acting_as(grant.actor), grant


def named_bases(rule: Rule, target: str | None, bases: Sequence[str | None]) -> list[str]:
    """The bases other than the default that a command names: none can exist in a
    knowledge base not made yet."""
    named = [target] if rule.acts_on == Target.BASE and target is not None else []
    return [base for base in [*named, *bases] if base is not None and base != DEFAULT_BASE]


def open_home(settings: Settings, create: bool, named: list[str]) -> Kb:
    """The knowledge base, made on first use when `create`. A new one would hold only
    the default base: a caller that names another (`named`) makes nothing, and is told
    how to make that base."""
    try:
        return Kb.open(settings, create=create and not named)
    except NoKnowledgeBaseYet as missing:
        if not named:
            raise
        if create:  # the command would have made the home, and the base still be missing
            raise no_such_base(named[0], [DEFAULT_BASE], missing) from None
        raise NoKnowledgeBaseYet(missing.where, missing.choose, named[0]) from None


def _check_role(user: UserRow | None, rule: Rule, token: str) -> tuple[Actor, Refusal | None]:
    """The caller (the user `token` names), and (None, forbidden, why) when the token
    or its role refuses (TokenMissing when there is no token at all)."""
    if user is None:
        if not token:
            why = "KB_TOKEN is missing"
            return Actor("anonymous"), (None, TokenMissing(f"forbidden: {why}"), why)
        why = "KB_TOKEN is not a valid token"
        return Actor("anonymous"), (None, ForbiddenError(f"forbidden: {why}"), why)
    actor = Actor(user.name, Role(user.role), user.token_id)
    if user.disabled_at is not None:
        why = f"user {user.name} is disabled (an admin can run: kb user enable {user.name})"
        return actor, (None, ForbiddenError(f"forbidden: {why}"), why)
    if actor.role in rule.roles:
        return actor, None
    why = f"role {user.role} may not run {rule.command}"
    return actor, (None, ForbiddenError(f"forbidden: {why}"), why)


def _base_refusal(conn: Connection, actor: Actor, name: str) -> Refusal | None:
    """None when the actor may read base `name`; the refusal to audit when it exists
    but the actor may not read it. A base that does not exist raises its not_found
    here, unaudited (the message is the same either way)."""
    try:
        require_base(conn, actor.scope(), name)
    except NotFoundError as error:
        if actor.reads_every_base or not queries.base_exists(conn, name):
            raise
        return BASE_PREFIX + name, error, f"base {name} is not readable by {actor.name}"
    return None


def _resolve(
    conn: Connection,
    actor: Actor,
    acts_on: Target | None,
    target: str | None,
    bases: tuple[str, ...] = (),
    verb: str | None = None,
) -> Grant:
    """What the command `verb` names, resolved in the actor's bases (narrowed to `bases`).
    Raises not_found or ambiguous as app.resolve_id does, and not_found for a base
    the actor may not read."""
    if acts_on is None or target is None:
        return Grant(actor, bases=bases)
    if acts_on == Target.BASE:
        require_base(conn, actor.scope(), target)
        return Grant(actor, base=target, bases=bases)
    kind, entity_id = resolve_id(conn, actor.scope(*bases), target, *_KINDS[acts_on], verb=verb)
    return Grant(actor, kind, entity_id, bases=bases)


def _with_more(
    conn: Connection,
    grant: Grant,
    acts_on: Target | None,
    more: Sequence[str],
    verb: str | None = None,
) -> Grant:
    """The further ids a command names, resolved in the actor's bases: one the caller
    may not read is not found, as any other (not audited: the guard's target is)."""
    if not more or acts_on is None or acts_on == Target.BASE:
        return grant
    scope = grant.actor.scope(*grant.bases)
    more_ids = tuple(resolve_id(conn, scope, ref, *_KINDS[acts_on], verb=verb)[1] for ref in more)
    return dataclasses.replace(grant, more_ids=more_ids)


def _resolve_visible(
    conn: Connection,
    actor: Actor,
    acts_on: Target,
    target: str,
    more: Sequence[str],
    bases: tuple[str, ...],
    verb: str | None = None,
) -> tuple[Grant, Refusal | None]:
    """The target resolved, or (entity, not_found, why) when it exists but outside the
    actor's bases; a target that does not exist at all, or lies in a readable base
    outside `bases`, raises its not_found here, unaudited."""
    if acts_on == Target.BASE:
        refusal = _base_refusal(conn, actor, target)
        return Grant(actor, base=target, bases=bases), refusal
    try:
        grant = _resolve(conn, actor, acts_on, target, bases, verb)
    except NotFoundError as error:
        if actor.reads_every_base:  # the lookup over every base would find nothing either
            raise
        try:  # the same lookup over every base, for the audit trail only
            entity = resolve_id(conn, EVERY_BASE, target, *_KINDS[acts_on])[1]
        except KbError:  # missing, or ambiguous only among rows the caller cannot see
            raise error from None
        base = queries.base_of(conn, entity)
        if base is not None and queries.base_exists(conn, base, actor.scope()):
            raise error  # readable, only outside the bases the command was kept to
        why = f"base {base or '?'} is not readable by {actor.name}"
        return Grant(actor), (entity, error, why)
    return _with_more(conn, grant, acts_on, more, verb), None


def add_user(kb: Kb, name: str, role: str, teams: list[str] | None = None) -> NewUser:
    if role not in ROLES:
        raise UsageError(f"unknown role {role!r}; one of: {', '.join(ROLES)}")
    if not name or len(name) > 100 or not name.isprintable() or name.strip() != name:
        raise UsageError("a user name is 1 to 100 printable characters")
    teams = check_names(teams or [], "team")
    token, stored = make_token()
    now = kb.timestamp()
    with kb.db.write() as conn:
        # The permission is checked again in the transaction that inserts: two callers
        # in open mode could otherwise both pass the open-mode check and both become
        # admins. Once an admin exists, only an admin's token may add a user.
        refusal = _refusal_to_add(conn)
        if refusal is None:
            _insert_user(conn, kb.actor.name, name, role, teams, stored, now)
    if refusal is not None:
        record_refusal(kb, kb.actor.name, "user", name, refusal)
        raise ForbiddenError(f"forbidden: {refusal}")
    return NewUser(name, role, token, teams)


def make_token() -> tuple[str, tuple[str, str, str]]:
    """A new token, and what is stored of it: (id, salt, salted hash of the secret)."""
    import secrets  # token modules load only where tokens are made or checked (~8 ms)

    token_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    return f"kb_{token_id}_{secret}", (token_id, salt, _hash(salt, secret))


def _refusal_to_add(conn: Connection) -> str | None:
    if not queries.admin_exists(conn):
        return None
    user = _user_for_token(conn, os.environ.get("KB_TOKEN", ""))
    if user is None:
        return "an admin exists now: KB_TOKEN must be an admin's token"
    if user.disabled_at is not None:
        return f"user {user.name} is disabled"
    return None if user.role in ADMINS else f"role {user.role} may not run user"


def _insert_user(
    conn: Connection,
    actor: str,
    name: str,
    role: str,
    teams: list[str],
    token: tuple[str, str, str],
    now: str,
) -> None:
    """The user, its teams and the audit event; `token` is (id, salt, hash)."""
    if not queries.admin_exists(conn) and role != "admin":
        raise ConflictError("the first user must be an admin (--role admin)")
    if queries.get_user(conn, name) is not None:
        raise ConflictError(f"user {name!r} already exists")
    token_id, salt, hashed = token
    queries.insert_user(
        conn,
        name=name,
        role=role,
        token_id=token_id,
        token_salt=salt,
        token_hash=hashed,
        created_at=now,
    )
    queries.insert_teams(conn, teams, now)
    queries.insert_user_teams(conn, name, teams)
    detail = f"role {role}" + (f", teams {', '.join(teams)}" if teams else "")
    queries.insert_audit_events(
        conn, [audit_event(actor, "user_add", name, None, role, detail, at=now)]
    )


def _user_for_token(conn: Connection, token: str) -> UserRow | None:
    import hmac

    if not token.isascii():  # kb's tokens are; undecodable bytes arrive as surrogates
        return None
    prefix, _, rest = token.partition("_")
    token_id, _, secret = rest.partition("_")
    if prefix != "kb" or not token_id or not secret:
        return None
    user = queries.get_user_by_token_id(conn, token_id)
    if user is None or not hmac.compare_digest(user.token_hash, _hash(user.token_salt, secret)):
        return None
    return user


def _hash(salt: str, secret: str) -> str:
    import hashlib

    return hashlib.sha256(f"{salt}:{secret}".encode()).hexdigest()


def record_refusal(
    kb: Kb, actor: str, command: str, target: str | None, reason: str, resolved: bool = False
) -> None:
    """Written the way a token's use is (note_use): best effort and brief. A refusal
    waits at most BRIEF_WRITE_SECONDS for a locked database, so a hidden id is answered
    as fast as a missing one (waiting out the busy timeout would tell them apart); one
    that cannot be written then (locked longer, read-only, full) is answered all the
    same, unrecorded, and says nothing of it: a word on stderr would tell them apart too."""
    try:
        with kb.db.write(lock_wait_seconds=_brief_wait(kb)) as conn:
            entity = (target if resolved else _entity_for(conn, target)) or f"command:{command}"
            event = audit_event(
                actor, "refused", entity, detail=f"{command}: {reason}", at=kb.timestamp()
            )
            queries.insert_audit_events(conn, [event])
    except Exception:
        pass


def _entity_for(conn: Connection, target: str | None) -> str | None:
    """The full id a target names, over every base: the audit trail is complete."""
    if not target:
        return None
    try:
        return resolve_id(conn, EVERY_BASE, target, "tasks", "documents")[1]
    except KbError:
        return target[:MAX_ID_CHARS]


# --- when a token was last accepted (users.last_used_at) -----------------------------

USE_NOTED_EVERY = timedelta(minutes=1)
BRIEF_WRITE_SECONDS = 0.1  # a refusal's or a use's wait for a locked database


def _brief_wait(kb: Kb) -> float:
    """A refusal's or a use's wait for a lock: BRIEF_WRITE_SECONDS at most."""
    return min(BRIEF_WRITE_SECONDS, kb.db.busy_timeout_seconds)


def _use_due(kb: Kb, user: UserRow) -> bool:
    """Whether the user's last use is to be written: not noted in the last minute (no
    write transaction at all otherwise)."""
    return user.last_used_at is None or user.last_used_at < _minute_ago(kb)


def _minute_ago(kb: Kb) -> str:
    return format_stamp(kb.clock.now() - USE_NOTED_EVERY)


def note_use(kb: Kb, name: str) -> None:
    """Write when the user's token was accepted, at most once a minute per user (the
    guarded UPDATE decides between racing commands). Best effort and brief: it waits
    at most 0.1 s for a locked database, and a busy or read-only
    database is ignored, so a read-only command never fails or waits because of it."""
    try:
        with kb.db.write(lock_wait_seconds=_brief_wait(kb)) as conn:
            queries.touch_user(conn, name, format_stamp(kb.clock.now()), _minute_ago(kb))
    except Exception:
        pass
