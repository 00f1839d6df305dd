"""What a reviewer reads before publishing: a revision's text as its chunks hold it
(`kb show`), what one revision changes against another (`kb diff`), and the stored
original, byte for byte (`kb export`).

A revision's text is kept while something may be served or reviewed: the revision
waiting for review, the published one, an unpublished one that may be served again.
Earlier revisions' chunks go when a newer one is published, and only the newest file
is kept in the store (docs/documents.md): a revision that is gone is `not_found`, with
what is kept named.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kb_cli import queries
from kb_cli.app import Kb
from kb_cli.chunking import own_parts
from kb_cli.db import Connection
from kb_cli.errors import AlreadyExists, ConflictError, InternalError, NotFoundError, UsageError
from kb_cli.lifecycle import DocStatus
from kb_cli.queries import PassageChunk
from kb_cli.records import ChunkChange, ChunkRecord, DocumentRecord, DocumentRow, meta_of
from kb_cli.transitions import audit_event

PENDING, PUBLISHED = "pending", "published"
# Where a hunk of a diff stands: the nearest page marker or heading line before it.
_MARKER = re.compile(r"^(\[(?:page|pages|slide|slides) [0-9-]+\]|#+ .*)$")
_SLIDES = "application/vnd.openxmlformats-officedocument.presentationml.presentation"


@dataclass
class Revision:
    """One revision of a document whose text is kept: which it is, and its chunks."""

    document: DocumentRow
    number: int
    role: str  # "pending", "published", or "unpublished"
    chunks: list[PassageChunk]

    def records(self) -> list[ChunkRecord]:
        return [
            ChunkRecord(
                self.document.id,
                self.number,
                chunk.chunk_index,
                chunk.page,
                chunk.page_end,
                chunk.heading,
                len(chunk.text),
                chunk.text,
            )
            for chunk in self.chunks
        ]

    def lines(self) -> list[str]:
        """The text, a line a line: each chunk's own text (the overlap it repeats from
        the one before left out), with a marker where a page (or slide) begins and a
        heading line (`## Heading`) where a section begins (its text's own first line,
        when that is the heading, not repeated)."""
        unit = "slide" if self.document.content_type == _SLIDES else "page"
        lines: list[str] = []
        section: tuple[str | None, str | None] | None = None
        page: int | None = None
        texts = [chunk.text for chunk in self.chunks]
        for chunk, own in zip(self.chunks, own_parts(texts, self._section_starts()), strict=True):
            if (chunk.heading, chunk.context) != section:
                section = (chunk.heading, chunk.context)
                if chunk.heading:
                    lines.append(f"## {chunk.heading}")
                    own = _without_first_line(own, chunk.heading)
            if chunk.page is not None and chunk.page != page:
                page = chunk.page_end or chunk.page
                span = f"{chunk.page}-{chunk.page_end}" if chunk.page_end else f"{chunk.page}"
                lines.append(f"[{unit}{'s' if chunk.page_end else ''} {span}]")
            lines.extend(own.splitlines())
        return lines

    def _section_starts(self) -> list[bool]:
        """Whether each chunk begins a section (its text repeats nothing before it)."""
        starts, previous = [], None
        for chunk in self.chunks:
            key = (chunk.heading, chunk.context)
            starts.append(key != previous)
            previous = key
        return starts


def _without_first_line(text: str, line: str) -> str:
    first, _newline, rest = text.partition("\n")
    return rest if first.strip() == line.strip() else text


def revision(kb: Kb, document_id: str, which: str | None = None) -> Revision:
    """The revision `which` names: a number, "pending" (the one waiting for review),
    "published" (the one search serves), or None for the newest kept (the pending one
    when one waits)."""
    with kb.db.read() as conn:
        document = queries.existing_document(conn, document_id)
        number, role = _chosen(document, which)
        chunks = queries.revision_chunks(conn, document_id, number)
    return Revision(document, number, role, chunks)


def _chosen(document: DocumentRow, which: str | None) -> tuple[int, str]:
    kept = _kept(document)
    if which is None:
        if not kept:
            raise ConflictError(
                f"document {document.id} has no processed revision to show: it is "
                f"{document.status}" + _next_step(document)
            )
        return next(iter(kept.items()))
    if which == PENDING:
        if document.status != DocStatus.REVIEW_PENDING:
            raise ConflictError(
                f"no revision of document {document.id} waits for review: it is {document.status}"
            )
        return document.revision, PENDING
    if which == PUBLISHED:
        if document.published_revision is None:
            raise ConflictError(f"document {document.id} has no published revision")
        return document.published_revision, PUBLISHED
    number = _number(which)
    if number not in kept:
        have = ", ".join(f"{n} ({role})" for n, role in kept.items()) or "none"
        raise NotFoundError(
            f"the text of revision {number} of document {document.id} is not kept (kept: {have})"
        )
    return number, kept[number]


def _kept(document: DocumentRow) -> dict[int, str]:
    """The revisions whose chunks are kept, newest first, each with what it is."""
    kept: dict[int, str] = {}
    if document.status == DocStatus.REVIEW_PENDING:
        kept[document.revision] = PENDING
    if document.published_revision is not None:
        kept.setdefault(document.published_revision, PUBLISHED)
    if document.archived_revision is not None:
        kept.setdefault(document.archived_revision, "unpublished")
    return kept


def _number(which: str) -> int:
    if not which.isdigit() or int(which) < 1:
        raise UsageError(f"--revision takes a number, {PENDING} or {PUBLISHED}, not {which!r}")
    return int(which)


def _next_step(document: DocumentRow) -> str:
    if document.status == DocStatus.PROCESSING:
        return f"; its task has not ended (kb status {document.id} --wait)"
    if document.status in (DocStatus.DRAFT, DocStatus.FAILED):
        return f"; kb submit {document.id} (or kb retry) processes it"
    return ""


# --- diff --------------------------------------------------------------------------------


@dataclass
class Hunk:
    """One hunk of a unified diff, and the page or heading it stands under."""

    from_line: int
    from_count: int
    to_line: int
    to_count: int
    where: str | None
    lines: list[str]

    def header(self) -> str:
        place = f" {self.where}" if self.where else ""
        return f"@@ -{self.from_line},{self.from_count} +{self.to_line},{self.to_count} @@{place}"

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass
class Diff:
    document_id: str
    filename: str
    from_revision: int | None  # None: the document was never served (all is new)
    to_revision: int
    hunks: list[Hunk] = field(default_factory=list)
    chunks_added: int = 0
    chunks_removed: int = 0
    chunks_kept: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "document_id": self.document_id,
            "filename": self.filename,
            "from_revision": self.from_revision,
            "to_revision": self.to_revision,
            "hunks": len(self.hunks),
            "chunks_added": self.chunks_added,
            "chunks_removed": self.chunks_removed,
            "chunks_kept": self.chunks_kept,
        }


def diff(kb: Kb, document_id: str, old: str | None = None, new: str | None = None) -> Diff:
    """What revision `new` changes against `old`: by default the pending revision
    against the one served (against nothing, for a document never published)."""
    with kb.db.read() as conn:
        document = queries.existing_document(conn, document_id)
    to = revision(kb, document_id, new if new is not None else PENDING)
    if old is None and document.published_revision is None:
        before = None
    else:
        before = revision(kb, document_id, old if old is not None else PUBLISHED)
    old_lines = before.lines() if before else []
    result = Diff(document.id, document.filename, before.number if before else None, to.number)
    result.hunks = list(_hunks(old_lines, to.lines()))
    change = _compared(
        _texts(c.text for c in to.chunks),
        _texts(c.text for c in before.chunks) if before else Counter(),
        result.from_revision,
    )
    result.chunks_added, result.chunks_removed = change.chunks_added, change.chunks_removed
    result.chunks_kept = change.chunks_kept
    return result


def with_review_facts(conn: Connection, record: DocumentRecord) -> DocumentRecord:
    """One document's record as `kb status ID` prints it to a reviewer: its newest
    revision's chunks, the pages OCR read, and what publishing it would change."""
    record.chunks = queries.count_revision_chunks(conn, record.document_id, record.revision)
    record.ocr_pages = queries.ocr_pages_of(conn, record.document_id, record.revision)
    return with_changes(conn, [record])[0]


