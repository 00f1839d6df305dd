"""What `kb sync` reads: the files under a directory, or the objects under an S3 bucket
prefix, as a stream of entries (docs/interface.md, "Syncing a folder or a bucket").

The walk streams: one directory listing at a time (os.scandir), one page of an S3
listing at a time, so memory does not grow with the number of files. It never follows
a symlinked folder (no loop is possible), takes a symlinked file only when its target
lies inside the source, and reports what it cannot take instead of stopping.
"""

from __future__ import annotations

import contextlib
import operator
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from kb_cli.store import layout
from kb_cli.store.location import S3Location, is_s3

if TYPE_CHECKING:
    from obstore.store import S3Store

SKIPPED, FAILED = "skipped", "failed"


class Entry(NamedTuple):
    """A file under the source: its path relative to the source ('/'-separated), and
    what the quick check compares (size, and a stamp: the modification time in
    nanoseconds of a file, the ETag of an object). `problem` (with its `outcome`,
    skipped or failed) when it cannot be synced. A tuple: one is made per file."""

    path: str
    size: int = 0
    stamp: str = ""
    problem: str | None = None
    outcome: str = SKIPPED


class Source(Protocol):
    """A directory or an S3 prefix: its entries, and a local copy of one to read."""

    name: str  # as stored in the metadata `source` of the documents it made

    def entries(self) -> Iterator[Entry]: ...

    def opened(self, entry: Entry) -> contextlib.AbstractContextManager[tuple[Path, Entry]]:
        """A local file with the entry's content, and the entry as it was when that
        content was read (the stamp of what will be stored)."""

    def unchanged_while_read(self, entry: Entry, read: Entry) -> bool:
        """Whether the file still is what was read (else what was stored may mix two
        versions of it)."""


def open_source(location: str) -> Source:
    if is_s3(location):
        return BucketSource(S3Location.parse(location))
    return DirectorySource(Path(location))


# --- a directory ----------------------------------------------------------------------


class DirectorySource:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.name = str(self.root)

    def entries(self) -> Iterator[Entry]:
        pending: list[tuple[str, str]] = [(str(self.root), "")]
        while pending:
            folder, relative = pending.pop()
            try:
                with os.scandir(folder) as listing:
                    found = sorted(listing, key=_NAME, reverse=True)
            except OSError as error:
                yield Entry(relative + "/", problem=_folder_problem(error), outcome=FAILED)
                continue
            children = []
            prefix = relative + "/" if relative else ""
            for item in reversed(found):  # in name order
                path = prefix + item.name
                entry = self._entry(item, path)
                if entry is _FOLDER:
                    children.append((item.path, path))
                elif entry is not None:
                    yield entry
            pending.extend(reversed(children))

    def _entry(self, item: os.DirEntry[str], path: str) -> Entry | None:
        """An Entry, _FOLDER to descend into, or None for what is not a file (a socket,
        a pipe, a device: not a document). One lstat per name, as rsync's."""
        try:
            status = item.stat(follow_symlinks=False)
            mode = status.st_mode
            if item.name.startswith("."):
                return Entry(path + "/" if stat.S_ISDIR(mode) else path, problem="hidden")
            if stat.S_ISREG(mode):
                return Entry(path, status.st_size, str(status.st_mtime_ns))
            if stat.S_ISDIR(mode):
                return _FOLDER
            if stat.S_ISLNK(mode):
                return self._linked(item, path)
        except OSError as error:
            return Entry(path, problem=_file_problem(error), outcome=FAILED)
        return None

    def _linked(self, item: os.DirEntry[str], path: str) -> Entry:
        try:
            target = Path(os.path.realpath(item.path))
            status = target.stat()
        except (OSError, RuntimeError):
            return Entry(path, problem="broken symlink")
        if not target.is_relative_to(self.root):
            return Entry(path, problem="symlink to outside the source")
        if not stat.S_ISREG(status.st_mode):
            return Entry(path, problem="symlink to a folder (not followed)")
        return Entry(path, status.st_size, str(status.st_mtime_ns))

    @contextlib.contextmanager
    def opened(self, entry: Entry) -> Iterator[tuple[Path, Entry]]:
        yield self.root / entry.path, entry

    def restat(self, entry: Entry) -> Entry | None:
        try:
            status = (self.root / entry.path).stat()
        except OSError:
            return None
        return Entry(entry.path, status.st_size, str(status.st_mtime_ns))

    def unchanged_while_read(self, entry: Entry, read: Entry) -> bool:
        after = self.restat(entry)
        return after is not None and after.size == entry.size and after.stamp == entry.stamp


_NAME = operator.attrgetter("name")
_FOLDER = Entry("")  # what _entry returns for a folder to descend into


def _folder_problem(error: OSError) -> str:
    return f"folder not readable: {error.strerror or type(error).__name__}"


def _file_problem(error: OSError) -> str:
    return f"not readable: {error.strerror or type(error).__name__}"


# --- an S3 bucket prefix ----------------------------------------------------------------


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
        import obstore

        from kb_cli.store.s3 import _errors

        with _errors(self.location):
            for batch in obstore.list(self.client, chunk_size=1000):
                for meta in batch:
                    path = meta["path"]
                    if path.endswith("/"):
                        continue  # a "folder" marker some tools create
                    if any(part.startswith(".") for part in path.split("/")):
                        yield Entry(path, problem="hidden")
                        continue
                    yield Entry(path, meta["size"], _object_stamp(meta))

    @contextlib.contextmanager
    def opened(self, entry: Entry) -> Iterator[tuple[Path, Entry]]:
        """The object downloaded in one GET (one version of it, never a mix) to a
        private temporary file, with the ETag that GET returned."""
        import obstore

        from kb_cli.store.s3 import _errors

        with tempfile.TemporaryDirectory(prefix="kb-sync-") as folder:
            local = Path(folder) / "object"
            with _errors(self.location):
                result = obstore.get(self.client, entry.path)
                meta = result.meta
                with open(local, "wb") as copy:
                    for block in result.stream(min_chunk_size=layout.COPY_BLOCK):
                        copy.write(bytes(block))
            read = Entry(entry.path, meta["size"], _object_stamp(meta))
            yield local, read
            shutil.rmtree(folder, ignore_errors=True)

    def unchanged_while_read(self, entry: Entry, read: Entry) -> bool:
        return True  # one GET is one version of the object


def _object_stamp(meta) -> str:
    """The ETag, which changes with the content (and the time, when a store has none)."""
    return str(meta.get("e_tag") or meta["last_modified"].isoformat())
