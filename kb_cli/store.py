"""Object store: immutable blobs under generated keys, written atomically.

Keys never contain the user's filename. A blob is streamed to a temporary file in the
store's own directory (same filesystem), hashed while copying, fsynced, then renamed
into place, so a reader never sees a half-written object.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from kb_cli.errors import ObjectTooLarge, StoreWriteError

COPY_BLOCK = 1024 * 1024


@dataclass(frozen=True)
class StoredObject:
    key: str
    size_bytes: int
    sha256: str


class FileObjectStore:
    """A directory of objects, sharded by the first two characters of the key."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        shard = key.lstrip(".")[:2]  # leftover temporary files are ".<key>.tmp"
        return self.root / shard / key

    def put(self, source: BinaryIO, max_bytes: int) -> StoredObject:
        import hashlib  # here, not above: loading OpenSSL costs 5 ms of every command

        key = uuid.uuid4().hex
        final = self._path(key)
        with _writing():
            final.parent.mkdir(parents=True, exist_ok=True)
        temp = final.with_name(f".{key}.tmp")
        digest = hashlib.sha256()
        size = 0
        try:
            with _writing():
                out = open(temp, "wb")  # noqa: SIM115 - closed by the with below
            with out:
                while block := source.read(COPY_BLOCK):  # a read error is the source's
                    size += len(block)
                    if size > max_bytes:
                        raise ObjectTooLarge(f"file is larger than the limit of {max_bytes} bytes")
                    digest.update(block)
                    with _writing():
                        out.write(block)
                with _writing():
                    out.flush()
                    os.fsync(out.fileno())
            with _writing():
                os.replace(temp, final)
                _fsync_dir(final.parent)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        return StoredObject(key=key, size_bytes=size, sha256=digest.hexdigest())

    def read_blocks(self, key: str) -> Iterator[bytes]:
        """Stream an object; raises OSError when it is missing or unreadable."""
        with open(self._path(key), "rb") as source:
            while block := source.read(COPY_BLOCK):
                yield block

    def local_path(self, key: str) -> Path:
        """Where parsers can open the object directly (filesystem store only)."""
        return self._path(key)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def keys(self) -> Iterator[str]:
        for key, _modified in self.entries():
            yield key

    def entries(self) -> Iterator[tuple[str, float]]:
        """(key, modification time) of every object, and of leftover temporary files."""
        if not self.root.is_dir():
            return
        for shard in self.root.iterdir():
            if shard.is_dir():
                for entry in shard.iterdir():
                    if entry.is_file():
                        yield entry.name, entry.stat().st_mtime

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


@contextlib.contextmanager
def _writing() -> Iterator[None]:
    try:
        yield
    except OSError as error:
        raise StoreWriteError(f"cannot write to the object store: {error.strerror}") from error


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
