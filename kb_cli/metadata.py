"""Document metadata: the checks on `kb upload --meta KEY=VALUE` and the filters of
`--where` (docs/interface.md, "Document metadata"). Pure: no database, no I/O.

Metadata is a flat JSON object of string keys and string values. The bounds keep a
document row small and a filter cheap: at most MAX_KEYS keys, each a short name, each
value at most MAX_VALUE characters, no control characters anywhere. The keys `kb sync`
keeps (SYNCED) have bounds of their own and never count against a document's MAX_KEYS,
so that no file's path, nor the folder it was synced from, can make a document one that
sync cannot change any more.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kb_cli.errors import UsageError

MAX_KEYS = 32
MAX_KEY = 64
MAX_VALUE = 1024
# A document has at most MAX_KEYS keys, so as many conditions can name every one of
# them; each is a condition of every candidate statement, and SQLite refuses a
# statement of about a thousand ("Expression tree is too large").
MAX_WHERE = MAX_KEYS
_KEY = re.compile(rf"[A-Za-z][A-Za-z0-9_.-]{{0,{MAX_KEY - 1}}}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Set by `kb sync` on every document it makes: where the file lives, and what the quick
# check compares (docs/interface.md, "Document metadata").
PATH, SOURCE = "path", "source"
SOURCE_SIZE, SOURCE_STAMP = "source_size", "source_stamp"
# A source is a folder (at most PATH_MAX, 4,096 bytes on Linux) or s3://BUCKET/PREFIX.
MAX_SOURCE = 4096
# The longest value each of sync's keys may hold: a size in digits, a stamp (a time in
# nanoseconds, or an ETag).
SYNCED = {PATH: MAX_VALUE, SOURCE: MAX_SOURCE, SOURCE_SIZE: 20, SOURCE_STAMP: 200}
PREFIX_OPERATOR = "^="


def check_key(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise UsageError(
            f"metadata key {_shown(key)!r} is not allowed: use a letter, then up to "
            f"{MAX_KEY - 1} letters, digits, '_', '.' or '-'"
        )
    return key


def check_value(key: str, value: str) -> str:
    most = SYNCED.get(key, MAX_VALUE)
    if len(value) > most:
        raise UsageError(f"metadata value of {key!r} is longer than {most} characters")
    if _CONTROL.search(value):
        raise UsageError(f"metadata value of {key!r} contains a control character")
    return value


def parse_pairs(pairs: Iterable[str]) -> dict[str, str]:
    """`--meta KEY=VALUE` options as a dict (a later KEY wins), checked."""
    meta: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals:
            raise UsageError(f"--meta takes KEY=VALUE, not {_shown(pair)!r}")
        meta[check_key(key)] = check_value(key, value)
    return checked(meta)


def checked(meta: Mapping[str, str]) -> dict[str, str]:
    """The whole object within bounds (keys and values each checked); sync's own keys
    are not counted."""
    if sum(key not in SYNCED for key in meta) > MAX_KEYS:
        raise UsageError(f"a document has at most {MAX_KEYS} metadata keys")
    return {check_key(key): check_value(key, value) for key, value in meta.items()}


@dataclass(frozen=True)
class MetaFilter:
    """One `--where`: the document's value of `key` equals `value`, or starts with it
    when `prefix` (KEY^=PREFIX)."""

    key: str
    value: str
    prefix: bool = False


def parse_where(conditions: Sequence[str]) -> tuple[MetaFilter, ...]:
    """`--where KEY=VALUE` / `--where KEY^=PREFIX` options; all must hold."""
    if len(conditions) > MAX_WHERE:
        raise UsageError(
            f"{len(conditions)} --where conditions: at most {MAX_WHERE} (one for each "
            "metadata key a document may have)"
        )
    filters = []
    for condition in conditions:
        key, equals, value = condition.partition("=")
        if not equals:
            raise UsageError(f"--where takes KEY=VALUE or KEY^=PREFIX, not {_shown(condition)!r}")
        prefix = key.endswith("^")
        key = key.removesuffix("^")
        filters.append(MetaFilter(check_key(key), check_value(key, value), prefix))
    return tuple(filters)


def describe_filter(condition: MetaFilter) -> str:
    """A `--where` as it was written."""
    operator = PREFIX_OPERATOR if condition.prefix else "="
    return f"{condition.key}{operator}{condition.value}"


def describe(meta: Mapping[str, str]) -> str:
    """Metadata as the audit trail shows it: key=value pairs, sorted."""
    return ", ".join(f"{key}={value}" for key, value in sorted(meta.items()))


def _shown(text: str) -> str:
    return _CONTROL.sub("?", text)[:80]