def with_changes(conn: Connection, records: list[DocumentRecord]) -> list[DocumentRecord]:
    """Each `review_pending` record with what publishing it would change: its chunks
    against those of the revision served (one document's chunks read at a time)."""
    for record in records:
        if record.status == DocStatus.REVIEW_PENDING:
            record.change = chunk_change(
                conn, record.document_id, record.revision, record.published_revision
            )
    return records


def chunk_change(
    conn: Connection, document_id: str, revision: int, served: int | None
) -> ChunkChange:
    """Revision `revision`'s chunks against those of revision `served` (None: none)."""
    mine = _texts(queries.chunk_texts(conn, document_id, revision))
    theirs = _texts(queries.chunk_texts(conn, document_id, served)) if served else Counter()
    return _compared(mine, theirs, served)


def _texts(texts: Iterable[str]) -> Counter[str]:
    """Chunk texts as compared: whitespace aside, each as often as it occurs."""
    return Counter(" ".join(text.split()) for text in texts)


def _compared(mine: Counter[str], theirs: Counter[str], served: int | None) -> ChunkChange:
    kept = sum((mine & theirs).values())
    return ChunkChange(served, sum(mine.values()) - kept, sum(theirs.values()) - kept, kept)


def _hunks(old: list[str], new: list[str]) -> Iterator[Hunk]:
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for group in matcher.get_grouped_opcodes(3):
        first, last = group[0], group[-1]
        lines = []
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines += [" " + line for line in old[i1:i2]]
                continue
            lines += ["-" + line for line in old[i1:i2]]
            lines += ["+" + line for line in new[j1:j2]]
        changed = next(op for op in group if op[0] != "equal")
        yield Hunk(
            first[1] + 1,
            last[2] - first[1],
            first[3] + 1,
            last[4] - first[3],
            _where(new, changed[3]),
            lines,
        )


