"""Stored vectors (float16 blobs) sent to PostgreSQL as pgvector's `halfvec`, in its
binary form: the same float16 values, byte-swapped behind a dimension header, a few
microseconds a vector where its text form costs half a millisecond."""

from __future__ import annotations

import struct
from typing import Any


class HalfVec:
    """A stored vector (kb_cli/embeddings `to_blob`) as a query parameter whose
    PostgreSQL type is halfvec; on a connection `register` was called for."""

    __slots__ = ("blob",)

    def __init__(self, blob: bytes) -> None:
        self.blob = blob


def binary(blob: bytes) -> bytes:
    """pgvector's halfvec_recv format: dimension and a zero (big-endian uint16s), then
    each value as a big-endian float16 (the blob's are little-endian)."""
    swapped = bytearray(len(blob))
    swapped[0::2] = blob[1::2]
    swapped[1::2] = blob[0::2]
    return struct.pack(">HH", len(blob) // 2, 0) + bytes(swapped)


def register(raw: Any) -> None:
    """Let psycopg connection `raw` send HalfVec parameters (the extension must be
    installed in its database: its type's oid is looked up)."""
    from psycopg.adapt import Dumper
    from psycopg.pq import Format
    from psycopg.types import TypeInfo

    info = TypeInfo.fetch(raw, "halfvec")
    if info is None:
        raise LookupError("the vector extension is not installed")

    class HalfVecDumper(Dumper):
        format = Format.BINARY
        oid = info.oid

        def dump(self, obj: HalfVec) -> bytes:
            return binary(obj.blob)

    raw.adapters.register_dumper(HalfVec, HalfVecDumper)
