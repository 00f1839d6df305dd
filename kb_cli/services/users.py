"""A user's life after `kb user add`: list, disable, enable, a new token, teams.

Every change is one write transaction with its audit event, recorded under the user's
name (as `user_add` is). A disabled user's token is refused by the guard at once
(services.access), and a running worker of that user releases its task and stops
(worker.claim). The last active admin can never be disabled: someone must be left who
can manage users.
"""

from __future__ import annotations

from kb_cli import queries
from kb_cli.app import Kb
from kb_cli.db import Connection
from kb_cli.engines import EVENTS_CHANNEL, TASKS_CHANNEL
from kb_cli.errors import ConflictError, NotFoundError, UsageError
from kb_cli.permissions import Role, check_names
from kb_cli.records import UserRecord, UserRow
from kb_cli.services.access import NewUser, make_token
from kb_cli.transitions import audit_event

ACTIVE, DISABLED = "active", "disabled"


def list_users(kb: Kb) -> list[UserRecord]:
    with kb.db.read() as conn:
        users = queries.list_users(conn)
        teams = queries.user_teams(conn)
    return [
        _record(user, [row.team for row in teams if row.user_name == user.name]) for user in users
    ]


def disable_user(kb: Kb, name: str) -> UserRecord:
    """Disable a user: its token is refused from the next command on, and its running
    workers stop at their next write. Disabling a disabled user changes nothing."""
    with kb.db.write() as conn:
        user = _existing_user(conn, name)
        if user.disabled_at is None and user.role == Role.ADMIN:
            others = [admin for admin in queries.active_admins(conn) if admin != name]
            if not others:
                raise ConflictError(
                    f"{name} is the last active admin: disabling it would leave nobody "
                    "who can manage users; make another admin first (kb user add NAME "
                    f"--role admin), then disable {name}"
                )
        now = kb.timestamp()
        if queries.set_user_disabled(conn, name, now):
            _audit(conn, kb, "user_disable", name, ACTIVE, DISABLED, f"role {user.role}", now)
            _wake_waiters(conn)
        return _user_record(conn, name)


def _wake_waiters(conn: Connection) -> None:
    """Wake the user's idle long-running commands (`work --loop`, `events --follow`,
    `relay`): each checks its caller on waking, so it stops now, not at its next poll."""
    queries.wake(conn, TASKS_CHANNEL)
    queries.wake(conn, EVENTS_CHANNEL)


def enable_user(kb: Kb, name: str) -> UserRecord:
    """Enable a disabled user: its token (the one it had) works again."""
    with kb.db.write() as conn:
        user = _existing_user(conn, name)
        if queries.set_user_disabled(conn, name, None):
            _audit(conn, kb, "user_enable", name, DISABLED, ACTIVE, f"role {user.role}")
        return _user_record(conn, name)


def new_token(kb: Kb, name: str) -> NewUser:
    """A new token for the user, printed once; the old one stops working at once. A
    disabled user stays disabled."""
    token, (token_id, salt, hashed) = make_token()
    with kb.db.write() as conn:
        user = _existing_user(conn, name)
        queries.set_user_token(conn, name, token_id, salt, hashed)
        _audit(conn, kb, "user_token", name, detail="new token; the old one no longer works")
        _wake_waiters(conn)
        teams = [row.team for row in queries.user_teams(conn, name)]
    return NewUser(name, user.role, token, teams)


def change_teams(kb: Kb, name: str, add: list[str], remove: list[str]) -> UserRecord:
    """Add the user to teams (naming a team creates it) and remove it from others, in
    one transaction. Adding a team the user is in changes nothing; removing one it is
    not in is a conflict, and nothing changes."""
    if not add and not remove:
        raise UsageError("name a team to change: --add TEAM and/or --remove TEAM")
    add, remove = check_names(add, "team"), check_names(remove, "team")
    both = sorted(set(add) & set(remove))
    if both:
        raise UsageError(f"a team cannot be both added and removed: {', '.join(both)}")
    with kb.db.write() as conn:
        _existing_user(conn, name)
        current = {row.team for row in queries.user_teams(conn, name)}
        missing = [team for team in remove if team not in current]
        if missing:
            raise ConflictError(
                f"{name} is not in team {', '.join(missing)}; nothing changed "
                f"(kb user list shows each user's teams)"
            )
        added = [team for team in add if team not in current]
        now = kb.timestamp()
        queries.insert_teams(conn, added, now)
        queries.insert_user_teams(conn, name, added)
        queries.delete_user_teams(conn, name, remove)
        changes = [
            f"{verb} {', '.join(teams)}"
            for verb, teams in (("added", added), ("removed", remove))
            if teams
        ]
        if changes:
            _audit(conn, kb, "user_teams", name, detail="; ".join(changes), at=now)
        return _user_record(conn, name)


def _existing_user(conn: Connection, name: str) -> UserRow:
    user = queries.get_user(conn, name)
    if user is None:
        raise NotFoundError(f"no user named {name!r} (kb user list shows the users)")
    return user


def _user_record(conn: Connection, name: str) -> UserRecord:
    user = _existing_user(conn, name)
    return _record(user, [row.team for row in queries.user_teams(conn, name)])


def _record(user: UserRow, teams: list[str]) -> UserRecord:
    state = ACTIVE if user.disabled_at is None else DISABLED
    return UserRecord(user.name, user.role, teams, state, user.created_at, user.last_used_at)


def _audit(
    conn: Connection,
    kb: Kb,
    action: str,
    name: str,
    from_status: str | None = None,
    to_status: str | None = None,
    detail: str | None = None,
    at: str | None = None,
) -> None:
    event = audit_event(
        kb.actor.name, action, name, from_status, to_status, detail, at=at or kb.timestamp()
    )
    queries.insert_audit_events(conn, [event])
