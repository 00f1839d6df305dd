"""Document verbs: upload, replace, submit, publish, and reading status."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb_cli import intake, metadata, pending, queries
from kb_cli.app import Kb, require_base
from kb_cli.db import Connection
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
    DocStatus,
)
from kb_cli.parsers import KINDS, FileKind
from kb_cli.permissions import DEFAULT_BASE
from kb_cli.records import DocumentRecord, TaskRecord
from kb_cli.services import reading
from kb_cli.store import StoredObject
from kb_cli.transitions import move_document


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
    owner = intake.claimed_store(kb)
    stored = _store_all(kb, uploads, on_progress)
    skipped: list[Duplicate] = []
    kept = stored
    try:
        with kb.db.write() as conn:
            require_base(conn, kb.scope, base)
            intake.own_store(conn, kb, owner)
            if skip_existing:
                uploads, kept, skipped = _without_existing(conn, base, uploads, stored)
            # A stamp per document, so that `kb status` (newest first) and the queue
            # keep the order of the files named.
            inserted = [
                _Inserted(
                    intake.insert_document(
                        conn,
                        kb.actor.name,
                        base,
                        intake.NewDocument(up.filename, up.kind.content_type, obj, meta),
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
                    intake.submit(
                        conn, kb.actor.name, new.document_id, kb.timestamp(), kb.settings.given
                    )
                    for new in inserted
                ]
            else:
                records = [queries.document_record(conn, new.document_id) for new in inserted]
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
        intake.require_status(queries.get_document(conn, document_id), REPLACEABLE, "replace")
    owner = intake.claimed_store(kb)
    [obj] = _store_all(kb, [upload])
    try:
        with kb.db.write() as conn:
            document = queries.existing_document(conn, document_id, lock=True)
            intake.own_store(conn, kb, owner)
            renamed = intake.replace_revision(
                conn,
                kb.actor.name,
                document,
                intake.NewDocument(upload.filename, upload.kind.content_type, obj, meta),
                kb.timestamp(),
            )
            record = queries.document_record(conn, document_id)
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


def submit_document(kb: Kb, document_id: str) -> TaskRecord:
    with kb.db.write() as conn:
        return intake.submit(conn, kb.actor.name, document_id, kb.timestamp(), kb.settings.given)


def publish_document(kb: Kb, document_id: str, if_version: int | None = None) -> DocumentRecord:
    """review_pending -> published: move the published revision pointer in one step;
    archived -> published: serve the unpublished revision again, without reprocessing."""
    with kb.db.write() as conn:
        document = queries.existing_document(conn, document_id, lock=True)
        intake.require_status(document, PUBLISHABLE, "publish")
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
        return queries.document_record(conn, document_id)


def publish_all_reviewed(kb: Kb, bases: tuple[str, ...] = ()) -> Iterator[DocumentRecord]:
    """Publish every review_pending document of the caller's bases (of `bases` only,
    when named), each in its own transaction, yielding its record as it is published.
    One that moved on meanwhile (a reviewer rejected, published or deleted it) is left
    as it is, not an error."""
    scope = kb.actor.scope(*bases)
    with kb.db.read() as conn:
        waiting = queries.list_documents(conn, DocStatus.REVIEW_PENDING, scope=scope)
    for document in waiting:  # newest first, as `kb status` lists them
        try:
            yield publish_document(kb, document.document_id)
        except (ConflictError, NotFoundError):
            continue


def list_document_records(
    kb: Kb,
    status: str | None = None,
    error_code: str | None = None,
    where: tuple[metadata.MetaFilter, ...] = (),
    bases: tuple[str, ...] = (),
    limit: int | None = None,
) -> list[DocumentRecord]:
    """The documents of the caller's bases (of `bases` only, when named), newest first.
    Listing `review_pending` ones, the first `limit` (all, when None) say what
    publishing each would change."""
    scope = dataclasses.replace(kb.actor.scope(*bases), where=where)
    with kb.db.read() as conn:
        records = queries.list_documents(conn, status, error_code, scope=scope)
        if status == DocStatus.REVIEW_PENDING:
            reading.with_changes(conn, records[:limit])
        return records


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


def document_record_for(kb: Kb, document_id: str) -> DocumentRecord:
    with kb.db.read() as conn:
        return queries.document_record(conn, document_id)
