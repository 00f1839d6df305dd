"""`kb sync SOURCE`: keep a base in step with a folder or a bucket prefix
(docs/interface.md, "Syncing a folder or a bucket").

A file is matched to the document of the base whose metadata `path` is its path
relative to SOURCE; the database allows one live document per (base, path), so two
syncs at once, or a sync run again after being killed, never make a second one. Each
file costs its own short transactions; an unchanged one (same size and stamp as
recorded, or the same content) costs none. Records stream out as the walk goes.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from kb_cli import intake, metadata, pending, queries
from kb_cli.app import Kb, require_base
from kb_cli.errors import (
    AlreadyExists,
    ConflictError,
    EntryUnreadable,
    InvalidInputError,
    NotFoundError,
    ObjectTooLarge,
    UsageError,
)
from kb_cli.lifecycle import REPLACEABLE, DocStatus
from kb_cli.parsers import FileKind
from kb_cli.permissions import REVIEWERS
from kb_cli.queries import SyncedDocument
from kb_cli.records import DocumentRow, meta_of
from kb_cli.services import removal, review
from kb_cli.store import StoredObject
from kb_cli.store.sources import (
    FAILED,
    SKIPPED,
    Entry,
    Source,
    bounded,
    open_source,
    too_large,
)

ADDED, CHANGED, UNCHANGED, MISSING = "added", "changed", "unchanged", "missing"
ACTIONS = (ADDED, CHANGED, UNCHANGED, MISSING, SKIPPED, FAILED)
MISSING_CHOICES = ("keep", "unpublish", "delete")
# The metadata keys a sync sets besides `path` and `source`: what the quick check compares.
SIZE, STAMP = metadata.SOURCE_SIZE, metadata.SOURCE_STAMP
# The reason of a document whose folder could not be read: never handled as missing.
UNLISTED = "its folder could not be read; left as it is"
DELETED_MEANWHILE = "deleted by another command meanwhile"
# A delete that a killed command began (`deleting`) is finished by the next sync.
DELETE_FINISHED = "deleted: an earlier delete of it was interrupted, and is finished now"
# The reason of a missing document left as it was because the question before
# unpublishing or deleting was answered no (on a terminal; `--yes` skips it).
NOT_CONFIRMED = "kept (not confirmed)"
# A changed file becomes a new revision only of a document that is not being worked on.
_REPLACEABLE = frozenset(str(status) for status in REPLACEABLE)


@dataclass
class SyncRecord:
    path: str
    action: str
    document_id: str | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass
class Gone:
    """A document whose file is gone from the source, as the question before it is
    unpublished or deleted lists it: `filename` is its path under the source."""

    document_id: str
    filename: str
    status: str


@dataclass
class SyncSummary:
    source: str
    base: str
    dry_run: bool
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ACTIONS, 0))

    def to_dict(self) -> dict[str, object]:
        return {"source": self.source, "base": self.base, "dry_run": self.dry_run, **self.counts}


@dataclass
class SyncOptions:
    base: str
    missing: str = "keep"
    dry_run: bool = False
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    checksum: bool = False


@dataclass
class Counters:
    """Live progress: files scanned, hashed, uploaded."""

    scanned: int = 0
    hashed: int = 0
    uploaded: int = 0


def _check_options(kb: Kb, options: SyncOptions) -> None:
    if options.missing not in MISSING_CHOICES:
        raise UsageError(f"--missing is one of: {', '.join(MISSING_CHOICES)}")
    role = kb.actor.role
    if options.missing == "unpublish" and role is not None and role not in REVIEWERS:
        from kb_cli.errors import ForbiddenError

        raise ForbiddenError(
            "--missing unpublish needs a reviewer or admin (unpublishing is theirs); "
            "use --missing keep"
        )


def sync(kb: Kb, location: str, options: SyncOptions) -> SyncRun:
    """A sync of `location` into the options' base, once everything that can be
    refused before it is read has been: the options, the caller's role, the source,
    the base. Its `records` read it."""
    _check_options(kb, options)
    source = _source(location)
    if not options.dry_run:
        pending.clean_abandoned(kb)  # what a sync killed on this host left behind
    with kb.db.read() as conn:
        require_base(conn, kb.scope, options.base)
        known = {row.path: row for row in queries.synced_documents(conn, options.base, SIZE, STAMP)}
        interrupted = [row for row in removal.unfinished(conn) if row.base == options.base]
    run = SyncRun(kb, source, options, known, [] if options.dry_run else interrupted)
    elsewhere = sorted(
        {row.source for row in known.values() if row.source not in (None, source.name)}
    )
    if elsewhere:
        more = f" (and {len(elsewhere) - 1} more)" if len(elsewhere) > 1 else ""
        run.notes.append(
            f"documents of base {options.base} were synced from {elsewhere[0]}{more}: they are "
            "matched to this source by their paths relative to it (a base follows one source)"
        )
    return run


def _source(location: str) -> Source:
    if not location.startswith("s3://"):
        path = Path(location)
        if not path.exists():
            raise UsageError(f"no such folder: {location}")
        if not path.is_dir():
            raise UsageError(
                f"not a folder: {location} (sync takes a folder or s3://BUCKET/PREFIX)"
            )
    source = open_source(location)
    if len(source.name) > metadata.MAX_SOURCE:
        raise UsageError(f"the source's name is longer than {metadata.MAX_SOURCE} characters")
    return source


class SyncRun:
    def __init__(
        self,
        kb: Kb,
        source: Source,
        options: SyncOptions,
        known: dict[str, SyncedDocument],
        interrupted: list[DocumentRow] | None = None,
    ) -> None:
        self.kb, self.source, self.options, self.known = kb, source, options, known
        # Documents of the base whose delete a killed command began: finished first.
        self.interrupted = interrupted or []
        self.notes: list[str] = []  # for the caller to show before the records
        self.counters = Counters()
        self.progress: Callable[[Counters], None] | None = None
        self.store_owner: str | None = None  # read (and claimed) before the first put
        self.store_checked = False
        self.keys = pending.Keys(kb)
        # Folders that could not be listed ("a/b/"; "/" for SOURCE itself): what is
        # under them is not missing.
        self.unlisted: list[str] = []
        # Asked once, after the walk and before any missing document is unpublished or
        # deleted: (how, the documents) -> go ahead? None: never asked. `asked` holds
        # the ids it was asked about, `declined` that it was answered no (those
        # documents are then kept).
        self.confirm: Callable[[str, list[Gone]], bool] | None = None
        self.asked: set[str] | None = None
        self.declined = False

    def records(
        self, summary: SyncSummary, progress: Callable[[Counters], None] | None = None
    ) -> Iterator[SyncRecord]:
        """Each path's record, as it is decided; `summary` counts them, `progress`
        hears the live counts."""
        self.progress = progress
        for record in self._decided():
            summary.counts[record.action] += 1
            yield record

    def _decided(self) -> Iterator[SyncRecord]:
        try:
            yield from self._finish_interrupted()
            for entry in self.source.entries():
                if entry.unlisted:
                    self.unlisted.append(entry.path)  # even when not --include'd itself
                if not _taken(entry.path.rstrip("/"), self.options):
                    continue
                self.counters.scanned += 1
                record = self._one(entry)
                self._report()
                yield record
            yield from self._missing()
        finally:
            self.keys.close()

    def _finish_interrupted(self) -> Iterator[SyncRecord]:
        """The deletes a killed command began in this base, finished (as `kb doctor
        --repair` would: each step is safe to run again, also beside a live delete)."""
        for row in self.interrupted:
            removal.finish(self.kb, row.id)
            yield SyncRecord(
                meta_of(row.meta).get(metadata.PATH) or row.filename,
                MISSING,
                row.id,
                DELETE_FINISHED,
            )

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(self.counters)

    def _one(self, entry: Entry) -> SyncRecord:
        """One path's record. What goes wrong with one path (it changed while being
        read, it grew too large, another command changed its document) is that path's
        record, never the end of the walk."""
        known = self.known.pop(entry.path, None)
        document_id = known.id if known else None
        if entry.problem is not None:
            return SyncRecord(entry.path, entry.outcome, document_id, entry.problem)
        if known is not None:  # the stored path: a good name
            if self._quick_check(known, entry):
                return SyncRecord(entry.path, UNCHANGED, known.id)
        elif bad_name := _bad_name(entry.path):
            return SyncRecord(_printable(entry.path), FAILED, None, bad_name)
        limit = self.kb.settings.max_upload_bytes
        if entry.size > limit:
            return SyncRecord(entry.path, FAILED, document_id, too_large(limit))
        try:
            return self._read_and_store(entry, _document(self.kb, known))
        except EntryUnreadable as unread:
            return SyncRecord(entry.path, unread.outcome, document_id, unread.reason)
        except ObjectTooLarge:
            return SyncRecord(entry.path, FAILED, document_id, too_large(limit))
        except OSError as error:
            reason = f"not readable: {error.strerror or type(error).__name__}"
            return SyncRecord(entry.path, FAILED, document_id, reason)
        except (UsageError, InvalidInputError) as refused:
            return SyncRecord(entry.path, FAILED, document_id, refused.message)

    def _quick_check(self, known: SyncedDocument, entry: Entry) -> bool:
        """Unchanged by size and stamp, as recorded (unless --checksum)."""
        return (
            not self.options.checksum
            and known.stamp == entry.stamp
            and known.size == str(entry.size)
        )

    def _read_and_store(self, entry: Entry, document: DocumentRow | None) -> SyncRecord:
        """The file read once, from what the source opened and checked: its kind, its
        hash, the object stored."""
        document_id = document.id if document else None
        limit = self.kb.settings.max_upload_bytes
        with self.source.opened(entry, limit) as opened:
            kind, problem = _kind(opened.file, entry.path)
            if kind is None:
                return SyncRecord(entry.path, SKIPPED, document_id, problem)
            read = opened.read
            if document is not None:
                self.counters.hashed += 1
                if _sha256(opened.file, limit) == document.sha256:
                    if not self.options.dry_run and _stamps_moved(document, read):
                        self._restamp(document, read)
                    return SyncRecord(entry.path, UNCHANGED, document.id, "same content")
                if document.status not in _REPLACEABLE:
                    return SyncRecord(entry.path, SKIPPED, document.id, _busy(document.status))
            if self.options.dry_run:
                return SyncRecord(entry.path, CHANGED if document else ADDED, document_id)
            obj = self._put(opened.file)
            if obj.size_bytes != read.size or not opened.unchanged():
                pending.discard(self.kb, [obj.key])
                return SyncRecord(
                    entry.path, FAILED, document_id, "changed while being read; sync again"
                )
            new = intake.NewDocument(
                entry.path.rsplit("/", 1)[-1], kind.content_type, obj, self._meta(read)
            )
            if document is None:
                return self._add(entry.path, new)
            return self._change(entry.path, document, new)

    def _put(self, file: BinaryIO) -> StoredObject:
        if not self.store_checked:
            self.store_owner, self.store_checked = intake.claimed_store(self.kb), True
        key = self.keys.take()  # recorded before it is written: never an orphan
        try:
            file.seek(0)
            obj = self.kb.store.put(file, self.kb.settings.max_upload_bytes, key)
        except BaseException:
            pending.discard(self.kb, [key])
            raise
        self.counters.uploaded += 1
        return obj

    def _meta(self, read: Entry) -> dict[str, str]:
        return {
            metadata.PATH: read.path,
            metadata.SOURCE: self.source.name,
            SIZE: str(read.size),
            STAMP: read.stamp,
        }

    def _add(self, path: str, new: intake.NewDocument) -> SyncRecord:
        kb = self.kb
        try:
            with kb.db.write() as conn:
                intake.own_store(conn, kb, self.store_owner)
                document_id = intake.insert_document(
                    conn, kb.actor.name, self.options.base, new, kb.timestamp()
                )
                intake.submit(conn, kb.actor.name, document_id, kb.timestamp(), kb.settings.given)
        except AlreadyExists:
            pending.discard(kb, [new.stored.key])
            return SyncRecord(path, SKIPPED, None, "another command added this path meanwhile")
        except BaseException:
            pending.discard(kb, [new.stored.key])
            raise
        return SyncRecord(path, ADDED, document_id)

    def _change(self, path: str, document: DocumentRow, new: intake.NewDocument) -> SyncRecord:
        kb = self.kb
        try:
            with kb.db.write() as conn:
                current = queries.get_document(conn, document.id, lock=True)
                if current is None or current.status == DocStatus.DELETING:
                    raise NotFoundError("its document was " + DELETED_MEANWHILE)
                intake.own_store(conn, kb, self.store_owner)
                intake.replace_revision(conn, kb.actor.name, current, new, kb.timestamp())
                if current.status == DocStatus.FAILED:
                    if current.latest_task_id is None:
                        raise ConflictError("a failed document without a task")
                    intake.requeue(
                        conn,
                        kb.actor.name,
                        current.latest_task_id,
                        kb.timestamp(),
                        kb.settings.given,
                        new_revision=True,
                    )
                else:
                    intake.submit(
                        conn, kb.actor.name, document.id, kb.timestamp(), kb.settings.given
                    )
        except ConflictError as refused:
            pending.discard(kb, [new.stored.key])
            status = _status_now(kb, document.id)
            reason = _busy(status) if status is not None else refused.message
            return SyncRecord(path, SKIPPED, document.id, reason)
        except NotFoundError as gone:
            pending.discard(kb, [new.stored.key])
            return SyncRecord(path, SKIPPED, document.id, f"{gone.message}; sync again to add it")
        except BaseException:
            pending.discard(kb, [new.stored.key])
            raise
        self.keys.delete(current.object_key)  # served revisions live on as chunks
        return SyncRecord(path, CHANGED, document.id)

    def _restamp(self, document: DocumentRow, read: Entry) -> None:
        """Same content with a new size or time: record the new stamp, so that the next
        sync does not read the file again."""
        stamps = {SIZE: str(read.size), STAMP: read.stamp}
        with self.kb.db.write() as conn:
            current = queries.get_document(conn, document.id, lock=True)
            if current is None:
                return
            merged = {**meta_of(current.meta), **stamps}
            queries.update_document(
                conn,
                current.id,
                [current.status],
                meta=json.dumps(merged, ensure_ascii=False, sort_keys=True),
            )
            queries.insert_audit_events(
                conn,
                [intake.meta_event(self.kb.actor.name, current.id, stamps, self.kb.timestamp())],
            )

    def _missing(self) -> Iterator[SyncRecord]:
        """Synced documents of the base whose path is gone from the source, as --missing
        says: matched by path alone, so a source that moved (renamed, remounted, a
        symlink pointed at another release) still converges."""
        gone = [
            (path, known)
            for path, known in sorted(self.known.items())
            if known.source is not None and _taken(path, self.options)
        ]
        if self.confirm is not None and not self.options.dry_run:
            self._ask([(path, known) for path, known in gone if not self._unlisted(path)])
        for path, known in gone:
            if self._unlisted(path):
                yield SyncRecord(path, SKIPPED, known.id, UNLISTED)
            elif (row := _document(self.kb, known)) is None or row.status == DocStatus.DELETING:
                yield SyncRecord(path, MISSING, known.id, DELETED_MEANWHILE)
            elif self.asked is not None and self._acts_on(row) and not self._confirmed(row):
                yield SyncRecord(path, MISSING, row.id, NOT_CONFIRMED)
            else:
                yield self._handle_missing(path, row)
            self._report()

    def _unlisted(self, path: str) -> bool:
        return any(folder == "/" or path.startswith(folder) for folder in self.unlisted)

    def _ask(self, gone: list[tuple[str, SyncedDocument]]) -> None:
        """The documents --missing would unpublish or delete, read one at a time, and
        the question asked once about them all, before any is touched."""
        acted_on = [
            Gone(row.id, path, row.status)
            for path, known in gone
            if (row := _document(self.kb, known)) is not None
            and row.status != DocStatus.DELETING
            and self._acts_on(row)
        ]
        if acted_on and self.confirm is not None:
            self.asked = {item.document_id for item in acted_on}
            self.declined = not self.confirm(self.options.missing, acted_on)

    def _confirmed(self, row: DocumentRow) -> bool:
        """Answered yes about this very document (one that became published after the
        question was not asked about)."""
        return not self.declined and self.asked is not None and row.id in self.asked

    def _acts_on(self, row: DocumentRow) -> bool:
        """Whether --missing unpublishes or deletes this document (a kept one, or one
        not published under `unpublish`, is left as it is)."""
        how = self.options.missing
        return how == "delete" or (how == "unpublish" and row.published_revision is not None)

    def _handle_missing(self, path: str, row: DocumentRow) -> SyncRecord:
        how, dry = self.options.missing, self.options.dry_run
        if how == "keep":
            return SyncRecord(path, MISSING, row.id, "kept (--missing keep)")
        if how == "unpublish":
            if row.published_revision is None:
                return SyncRecord(path, MISSING, row.id, f"kept: not published ({row.status})")
            if not dry:
                try:
                    review.unpublish_document(self.kb, row.id)
                except ConflictError as refused:
                    return SyncRecord(path, MISSING, row.id, refused.message)
                except NotFoundError:
                    return SyncRecord(path, MISSING, row.id, DELETED_MEANWHILE)
            return SyncRecord(path, MISSING, row.id, "would unpublish" if dry else "unpublished")
        if not dry:
            try:
                removal.delete(self.kb, removal.plan(self.kb, [row.id]))
            except NotFoundError:  # another command deleted it first: what it did
                return SyncRecord(path, MISSING, row.id, DELETED_MEANWHILE)
            except ConflictError as refused:  # submitted again meanwhile
                return SyncRecord(path, SKIPPED, row.id, refused.message)
        return SyncRecord(path, MISSING, row.id, "would delete" if dry else "deleted")


def _taken(path: str, options: SyncOptions) -> bool:
    """--include (any, when given) and --exclude (none), on the relative path or the
    file name."""
    if not (options.include or options.exclude):
        return True
    name = path.rsplit("/", 1)[-1]

    def matches(patterns: Iterable[str]) -> bool:
        return any(fnmatch.fnmatchcase(path, p) or fnmatch.fnmatchcase(name, p) for p in patterns)

    if options.include and not matches(options.include):
        return False
    return not matches(options.exclude)


def _document(kb: Kb, known: SyncedDocument | None) -> DocumentRow | None:
    """The whole row of a known document, read when its file must be: not for each of
    an unchanged tree's files."""
    if known is None:
        return None
    with kb.db.read() as conn:
        return queries.get_document(conn, known.id)


