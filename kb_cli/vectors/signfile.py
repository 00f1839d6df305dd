"""A vector index for SQLite homes, derived from the database: one file per embedding
model and dimension beside the database file, holding for every chunk with such a
vector up to a watermark chunk id its id, one bit per dimension (the sign), and the
vector in half precision. Chosen on measurement (benchmarks/README.md, "A vector index
on SQLite"): memory-mapped, so a `kb search` process opens it in microseconds, and
needs nothing beyond numpy; the few thousand vectors a search rescores are read with
pread, so that its memory stays that of the sign codes (about 120 MiB a process at 1M
chunks, against 642 MiB mapped).

A search ranks every sign code by Hamming distance to the query's (32 bytes a chunk),
rescores the nearest few thousand by their half-precision vectors, and asks the
database about the best of those in order, in the search's own read transaction:
only a chunk of a published revision, in the caller's scope, embedded by the model,
survives, and its score is computed from the vector the database holds. Chunks newer
than the watermark (the delta) are scanned exactly. A file that is missing, damaged,
of another database, or stale (a re-embedding bumped the epoch; the chunk at its
watermark changed, so ids may have been reused) is not used: the exact scan answers.
The database stays the only source of truth; deleting the directory loses nothing.

The header carries a CRC-32 of the body, computed from it as it is written. A search does
not read the whole file to check it: beside the structure (magic, header, size, end
mark), it checks that what it rescores are cosines (finite, within [-1, 1]), and a
file whose vectors are not is damaged: the exact scan answers, silently. `kb doctor`
verifies the checksum of the whole file (a damaged one is a `vector_index` problem
that `--repair` rebuilds), and so does a fold before it copies the old vectors into
the new file, which it otherwise writes anew from the database.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import mmap
import os
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kb_cli.db import Connection, Database
from kb_cli.embeddings import VECTOR_DTYPE, from_blobs
from kb_cli.permissions import Scope
from kb_cli.ranking import Scored, top_similar
from kb_cli.records import BuildReport, IndexProblem
from kb_cli.vectors import stored
from kb_cli.vectors.stored import Nearest

if TYPE_CHECKING:
    import numpy as np

    from kb_cli.config import Settings

# The second format: the header carries the body's checksum. A file of the first (none)
# is stale, and written anew like one.
MAGIC, END = b"KBVECIX2", b"KBVECEND"
OLDER_MAGICS = (b"KBVECIX1",)
ALIGN = 64
# Hamming candidates rescored in half precision, per result sought, at least ROUGH_MIN
# and at least one in ROUGH_SHARE of the index (sign bits tell fewer of the nearest
# apart as the index grows): recall@10 against the exact ranking is 0.98 at 100k real
# chunks, 0.993 at 986k with one in 50 or in 100 (0.987 in 150), where each read costs
# a pread (benchmarks/README.md, "A vector index on SQLite", "A company-sized ...").
ROUGH_PER_RESULT, ROUGH_MIN, ROUGH_SHARE = 40, 2000, 100
# Candidates checked against the database: first this many per result sought, doubled
# while too few survive (another base, an unpublished revision, a deleted chunk) ...
CHECK_PER_RESULT = 2
# ... up to this many per result; a scope that keeps fewer is small, and its exact scan
# cheap.
CHECK_BOUND_PER_RESULT = 64
# Half precision rounds a similarity by about 1e-3: a candidate this far below the
# floor by its rounded score cannot reach the floor.
ROUNDING = 0.01
READ_BATCH = 20_000  # vectors per statement while building
VERIFY_BLOCK = 4 << 20  # bytes read at a time while a checksum is verified
# The worker folds newer chunks into the index once this many wait in the delta (it
# looks after its first task, then every few seconds: kb_cli/worker/loop.py), or
# this share of the index in a larger one: a fold rewrites the whole file (550 MB at 1M chunks), so
# in a growing base folds come as often as its size allows, and each chunk written pays
# a bounded cost for them, where every 5,000 chunks cost a rewrite of 1M; a search
# scans at most that share of the base exactly meanwhile ...
FOLD_CHUNKS = 5_000
FOLD_SHARE = 0.02
# ... and writes the index anew instead when more than this share of what it would
# hold is gone from the database (deleted documents, superseded revisions).
GONE_SHARE = 0.25


def directory_for(settings: Settings) -> Path:
    """Where a SQLite database's vector indexes live: beside its file, so they move
    with it (`kb.sqlite3-vectors/`)."""
    from kb_cli.engines.sqlite import database_path

    path = Path(database_path(settings.database_url))
    return path.with_name(path.name + "-vectors")


def index_path(directory: Path, model: str, dim: int) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", model)[:60]
    return directory / f"{slug}-{zlib.crc32(model.encode()):08x}-{dim}.kbv"


def code_words(dim: int) -> int:
    """Machine words of a vector's sign code: a bit per dimension."""
    return (dim + 63) // 64


