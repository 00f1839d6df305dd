"""What `kb sync` reads: the files under a folder, or the objects under an S3 bucket
prefix, as a stream of entries (docs/interface.md, "Syncing a folder or a bucket").

A folder is input, and whoever can write to it while a sync runs may swap a file for a
link, a FIFO or another file, or a subfolder for a link out of it. So a folder is
walked by descriptor: each subfolder is opened relative to its parent's descriptor
without following a link, and checked to be the folder that was listed (its device
and inode); each file is opened the same way, without blocking, checked to be a
regular file and the one listed, and read from that descriptor only. No link is ever
followed below SOURCE (SOURCE itself, which the caller names, may be one). What
changed kind or identity between its listing and its opening is skipped, with the
reason; a folder that could not be listed, or not as it was listed, is `unlisted`:
nothing under it counts as gone from the source.

The walk streams: one folder listing at a time (open folders: one per level, at most
MAX_DEPTH), one page of an S3 listing at a time, so memory does not grow with the
number of files. Every read is bounded by the caller's limit, as the bytes arrive.
"""

from __future__ import annotations

import contextlib
import errno
import operator
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, NamedTuple, Protocol

from kb_cli.errors import EntryUnreadable
from kb_cli.store import layout
from kb_cli.store.location import S3Location, is_s3

if TYPE_CHECKING:
    from obstore import ObjectMeta
    from obstore.store import S3Store

SKIPPED, FAILED = "skipped", "failed"
# Folders below SOURCE deeper than this are not walked (a bound on the descriptors a
# walk holds open: one per level).
MAX_DEPTH = 64


class Entry(NamedTuple):
    """A file under the source: its path relative to the source ('/'-separated), and
    what the quick check compares (size, and a stamp: the modification time in
    nanoseconds of a file, the ETag of an object). `problem` (with its `outcome`,
    skipped or failed) when it cannot be synced; `unlisted` when it is a folder (its
    path ends in '/') whose contents were not listed. `identity` is the device and
    inode a folder's file was listed with. A tuple: one is made per file."""

    path: str
    size: int = 0
    stamp: str = ""
    problem: str | None = None
    outcome: str = SKIPPED
    unlisted: bool = False
    identity: tuple[int, int] | None = None


class Source(Protocol):
    """A folder or an S3 prefix: its entries, and the content of one, read once."""

    name: str  # as stored in the metadata `source` of the documents it made

    def entries(self) -> Iterator[Entry]: ...

    def opened(self, entry: Entry, limit: int) -> contextlib.AbstractContextManager[Opened]:
        """The entry's content, read once, from the start: while the walk stands at
        the entry (a folder's descriptor is open only while the walk is in it).
        EntryUnreadable (with the record's outcome and reason) when it is not what was
        listed any more, or larger than `limit` bytes."""


def _always() -> bool:
    return True


@dataclass
class Opened:
    """An entry's content, `file` positioned at its start; the entry as it was when
    opened (the stamp of what will be stored); and whether the content is still what
    was opened (else what was stored may mix two versions of it): one GET is one
    version of an object, a file is checked again."""

    file: BinaryIO
    read: Entry
    unchanged: Callable[[], bool] = _always


def open_source(location: str) -> Source:
    if is_s3(location):
        return BucketSource(S3Location.parse(location))
    return DirectorySource(Path(location))


def bounded(file: BinaryIO, limit: int) -> Iterator[bytes]:
    """The file's blocks from where it stands, EntryUnreadable past `limit` bytes."""
    read = 0
    while block := file.read(layout.COPY_BLOCK):
        read += len(block)
        if read > limit:
            raise EntryUnreadable(FAILED, too_large(limit))
        yield block


def too_large(limit: int) -> str:
    return f"too large (limit {limit} bytes)"


# --- a folder ---------------------------------------------------------------------------

# A subfolder: opened relative to its parent, never through a link.
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A file: never through a link, and never waiting (a FIFO or a device would block open).
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_NAME = operator.attrgetter("name")


