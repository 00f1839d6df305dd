"""The object store on an S3-compatible bucket prefix (AWS S3, MinIO, Ceph, ...), through
obstore (the optional `s3` extra), imported at the first read or write: a command that
never touches an object (`kb status`) never loads the client.

The bucket prefix has the layout of a file store. An object is never overwritten: a
small one is one PUT with `If-None-Match: *`; a large one streams as a multipart upload
to its temporary key, then is copied to its key only if that does not exist (a multipart
copy completed with `If-None-Match: *`), like the file store's rename. The endpoint,
region and credentials come from the usual AWS variables, read when the client is built
and never kept anywhere else, so they cannot reach a record, a message or a log.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from kb_cli.errors import ObjectStoreMisconfigured, ObjectStoreUnreachable, UsageError
from kb_cli.store import layout
from kb_cli.store.location import S3Location

if TYPE_CHECKING:
    from obstore.store import S3Store

# Up to this size an object is one conditional PUT from memory; above, a multipart upload
# in parts of this size, a few at a time (memory stays at PART_BYTES * PARTS_IN_FLIGHT).
PART_BYTES = 8 * 1024 * 1024
PARTS_IN_FLIGHT = 4
# A store that stays down fails a command within seconds (and a worker's task waits and
# retries); the client's own default is ten retries over up to three minutes.
RETRIES = 3
RETRY_TIMEOUT = timedelta(seconds=20)
CONNECT_TIMEOUT = "5s"
REQUEST_TIMEOUT = "120s"

CREDENTIALS = "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"
_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>(\w+)</Code>")
_CREDENTIAL_CODES = frozenset(
    {"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"}
)
_REGION_CODES = frozenset({"PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocation"})


class S3ObjectStore:
    def __init__(self, location: S3Location) -> None:
        self.location = location

    @functools.cached_property
    def _s3(self) -> S3Store:
        return client(self.location)

    # --- writing --------------------------------------------------------------------

    def make_durable(self, keys: list[str]) -> None:
        """Nothing to do: a stored object is durable once the PUT returned."""

    def put(
        self, source: BinaryIO, max_bytes: int, key: str | None = None, durable: bool = True
    ) -> layout.StoredObject:
        import hashlib  # here, not above: loading OpenSSL costs 5 ms of every command

        import obstore

        key = key or layout.new_key()
        digest = hashlib.sha256()
        first = _read_at_most(source, PART_BYTES + 1, max_bytes)
        digest.update(first)
        if len(first) <= PART_BYTES:
            self._create(_path(key), first)
            return layout.StoredObject(key, len(first), digest.hexdigest())
        size = len(first)

        def blocks() -> Iterator[bytes]:
            nonlocal size
            yield first
            while block := source.read(layout.COPY_BLOCK):
                size = layout.size_checked(size + len(block), max_bytes)
                digest.update(block)
                yield block

        temporary = _path(layout.temporary_key(key))
        with _errors(self.location, writing=True):
            obstore.put(
                self._s3,
                temporary,
                blocks(),
                use_multipart=True,
                chunk_size=PART_BYTES,
                max_concurrency=PARTS_IN_FLIGHT,
            )
        try:
            with _errors(self.location, writing=True):
                obstore.copy(self._s3, temporary, _path(key), overwrite=False)
        finally:
            self.delete(layout.temporary_key(key))
        return layout.StoredObject(key, size, digest.hexdigest())

    def _create(self, path: str, data: bytes) -> None:
        """One PUT that fails rather than overwrite (`If-None-Match: *`)."""
        import obstore

        with _errors(self.location, writing=True):
            obstore.put(self._s3, path, data, mode="create")

    def delete(self, key: str) -> None:
        import obstore

        with _errors(self.location, writing=True):
            obstore.delete(self._s3, _path(key))  # deleting a missing object succeeds

    def claim(self, database_id: str) -> None:
        """The marker is an empty object `owner.<database id>` at the prefix's top."""
        from obstore.exceptions import AlreadyExistsError

        if self.owner(writing=True) is not None:
            return
        with contextlib.suppress(AlreadyExistsError):  # another upload named it first
            self._create(f"{layout.OWNER_MARKER}{database_id}", b"")

    def quarantine(self, key: str) -> None:
        """Copy to QUARANTINE/<key>, then delete; a copy that is already there (a repair
        that stopped halfway) is kept, never overwritten."""
        import obstore
        from obstore.exceptions import AlreadyExistsError

        with contextlib.suppress(AlreadyExistsError), _errors(self.location, writing=True):
            obstore.copy(self._s3, _path(key), f"{layout.QUARANTINE}/{key}", overwrite=False)
        self.delete(key)

    # --- reading --------------------------------------------------------------------

    def read_blocks(self, key: str) -> Iterator[bytes]:
        import obstore

        with _errors(self.location):
            result = obstore.get(self._s3, _path(key))
            for block in result.stream(min_chunk_size=layout.COPY_BLOCK):
                yield bytes(block)

    def local_path(self, key: str) -> Path | None:
        return None  # the reader keeps its own copy of the streamed blocks

    def exists(self, key: str) -> bool:
        import obstore

        try:
            with _errors(self.location):
                obstore.head(self._s3, _path(key))
        except FileNotFoundError:
            return False
        return True

    def keys(self) -> Iterator[str]:
        for key, _modified in self.entries():
            yield key

    def entries(self) -> Iterator[tuple[str, float]]:
        import obstore

        with _errors(self.location):
            for batch in obstore.list(self._s3, chunk_size=1000):
                for meta in batch:
                    shard, _, name = meta["path"].partition("/")
                    if len(shard) == 2 and name and "/" not in name:  # not the quarantine
                        yield name, meta["last_modified"].timestamp()

    def owner(self, writing: bool = False) -> str | None:
        import obstore

        with _errors(self.location, writing):
            top = obstore.list_with_delimiter(self._s3)
        return layout.owner_of(meta["path"] for meta in top["objects"])


