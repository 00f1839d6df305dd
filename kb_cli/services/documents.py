"""Document verbs: upload, replace, submit, publish, and reading status."""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb_cli import metadata, queries
from kb_cli.app import Kb, check_store_owner, require_base
from kb_cli.db import Connection
from kb_cli.engines import TASKS_CHANNEL
from kb_cli.errors import (
    AlreadyExists,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    UploadInterrupted,
    UsageError,
)
from kb_cli.lifecycle import (
    PUBLISHABLE,
    REPLACEABLE,
    SUBMITTABLE,
    DocStatus,
    EventType,
    Stage,
    TaskStatus,
)
from kb_cli.parsers import KINDS, FileKind
from kb_cli.permissions import DEFAULT_BASE
from kb_cli.queries import AuditEvent
from kb_cli.records import DocumentRecord, DocumentRow, TaskRecord, meta_of
from kb_cli.services import pending
from kb_cli.store import StoredObject
from kb_cli.transitions import audit_event, move_document, task_event_data


@dataclass(frozen=True)
class CheckedFile:
    path: Path
    kind: FileKind

    @property
    def filename(self) -> str:
        """The name as text, even when the filesystem name is not valid UTF-8."""
        return _shown(self.path.name)


@dataclass(frozen=True)
class Uploaded:
    """What an upload made: a record per file (its task's with --submit, each naming its
    file), and the files whose content an earlier document already has."""

    records: list[TaskRecord] | list[DocumentRecord]
    duplicates: list[Duplicate]
    # --skip-existing: the files not stored, each with the document that has its content.
    skipped: list[Duplicate] = field(default_factory=list)


def upload(
    kb: Kb,
    paths: list[Path],
    submit: bool = False,
    base: str = DEFAULT_BASE,
    skip_existing: bool = False,
    meta: dict[str, str] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    checked: list[CheckedFile] | None = None,
) -> Uploaded:
    """Store each file as a draft document of `base` (and submit it), each with the
    metadata `meta`; all or nothing. `skip_existing`: a file whose content a document
    of `base` (or an earlier file of this upload) already has is left out, not stored
    again. `on_progress(done, total)`: files stored so far. `checked`: what
    check_files answered for these paths just before (20,000 files are not read twice)."""
    if not paths:
        raise UsageError("give at least one file to upload")
    meta = metadata.checked(meta or {})
    if metadata.PATH in meta and len(paths) > 1:
        raise UsageError(
            f"metadata {metadata.PATH!r} names one document of a base: upload one file with it"
        )
    uploads = checked or check_files(paths, kb.settings.max_upload_bytes)
    owner = claimed_store(kb)
    stored = _store_all(kb, uploads, on_progress)
    skipped: list[Duplicate] = []
    kept = stored
    try:
        with kb.db.write() as conn:
            require_base(conn, kb.scope, base)
            own_store(conn, kb, owner)
            if skip_existing:
                uploads, kept, skipped = _without_existing(conn, base, uploads, stored)
            # A stamp per document, so that `kb status` (newest first) and the queue
            # keep the order of the files named.
            inserted = [
                _Inserted(
                    insert_document(
                        conn,
                        kb.actor.name,
                        base,
                        NewDocument(up.filename, up.kind.content_type, obj, meta),
                        kb.timestamp(),
                    ),
                    up.filename,
                    obj,
                )
                for up, obj in zip(uploads, kept, strict=True)
            ]
            duplicates = _duplicates(conn, base, inserted)
            if submit:
                records: list[TaskRecord] | list[DocumentRecord] = [
                    _submit(conn, kb.actor.name, new.document_id, kb.timestamp())
                    for new in inserted
                ]
            else:
                records = [document_record(conn, new.document_id) for new in inserted]
    except AlreadyExists as taken:
        pending.discard(kb, [obj.key for obj in stored])
        raise AlreadyExists(
            f"a document of base {base!r} already has path {meta.get(metadata.PATH)!r}: "
            "replace its file instead (kb upload FILE --replace ID)"
        ) from taken
    except BaseException:
        pending.discard(kb, [obj.key for obj in stored])
        raise
    # Committed without them: their objects are nobody's.
    pending.discard(kb, [skip.document_id for skip in skipped])
    return Uploaded(records, duplicates, [dataclasses.replace(s, document_id="") for s in skipped])


