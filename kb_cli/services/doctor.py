"""`kb doctor`: check the invariants, and with `repair` fix what is safe to fix.

Repair never deletes a stored original: an orphan object is moved to the store's
quarantine folder, and only when the store names this database as its owner and the
database has documents. A wrong --home or --database-url over a shared store, or an
emptied database, would otherwise make every original look like an orphan."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field

from kb_cli import pending, queries
from kb_cli.app import Kb
from kb_cli.db import Connection, format_stamp
from kb_cli.embeddings import Embedder
from kb_cli.errors import RepairRefused, UsageError
from kb_cli.lifecycle import DocStatus, TaskStatus, is_legal_pair
from kb_cli.permissions import BASE_PREFIX
from kb_cli.services import removal
from kb_cli.store.layout import key_of
from kb_cli.transitions import requeue_task

# Documents search must never serve: unpublished, or on their way out.
NOT_SERVED = (DocStatus.ARCHIVED, DocStatus.DELETING)
# An object younger than this may belong to an upload whose row is not committed yet.
ORPHAN_GRACE_SECONDS = 600


@dataclass(frozen=True)
class Problem:
    kind: str
    id: str
    detail: str
    document_id: str | None = None  # the document that needs attention, when there is one
    object_key: str | None = None


@dataclass
class DoctorReport:
    problems: list[Problem] = field(default_factory=list)
    repaired: list[Problem] = field(default_factory=list)
    # What would make the knowledge base better without anything being wrong (no
    # problem: the exit code stays 0).
    notes: list[str] = field(default_factory=list)
    # Which index ranks the words (LexicalIndex.kind): fts5, pg_textsearch or gin.
    words_index: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "problems": [asdict(problem) for problem in self.problems],
            "repaired": [asdict(fix) for fix in self.repaired],
            "words_index": self.words_index,
        } | ({"notes": self.notes} if self.notes else {})


def check(kb: Kb, repair: bool = False, verify: bool = False) -> DoctorReport:
    """Find every broken invariant; with `repair`, fix the safe ones and say so; with
    `verify`, also re-read every stored original and compare it with its sha256."""
    now = format_stamp(kb.clock.now())
    with kb.db.read() as conn:
        deleting = {row.id for row in removal.unfinished(conn)}
        found = [
            *_unfinished_deletes(conn),
            *_status_pairs(conn),
            *_stray_chunks(conn),
            *_stray_artefacts(conn),
            *_expired_leases(conn, now),
            *_base_access(conn),
        ]
        referenced = queries.object_keys(conn)
        waiting = {row.object_key: row for row in queries.pending_objects(conn)}
        database_id = queries.database_id(conn)
        notes = kb.vectors.notes(conn)
        words_index = kb.lexical.kind(conn)
        found += [
            Problem("lexical_index", words_index, detail) for detail in kb.lexical.problems(conn)
        ]
        model_problems, model_notes = _models(kb, conn)
    found += model_problems
    notes += model_notes
    found += _objects(kb, referenced, deleting, waiting) + _foreign_store(kb, database_id)
    found += _vector_index(kb)
    if verify:
        missing = {problem.id for problem in found if problem.kind == "missing_object"}
        present = {key: id_ for key, id_ in referenced.items() if id_ not in missing | deleting}
        found += _changed_objects(kb, present)
    if repair and any(problem.kind == "orphan_object" for problem in found):
        _require_own_store(kb, database_id, referenced)
    report = DoctorReport(notes=notes, words_index=words_index)
    for problem in found:
        if repair and _repair(kb, problem):
            report.repaired.append(problem)
        else:
            report.problems.append(problem)
    return report


def _unfinished_deletes(conn: Connection) -> list[Problem]:
    """A delete that began and did not end (its process died): repair finishes it."""
    return [
        Problem(
            "unfinished_delete",
            row.id,
            f"document {row.id} ({row.filename}) is being deleted, but nothing is deleting it",
            row.id,
            row.object_key,
        )
        for row in removal.unfinished(conn)
    ]


def _status_pairs(conn: Connection) -> list[Problem]:
    problems = []
    latest = queries.latest_tasks(conn)
    for document in queries.all_documents(conn):
        task = latest.get(document.latest_task_id or "")
        task_status = task.status if task else None
        has_published = (document.published_revision or document.archived_revision) is not None
        rejected = task is not None and document.rejected_revision == task.revision
        if document.published_revision is not None and document.status in NOT_SERVED:
            problems.append(
                Problem(
                    "served_while_out",
                    document.id,
                    f"document is {document.status} but search serves its revision "
                    f"{document.published_revision}",
                    document.id,
                    document.object_key,
                )
            )
        if not is_legal_pair(task_status, document.status, has_published, rejected):
            problems.append(
                Problem(
                    "status_pair",
                    document.id,
                    f"document is {document.status} but its latest task is {task_status or 'none'}",
                    document.id,
                    document.object_key,
                )
            )
    for stale in queries.stale_active_tasks(conn):
        problems.append(
            Problem(
                "stale_task",
                stale.id,
                "active task is not its document's latest task",
                stale.document_id,
                stale.object_key,
            )
        )
    return problems


def _stray_chunks(conn: Connection) -> list[Problem]:
    """Chunks may exist for a published revision, for an unpublished (archived) one, or
    for the latest task's revision while that task runs (a large document's chunks are
    written in batches before the completion) or once it succeeded, unless a reviewer
    rejected that revision. A document being deleted is an unfinished delete instead."""
    problems = []
    for row in queries.chunk_owners(conn):
        if row.revision in (row.published_revision, row.archived_revision):
            continue
        if row.document_status == DocStatus.DELETING:
            continue
        own_run = (
            row.task_id == row.latest_task_id
            and row.revision == row.task_revision
            and row.revision != row.rejected_revision
            and row.task_status in (TaskStatus.RUNNING, TaskStatus.SUCCEEDED)
        )
        if not own_run:
            problems.append(
                Problem(
                    "stray_chunks",
                    row.document_id,
                    f"chunks of revision {row.revision} from task {row.task_id} "
                    f"({row.task_status or 'missing'}) are neither published nor in review",
                    row.document_id,
                    row.object_key,
                )
            )
    return problems


# A revision not yet processed: only its parse may be reused (kb_cli/artefacts.py).
_UNPROCESSED = (DocStatus.DRAFT, DocStatus.PROCESSING, DocStatus.FAILED)


def _stray_artefacts(conn: Connection) -> list[Problem]:
    problems = []
    for row in _stray_artefact_rows(conn):
        why = "its document is gone"
        if row.found is not None:
            why = f"the document is {row.document_status} at revision {row.document_revision}"
        problems.append(
            Problem(
                "stray_artefact",
                row.document_id,
                f"the kept parse of revision {row.revision} ({row.chunks} chunks) can no "
                f"longer be reused: {why}",
                row.found,
                row.object_key,
            )
        )
    return problems


def _stray_artefact_rows(
    conn: Connection, document_id: str | None = None
) -> list[queries.ArtefactOwner]:
    """A kept parse may exist only for its document's current, unprocessed revision and
    file (one not rejected): a later attempt may still reuse it. Any other (its document
    deleted, its revision processed, published or superseded) is stray. A document being
    deleted is an unfinished delete instead."""
    return [
        row
        for row in queries.artefact_owners(conn, document_id)
        if row.document_status != DocStatus.DELETING
        and not (
            row.found is not None
            and row.document_status in _UNPROCESSED
            and row.revision == row.document_revision
            and row.sha256 == row.document_sha256
            and row.revision != row.rejected_revision
        )
    ]


def _expired_leases(conn: Connection, now: str) -> list[Problem]:
    return [
        Problem(
            "expired_lease",
            task.id,
            f"running under {task.worker_id}, whose lease expired at {task.lease_expires_at}",
            task.document_id,
            task.object_key,
        )
        for task in queries.expired_running_tasks(conn, now)
    ]


def _base_access(conn: Connection) -> list[Problem]:
    """Every document in an existing base; no team restriction or grant naming a team or
    user that does not exist. Reported, never repaired: each fix would change who reads
    what (a document's base, a base's readers), which is for a person to decide."""
    problems = [
        Problem("missing_base", row.id, f"the document's base {row.base!r} does not exist")
        for row in queries.documents_in_missing_bases(conn)
    ]
    problems += [
        Problem(
            "dangling_access", BASE_PREFIX + row.base, f"{row.kind} {row.name!r} does not exist"
        )
        for row in queries.dangling_base_access(conn)
    ]
    return problems


def _objects(
    kb: Kb,
    referenced: dict[str, str],
    deleting: set[str],
    waiting: dict[str, queries.PendingObject],
) -> list[Problem]:
    """referenced: object key -> id of the document that refers to it; a document being
    deleted may have lost its object already (it goes before the row). waiting: the
    objects a command stored and has not committed, or has to delete (kb_cli/services/
    pending.py): no orphans, but abandoned once that command is gone."""
    problems = [
        Problem(
            "missing_object",
            document_id,
            f"document {document_id}{_file_of(kb, document_id)} refers to object {key}, "
            "which is not in the store",
            document_id,
            key,
        )
        for key, document_id in sorted(referenced.items())
        if document_id not in deleting and not kb.store.exists(key)
    ]
    # The clock, not the file system's: a test (or a bucket, whose objects cannot be
    # back-dated) lets the grace period pass by moving it.
    cutoff = kb.clock.now().timestamp() - ORPHAN_GRACE_SECONDS
    abandoned: set[str] = set()
    for key, modified in kb.store.entries():
        own = key_of(key)
        if own in referenced:
            continue
        row = waiting.get(own)
        if row is None:
            if modified < cutoff:
                problems.append(
                    Problem("orphan_object", key, "no document refers to this object", None, key)
                )
        elif own not in abandoned and pending.state(row, kb) == pending.ABANDONED:
            abandoned.add(own)
            problems.append(_abandoned(own, row))
    return problems


def _abandoned(key: str, row: queries.PendingObject) -> Problem:
    return Problem(
        "abandoned_object",
        key,
        f"left by a command killed before it finished ({pending.describe(row)}); the next "
        "upload or sync on that host deletes it, as does kb doctor --repair",
        None,
        key,
    )


def _changed_objects(kb: Kb, referenced: dict[str, str]) -> list[Problem]:
    """Stored originals whose bytes no longer hash to the sha256 recorded at upload
    (changed or damaged in the store), each read as a stream outside any transaction.
    A mismatch counts only if the document still names that object and digest after
    the read: a file replaced meanwhile is no problem."""
    problems = []
    for key, document_id in sorted(referenced.items()):
        digest = _sha256_of(kb, key)
        if digest is None:
            continue  # gone since it was listed: a delete or a replacement
        with kb.db.read() as conn:
            document = queries.get_document(conn, document_id)
        if document is None or document.object_key != key or digest == document.sha256:
            continue
        problems.append(
            Problem(
                "changed_object",
                document.id,
                f"object {key} of document {document.id} no longer matches the sha256 "
                f"recorded at upload ({document.sha256[:12]}); upload the original again: "
                f"kb upload FILE --replace {document.id[:8]}",
                document.id,
                key,
            )
        )
    return problems


def _file_of(kb: Kb, document_id: str) -> str:
    """` (report.pdf)`: the file a problem's document was uploaded from."""
    with kb.db.read() as conn:
        document = queries.get_document(conn, document_id)
    return f" ({document.filename})" if document is not None else ""