def client(location: S3Location) -> S3Store:
    """An obstore client of the bucket prefix, from the AWS_* variables (also what
    `kb sync s3://...` lists and reads with)."""
    try:
        from obstore.store import S3Store
    except ImportError:
        raise UsageError(
            "an s3:// object store needs the s3 extra: pip install 'kb-cli[s3]'"
        ) from None
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or None
    key_id = os.environ.get("AWS_ACCESS_KEY_ID") or None
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY") or None
    if (key_id is None) != (secret is None):
        raise ObjectStoreMisconfigured(f"set both or neither of {CREDENTIALS}")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return S3Store(
        location.bucket,
        prefix=location.prefix or None,
        endpoint=endpoint,
        region=region or "us-east-1",
        access_key_id=key_id,
        secret_access_key=secret,
        copy_if_not_exists="multipart",
        client_options={
            # Plain HTTP only when the endpoint asks for it (a local server).
            "allow_http": bool(endpoint and endpoint.startswith("http://")),
            "connect_timeout": CONNECT_TIMEOUT,
            "timeout": REQUEST_TIMEOUT,
        },
        retry_config={"max_retries": RETRIES, "retry_timeout": RETRY_TIMEOUT},
    )


def _path(key: str) -> str:
    return f"{layout.shard_of(key)}/{key}"


def _read_at_most(source: BinaryIO, count: int, max_bytes: int) -> bytes:
    """Up to `count` bytes of `source`, within the upload limit."""
    blocks: list[bytes] = []
    size = 0
    while size < count and (block := source.read(min(layout.COPY_BLOCK, count - size))):
        size = layout.size_checked(size + len(block), max_bytes)
        blocks.append(block)
    return b"".join(blocks)


@contextlib.contextmanager
def _errors(location: S3Location, writing: bool = False) -> Iterator[None]:
    """The client's errors as kb's: a missing object stays FileNotFoundError (what a
    reader of any store expects); the rest say what to fix, without the endpoint's
    address, a key or a credential."""
    from obstore.exceptions import AlreadyExistsError, BaseError, InvalidPathError

    try:
        yield
    except (AlreadyExistsError, InvalidPathError):  # the caller's to say what it means
        raise
    except (BaseError, FileNotFoundError) as error:
        raise classify(error, location, writing) from None


def classify(error: Exception, location: S3Location, writing: bool = False) -> Exception:
    """What a failed request means for kb: the store may recover (unreachable, timed
    out, 5xx, throttled), kb's configuration is wrong (credentials, bucket, region), or
    the object is not there."""
    text = str(error)
    status_match = _STATUS.search(text)
    status = int(status_match.group(1)) if status_match else None
    code_match = _CODE.search(text)
    code = code_match.group(1) if code_match else None
    if code == "NoSuchBucket":
        return ObjectStoreMisconfigured(
            f"the bucket {location.bucket!r} does not exist: create it, or fix "
            "OBJECT_STORE_ROOT / --object-store"
        )
    if status == 404 or (status is None and isinstance(error, FileNotFoundError)):
        return FileNotFoundError(errno.ENOENT, "the object is not in the store")
    if code in _CREDENTIAL_CODES or status == 401 or (status == 403 and code is None):
        return ObjectStoreMisconfigured(
            f"the object store refused the credentials ({code or status}): check {CREDENTIALS}"
        )
    if status == 403:
        return ObjectStoreMisconfigured(
            f"the object store denied access to bucket {location.bucket!r} ({code}): "
            f"check {CREDENTIALS} and the bucket's policy"
        )
    if code in _REGION_CODES or status == 301:
        return ObjectStoreMisconfigured(
            f"the bucket {location.bucket!r} is in another region ({code or status}): "
            "check AWS_REGION"
        )
    if status is not None and status < 500 and status != 429:
        return ObjectStoreMisconfigured(
            f"the object store refused the request (HTTP {status}{' ' + code if code else ''}): "
            "check OBJECT_STORE_ROOT and AWS_ENDPOINT_URL"
        )
    reason = f"HTTP {status}{' ' + code if code else ''}" if status else _network_reason(text)
    what = "write to" if writing else "read from"
    return ObjectStoreUnreachable(
        f"cannot {what} the object store ({reason}): check AWS_ENDPOINT_URL and the "
        "network, then run again"
    )


def _network_reason(text: str) -> str:
    lowered = text.lower()
    if "timed out" in lowered:  # not "timeout": every retried error names retry_timeout
        return "timed out"
    if "error sending request" in lowered or "connect" in lowered:
        return "connection failed"
    return "no answer"