def _without_existing(
    conn: Connection, base: str, uploads: list[CheckedFile], stored: list[StoredObject]
) -> tuple[list[CheckedFile], list[StoredObject], list[Duplicate]]:
    """The uploads whose content is new to `base`, and the rest as Duplicates that
    carry their stored object's key (to delete) in place of a document id."""
    digests = [obj.sha256 for obj in stored]
    first_with = {
        row.sha256: (row.id, row.filename)
        for row in reversed(queries.documents_with_content(conn, base, digests))
    }
    kept_uploads, kept_objects, skipped = [], [], []
    for upload, obj in zip(uploads, stored, strict=True):
        if obj.sha256 in first_with:
            same_id, same_name = first_with[obj.sha256]
            in_upload = same_id == ""
            skipped.append(Duplicate(obj.key, upload.filename, same_id, same_name, in_upload))
            continue
        first_with[obj.sha256] = ("", upload.filename)  # an earlier file of this upload
        kept_uploads.append(upload)
        kept_objects.append(obj)
    return kept_uploads, kept_objects, skipped


def upload_files(
    kb: Kb, paths: list[Path], submit: bool = False, base: str = DEFAULT_BASE
) -> list[Any]:  # TaskRecords with `submit`, else DocumentRecords
    """`upload`'s records alone."""
    return upload(kb, paths, submit, base).records


@dataclass(frozen=True)
class _Inserted:
    document_id: str
    filename: str
    stored: StoredObject


@dataclass(frozen=True)
class Duplicate:
    """A document just uploaded whose content an earlier document already has: one
    of the same upload (the same file named twice) or one already in the base."""

    document_id: str
    filename: str
    same_as_id: str
    same_as_filename: str
    in_this_upload: bool


def _duplicates(conn: Connection, base: str, inserted: list[_Inserted]) -> list[Duplicate]:
    """Which of the documents just inserted into `base` (in upload order) have the
    content of an earlier document of that base. Uploading them is allowed (a copy may
    be meant); the caller warns."""
    digests = [new.stored.sha256 for new in inserted]
    new_ids = {new.document_id for new in inserted}
    first_with: dict[str, tuple[str, str]] = {
        row.sha256: (row.id, row.filename)
        for row in reversed(queries.documents_with_content(conn, base, digests))
        if row.id not in new_ids
    }
    in_base = set(first_with)
    found = []
    for new in inserted:
        digest = new.stored.sha256
        other_id, other_name = first_with.setdefault(digest, (new.document_id, new.filename))
        if other_id != new.document_id:
            found.append(
                Duplicate(
                    new.document_id, new.filename, other_id, other_name, digest not in in_base
                )
            )
    return found


@dataclass(frozen=True)
class Replaced:
    """A replace's record, and what changed of the file besides its content (its name
    or type, as "a.md (text/markdown) -> b.txt (text/plain)"), for a warning."""

    record: DocumentRecord
    renamed: str | None


def replace_file(
    kb: Kb, path: Path, document_id: str, meta: dict[str, str] | None = None
) -> DocumentRecord:
    """`replace`'s record alone."""
    return replace(kb, path, document_id, meta).record


def replace(kb: Kb, path: Path, document_id: str, meta: dict[str, str] | None = None) -> Replaced:
    """Give a draft, failed or published document a new source file and revision (and
    set the metadata keys of `meta`)."""
    [upload] = check_files([path], kb.settings.max_upload_bytes)
    meta = metadata.checked(meta or {})
    with kb.db.read() as conn:
        require_status(queries.get_document(conn, document_id), REPLACEABLE, "replace")
    owner = claimed_store(kb)
    [obj] = _store_all(kb, [upload])
    try:
        with kb.db.write() as conn:
            document = queries.existing_document(conn, document_id, lock=True)
            own_store(conn, kb, owner)
            renamed = replace_revision(
                conn,
                kb.actor.name,
                document,
                NewDocument(upload.filename, upload.kind.content_type, obj, meta),
                kb.timestamp(),
            )
            record = document_record(conn, document_id)
    except AlreadyExists as taken:
        pending.discard(kb, [obj.key])
        raise AlreadyExists(
            f"another document of its base already has path {meta.get(metadata.PATH)!r}"
        ) from taken
    except BaseException:
        pending.discard(kb, [obj.key])
        raise
    # The old file is no longer needed: the published revision lives on as chunks.
    pending.discard(kb, [document.object_key])
    return Replaced(record, renamed)


def _renamed(document: DocumentRow, new_file: NewDocument) -> str | None:
    """The old and new file, when the new one has another name or type."""
    old = (document.filename, document.content_type)
    new = (new_file.filename, new_file.content_type)
    if old == new:
        return None
    return f"{old[0]} ({old[1]}) -> {new[0]} ({new[1]})"