def _sha256_of(kb: Kb, key: str) -> str | None:
    """The object's sha256, read in the store's blocks (memory stays one block); None
    when it is no longer in the store."""
    digest = hashlib.sha256()
    try:
        for block in kb.store.read_blocks(key):
            digest.update(block)
    except FileNotFoundError:
        return None
    return digest.hexdigest()


def _foreign_store(kb: Kb, database_id: str | None) -> list[Problem]:
    owner = kb.store.owner()
    if owner is None or owner == database_id:
        return []
    detail = f"the object store belongs to database {owner[:12]}, not to this one"
    return [Problem("foreign_store", owner, detail)]


def _require_own_store(kb: Kb, database_id: str | None, referenced: dict[str, str]) -> None:
    """Refuse to move anything out of a store that may belong to another database.

    A store without a marker (made before markers existed) is adopted only when it
    holds at least one object this database refers to."""
    if not referenced:
        raise RepairRefused(
            "refusing to repair: this database has no documents, so every stored object "
            "would look orphaned; is --home / --database-url / --object-store right?"
        )
    owner = kb.store.owner()
    if owner is None and database_id and any(kb.store.exists(key) for key in referenced):
        kb.store.claim(database_id)
        owner = kb.store.owner()
    if owner != database_id:
        raise RepairRefused(
            "refusing to repair: the object store belongs to another database "
            f"({'no owner marker' if owner is None else 'owner ' + owner[:12]}); "
            "is --home / --database-url / --object-store right?"
        )


