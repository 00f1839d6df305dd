"""Where an S3-compatible store is: parsed from OBJECT_STORE_ROOT / --object-store, with
no client imported."""

from __future__ import annotations

import re
from dataclasses import dataclass

from kb_cli.errors import UsageError

SCHEME = "s3://"
# S3's own rule for bucket names (3-63 of lowercase letters, digits, dots, hyphens).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def is_s3(location: str) -> bool:
    return location.startswith(SCHEME)


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # without leading or trailing slashes; "" for the bucket's root

    @classmethod
    def parse(cls, location: str) -> S3Location:
        bucket, _, prefix = location[len(SCHEME) :].partition("/")
        if not _BUCKET.fullmatch(bucket):
            raise UsageError(
                f"the object store {location!r} does not name a valid bucket: "
                "use s3://BUCKET/PREFIX (OBJECT_STORE_ROOT / --object-store)"
            )
        return cls(bucket, prefix.strip("/"))

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{SCHEME}{self.bucket}"
