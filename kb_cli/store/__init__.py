"""Object stores: immutable blobs under generated keys. Two implementations of one
protocol: a directory (kb_cli.store.files) and an S3-compatible bucket prefix
(kb_cli.store.s3, whose client is imported only when an object is read or written).

Every store names the database it belongs to in an owner marker, written at the first
upload; `kb doctor --repair` touches only a store that names its own database, and
moves orphans to the quarantine instead of deleting them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from kb_cli.store.files import FileObjectStore, storage_message
from kb_cli.store.layout import OWNER_MARKER, QUARANTINE, StoredObject
from kb_cli.store.location import S3Location, is_s3

__all__ = [
    "OWNER_MARKER",
    "QUARANTINE",
    "FileObjectStore",
    "ObjectStore",
    "StoredObject",
    "open_store",
    "storage_message",
]


class ObjectStore(Protocol):
    def put(
        self, source: BinaryIO, max_bytes: int, key: str | None = None, durable: bool = True
    ) -> StoredObject:
        """Stream `source` into a new object under `key` (default: a fresh one), hashing
        as it goes; an existing object is never overwritten. `durable=False`: the caller
        makes the object durable (`make_durable`) before anything refers to it."""

    def make_durable(self, keys: list[str]) -> None:
        """Make objects put with `durable=False` survive a crash of the machine."""

    def read_blocks(self, key: str) -> Iterator[bytes]:
        """Stream an object; OSError when it is missing or unreadable."""

    def local_path(self, key: str) -> Path | None:
        """Where parsers can open the object directly; None when it is not on this
        host's disk (the reader keeps its own copy of the streamed blocks)."""

    def exists(self, key: str) -> bool: ...

    def keys(self) -> Iterator[str]:
        """The key of every object, and of leftover temporary ones."""

    def entries(self) -> Iterator[tuple[str, float]]:
        """(key, modification time) of every object, and of leftover temporary ones."""

    def delete(self, key: str) -> None:
        """Remove an object; nothing happens when it is gone already."""

    def owner(self, writing: bool = False) -> str | None:
        """The id of the database this store belongs to, None if it names none yet;
        `writing`: looked up on the way to a write, and failing as one."""

    def claim(self, database_id: str) -> None:
        """Name `database_id` as the owner, unless the store names one already."""

    def quarantine(self, key: str) -> None:
        """Move an object aside (QUARANTINE/<key>) instead of deleting it."""


def open_store(location: str) -> ObjectStore:
    """The store at `location`: s3://BUCKET/PREFIX, or a directory."""
    if is_s3(location):
        from kb_cli.store.s3 import S3ObjectStore

        return S3ObjectStore(S3Location.parse(location))
    return FileObjectStore(Path(location))