def _where(lines: list[str], at: int) -> str | None:
    """The nearest page marker or heading before line `at` (its first change)."""
    return next((line for line in reversed(lines[:at]) if _MARKER.match(line)), None)


# --- export ------------------------------------------------------------------------------


@dataclass
class Exported:
    document_id: str
    revision: int
    path: str
    size_bytes: int
    sha256: str

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def export(
    kb: Kb,
    document_ids: list[str],
    output: Path,
    which: str | None = None,
    force: bool = False,
    into_folder: bool = False,
) -> list[Exported]:
    """Each document's stored original to `output`: the file itself for one document, a
    folder (made if missing) for several or `into_folder`, each under its synced path or
    file name. Only the newest revision's file is kept: `which` may name it (its number,
    "pending" or "published" when that is the newest). Nothing is written when a target
    exists without `force`; each file's sha256 is checked as it is written, and a file
    that does not match is not left behind. Every export is in the history."""
    with kb.db.read() as conn:
        documents = [queries.existing_document(conn, d) for d in document_ids]
    for document in documents:
        _original_of(document, which)
    targets = _targets(documents, output, into_folder or len(documents) > 1 or output.is_dir())
    if not force:
        _refuse_overwriting(targets)
    done = [_write(kb, doc, target) for doc, target in zip(documents, targets, strict=True)]
    now = kb.timestamp()
    with kb.db.write() as conn:
        events = [
            audit_event(
                kb.actor.name, "export", item.document_id, None, None,
                f"revision {item.revision} ({item.sha256[:12]}) to {item.path}", at=now,
            )
            for item in done
        ]  # fmt: skip
        queries.insert_audit_events(conn, events)
    return done


def _original_of(document: DocumentRow, which: str | None) -> None:
    """Refuse a revision whose file is not kept (only the newest is)."""
    if which is None:
        return
    number, _role = (
        _chosen(document, which) if which in (PENDING, PUBLISHED) else (_number(which), None)
    )
    if number != document.revision:
        raise NotFoundError(
            f"the original of revision {number} of document {document.id} is not kept: "
            f"only the newest file is (revision {document.revision})"
        )


def _refuse_overwriting(targets: list[Path]) -> None:
    taken = [str(target) for target in targets if target.exists() or target.is_symlink()]
    if taken:
        more = f" and {len(taken) - 1} more" if len(taken) > 1 else ""
        raise AlreadyExists(
            f"would overwrite {taken[0]}{more}: give --force to replace, or another --output"
        )


def documents_of(kb: Kb, base: str) -> list[str]:
    """The documents of a base the caller may read, newest first (as `kb status` lists
    them); the base must be one it may read."""
    from kb_cli.app import require_base

    scope = kb.actor.scope(base)
    with kb.db.read() as conn:
        require_base(conn, scope, base)
        return [record.document_id for record in queries.list_documents(conn, scope=scope)]


def _targets(documents: list[DocumentRow], output: Path, folder: bool) -> list[Path]:
    if not folder:
        if not output.parent.is_dir():
            raise UsageError(f"no such folder: {output.parent}")
        return [output]
    if output.exists() and not output.is_dir():
        raise UsageError(f"not a folder: {output} (several documents go into a folder)")
    if not output.parent.is_dir():
        raise UsageError(f"no such folder: {output.parent}")
    seen: set[Path] = set()
    targets = []
    for document in documents:
        relative = _relative(meta_of(document.meta).get("path") or document.filename)
        target = output / relative
        if target in seen:  # two documents of one name: the later ones named by their id
            target = target.with_name(f"{target.stem}.{document.id[:8]}{target.suffix}")
        seen.add(target)
        targets.append(target)
    return targets


def _relative(path: str) -> Path:
    """A synced path or file name as a path inside the export folder: never absolute,
    never above it."""
    parts = [part for part in path.replace("\\", "/").split("/") if part not in ("", ".", "..")]
    return Path(*parts) if parts else Path("document")


def _write(kb: Kb, document: DocumentRow, target: Path) -> Exported:
    """The stored object to `target` through a temporary file beside it, renamed into
    place only once its sha256 is the document's."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.kb-export-{os.getpid()}")
    digest, size = hashlib.sha256(), 0
    try:
        with open(temporary, "wb") as copy:
            for block in kb.store.read_blocks(document.object_key):
                digest.update(block)
                size += len(block)
                copy.write(block)
        if digest.hexdigest() != document.sha256:
            raise InternalError(
                f"the stored original of document {document.id} does not match its sha256: "
                "the object store is damaged (kb doctor --verify names what changed)"
            )
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return Exported(document.id, document.revision, str(target), size, digest.hexdigest())