class _Listed(NamedTuple):
    """A subfolder as its parent's listing saw it."""

    name: str
    path: str
    identity: tuple[int, int]


@dataclass
class _Open:
    """A folder the walk holds open, and its subfolders still to walk (last first)."""

    fd: int
    path: str
    subfolders: list[_Listed] = field(default_factory=list)


class DirectorySource:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.name = str(self.root)
        # The entry the walk stands at, and the descriptor of its folder.
        self._standing: tuple[Entry, int] | None = None

    def entries(self) -> Iterator[Entry]:
        try:
            root = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as error:
            yield Entry("/", problem=_folder_problem(error), outcome=FAILED, unlisted=True)
            return
        walking = [_Open(root, "")]
        try:
            yield from self._files(walking[-1])
            while walking:
                folder = walking[-1]
                if not folder.subfolders:
                    os.close(walking.pop().fd)
                    continue
                listed = folder.subfolders.pop()
                opened = self._subfolder(folder.fd, listed, len(walking))
                if isinstance(opened, Entry):
                    yield opened
                    continue
                walking.append(_Open(opened, listed.path))
                yield from self._files(walking[-1])
        finally:
            self._standing = None
            for folder in walking:
                os.close(folder.fd)

    def _files(self, folder: _Open) -> Iterator[Entry]:
        """The folder's files and problems in name order (one lstat per name, as
        rsync's); its subfolders kept to walk."""
        try:
            with os.scandir(folder.fd) as listing:
                found = sorted(listing, key=_NAME)
        except OSError as error:
            problem = _folder_problem(error)
            yield Entry(folder.path + "/", problem=problem, outcome=FAILED, unlisted=True)
            return
        prefix = folder.path + "/" if folder.path else ""
        # Every name's kind as the folder is listed, before any is read: what is
        # opened later is checked against this.
        for entry in [self._entry(item, prefix + item.name) for item in found]:
            if isinstance(entry, _Listed):
                folder.subfolders.append(entry)
            elif entry is not None:
                self._standing = (entry, folder.fd)
                yield entry
        folder.subfolders.reverse()

    def _entry(self, item: os.DirEntry[str], path: str) -> Entry | _Listed | None:
        """An Entry, a subfolder to walk, or None for what is not a file (a socket, a
        pipe, a device: not a document)."""
        try:
            status = item.stat(follow_symlinks=False)
        except OSError as error:
            return Entry(path, problem=_file_problem(error), outcome=FAILED)
        mode = status.st_mode
        if item.name.startswith("."):
            return Entry(path + "/" if stat.S_ISDIR(mode) else path, problem="hidden")
        if stat.S_ISREG(mode):
            return Entry(path, status.st_size, str(status.st_mtime_ns), identity=_identity(status))
        if stat.S_ISDIR(mode):
            return _Listed(item.name, path, _identity(status))
        if stat.S_ISLNK(mode):
            return Entry(path, problem="a symbolic link (never followed)")
        return None

    def _subfolder(self, parent: int, listed: _Listed, depth: int) -> int | Entry:
        """The subfolder's descriptor, or why it is not walked."""
        shown = listed.path + "/"
        if depth > MAX_DEPTH:
            return Entry(shown, problem=f"nested deeper than {MAX_DEPTH} folders", unlisted=True)
        try:
            fd = os.open(listed.name, _FOLDER, dir_fd=parent)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                return Entry(shown, problem=_SWAPPED_FOLDER, unlisted=True)
            return Entry(shown, problem=_folder_problem(error), outcome=FAILED, unlisted=True)
        if _identity(os.fstat(fd)) != listed.identity:
            os.close(fd)
            return Entry(shown, problem=_SWAPPED_FOLDER, unlisted=True)
        return fd

    @contextlib.contextmanager
    def opened(self, entry: Entry, limit: int) -> Iterator[Opened]:
        if self._standing is None or self._standing[0] is not entry:
            raise RuntimeError("a folder's file is opened while the walk stands at it")
        folder = self._standing[1]
        try:
            fd = os.open(entry.path.rsplit("/", 1)[-1], _FILE, dir_fd=folder)
        except OSError as error:
            raise EntryUnreadable(*_unopened(error)) from None
        with os.fdopen(fd, "rb") as file:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise EntryUnreadable(SKIPPED, "changed while being synced: not a file any more")
            if _identity(status) != entry.identity:
                raise EntryUnreadable(SKIPPED, "replaced by another file while being synced")
            if status.st_size > limit:
                raise EntryUnreadable(FAILED, too_large(limit))
            read = Entry(
                entry.path, status.st_size, str(status.st_mtime_ns), identity=entry.identity
            )
            yield Opened(file, read, lambda: _same_content(os.fstat(fd), read))


