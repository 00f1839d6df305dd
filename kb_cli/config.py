"""Resolved settings: a flag beats the environment, which beats the default."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kb_cli.chunking import OVERLAP_CHARS, TARGET_CHARS
from kb_cli.embeddings import PROVIDERS, EmbeddingSettings
from kb_cli.errors import UsageError
from kb_cli.parsers import ParseLimits
from kb_cli.reranking import PROVIDERS as RERANKERS
from kb_cli.reranking import RerankSettings
from kb_cli.store.location import S3Location, is_s3

DEFAULT_MAX_UPLOAD_BYTES = 200 * 1024 * 1024
DEFAULT_BUSY_TIMEOUT_SECONDS = 30.0
DEFAULT_VECTOR_FLOOR = 0.2
# Below this many chunks with vectors of a model, a SQLite search scans them all (fast
# enough: benchmarks/README.md, "A vector index on SQLite") and no index file is built.
DEFAULT_VECTOR_INDEX_MIN_CHUNKS = 20_000
# Chunks per write transaction of a worker: the lock is held for milliseconds at any
# document size, while a small document still costs a single transaction.
DEFAULT_CHUNK_BATCH = 500
# A chunk holds at least a few sentences beside its overlap, and at most what an
# embedding model reads at once.
MIN_CHUNK_CHARS, MAX_CHUNK_CHARS = 2 * OVERLAP_CHARS + 100, 8000
# How long a long-running command (`work --loop`, `events --follow`, `relay`, `status
# --wait`) keeps reconnecting to a database server it lost before it gives up (exit 1).
DEFAULT_RECONNECT_SECONDS = 60.0
# The longest time any option or variable may give (11.6 days): longer is a typo, and
# would overflow the waits it is handed to (threading, sockets, a lock_timeout in ms).
MAX_SECONDS = 1_000_000.0
# The largest integer SQLite's INTEGER and PostgreSQL's bigint hold: no number kb reads
# is larger, so none can overflow a statement it ends up in (docs/limits.md).
LARGEST_INTEGER = 2**63 - 1
# A parse child's memory limit beyond any machine's (1 TiB), whose bytes setrlimit holds.
MAX_MEMORY_MB = 2**20


@dataclass(frozen=True)
class TaskSettings:
    """The settings that decide a document's chunks, as a queuing command (submit,
    `upload --submit`, retry, reparse, sync) was given them: each one given travels with
    the task it queues (`ingestion_tasks.settings`), and the worker that runs the task
    uses it instead of its own; one not given (None) is the worker's. The chunk overlap
    is fixed (chunking.OVERLAP_CHARS), so it never travels."""

    chunk_chars: int | None = None  # KB_CHUNK_CHARS
    ocr: str | None = None  # KB_OCR
    pdf_backend: str | None = None  # KB_PDF_BACKEND

    def given(self) -> dict[str, int | str]:
        """Each setting given, by field name."""
        return {name: value for name, value in self.__dict__.items() if value is not None}

    def to_json(self) -> str | None:
        """As the task stores it: a JSON object of what was given; None for nothing."""
        given = self.given()
        return json.dumps(given, sort_keys=True) if given else None

    @classmethod
    def from_json(cls, text: str | None) -> TaskSettings:
        """What a task stored (to_json); a task queued before tasks carried settings
        (None) was given none."""
        return cls(**json.loads(text)) if text else cls()

    def over(self, older: TaskSettings) -> TaskSettings:
        """These settings, and `older`'s where these give none: a task queued again
        (a retry) keeps what it was asked, changed where the new command says."""
        return TaskSettings(
            older.chunk_chars if self.chunk_chars is None else self.chunk_chars,
            older.ocr if self.ocr is None else self.ocr,
            older.pdf_backend if self.pdf_backend is None else self.pdf_backend,
        )

    def describe(self) -> str:
        """`KB_CHUNK_CHARS=400, KB_OCR=force`: what was given, as the variables say it."""
        return ", ".join(
            f"{TASK_VARIABLES[name]}={value}" for name, value in sorted(self.given().items())
        )


# The variable that gives each of a task's settings.
TASK_VARIABLES = {"chunk_chars": "KB_CHUNK_CHARS", "ocr": "KB_OCR", "pdf_backend": "KB_PDF_BACKEND"}
# What one parse may cost a worker: its own to set, for its machine. A task does not
# carry them (an editor's command cannot raise a worker's memory or time); a queuing
# command given one is refused (cli/shared.py, refuse_worker_settings).
WORKER_VARIABLES = {
    "max_chars": "KB_MAX_CHARS",
    "max_pages": "KB_MAX_PAGES",
    "max_chunks": "KB_MAX_CHUNKS",
    "max_decompressed_bytes": "KB_MAX_DECOMPRESSED_BYTES",
    "timeout_seconds": "KB_PARSE_TIMEOUT",
    "max_memory_bytes": "KB_PARSE_MAX_MEMORY_MB",
    "ocr_max_pages": "KB_OCR_MAX_PAGES",
    "ocr_max_memory_bytes": "KB_OCR_MAX_MEMORY_MB",
}


@dataclass(frozen=True)
class Settings:
    home: Path
    database_url: str
    object_store: str  # an absolute directory, or s3://BUCKET/PREFIX
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    busy_timeout_seconds: float = DEFAULT_BUSY_TIMEOUT_SECONDS
    embeddings: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    # Vector hits below this cosine similarity are dropped: a query about nothing in
    # the knowledge base gets no hits instead of the nearest unrelated chunks.
    vector_floor: float = DEFAULT_VECTOR_FLOOR
    limits: ParseLimits = field(default_factory=ParseLimits)
    chunk_batch: int = DEFAULT_CHUNK_BATCH
    # The size chunks are packed to (KB_CHUNK_CHARS); part of a kept parse's key, so a
    # change makes `kb reparse` (and any new attempt) chunk again.
    chunk_chars: int = TARGET_CHARS
    rerank: RerankSettings = field(default_factory=RerankSettings)
    # How much the meaning ranking counts in hybrid search, for every query; None: the
    # embedding provider's own measured weights (kb_cli/embeddings).
    vector_weight: float | None = None
    # Whether waiting processes (an idle `kb work --loop`, `kb events --follow`, `kb
    # relay`) are woken by commits; KB_WAKE=poll makes them poll only.
    wake: bool = True
    reconnect_seconds: float = DEFAULT_RECONNECT_SECONDS
    vector_index_min_chunks: int = DEFAULT_VECTOR_INDEX_MIN_CHUNKS
    # The settings of a task this process's environment gives (a queuing command
    # records them with the task it queues).
    given: TaskSettings = field(default_factory=TaskSettings)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    def for_task(self, asked: TaskSettings) -> Settings:
        """These settings with those a task was queued with in their place."""
        limits = self.limits
        return dataclasses.replace(
            self,
            chunk_chars=self.chunk_chars if asked.chunk_chars is None else asked.chunk_chars,
            limits=dataclasses.replace(
                limits,
                ocr=limits.ocr if asked.ocr is None else asked.ocr,
                pdf_backend=limits.pdf_backend if asked.pdf_backend is None else asked.pdf_backend,
            ),
        )

    def worker_variables(self) -> list[str]:
        """The variables of a worker's limits (WORKER_VARIABLES) set here to something
        other than their default."""
        default = ParseLimits()
        return [
            variable
            for name, variable in WORKER_VARIABLES.items()
            if getattr(self.limits, name) != getattr(default, name)
        ]

    def where(self, short: bool = True) -> str:
        """Where the knowledge base is, for a person: the home (./.kb when it is under
        the working directory and `short`), or a database server's host and database,
        never its user or password."""
        if self.is_sqlite:
            default = f"sqlite:///{self.home / 'kb.sqlite3'}"
            if self.database_url != default:
                return self.database_url
            return shown_path(self.home) if short else str(self.home)
        parts = urllib.parse.urlsplit(self.database_url)
        port = f":{parts.port}" if parts.port else ""
        return f"database {parts.hostname or 'localhost'}{port}{parts.path}"

    def store_where(self, short: bool = True) -> str:
        """The object store, for a person (an s3:// location holds no keys)."""
        if is_s3(self.object_store) or not short:
            return self.object_store
        return shown_path(Path(self.object_store))


def shown_path(path: Path) -> str:
    """./X for a path under the working directory, else the absolute path."""
    try:
        return f"./{path.relative_to(Path.cwd())}"
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class WorkerOptions:
    """How a worker runs; `kb work`'s option defaults are these."""

    worker_id: str = ""
    lease_seconds: float = 60.0
    max_attempts: int = 3
    stage_delay: float = 0.0
    backoff_seconds: float = 5.0
    # Progress is written at most this often, so a 500-page PDF is not 500 commits.
    progress_interval: float = 0.25
    # An idle --loop worker is woken by the commit that queues a task (LISTEN/NOTIFY
    # on PostgreSQL, PRAGMA data_version on SQLite); this poll only covers a lost
    # wake-up.
    poll_seconds: float = 5.0
    # The knowledge bases whose tasks it claims (`kb work --base`); none: every base.
    bases: tuple[str, ...] = ()


WORKER_DEFAULTS = WorkerOptions()


def _env_number(
    name: str,
    default: float,
    cast: Callable[[str], float] = float,
    at_most: float = LARGEST_INTEGER,
) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = cast(raw)
    except ValueError:
        raise UsageError(f"{name} must be a number, got {raw!r}") from None
    if not (math.isfinite(value) and 0 <= value <= at_most):
        raise UsageError(f"{name} must be a number from 0 to {int(at_most):,}; got {raw!r}")
    return value


def _env_seconds(name: str, default: float) -> float:
    return _env_number(name, default, at_most=MAX_SECONDS)


def resolve_settings(
    home: str | None = None,
    database_url: str | None = None,
    object_store: str | None = None,
) -> Settings:
    """Build settings from flags (given here), then the environment, then defaults."""
    # Absolute, so no relative path can leak into a message or a record.
    home_path = Path(home or os.environ.get("KB_HOME") or ".kb").expanduser().absolute()
    url = database_url or os.environ.get("DATABASE_URL") or f"sqlite:///{home_path / 'kb.sqlite3'}"
    store = object_store or os.environ.get("OBJECT_STORE_ROOT") or str(home_path / "objects")
    if is_s3(store):
        store = str(S3Location.parse(store))  # refused here when it names no valid bucket
    else:
        store = str(Path(store).expanduser().absolute())
    chunk_chars, limits = _chunk_chars(), _parse_limits()
    return Settings(
        home=home_path,
        database_url=url,
        object_store=store,
        max_upload_bytes=int(_env_number("KB_MAX_UPLOAD_BYTES", DEFAULT_MAX_UPLOAD_BYTES, int)),
        busy_timeout_seconds=_env_seconds("KB_BUSY_TIMEOUT", DEFAULT_BUSY_TIMEOUT_SECONDS),
        embeddings=_embedding_settings(),
        vector_floor=_env_number("KB_VECTOR_FLOOR", DEFAULT_VECTOR_FLOOR, at_most=1),
        limits=limits,
        chunk_batch=max(1, int(_env_number("KB_CHUNK_BATCH", DEFAULT_CHUNK_BATCH, int))),
        chunk_chars=chunk_chars,
        rerank=_rerank_settings(),
        vector_weight=_optional_number("KB_VECTOR_WEIGHT"),
        wake=_wake(),
        reconnect_seconds=_env_seconds("KB_RECONNECT_SECONDS", DEFAULT_RECONNECT_SECONDS),
        vector_index_min_chunks=int(
            _env_number("KB_VECTOR_INDEX_MIN_CHUNKS", DEFAULT_VECTOR_INDEX_MIN_CHUNKS, int)
        ),
        given=_given(chunk_chars, limits),
    )


def _given(chunk_chars: int, limits: ParseLimits) -> TaskSettings:
    """The task settings whose variables are set (to something) in the environment."""

    def given(name: str) -> bool:
        return bool(os.environ.get(TASK_VARIABLES[name]))

    return TaskSettings(
        chunk_chars if given("chunk_chars") else None,
        limits.ocr if given("ocr") else None,
        limits.pdf_backend if given("pdf_backend") else None,
    )


def _chunk_chars() -> int:
    chars = int(_env_number("KB_CHUNK_CHARS", TARGET_CHARS, int))
    if not MIN_CHUNK_CHARS <= chars <= MAX_CHUNK_CHARS:
        raise UsageError(
            f"KB_CHUNK_CHARS must be between {MIN_CHUNK_CHARS} and {MAX_CHUNK_CHARS}; got {chars}"
        )
    return chars


def _wake() -> bool:
    mode = os.environ.get("KB_WAKE") or "commit"
    if mode not in ("commit", "poll"):
        raise UsageError(f"KB_WAKE must be commit or poll; got {mode!r}")
    return mode == "commit"


def _parse_limits() -> ParseLimits:
    default = ParseLimits()
    return ParseLimits(
        max_chars=int(_env_number("KB_MAX_CHARS", default.max_chars, int)),
        max_pages=int(_env_number("KB_MAX_PAGES", default.max_pages, int)),
        max_chunks=int(_env_number("KB_MAX_CHUNKS", default.max_chunks, int)),
        max_decompressed_bytes=int(
            _env_number("KB_MAX_DECOMPRESSED_BYTES", default.max_decompressed_bytes, int)
        ),
        timeout_seconds=_env_seconds("KB_PARSE_TIMEOUT", default.timeout_seconds),
        max_memory_bytes=_memory_bytes("KB_PARSE_MAX_MEMORY_MB", default.max_memory_bytes),
        ocr=_ocr_mode(),
        pdf_backend=_pdf_backend(),
        ocr_max_pages=int(_env_number("KB_OCR_MAX_PAGES", default.ocr_max_pages, int)),
        ocr_max_memory_bytes=_memory_bytes("KB_OCR_MAX_MEMORY_MB", default.ocr_max_memory_bytes),
    )


def _memory_bytes(name: str, default: int) -> int:
    """A memory limit given in MiB, in bytes."""
    return int(_env_number(name, default / 2**20, at_most=MAX_MEMORY_MB) * 2**20)


def _ocr_mode() -> str:
    """Which PDF pages OCR reads when the `ocr` extra is installed (parsers/ocr.py)."""
    mode = os.environ.get("KB_OCR") or "auto"
    if mode not in ("auto", "off", "force"):
        raise UsageError(f"KB_OCR must be auto, off or force; got {mode!r}")
    return mode


def _pdf_backend() -> str:
    """Which PDF library parses (parsers/pdf.py)."""
    backend = os.environ.get("KB_PDF_BACKEND") or "auto"
    if backend not in ("auto", "pypdf", "pdfium"):
        raise UsageError(f"KB_PDF_BACKEND must be auto, pypdf or pdfium; got {backend!r}")
    return backend


def _embedding_settings() -> EmbeddingSettings:
    provider = os.environ.get("KB_EMBEDDINGS") or "local"
    if provider not in PROVIDERS:
        raise UsageError(f"KB_EMBEDDINGS must be one of {', '.join(PROVIDERS)}; got {provider!r}")
    batch = int(_env_number("KB_EMBEDDING_BATCH", 64, int))
    if batch < 1:
        raise UsageError("KB_EMBEDDING_BATCH must be at least 1")
    return EmbeddingSettings(
        provider=provider,
        url=os.environ.get("KB_EMBEDDING_URL") or None,
        model=os.environ.get("KB_EMBEDDING_MODEL") or None,
        api_key=os.environ.get("KB_EMBEDDING_API_KEY") or None,
        batch_size=batch,
        timeout_seconds=_env_seconds("KB_EMBEDDING_TIMEOUT", 30.0),
    )


def _rerank_settings() -> RerankSettings:
    provider = os.environ.get("KB_RERANK") or "none"
    if provider not in RERANKERS:
        raise UsageError(f"KB_RERANK must be one of {', '.join(RERANKERS)}; got {provider!r}")
    default = RerankSettings()
    return RerankSettings(
        provider=provider,
        url=os.environ.get("KB_RERANK_URL") or None,
        model=os.environ.get("KB_RERANK_MODEL") or None,
        api_key=os.environ.get("KB_RERANK_API_KEY") or None,
        timeout_seconds=_positive_seconds("KB_RERANK_TIMEOUT", default.timeout_seconds),
        depth=max(1, int(_env_number("KB_RERANK_DEPTH", default.depth, int))),
    )


def _optional_number(name: str) -> float | None:
    """The variable's number, or None when it is not set."""
    return _env_number(name, 0.0) if os.environ.get(name) else None


def _positive_seconds(name: str, default: float) -> float:
    value = _env_seconds(name, default)
    if value <= 0:
        raise UsageError(f"{name} must be more than 0")
    return value
