"""Identity and roles (contract section 8): tokens, permissions, recorded refusals.

Open mode until the first admin exists. Tokens look like `kb_<id>_<secret>`; only a
salted SHA-256 of the secret is stored. The secret has 256 bits of entropy, so a slow
KDF would add latency to every command without adding security.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from kb_cli import queries
from kb_cli.db import Connection, utcnow
from kb_cli.errors import ConflictError, ForbiddenError, KbError, UsageError
from kb_cli.services.context import MAX_ID_CHARS, Kb, resolve_id
from kb_cli.transitions import audit_event

VIEWER = frozenset({"status", "search", "eval", "history"})
EDITOR = VIEWER | {"upload", "submit", "cancel", "retry"}
REVIEWER = EDITOR | {"publish"}
ROLE_COMMANDS: dict[str, frozenset[str] | None] = {
    "viewer": VIEWER,
    "editor": EDITOR,
    "reviewer": REVIEWER,
    "worker": frozenset({"status", "work"}),
    "admin": None,  # everything: user, doctor, reindex, db, demo
}
ROLES = tuple(ROLE_COMMANDS)


def may(role: str, command: str) -> bool:
    allowed = ROLE_COMMANDS.get(role, frozenset())
    return allowed is None or command in allowed


@dataclass(frozen=True)
class NewUser:
    user: str
    role: str
    token: str

    def to_dict(self) -> dict[str, str]:
        return {"user": self.user, "role": self.role, "token": self.token}


def authorize(kb: Kb, command: str, target: str | None = None) -> None:
    """Check KB_TOKEN against the command; a refusal is recorded, then raised."""
    token = os.environ.get("KB_TOKEN", "")
    with kb.db.read() as conn:
        if not queries.admin_exists(conn):
            return  # open mode: a single person on a laptop
        user = _user_for_token(conn, token)
    if user is not None and may(user.role, command):
        kb.actor = user.name
        return
    if user is None:
        reason = "KB_TOKEN is missing" if not token else "KB_TOKEN is not a valid token"
    else:
        reason = f"role {user.role} may not run {command}"
    kb.actor = user.name if user else "anonymous"
    record_refusal(kb, command, target, reason)
    raise ForbiddenError(f"forbidden: {reason}")


def add_user(kb: Kb, name: str, role: str) -> NewUser:
    if role not in ROLE_COMMANDS:
        raise UsageError(f"unknown role {role!r}; one of: {', '.join(ROLES)}")
    if not name or len(name) > 100 or not name.isprintable() or name.strip() != name:
        raise UsageError("a user name is 1 to 100 printable characters")
    import secrets  # token modules load only where tokens are made or checked (~8 ms)

    token_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    now = utcnow()
    with kb.db.write() as conn:
        # The permission is checked again in the transaction that inserts: two callers
        # in open mode could otherwise both pass the open-mode check and both become
        # admins. Once an admin exists, only an admin's token may add a user.
        refusal = _refusal_to_add(conn)
        if refusal is None:
            _insert_user(conn, kb.actor, name, role, token_id, salt, _hash(salt, secret), now)
    if refusal is not None:
        record_refusal(kb, "user", name, refusal)
        raise ForbiddenError(f"forbidden: {refusal}")
    return NewUser(name, role, f"kb_{token_id}_{secret}")


def _refusal_to_add(conn: Connection) -> str | None:
    if not queries.admin_exists(conn):
        return None
    user = _user_for_token(conn, os.environ.get("KB_TOKEN", ""))
    if user is None:
        return "an admin exists now: KB_TOKEN must be an admin's token"
    return None if may(user.role, "user") else f"role {user.role} may not run user"


def _insert_user(
    conn: Connection,
    actor: str,
    name: str,
    role: str,
    token_id: str,
    salt: str,
    hashed: str,
    now: str,
) -> None:
    if not queries.admin_exists(conn) and role != "admin":
        raise ConflictError("the first user must be an admin (--role admin)")
    if queries.get_user(conn, name) is not None:
        raise ConflictError(f"user {name!r} already exists")
    queries.insert_user(
        conn,
        name=name,
        role=role,
        token_id=token_id,
        token_salt=salt,
        token_hash=hashed,
        created_at=now,
    )
    queries.insert_audit_events(
        conn, [audit_event(actor, "user_add", name, None, role, f"role {role}", now)]
    )


def _user_for_token(conn: Connection, token: str):
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


def record_refusal(kb: Kb, command: str, target: str | None, reason: str) -> None:
    """Best effort: a refusal is reported even if it cannot be logged (busy, read-only)."""
    try:
        with kb.db.write() as conn:
            entity = _entity_for(conn, target) or f"command:{command}"
            event = audit_event(kb.actor, "refused", entity, detail=f"{command}: {reason}")
            queries.insert_audit_events(conn, [event])
    except Exception:
        pass


def _entity_for(conn: Connection, target: str | None) -> str | None:
    if not target:
        return None
    try:
        return resolve_id(conn, target, "tasks", "documents")[1]
    except KbError:
        return target[:MAX_ID_CHARS]