_SWAPPED_FOLDER = "changed while being synced: not the folder that was listed"


def _identity(status: os.stat_result) -> tuple[int, int]:
    return status.st_dev, status.st_ino


def _same_content(now: os.stat_result, read: Entry) -> bool:
    return (now.st_size, str(now.st_mtime_ns)) == (read.size, read.stamp)


def _unopened(error: OSError) -> tuple[str, str]:
    """The record's outcome and reason for a file that would not open as listed."""
    if error.errno == errno.ELOOP:
        return SKIPPED, "changed while being synced: now a symbolic link (never followed)"
    if error.errno in (errno.ENOENT, errno.ENXIO):
        return SKIPPED, "changed while being synced: not a file any more"
    return FAILED, _file_problem(error)


def _folder_problem(error: OSError) -> str:
    return f"folder not readable: {error.strerror or type(error).__name__}"


def _file_problem(error: OSError) -> str:
    return f"not readable: {error.strerror or type(error).__name__}"


# --- an S3 bucket prefix ----------------------------------------------------------------

# What an S3 client built on object_store (obstore) cannot address: a key with an empty,
# "." or ".." segment, or a control character. It cannot list a page of keys holding one
# either; the walk names the key and goes on after it (docs/interface.md).
UNADDRESSABLE = (
    "a key the S3 client cannot address (an empty, '.' or '..' segment, or a control "
    "character): rename the object"
)
_INVALID_KEY = re.compile(r'Path "(.*?)"(?::| contained)', re.S)
_CONTROL = re.compile("[\x00-\x1f\x7f]")