def replace_revision(
    conn: Connection, actor: str, document: DocumentRow, new: NewDocument, now: str
) -> str | None:
    """In `conn`: the document's next revision is the stored file of `new`, its metadata
    keys updated with `new.meta`; its old object is pending, the caller's to delete after
    commit (pending.discard).
    A conflict unless the document is draft, failed, published or unpublished. Returns
    the old and new file when the new one has another name or type (_renamed)."""
    require_status(document, REPLACEABLE, "replace")
    renamed = _renamed(document, new)
    revision = document.revision + 1
    # A published (or unpublished) document goes back to draft; draft and failed
    # keep their status so that `retry` reprocesses a failed document's new file.
    served = (DocStatus.PUBLISHED, DocStatus.ARCHIVED)
    new_status = DocStatus.DRAFT if document.status in served else document.status
    merged = metadata.checked({**meta_of(document.meta), **new.meta})
    obj = new.stored
    move_document(
        conn,
        document,
        new_status,
        actor=actor,
        action="replace",
        required=True,
        detail=f"revision {revision}" + (f": {renamed}" if renamed else ""),
        filename=new.filename,
        content_type=new.content_type,
        size_bytes=obj.size_bytes,
        sha256=obj.sha256,
        object_key=obj.key,
        revision=revision,
        updated_at=now,
        meta=json.dumps(merged, ensure_ascii=False, sort_keys=True),
    )
    queries.insert_revision_file(conn, document.id, revision, new.filename, new.content_type, now)
    if new.meta:
        queries.insert_audit_events(conn, [meta_event(actor, document.id, new.meta, now)])
    queries.delete_artefacts(conn, document.id)  # parses of the superseded file
    pending.settle(conn, [obj.key])
    if document.object_key != obj.key:
        pending.release(conn, document.object_key, now)
    return renamed


def submit_document(kb: Kb, document_id: str) -> TaskRecord:
    with kb.db.write() as conn:
        return _submit(conn, kb.actor.name, document_id, kb.timestamp())


def publish_document(kb: Kb, document_id: str, if_version: int | None = None) -> DocumentRecord:
    """review_pending -> published: move the published revision pointer in one step;
    archived -> published: serve the unpublished revision again, without reprocessing."""
    with kb.db.write() as conn:
        document = queries.existing_document(conn, document_id, lock=True)
        require_status(document, PUBLISHABLE, "publish")
        if if_version is not None and if_version != document.version:
            raise ConflictError(
                f"document {document_id} is at version {document.version}, not {if_version}"
            )
        revision = document.revision
        if document.status == DocStatus.ARCHIVED:
            archived = document.archived_revision
            if archived is None or not queries.revision_has_chunks(conn, document_id, archived):
                raise ConflictError(
                    f"cannot publish document {document_id} again: the chunks of revision "
                    f"{archived} are gone; upload it again (kb upload FILE --replace "
                    f"{document_id}) and submit it"
                )
            revision = archived
        moved = move_document(
            conn,
            document,
            DocStatus.PUBLISHED,
            actor=kb.actor.name,
            action="publish",
            detail=f"revision {revision}",
            if_version=if_version,
            published_revision=revision,
            archived_revision=None,
            updated_at=kb.timestamp(),
        )
        if not moved:
            raise ConflictError(f"document {document_id} changed meanwhile; read it and retry")
        # What nothing serves any more goes now: earlier revisions, an unpublished one.
        queries.delete_unpublished_chunks(conn, document_id, keep_revision=revision)
        return document_record(conn, document_id)


def publish_all_reviewed(kb: Kb) -> Iterator[DocumentRecord]:
    """Publish every review_pending document of the caller's bases, each in its own
    transaction, yielding its record as it is published. One that moved on meanwhile (a
    reviewer rejected, published or deleted it) is left as it is, not an error."""
    with kb.db.read() as conn:
        waiting = queries.list_documents(conn, DocStatus.REVIEW_PENDING, scope=kb.scope)
    for document in waiting:  # newest first, as `kb status` lists them
        try:
            yield publish_document(kb, document.document_id)
        except (ConflictError, NotFoundError):
            continue


def document_record(conn: Connection, document_id: str) -> DocumentRecord:
    rows = queries.list_documents(conn, document_id=document_id)
    if not rows:
        raise NotFoundError(f"no document with id {document_id!r}")
    record = rows[0]
    served = record.published_revision
    if served is not None and served != record.revision:
        file = queries.revision_file(conn, document_id, served)
        if file is not None and file != (record.filename, record.content_type):
            record.published_file = file._asdict()
    return record


