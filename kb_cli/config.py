"""Resolved settings: a flag beats the environment, which beats the default."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from kb_cli.errors import UsageError

DEFAULT_MAX_UPLOAD_BYTES = 200 * 1024 * 1024
DEFAULT_BUSY_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class Settings:
    home: Path
    database_url: str
    object_store: Path
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    busy_timeout_seconds: float = DEFAULT_BUSY_TIMEOUT_SECONDS


def _env_number(name: str, default: float, cast: type = float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = cast(raw)
    except ValueError:
        raise UsageError(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{name} must be a finite number, not negative; got {raw!r}")
    return value


def resolve_settings(
    home: str | None = None,
    database_url: str | None = None,
    object_store: str | None = None,
) -> Settings:
    """Build settings from flags (given here), then the environment, then defaults."""
    # Absolute, so no relative path can leak into a message or a record.
    home_path = Path(home or os.environ.get("KB_HOME") or ".kb").expanduser().absolute()
    url = database_url or os.environ.get("DATABASE_URL") or f"sqlite:///{home_path / 'kb.sqlite3'}"
    store = Path(object_store or os.environ.get("OBJECT_STORE_ROOT") or home_path / "objects")
    store = store.expanduser().absolute()
    return Settings(
        home=home_path,
        database_url=url,
        object_store=store,
        max_upload_bytes=int(_env_number("KB_MAX_UPLOAD_BYTES", DEFAULT_MAX_UPLOAD_BYTES, int)),
        busy_timeout_seconds=_env_number("KB_BUSY_TIMEOUT", DEFAULT_BUSY_TIMEOUT_SECONDS),
    )