@dataclass(frozen=True)
class Header:
    model: str
    dim: int
    count: int
    watermark: int  # every chunk with a vector of the model up to this id is inside
    database_id: str | None
    epoch: int
    anchor: str | None  # the identity of the chunk at the watermark when built
    checksum: int  # CRC-32 of the body: the ids, the sign codes and the halves, in order

    @property
    def words(self) -> int:
        return code_words(self.dim)

    def body_bytes(self) -> int:
        return self.count * (8 + 8 * self.words + 2 * self.dim)


class LoadedIndex:
    """An index file: the ids (ascending) and the sign codes one machine word column at
    a time (a contiguous pass per word), memory-mapped; the half-precision vectors,
    read row by row (`halves`)."""

    def __init__(self, path: Path, header: Header, offset: int, stamp: tuple[int, ...]) -> None:
        import numpy as np

        self.header, self.stamp = header, stamp
        n, words = header.count, header.words
        self._body_at = offset
        self._file = path.open("rb")
        self._mapped = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        self.ids = np.frombuffer(self._mapped, dtype="<i8", count=n, offset=offset)
        offset += 8 * n
        self._codes_at = offset
        self.codes = np.frombuffer(self._mapped, "<u8", words * n, offset).reshape(words, n)
        self._halves_at = offset + 8 * words * n

    def release_codes(self, word: int) -> None:
        """Let go of the pages of one word column of the codes once scanned: a search
        holds one column (8 MB at 1M chunks) at a time, not all of them."""
        size = 8 * self.header.count
        start = -(-(self._codes_at + word * size) // mmap.PAGESIZE) * mmap.PAGESIZE
        end = (self._codes_at + (word + 1) * size) // mmap.PAGESIZE * mmap.PAGESIZE
        if end > start:
            self._mapped.madvise(mmap.MADV_DONTNEED, start, end - start)

    def every_half(self) -> np.ndarray:
        """Every half-precision vector, in one read (a fold copies them)."""
        import numpy as np

        self._file.seek(self._halves_at)
        count = self.header.count * self.header.dim
        return np.fromfile(self._file, VECTOR_DTYPE, count).reshape(-1, self.header.dim)

    def halves(self, positions: np.ndarray) -> np.ndarray:
        """The half-precision vectors at `positions`, read with one pread each: a search
        reads a few thousand scattered rows, and a memory-mapped read of each would map
        (and count in the process's memory) the 64 KiB around it, the whole vector
        section at 1M chunks (642 MiB at the peak of a search process, measured)."""
        import numpy as np

        row = 2 * self.header.dim
        fd, at = self._file.fileno(), self._halves_at
        data = b"".join([os.pread(fd, row, at + row * p) for p in positions.tolist()])
        return np.frombuffer(data, dtype=VECTOR_DTYPE).reshape(len(positions), self.header.dim)

    def intact(self) -> bool:
        """Whether the body still has the checksum it was written with: the whole body
        read once, block by block (`kb doctor` and a fold ask; a search does not)."""
        fd, at = self._file.fileno(), self._body_at
        end = at + self.header.body_bytes()
        checksum = 0
        while at < end:
            block = os.pread(fd, min(VERIFY_BLOCK, end - at), at)
            if not block:  # cut short since it was opened
                return False
            checksum = zlib.crc32(block, checksum)
            at += len(block)
        return checksum == self.header.checksum

    def current(self, conn: Connection) -> bool:
        marks = stored.index_marks(conn, self.header.watermark)
        return (marks.database_id, marks.epoch, marks.anchor) == (
            self.header.database_id,
            self.header.epoch,
            self.header.anchor,
        )

    def approximate(self, query: np.ndarray, rough: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Positions of (about) the `rough` sign codes nearest the query's, and their
        half-precision similarities, best first; None when a similarity is not a
        cosine (not finite, or outside [-1, 1]): the file is damaged."""
        import numpy as np

        n = self.header.count
        signs = np.packbits(query > 0)
        signs = np.pad(signs, (0, 8 * self.header.words - signs.size)).view("<u8")
        distance = np.zeros(n, dtype=np.uint16)
        scratch, counts = np.empty(n, dtype=np.uint64), np.empty(n, dtype=np.uint8)
        for word in range(self.header.words):
            np.bitwise_xor(self.codes[word], signs[word], out=scratch)
            np.bitwise_count(scratch, out=counts)
            distance += counts
            self.release_codes(word)
        if rough < n:
            # Every code within the distance that reaches `rough` codes: a histogram of
            # 257 bins is cheaper than a partition of n.
            cut = int(np.searchsorted(np.cumsum(np.bincount(distance, minlength=257)), rough))
            positions = np.flatnonzero(distance <= cut)
        else:
            positions = np.arange(n)
        # A damaged half (inf, NaN) would make numpy warn on stderr: it is caught below.
        with np.errstate(invalid="ignore", over="ignore"):
            similarity = self.halves(positions).astype(np.float32) @ query.astype(np.float32)
        if not (np.abs(similarity) <= 1 + ROUNDING).all():
            return None
        order = np.argsort(-similarity, kind="stable")
        return positions[order], similarity[order]


# What a search pays for an index that is not current: a damaged one that still reads as
# an index is used, and its damaged vectors may keep a chunk from the candidates.
_COST = {"damaged": "search may miss chunks, or read every vector"}


class SignFileIndex:
    """The `VectorIndex` of a SQLite home (kb_cli/vectors/__init__.py): the index files
    of `directory`, built by the worker once a model has `min_chunks` vectors; where a
    file cannot answer, `fallback` does (the exact scan)."""

    def __init__(
        self, directory: Path, min_chunks: int, fallback: Nearest = stored.exact_nearest
    ) -> None:
        self.directory = directory
        self.min_chunks = min_chunks
        self.fallback = fallback
        self._loaded: dict[Path, LoadedIndex] = {}

    def nearest(
        self,
        conn: Connection,
        model: str,
        query: np.ndarray,
        depth: int,
        scope: Scope,
        floor: float,
    ) -> list[Scored]:
        index = self.open(model, len(query))
        if index is None or not index.current(conn):
            return self.fallback(conn, model, query, depth, scope, floor)
        found = _candidates(conn, index, model, query, depth, scope, floor)
        if found is None:  # the scope keeps too few of the nearest, or the file is damaged
            return self.fallback(conn, model, query, depth, scope, floor)
        delta_ids, delta_blobs = stored.published_vectors(
            conn, model, len(query), scope, after=index.header.watermark
        )
        # By id: a damaged file may name a chunk of the delta too.
        vectors = dict(zip(*found, strict=True)) | dict(zip(delta_ids, delta_blobs, strict=True))
        if not vectors:
            return []
        return top_similar(
            list(vectors), from_blobs(list(vectors.values()), len(query)), query, floor, depth
        )

    def beside(self, conn: Connection, vectors: Sequence[bytes | None]) -> dict[str, list[object]]:
        return {}  # the index is files of its own, beside the database

    def refresh(self, db: Database, model: str) -> None:
        with contextlib.suppress(OSError):  # a full disk: the index waits for space
            fold_if_due(db, self.directory, model, self.min_chunks)

    def notes(self, conn: Connection) -> list[str]:
        return []

    def problems(self, db: Database, model: str) -> list[IndexProblem]:
        """An index that is not current for a model with at least `min_chunks`
        vectors (KB_VECTOR_INDEX_MIN_CHUNKS) of a dimension."""
        return [
            IndexProblem(
                state.model,
                state.dim,
                f"the vector index of {state.model} ({state.vectors} vectors) is "
                f"{state.state}: {_COST.get(state.state, 'search reads every vector')}",
            )
            for state in states(db, self.directory, model)
            if state.state != "current" and state.vectors >= self.min_chunks
        ]

    def rebuild(self, db: Database, model: str, dims: Sequence[int] = ()) -> list[BuildReport]:
        if not dims:
            with db.read() as conn:
                dims = stored.embedding_dims(conn, model)
        with writing(self.directory, wait=True):
            return [build(db, self.directory, model, dim, incremental=False) for dim in dims]

    def open(self, model: str, dim: int) -> LoadedIndex | None:
        """The index file of (model, dim), mapped once per process and again when the
        file was replaced; None when there is none, or it is not a whole index file."""
        path = index_path(self.directory, model, dim)
        try:
            status = path.stat()
        except OSError:
            return None
        stamp = (status.st_ino, status.st_size, status.st_mtime_ns)
        loaded = self._loaded.get(path)
        if loaded is not None and loaded.stamp == stamp:
            return loaded
        loaded = read_index(path, stamp)
        if loaded is None or (loaded.header.model, loaded.header.dim) != (model, dim):
            return None
        self._loaded[path] = loaded
        return loaded


def _candidates(
    conn: Connection,
    index: LoadedIndex,
    model: str,
    query: np.ndarray,
    depth: int,
    scope: Scope,
    floor: float,
) -> tuple[list[int], list[bytes]] | None:
    """The nearest indexed chunks the database lets this search see, with their stored
    vectors: at least `depth` of them when there are, checked in order of their rounded
    similarity; None when too many had to be checked, or the file's vectors are damaged
    (the exact scan answers)."""
    rough = max(ROUGH_MIN, ROUGH_PER_RESULT * depth, index.header.count // ROUGH_SHARE)
    approximated = index.approximate(query, rough)
    if approximated is None:
        return None
    positions, similarity = approximated
    ids: list[int] = []
    blobs: list[bytes] = []
    checked, step = 0, CHECK_PER_RESULT * depth
    while len(ids) < depth and checked < len(positions):
        if similarity[checked] < floor - ROUNDING:
            return ids, blobs  # the rest are further still: none reaches the floor
        if checked >= CHECK_BOUND_PER_RESULT * depth:
            return None
        batch = positions[checked : checked + step]
        found_ids, found_blobs = stored.published_vectors(
            conn, model, len(query), scope, among=index.ids[batch].tolist()
        )
        ids += found_ids
        blobs += found_blobs
        checked += len(batch)
        step *= 2
    if len(ids) < depth and len(positions) < index.header.count:
        return None  # every rough candidate checked, too few kept, more not looked at
    return ids, blobs


def read_index(path: Path, stamp: tuple[int, ...] = ()) -> LoadedIndex | None:
    """The index at `path`, or None when it is missing, truncated, or not one."""
    try:
        with path.open("rb") as file:
            head = file.read(len(MAGIC) + 4)
            if len(head) < len(MAGIC) + 4 or head[: len(MAGIC)] != MAGIC:
                return None
            length = int.from_bytes(head[len(MAGIC) :], "little")
            if length > 1 << 16:
                return None
            fields = json.loads(file.read(length))
            header = Header(**fields)
            offset = _aligned(len(MAGIC) + 4 + length)
            size = path.stat().st_size
            if size != offset + header.body_bytes() + len(END):
                return None
            file.seek(size - len(END))
            if file.read(len(END)) != END:
                return None
    except (OSError, ValueError, TypeError):
        return None
    if header.count <= 0 or header.dim <= 0:
        return None
    return LoadedIndex(path, header, offset, stamp)


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


# --- building ------------------------------------------------------------------------


class IndexBusy(Exception):
    """Another process is writing this home's vector index."""


@contextlib.contextmanager
def writing(directory: Path, wait: bool) -> Iterator[None]:
    """The lock of the index directory: one writer at a time, released by the system
    when its process dies (kill -9 included). Leftover temporary files of a writer
    that died are removed once the lock is held."""
    directory.mkdir(mode=0o700, exist_ok=True)
    with (directory / ".lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise IndexBusy from None
        for leftover in directory.glob(".tmp-*"):
            leftover.unlink(missing_ok=True)
        yield


def build(
    db: Database, directory: Path, model: str, dim: int, incremental: bool = True
) -> BuildReport:
    """Write the index of (model, dim) from one read snapshot of the database: only the
    chunks past the watermark of a current index when `incremental`, every chunk
    otherwise. The caller holds `writing`. No write transaction is held meanwhile."""
    import numpy as np

    path = index_path(directory, model, dim)
    previous = read_index(path) if incremental else None
    if previous is not None and not previous.intact():
        previous = None  # its vectors are not copied on under a new checksum: all anew
    with db.read() as conn:
        if previous is not None and not previous.current(conn):
            previous = None
        after = previous.header.watermark if previous is not None else 0
        watermark = stored.newest_chunk_id(conn)
        marks = stored.index_marks(conn, watermark)
        new_ids, new_vectors = _read_vectors(conn, model, dim, after, watermark)
    ids = [new_ids]
    halves = [new_vectors]
    if previous is not None:
        ids.insert(0, np.asarray(previous.ids))
        halves.insert(0, previous.every_half())
    all_ids, all_halves = np.concatenate(ids), np.concatenate(halves)
    if not len(all_ids):  # nothing to index: no file (a search scans exactly)
        path.unlink(missing_ok=True)
        return BuildReport(model, dim, 0, 0, watermark, str(path), 0)
    body = _body(all_ids, all_halves, code_words(dim))
    checksum = 0
    for part in body:
        checksum = zlib.crc32(part.data, checksum)
    header = Header(
        model, dim, len(all_ids), watermark, marks.database_id, marks.epoch, marks.anchor, checksum
    )
    size = _write(path, header, body)
    return BuildReport(model, dim, len(all_ids), len(new_ids), watermark, str(path), size)


def _read_vectors(
    conn: Connection, model: str, dim: int, after: int, upto: int
) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    id_parts, vector_parts = [np.zeros(0, dtype="<i8")], [np.zeros((0, dim), VECTOR_DTYPE)]
    while True:
        ids, blobs = stored.vectors_between(conn, model, dim, after, upto, READ_BATCH)
        if not ids:
            break
        id_parts.append(np.asarray(ids, dtype="<i8"))
        flat = np.frombuffer(b"".join(blobs), dtype=VECTOR_DTYPE)
        vector_parts.append(flat.reshape(len(ids), dim))
        after = ids[-1]
    return np.concatenate(id_parts), np.concatenate(vector_parts)


def _body(ids: np.ndarray, halves: np.ndarray, words: int) -> list[np.ndarray]:
    """The sections of the body, in file order: ids, sign codes (a word column at a
    time), half-precision vectors."""
    import numpy as np

    signs = np.packbits(halves > 0, axis=1)
    signs = np.pad(signs, ((0, 0), (0, 8 * words - signs.shape[1])))
    codes = np.ascontiguousarray(signs.view("<u8").T)
    return [
        np.ascontiguousarray(ids, dtype="<i8"),
        codes,
        np.ascontiguousarray(halves, dtype=VECTOR_DTYPE),
    ]


def _write(path: Path, header: Header, body: list[np.ndarray]) -> int:
    """The whole file under a temporary name, flushed to disk, then renamed over the
    old one: a reader sees the old file or the new one, never a part (kill -9 of the
    writer at any point leaves at most a temporary file the next writer removes)."""
    head = json.dumps(header.__dict__).encode()
    prefix = MAGIC + len(head).to_bytes(4, "little") + head
    prefix += b"\0" * (_aligned(len(prefix)) - len(prefix))
    temporary = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    with temporary.open("wb") as file:
        file.write(prefix)
        for part in body:
            file.write(part.data)
        file.write(END)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return path.stat().st_size


# --- what doctor and the worker ask ---------------------------------------------------


@dataclass(frozen=True)
class IndexState:
    model: str
    dim: int
    vectors: int  # chunks with vectors of (model, dim)
    # "current", "missing", "stale" (also a file of an older format), "damaged" (not a
    # whole index file, or its body no longer has its checksum), "foreign"
    state: str
    delta: int  # chunks past the watermark of a current index


def fold_due(delta: int, indexed: int) -> bool:
    """Whether `delta` chunks past the watermark of an index of `indexed` are worth a
    rewrite of the whole file."""
    return delta >= max(FOLD_CHUNKS, int(FOLD_SHARE * indexed))


def fold_if_due(db: Database, directory: Path, model: str, min_chunks: int) -> bool:
    """What the worker runs after a task: build the index of `model` (at the dimension
    of its newest vector) when there is none, or a stale one, and the base has at least
    `min_chunks` such vectors; fold the delta in when it is due (fold_due). Skipped
    when another process is writing it. Whether it built anything."""
    with db.read() as conn:
        dim = stored.newest_dim(conn, model)
        if dim is None:
            return False
        index = read_index(index_path(directory, model, dim))
        incremental = True
        if index is not None and index.current(conn):
            delta = stored.count_vectors(conn, model, dim, index.header.watermark)
            if not fold_due(delta, index.header.count):
                return False
            live = stored.count_vectors(conn, model, dim)
            incremental = index.header.count + delta <= (1 + GONE_SHARE) * live
        elif stored.newest_chunk_id(conn) < min_chunks or (
            stored.count_vectors(conn, model, dim) < min_chunks
        ):
            return False
    try:
        with writing(directory, wait=False):
            build(db, directory, model, dim, incremental)
    except IndexBusy:
        return False
    return True


def states(db: Database, directory: Path, model: str) -> list[IndexState]:
    """The index of each dimension `model` has vectors in; a current one's checksum
    verified (the whole file read once)."""
    found = []
    with db.read() as conn:
        for dim in stored.embedding_dims(conn, model):
            vectors = stored.count_vectors(conn, model, dim)
            path = index_path(directory, model, dim)
            index = read_index(path) if path.exists() else None
            state, delta = "missing", 0
            if index is None and path.exists():
                state = _unreadable_state(path)
            if index is not None:
                marks = stored.index_marks(conn, index.header.watermark)
                if marks.database_id != index.header.database_id:
                    state = "foreign"
                elif index.current(conn):
                    state = "current" if index.intact() else "damaged"
                    delta = stored.count_vectors(conn, model, dim, index.header.watermark)
                else:
                    state = "stale"
            found.append(IndexState(model, dim, vectors, state, delta))
    return found


def _unreadable_state(path: Path) -> str:
    """What a file that is not a whole index file of this format is: "stale" when an
    older kb wrote it, else "damaged"."""
    try:
        with path.open("rb") as file:
            older = file.read(len(MAGIC)) in OLDER_MAGICS
    except OSError:
        older = False
    return "stale" if older else "damaged"
