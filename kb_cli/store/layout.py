"""What every object store shares: generated keys, where a key lives, the owner marker,
the quarantine, the upload limit. A file store and a bucket prefix have the same layout
(`<shard>/<key>`, `owner.<database id>`, `quarantine/<key>`), so the same rules apply."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from kb_cli.errors import ObjectTooLarge

COPY_BLOCK = 1024 * 1024
OWNER_MARKER = "owner."  # + the database id: an empty directory, or an empty object
QUARANTINE = "quarantine"


@dataclass(frozen=True)
class StoredObject:
    key: str
    size_bytes: int
    sha256: str


def new_key() -> str:
    """A fresh object key; never derived from the user's filename."""
    return uuid.uuid4().hex


def shard_of(key: str) -> str:
    """The folder of a key: its first two characters (a leftover temporary object is
    ".<key>.tmp", and lives beside the object it was meant to become)."""
    return key.lstrip(".")[:2]


def temporary_key(key: str) -> str:
    return f".{key}.tmp"


def key_of(name: str) -> str:
    """The key a name in the store belongs to: a temporary object's is the key it was
    meant to become."""
    if name.startswith(".") and name.endswith(".tmp"):
        return name[1:-4]
    return name


def owner_of(names: Iterable[str]) -> str | None:
    """The owner a store's top-level names declare; None when none does. Two owners
    match no database, so nothing is touched."""
    owners = sorted(name[len(OWNER_MARKER) :] for name in names if name.startswith(OWNER_MARKER))
    return ",".join(owners) or None


def size_checked(size: int, max_bytes: int) -> int:
    """`size` if it is within the upload limit."""
    if size > max_bytes:
        raise ObjectTooLarge(f"file is larger than the limit of {max_bytes} bytes")
    return size
