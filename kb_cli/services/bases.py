"""Knowledge bases (docs/access.md, "Knowledge bases"): create, list, describe, grant,
move a document.

A base with no team is readable by the whole company; with teams, by their members and
by users granted it. Who reads a base is checked inside every query (queries.scope_filter).
"""

from __future__ import annotations

from kb_cli import queries
from kb_cli.app import Kb, require_base
from kb_cli.embeddings import check_model
from kb_cli.errors import ConflictError, NotFoundError
from kb_cli.permissions import BASE_PREFIX, check_names
from kb_cli.records import BaseRecord, DocumentRecord
from kb_cli.transitions import audit_event


def create_base(kb: Kb, name: str, teams: list[str], model: str | None = None) -> BaseRecord:
    """A new base; `model` its embedding provider (None: it follows KB_EMBEDDINGS)."""
    [name] = check_names([name], "base")
    teams = check_names(teams, "team")
    if model is not None:
        kb.embedder_for(check_model(model))  # a provider this process cannot build: usage
    now = kb.timestamp()
    with kb.db.write() as conn:
        if queries.base_exists(conn, name):
            raise ConflictError(f"knowledge base {name!r} already exists")
        queries.insert_base(conn, name, now, model)
        queries.insert_teams(conn, teams, now)
        queries.insert_base_teams(conn, name, teams)
        readers = f"teams {', '.join(teams)}" if teams else "company-wide"
        detail = readers if model is None else f"{readers}; model {model}"
        event = audit_event(kb.actor.name, "base_create", BASE_PREFIX + name, detail=detail, at=now)
        queries.insert_audit_events(conn, [event])
    [record] = list_bases(kb, name)
    return record


def list_bases(kb: Kb, name: str | None = None) -> list[BaseRecord]:
    """Every base the caller may read (or the one named: not_found if unreadable)."""
    scope = kb.actor.scope(name)
    with kb.db.read() as conn:
        if name is not None:
            require_base(conn, scope, name)
        rows = queries.list_bases(conn, scope)
        teams, grants = queries.base_members(conn)
    configured = kb.settings.embeddings.provider
    return [
        BaseRecord(
            row.base,
            [team.team for team in teams if team.base == row.base],
            [grant.user_name for grant in grants if grant.base == row.base],
            row.documents,
            row.model or configured,
            "base" if row.model else "KB_EMBEDDINGS",
            row.model_next,
        )
        for row in rows
    ]


def grant_base(kb: Kb, name: str, user: str) -> BaseRecord:
    """Give one user read access to a base (and write access as far as their role
    allows). Granting twice changes nothing."""
    with kb.db.write() as conn:
        require_base(conn, kb.scope, name)
        if queries.get_user(conn, user) is None:
            raise NotFoundError(f"no user named {user!r}")
        if queries.insert_grant(conn, name, user):
            event = audit_event(
                kb.actor.name, "grant", BASE_PREFIX + name, detail=f"user {user}", at=kb.timestamp()
            )
            queries.insert_audit_events(conn, [event])
    [record] = list_bases(kb, name)
    return record


def move_document(kb: Kb, document_id: str, base: str) -> DocumentRecord:
    """Put a document (all its revisions and tasks) into another base, audited."""
    with kb.db.write() as conn:
        require_base(conn, kb.scope, base)
        document = queries.existing_document(conn, document_id, lock=True)
        if document.base == base:
            raise ConflictError(f"document {document_id} is already in {base!r}")
        now = kb.timestamp()
        if queries.move_to_base(conn, document_id, document.base, base, now) is None:
            raise ConflictError(f"document {document_id} changed meanwhile; try again")
        event = audit_event(
            kb.actor.name, "move", document_id, detail=f"base {document.base} -> {base}", at=now
        )
        queries.insert_audit_events(conn, [event])
        return queries.document_record(conn, document_id)


def revoke_base(kb: Kb, name: str, user: str) -> BaseRecord:
    """Take one user's grant on a base away: the user reads the base from the next
    command on only if a team of theirs, or the whole company, may. A grant that does
    not exist is a conflict (nothing changes); a grant naming a user that no longer
    exists can be revoked, which is how the grant `kb doctor` reports is removed."""
    with kb.db.write() as conn:
        require_base(conn, kb.scope, name)
        if not queries.delete_grant(conn, name, user):
            raise ConflictError(
                f"user {user!r} has no grant on knowledge base {name!r}; nothing changed "
                f"(kb base show {name} lists its grants)"
            )
        event = audit_event(
            kb.actor.name, "revoke", BASE_PREFIX + name, detail=f"user {user}", at=kb.timestamp()
        )
        queries.insert_audit_events(conn, [event])
    [record] = list_bases(kb, name)
    return record