def _bad_name(path: str) -> str | None:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "the name is not valid UTF-8"
    try:
        metadata.check_value(metadata.PATH, path)
    except UsageError as bad:
        return bad.message.replace("metadata value of 'path'", "the path")
    return None


def _printable(path: str) -> str:
    shown = path.encode("utf-8", "replace").decode("utf-8")
    return "".join("?" if ord(c) < 32 or ord(c) == 127 else c for c in shown)


def _kind(file: BinaryIO, path: str) -> tuple[FileKind | None, str | None]:
    from kb_cli.parsers.detect import detect_file, legacy_office_file

    name = path.rsplit("/", 1)[-1]
    kind = detect_file(file, name)
    if kind is not None:
        return kind, None
    legacy = legacy_office_file(file, name)
    return None, (f"unsupported file type: {legacy}" if legacy else "unsupported file type")


def _sha256(file: BinaryIO, limit: int) -> str:
    file.seek(0)
    digest = hashlib.sha256()
    for block in bounded(file, limit):
        digest.update(block)
    return digest.hexdigest()


def _stamps_moved(document: DocumentRow, read: Entry) -> bool:
    """Whether the size or stamp recorded on the document is not the file's now."""
    recorded = meta_of(document.meta)
    return (recorded.get(SIZE), recorded.get(STAMP)) != (str(read.size), read.stamp)


def _busy(status: str) -> str:
    return f"left alone while the document is {status}; a later sync takes the change"


def _status_now(kb: Kb, document_id: str) -> str | None:
    with kb.db.read() as conn:
        document = queries.get_document(conn, document_id)
    return None if document is None else document.status
