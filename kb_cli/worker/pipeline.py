"""The stages of one task: download, parse, embedding, indexing.

The pipeline reports progress and raises; it never writes task state. Chunk rows and
the parse artefact go to a `ChunkSink` (the claim, which fences each write), and every
failure is raised as a TaskFailure carrying the task's error code, or as a
WorkerInterrupt. An attempt whose revision was parsed before (kb_cli/artefacts.py)
starts at the embedding stage.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from kb_cli import artefacts, queries
from kb_cli.app import Kb
from kb_cli.chunking import ChunkText, chunk_blocks, contextual_text, with_context
from kb_cli.config import TaskSettings
from kb_cli.embeddings import Embedder, to_blob
from kb_cli.errors import (
    DocumentTooLarge,
    KbError,
    ObjectStoreMisconfigured,
    ObjectStoreUnreachable,
    ProviderRejected,
    ProviderUnavailable,
    ScannedWithoutOcr,
    TaskFailure,
    WorkerInterrupt,
)
from kb_cli.lifecycle import ErrorCode, Stage
from kb_cli.records import DocumentRow, NewChunk
from kb_cli.textsearch import count_words, index_terms

DETAIL_LIMIT = 500
# The disk, not the object, is at fault for these: storage_unavailable, retried.
_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


class Reporter(Protocol):
    def report(self, stage: Stage, done: int, total: int) -> None:
        """A progress step: shown, written now and then; raises WorkerInterrupt when
        the attempt must stop."""

    def checkpoint(self) -> None:
        """A safe point: raises WorkerInterrupt when the attempt must stop."""

    def reused(self, chunks: int) -> None:
        """The attempt starts at the embedding stage with a kept parse: say so."""

    def read_by_ocr(self, pages: int) -> None:
        """The parse read `pages` scanned pages by OCR (parsers/ocr.py)."""


class ChunkSink(Protocol):
    batch: int

    def purge_chunks(self) -> None: ...
    def store_chunks(self, rows: list[NewChunk], done: int, total: int) -> None: ...
    def saved_parse(self, parser_key: str) -> bytes | None: ...
    def save_parse(self, parser_key: str, chunks: list[ChunkText]) -> None: ...


def describe_error(error: BaseException) -> str:
    """Type name and a short message: no traceback, SQL or filesystem path."""
    # Database errors never get here raw: `kb_cli.db` turns them into KbErrors whose
    # messages carry no SQL.
    if isinstance(error, OSError) and error.strerror:
        message = error.strerror  # str(error) would name the file
    else:
        message = _scrub_paths(" ".join(str(error).split()))
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text[:DETAIL_LIMIT]


_PATH = re.compile(r"(?:(?<=^)|(?<=[\s'\"(=:]))(?:[A-Za-z]:)?[\\/][^\s'\"]*")


def _scrub_paths(message: str) -> str:
    return _PATH.sub("<path>", message)


def error_detail(error: KbError) -> str:
    return f"{type(error).__name__}: {error.message}"[:DETAIL_LIMIT]


def _read_failure(error: OSError, key: str | None = None) -> TaskFailure:
    """A stored object that cannot be read: gone or unreadable (object_read_error), or
    on a disk that is full or read-only (storage_unavailable); both are retried. A gone
    object is named by its key, with the likely cause."""
    code = ErrorCode.STORAGE_UNAVAILABLE if error.errno in _STORAGE_ERRNOS else None
    detail = describe_error(error)
    if key is not None and isinstance(error, FileNotFoundError):
        detail = (
            f"FileNotFoundError: object {key} is not in this worker's object store "
            "(is --object-store or OBJECT_STORE_ROOT the knowledge base's?)"
        )
    return TaskFailure(code or ErrorCode.OBJECT_READ_ERROR, detail[:DETAIL_LIMIT])


class Pipeline:
    """One attempt's stages, up to the rows of the last chunk batch, which the claim
    writes with the completion."""

    def __init__(
        self, kb: Kb, reporter: Reporter, sink: ChunkSink, asked: TaskSettings = TaskSettings()
    ) -> None:
        self.kb = kb
        self.reporter = reporter
        self.sink = sink
        # The worker's settings, with those the task was queued with (`asked`) in their
        # place: what a task was asked is what it does, whichever worker runs it.
        self.settings = kb.settings.for_task(asked)
        self.model: str | None = None  # of the vectors this attempt made
        self.dim: int | None = None
        self.base: str | None = None  # the document's, once read

    def run(self, document: DocumentRow | None, document_id: str) -> list[NewChunk]:
        chunks = self.chunks_of(document, document_id)
        return self.index(chunks, self.embed(chunks))

    def chunks_of(self, document: DocumentRow | None, document_id: str) -> list[ChunkText]:
        """The document's chunks with their context: the kept parse, or downloaded and
        parsed now (up to the embedding stage)."""
        if document is None:
            raise TaskFailure(
                ErrorCode.DOCUMENT_NOT_FOUND, f"document {document_id} does not exist"
            )
        self.base = document.base
        settings = self.settings
        parser_key = artefacts.parser_key(
            document.content_type, settings.chunk_chars, settings.limits
        )
        chunks = self.reuse(parser_key)
        if chunks is None:
            with self.download(document) as path:
                chunks = self.parse(path, document.content_type)
            self.sink.save_parse(parser_key, chunks)
        return with_context(chunks, document.filename)

    def reuse(self, parser_key: str) -> list[ChunkText] | None:
        """The chunks an earlier attempt parsed from the same bytes with the same
        parser; None when there are none (then this attempt downloads and parses)."""
        payload = self.sink.saved_parse(parser_key)
        if payload is None:
            return None
        chunks = artefacts.decode(payload)
        self.reporter.reused(len(chunks))
        return chunks

    def report(self, stage: Stage, done: int, total: int) -> None:
        self.reporter.report(stage, done, total)

    @contextlib.contextmanager
    def download(self, document: DocumentRow) -> Iterator[Path]:
        """Stream the stored object and check it against the checksum taken at upload;
        the file the parser reads: the object itself when the store is a directory, else
        a private copy written while streaming, removed after the parse."""
        local = self.kb.store.local_path(document.object_key)
        if local is not None:
            self._fetch(document, None)
            yield local
            return
        with self._private_folder() as folder:
            copy = folder / "object"
            try:
                with open(copy, "wb") as out:
                    self._fetch(document, out)
            except OSError as error:  # the copy's disk is full or read-only
                raise _read_failure(error) from error
            yield copy

    def _fetch(self, document: DocumentRow, out: BinaryIO | None) -> None:
        total = document.size_bytes
        self.report(Stage.DOWNLOAD, 0, total)
        digest = hashlib.sha256()
        done = 0
        try:
            for block in self.kb.store.read_blocks(document.object_key):
                digest.update(block)
                if out is not None:
                    out.write(block)
                done += len(block)
                self.report(Stage.DOWNLOAD, done, total)
        except OSError as error:
            raise _read_failure(error, document.object_key) from error
        except ObjectStoreUnreachable as error:  # it may come back: wait and retry
            raise TaskFailure(ErrorCode.OBJECT_READ_ERROR, error_detail(error)) from error
        except ObjectStoreMisconfigured as error:  # only a person can fix it
            raise TaskFailure(ErrorCode.INTERNAL_ERROR, error_detail(error)) from error
        if digest.hexdigest() != document.sha256:
            raise TaskFailure(
                ErrorCode.OBJECT_READ_ERROR,
                "ChecksumMismatch: the stored object does not match its sha256",
            )
        if total == 0:
            self.report(Stage.DOWNLOAD, 0, 0)

    @staticmethod
    @contextlib.contextmanager
    def _private_folder() -> Iterator[Path]:
        try:
            folder = tempfile.TemporaryDirectory(prefix="kb-download-")
        except OSError as error:
            raise _read_failure(error) from error
        with folder as name:
            yield Path(name)

    def parse(self, path: Path, content_type: str) -> list[ChunkText]:
        """Parse and chunk within the configured limits; a stop or a cancel is noticed
        within a fraction of a second, even inside a long parse."""
        from kb_cli import parsers

        self.report(Stage.PARSE, 0, 0)
        limits = self.settings.limits
        checkpoint = self.reporter.checkpoint
        try:
            blocks = parsers.parse(
                path,
                content_type,
                lambda done, total: self.report(Stage.PARSE, done, total),
                limits,
                checkpoint,
            )
            chunks = chunk_blocks(
                blocks,
                self.settings.chunk_chars,
                max_chunks=limits.max_chunks,
                checkpoint=checkpoint,
            )
            scanned = {block.page for block in blocks if block.ocr}
            if scanned:
                self.reporter.read_by_ocr(len(scanned))
        except DocumentTooLarge as error:
            raise TaskFailure(ErrorCode.DOCUMENT_TOO_LARGE, error_detail(error)) from error
        except ScannedWithoutOcr as error:
            raise TaskFailure(ErrorCode.EMPTY_DOCUMENT, str(error)) from error
        except (WorkerInterrupt, KbError):
            raise
        except OSError as error:  # the object vanished, or its disk failed, meanwhile
            raise _read_failure(error) from error
        except Exception as error:
            raise TaskFailure(ErrorCode.PARSE_ERROR, describe_error(error)) from error
        if not chunks:
            raise TaskFailure(
                ErrorCode.EMPTY_DOCUMENT, "EmptyDocument: parsing found no indexable text"
            )
        return chunks

    def embed(self, chunks: list[ChunkText]) -> list[bytes | None]:
        """Each chunk's vector, in batches, with progress in chunks; no vectors when
        embeddings are off. A provider that may recover (unreachable, 429, 5xx) makes
        the task wait and retry; one that refuses the configuration fails it."""
        total = len(chunks)
        self.report(Stage.EMBEDDING, 0, total)
        embedder = self.embedder()
        if embedder is None:
            self.report(Stage.EMBEDDING, total, total)
            return [None] * total
        blobs: list[bytes | None] = []
        for start in range(0, total, embedder.batch_size):
            batch = embedding_texts(chunks[start : start + embedder.batch_size])
            vectors, self.dim = embed_texts(embedder, batch)
            blobs.extend(vectors)
            self.report(Stage.EMBEDDING, len(blobs), total)
        self.model = embedder.model
        return blobs

    def embedder(self) -> Embedder | None:
        """The embedding model of the document's base, whatever this worker's own
        KB_EMBEDDINGS says (read now: a base given another model since the claim is
        embedded with that one)."""
        with self.kb.db.read() as conn:
            model = queries.base_model(conn, self.base) if self.base is not None else None
        return self.kb.embedder_for(model)

    def index(self, chunks: list[ChunkText], vectors: list[bytes | None]) -> list[NewChunk]:
        """The chunk rows (text, words for the lexical index, vector). Every batch but
        the last goes to the sink here; the last (at most a batch, so a small document
        costs one transaction) is returned, for the completion."""
        total = len(chunks)
        batch = self.sink.batch
        self.report(Stage.INDEXING, 0, total)
        self.sink.purge_chunks()  # what an earlier attempt at this task left, if any
        last = (total - 1) // batch * batch
        for start in range(0, last, batch):
            rows = self._rows(chunks, vectors, start, batch)
            done = start + len(rows)
            self.sink.store_chunks(rows, done, total)
            self.report(Stage.INDEXING, done, total)
        rows = self._rows(chunks, vectors, last, batch)
        self.report(Stage.INDEXING, total, total)
        return rows

    def _rows(
        self, chunks: list[ChunkText], vectors: list[bytes | None], start: int, batch: int
    ) -> list[NewChunk]:
        end = start + batch
        return [
            chunk_row(chunk, vector, self.model, self.dim)
            for chunk, vector in zip(chunks[start:end], vectors[start:end], strict=True)
        ]


def embedding_texts(chunks: list[ChunkText]) -> list[str]:
    """What the model reads of each chunk: its text with its context."""
    return [contextual_text(chunk.context, chunk.text) for chunk in chunks]


def embed_texts(embedder: Embedder, texts: list[str]) -> tuple[list[bytes | None], int]:
    """The vectors of `texts` (at most a batch of the embedder's) as blobs, and their
    dimension. A provider
    that may recover (unreachable, 429, 5xx) makes the task wait and retry; one that
    refuses the configuration fails it."""
    try:
        vectors = embedder.embed(texts)
    except ProviderUnavailable as error:
        raise TaskFailure(ErrorCode.PROVIDER_UNAVAILABLE, error_detail(error)) from error
    except ProviderRejected as error:
        raise TaskFailure(ErrorCode.INTERNAL_ERROR, error_detail(error)) from error
    return [to_blob(vector) for vector in vectors], len(vectors[0])


def chunk_row(
    chunk: ChunkText, vector: bytes | None, model: str | None, dim: int | None
) -> NewChunk:
    """A chunk as `queries.insert_chunks` writes it: its text, its words for the index,
    and its vector (None: embeddings off)."""
    terms = index_terms(contextual_text(chunk.context, chunk.text))
    return NewChunk(
        chunk_index=chunk.index,
        text=chunk.text,
        page=chunk.page,
        page_end=chunk.page_end,
        heading=chunk.heading and chunk.heading[:500],
        context=chunk.context or None,
        terms=terms,
        term_count=count_words(terms),
        embedding=vector,
        embedding_model=model if vector is not None else None,
        embedding_dim=dim if vector is not None else None,
    )