class BucketSource:
    def __init__(self, location: S3Location) -> None:
        self.location = location
        self.name = str(location)
        self._client: S3Store | None = None

    @property
    def client(self) -> S3Store:
        if self._client is None:
            from kb_cli.store.s3 import client

            self._client = client(self.location)
        return self._client

    def entries(self) -> Iterator[Entry]:
        """Every key in name order, one page of the listing at a time. A page holding a
        key the client cannot address cannot be listed: that key is `failed`, the keys
        of its page before it unlisted (nothing there is gone), and the walk resumes
        after it."""
        from obstore.exceptions import InvalidPathError

        after: str | None = None  # the last key listed, or where the walk resumes
        unlisted: set[str] = set()
        while True:
            try:
                for key, meta in self._listed(after):
                    after = key
                    yield self._entry(key, meta)
                return
            except (InvalidPathError, ValueError) as error:  # ValueError: `after` refused
                bad = _invalid_key(error, self.location)
                folder = _common_folder(after or "", bad or "")
                if folder not in unlisted:
                    unlisted.add(folder)
                    yield Entry(
                        folder, problem=f"not listed whole: {UNADDRESSABLE}", outcome=FAILED,
                        unlisted=True,
                    )  # fmt: skip
                if bad is None:
                    return  # the client did not say which key: nothing after it is known
                yield Entry(_printable(bad), problem=UNADDRESSABLE, outcome=FAILED)
                after = _past(bad)
                if (found := self._head(after)) is not None:
                    yield found

    def _listed(self, after: str | None) -> Iterator[tuple[str, ObjectMeta]]:
        import obstore

        from kb_cli.store.s3 import _errors

        with _errors(self.location):
            for batch in obstore.list(self.client, offset=after, chunk_size=1000):
                for meta in batch:
                    yield meta["path"], meta

    def _head(self, key: str) -> Entry | None:
        """The object at `key` itself, which a listing that resumes after it leaves out."""
        import obstore

        from kb_cli.store.s3 import _errors

        try:
            with _errors(self.location):
                return self._entry(key, obstore.head(self.client, key))
        except (FileNotFoundError, ValueError):
            return None

    def _entry(self, key: str, meta: ObjectMeta) -> Entry:
        if any(part.startswith(".") for part in key.split("/")):
            return Entry(key, problem="hidden")
        return Entry(key, meta["size"], _object_stamp(meta))

    @contextlib.contextmanager
    def opened(self, entry: Entry, limit: int) -> Iterator[Opened]:
        """The object read in one GET (one version of it, never a mix) into a private
        temporary file as it streams, stopped once past `limit`; with the ETag that
        GET returned. A listed key that is not there is a folder marker (a key ending
        in "/", which the listing shows without it) or an object deleted since."""
        import obstore

        from kb_cli.store.s3 import _errors

        if entry.size > limit:
            raise EntryUnreadable(FAILED, too_large(limit))
        with tempfile.TemporaryFile(prefix="kb-sync-") as copy:
            try:
                with _errors(self.location):
                    result = obstore.get(self.client, entry.path)
                    if result.meta["size"] > limit:
                        raise EntryUnreadable(FAILED, too_large(limit))
                    copied = 0
                    for block in result.stream(min_chunk_size=layout.COPY_BLOCK):
                        copied += len(block)
                        if copied > limit:
                            raise EntryUnreadable(FAILED, too_large(limit))
                        copy.write(bytes(block))
            except FileNotFoundError:
                marker = entry.size == 0
                raise EntryUnreadable(
                    SKIPPED, "a folder marker, not a document" if marker else "gone since listed"
                ) from None
            copy.seek(0)
            yield Opened(copy, Entry(entry.path, result.meta["size"], _object_stamp(result.meta)))


def _object_stamp(meta: ObjectMeta) -> str:
    """The ETag, which changes with the content (and the time, when a store has none)."""
    return str(meta.get("e_tag") or meta["last_modified"].isoformat())


def _invalid_key(error: Exception, location: S3Location) -> str | None:
    """The key, relative to the prefix, that the client refused to list (its message
    names it), or None."""
    match = _INVALID_KEY.search(str(error))
    if match is None:
        return None
    key = match.group(1)
    prefix = location.prefix.strip("/")
    return key[len(prefix) + 1 :] if prefix and key.startswith(prefix + "/") else key


def _common_folder(first: str, second: str) -> str:
    """The deepest folder ("a/b/", or "/" for the source itself) holding both keys, and
    so every key between them."""
    common = os.path.commonprefix([first, second])  # noqa: RUF071 (keys, not paths)
    folder = common[: common.rfind("/") + 1]
    return folder or "/"


def _past(key: str) -> str:
    """The first key the client can address that sorts after `key` and after every
    key sharing its unaddressable start (all of them as unaddressable as it is)."""
    start = 0
    for segment in key.split("/"):
        control = _CONTROL.search(segment)
        if control is not None:
            at = start + control.start()
            return key[:at] + _next_addressable(key[at])
        if segment in ("", ".", ".."):
            # Every key that continues this segment with "/" shares it: '0' follows '/'.
            return key[: start + len(segment)] + "0"
        start += len(segment) + 1
    return key + "\x20"  # addressable after all: just after it


def _next_addressable(char: str) -> str:
    """The first character after a control character that a key may hold."""
    return "\x20" if char < "\x20" else "\x80"


def _printable(key: str) -> str:
    return _CONTROL.sub("?", key)