def list_document_records(
    kb: Kb,
    status: str | None = None,
    error_code: str | None = None,
    where: tuple[metadata.MetaFilter, ...] = (),
) -> list[DocumentRecord]:
    scope = dataclasses.replace(kb.scope, where=where)
    with kb.db.read() as conn:
        return queries.list_documents(conn, status, error_code, scope=scope)


# --- helpers -------------------------------------------------------------------------


def check_files(paths: list[Path], max_bytes: int) -> list[CheckedFile]:
    """Check every file before storing any: missing (usage) beats unsupported (input)."""
    for path in paths:
        if not path.exists():
            raise UsageError(f"no such file: {_shown(path)}")
        if path.is_dir():
            shown = _shown(path).rstrip("/")
            raise UsageError(
                f"not a regular file: {shown} is a directory; upload its files with "
                f"kb upload {shown}/* (or kb sync {shown}, which keeps a base in step with it)"
            )
        if not path.is_file():
            raise UsageError(f"not a regular file: {_shown(path)}")
    uploads = []
    for path in paths:
        if not os.access(path, os.R_OK):
            raise InvalidInputError(f"file is not readable: {_shown(path.name)}")
        kind = _kind_of(path)
        if path.stat().st_size > max_bytes:
            raise InvalidInputError(
                f"file too large: {_shown(path.name)} (limit {max_bytes} bytes)"
            )
        uploads.append(CheckedFile(path, kind))
    return uploads


def _kind_of(path: Path) -> FileKind:
    """The file's kind by its content (and name); InvalidInputError when kb cannot read
    it, saying what to convert a legacy Office file to."""
    from kb_cli.parsers.detect import detect, legacy_office

    name = _shown(path.name)
    try:
        kind = detect(path, name)
        legacy = None if kind is not None else legacy_office(path, name)
    except OSError as error:
        raise InvalidInputError(f"cannot read {name}: {error.strerror}") from error
    if legacy is not None:
        raise InvalidInputError(f"unsupported file type: {name} is {legacy}")
    if kind is None:
        supported = ", ".join(sorted(KINDS))
        raise InvalidInputError(f"unsupported file type: {name} (supported: {supported})")
    return kind


def _shown(path: Path | str) -> str:
    """A path as printable text, even when it is not valid UTF-8."""
    return os.fsencode(path).decode("utf-8", "replace")


def claimed_store(kb: Kb) -> str | None:
    """The database the store names as its owner; a store that names none yet (the
    first upload) is claimed for this one. Read before any write transaction."""
    pending.clean_abandoned(kb)  # what a killed command on this host left
    owner = kb.store.owner(writing=True)
    if owner is None:
        with kb.db.read() as conn:
            owner = queries.database_id(conn)
        if owner is not None:  # every schema since 0001 has one
            kb.store.claim(owner)
    return owner


def own_store(conn: Connection, kb: Kb, owner: str | None) -> None:
    """In an upload's write: refuse a store of another knowledge base (its objects are
    then deleted with the rest), and record where this knowledge base's store is."""
    check_store_owner(conn, kb, owner)
    queries.record_object_store(conn, kb.settings.store_where(short=False))


def _store_all(
    kb: Kb, uploads: list[CheckedFile], on_progress: Callable[[int, int], None] | None = None
) -> list[StoredObject]:
    """Each file's bytes streamed into the store (never all held at once) under a key
    recorded as pending first (pending.reserve: a kill at any point leaves no orphan),
    made durable together before the caller's transaction refers to them."""
    stored: list[StoredObject] = []
    max_bytes = kb.settings.max_upload_bytes
    keys = pending.reserve(kb, len(uploads))
    try:
        for upload, key in zip(uploads, keys, strict=True):
            try:
                with open(upload.path, "rb") as source:
                    stored.append(kb.store.put(source, max_bytes, key, durable=False))
            except OSError as error:
                raise InvalidInputError(
                    f"cannot read {upload.filename}: {error.strerror}"
                ) from error
            if on_progress is not None:
                on_progress(len(stored), len(uploads))
        kb.store.make_durable([obj.key for obj in stored])
    except BaseException as error:
        pending.discard(kb, keys)
        if isinstance(error, KeyboardInterrupt):  # say so, not just ^C
            raise UploadInterrupted() from None
        raise
    return stored


@dataclass(frozen=True)
class NewDocument:
    """What a new document row is made of: its file as stored, and its metadata."""

    filename: str
    content_type: str
    stored: StoredObject
    meta: dict[str, str]