def _models(kb: Kb, conn: Connection) -> tuple[list[Problem], list[str]]:
    """Each base's embedding model (a note), a switch of model that has not ended, and
    published chunks whose vectors are of another model than their base's."""
    problems, models = [], []
    bases = queries.list_bases(conn, kb.scope)
    for row in bases:
        provider = row.model or kb.settings.embeddings.provider
        models.append(f"{row.base}={provider}" + ("" if row.model else " (KB_EMBEDDINGS)"))
        embedder = _embedder_or_none(kb, provider)
        if row.model_next is not None:
            building = _embedder_or_none(kb, row.model_next)
            built = queries.vectors_built(conn, row.base, building.model) if building else 0
            problems.append(
                Problem(
                    "unfinished_model_switch",
                    row.base,
                    f"a switch to {row.model_next} has not ended ({built} vectors built); "
                    f"kb reindex --base {row.base} --model {row.model_next} resumes it",
                )
            )
        others = queries.vectors_of_other_models(conn, row.base, embedder.model) if embedder else 0
        if others:
            problems.append(
                Problem(
                    "vectors_of_another_model",
                    row.base,
                    f"{others} published chunks have vectors of another model than the base's "
                    f"({provider}): they rank by their words alone until kb reindex --embeddings",
                )
            )
    # Said where a base chose its own: otherwise every base follows KB_EMBEDDINGS.
    chosen = any(row.model for row in bases)
    return problems, [f"embedding models by base: {', '.join(models)}"] if chosen else []