def insert_document(conn: Connection, actor: str, base: str, new: NewDocument, now: str) -> str:
    """A draft document row with its audit events, in `conn`: its id. AlreadyExists
    when its metadata `path` is taken in `base` (the database's unique index)."""
    document_id = str(uuid.uuid4())
    obj = new.stored
    queries.insert_document(
        conn,
        id=document_id,
        base=base,
        filename=new.filename,
        content_type=new.content_type,
        size_bytes=obj.size_bytes,
        sha256=obj.sha256,
        object_key=obj.key,
        status=DocStatus.DRAFT,
        version=1,
        revision=1,
        published_revision=None,
        latest_task_id=None,
        created_at=now,
        updated_at=now,
        meta=json.dumps(new.meta, ensure_ascii=False, sort_keys=True),
    )
    queries.insert_revision_file(conn, document_id, 1, new.filename, new.content_type, now)
    pending.settle(conn, [obj.key])
    events = [
        audit_event(actor, "upload", document_id, None, DocStatus.DRAFT, new.filename, at=now)
    ]
    if new.meta:
        events.append(meta_event(actor, document_id, new.meta, now))
    queries.insert_audit_events(conn, events)
    return document_id


def meta_event(actor: str, document_id: str, meta: dict[str, str], now: str) -> AuditEvent:
    """The audit event of a document's metadata being set: every key and value."""
    return audit_event(actor, "meta", document_id, None, None, metadata.describe(meta), at=now)


def _submit(conn: Connection, actor: str, document_id: str, now: str) -> TaskRecord:
    """draft -> processing with a new queued task and its outbox event, in `conn`: the
    task's record."""
    document = queries.existing_document(conn, document_id, lock=True)
    require_status(document, SUBMITTABLE, "submit")
    task_id = str(uuid.uuid4())
    queries.insert_task(
        conn,
        id=task_id,
        document_id=document_id,
        revision=document.revision,
        status=TaskStatus.QUEUED,
        stage=Stage.DOWNLOAD,
        completed=0,
        total=0,
        attempt=0,
        created_at=now,
        updated_at=now,
    )
    if not move_document(
        conn,
        document,
        DocStatus.PROCESSING,
        actor=actor,
        action="submit",
        detail=f"task {task_id}",
        latest_task_id=task_id,
        rejected_revision=None,
        rejected_reason=None,
        updated_at=now,
    ):
        raise ConflictError(f"document {document_id} changed meanwhile; try again")
    queries.insert_audit_events(
        conn,
        [
            audit_event(
                actor,
                "submit",
                task_id,
                None,
                TaskStatus.QUEUED,
                f"document {document_id} revision {document.revision}",
                at=now,
            )
        ],
    )
    task = queries.existing_task(conn, task_id)
    queries.insert_event(
        conn, EventType.TASK_QUEUED, document_id, task_id, task_event_data(task), now
    )
    queries.wake(conn, TASKS_CHANNEL)
    return TaskRecord.from_row(task, document.filename)


submit_in = _submit  # for a service that submits inside its own transaction (kb sync)

# What a person can do next with a document in each status, for refusals.
NEXT_STEP = {
    DocStatus.DRAFT: "submit it first: kb submit {id}",
    DocStatus.PROCESSING: "its task has not ended: kb status {id} --wait (or kb cancel {id})",
    DocStatus.REVIEW_PENDING: "a reviewer publishes it (kb publish {id}) or rejects it "
    "(kb reject {id} --reason TEXT) first",
    DocStatus.PUBLISHED: "to change it: kb upload FILE --replace {id}",
    DocStatus.FAILED: "fix the cause (kb upload FILE --replace {id}), then: kb retry {id}",
    DocStatus.ARCHIVED: "kb publish {id} serves it again; kb upload FILE --replace {id} changes it",
    DocStatus.DELETING: "it cannot change any more",
}
# The status a verb leads to: refusing it there is "already".
_OUTCOME = {"publish": DocStatus.PUBLISHED, "submit": DocStatus.PROCESSING}


def require_status(document: DocumentRow | None, allowed: tuple[DocStatus, ...], verb: str) -> None:
    """A conflict unless the document's status is one `verb` takes: the status, once,
    and what to do next."""
    if document is None:
        raise NotFoundError("no document with that id")
    status = document.status
    if status not in allowed:
        already = "already " if _OUTCOME.get(verb) == status else ""
        hint = NEXT_STEP[status].format(id=document.id)
        raise ConflictError(
            f"cannot {verb} document {document.id}: it is {already}{status}; {hint}"
        )


def document_record_for(kb: Kb, document_id: str) -> DocumentRecord:
    with kb.db.read() as conn:
        return document_record(conn, document_id)