def _embedder_or_none(kb: Kb, provider: str) -> Embedder | None:
    """The provider's embedder; None when it is off, or misconfigured (its own commands
    say so)."""
    try:
        return kb.embedder_for(provider)
    except UsageError:
        return None


def _vector_index(kb: Kb) -> list[Problem]:
    """The vectors of each model in use that the vector index cannot serve now,
    although it should: search still answers, by reading every vector, and slower.
    Repair rebuilds it."""
    with kb.db.read() as conn:
        providers = kb.models_in(conn, kb.scope)
    embedders = [_embedder_or_none(kb, provider) for provider in providers]
    models = sorted({embedder.model for embedder in embedders if embedder is not None})
    return [
        Problem("vector_index", f"{found.model}/{found.dim}", found.detail)
        for model in models
        for found in kb.vectors.problems(kb.db, model)
    ]


def _rebuild_vector_index(kb: Kb, problem: Problem) -> bool:
    model, _, dim = problem.id.rpartition("/")
    kb.vectors.rebuild(kb.db, model, [int(dim)])
    return True


def _repair(kb: Kb, problem: Problem) -> bool:
    """Fix what cannot lose data: orphans (quarantined), stray chunks, dead workers'
    tasks, a vector or words index (derived from the database)."""
    if problem.kind == "vector_index":
        return _rebuild_vector_index(kb, problem)
    if problem.kind == "lexical_index":
        return kb.lexical.rebuild(kb.db)
    if problem.kind == "orphan_object":
        kb.store.quarantine(problem.id)
        return True
    if problem.kind == "abandoned_object":
        return pending.repair(kb, problem.id)
    if problem.kind == "stray_chunks":
        return _delete_stray_chunks(kb, problem.id)
    if problem.kind == "stray_artefact":
        return _delete_stray_artefacts(kb, problem.id)
    if problem.kind == "expired_lease":
        return _requeue_abandoned(kb, problem.id)
    if problem.kind == "unfinished_delete":
        removal.finish(kb, problem.id)
        return True
    return False


def _delete_stray_chunks(kb: Kb, document_id: str) -> bool:
    with kb.db.write() as conn:
        stray = [p for p in _stray_chunks(conn) if p.id == document_id]
        if stray:
            document = queries.get_document(conn, document_id)
            served = (document.published_revision, document.archived_revision) if document else ()
            keep = {revision for revision in served if revision is not None}  # NOT IN (NULL)
            if document and document.latest_task_id:
                task = queries.get_task(conn, document.latest_task_id)
                if (
                    task
                    and task.status in (TaskStatus.RUNNING, TaskStatus.SUCCEEDED)
                    and task.revision != document.rejected_revision
                ):
                    keep.add(task.revision)
            queries.delete_chunks_except(conn, document_id, keep)
    return True


def _delete_stray_artefacts(kb: Kb, document_id: str) -> bool:
    """Checked again inside the write: a parse kept meanwhile by a new attempt stays."""
    with kb.db.write() as conn:
        for row in _stray_artefact_rows(conn, document_id):
            queries.delete_artefacts(conn, document_id, row.revision)
    return True


def _requeue_abandoned(kb: Kb, task_id: str) -> bool:
    """A running task whose worker is gone goes back to the queue, attempt kept."""
    with kb.db.write() as conn:
        task = queries.get_task(conn, task_id)
        now = format_stamp(kb.clock.now())
        if (
            task is None
            or task.status != TaskStatus.RUNNING
            or task.worker_id is None
            or task.lease_expires_at is None
            or task.lease_expires_at >= now
        ):
            return False
        requeued = requeue_task(
            conn,
            task,
            actor="doctor",
            action="release",
            detail=f"lease of {task.worker_id} expired",
            fence=(task.worker_id, task.attempt),
            updated_at=now,
        )
        return requeued is not None
