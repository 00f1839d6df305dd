"""Every default the documents state matches the code's: the tables with a `default`
column (a variable or option in the first cell) and prose such as "`--lease-seconds`,
default 60" or "`--max-attempts` (default 3)", read from README.md and docs/*.md and
compared with the defaults the code applies: the settings resolved from an empty
environment, and the options' defaults of every command of the real command line."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import typer

from kb_cli.cli import app
from kb_cli.config import Settings, resolve_settings
from kb_cli.services.demo import samples_dir

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

NAME = r"`(--[a-z][a-z-]*|KB_[A-Z_]+)`"
NAMES = re.compile(NAME)
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
PROSE = re.compile(NAME + r",? \(?default:? \**(-?\d[\d,]*(?:\.\d+)?)")
# "`KB_EMBEDDING_BATCH` (64)", "`KB_EMBEDDING_TIMEOUT` (30 s)": a value in brackets.
BRACKETED = re.compile(NAME + r" \((\d[\d,]*(?:\.\d+)?)(?: s| texts per request)?\)")

# Variables and what the resolved settings hold for them (the environment's name for a
# setting is the code's; its default is what resolve_settings gives with none set).
VARIABLES: dict[str, Callable[[Settings], object]] = {
    "KB_MAX_UPLOAD_BYTES": lambda s: s.max_upload_bytes,
    "KB_BUSY_TIMEOUT": lambda s: s.busy_timeout_seconds,
    "KB_VECTOR_FLOOR": lambda s: s.vector_floor,
    "KB_CHUNK_BATCH": lambda s: s.chunk_batch,
    "KB_RECONNECT_SECONDS": lambda s: s.reconnect_seconds,
    "KB_MAX_CHARS": lambda s: s.limits.max_chars,
    "KB_MAX_PAGES": lambda s: s.limits.max_pages,
    "KB_MAX_CHUNKS": lambda s: s.limits.max_chunks,
    "KB_MAX_DECOMPRESSED_BYTES": lambda s: s.limits.max_decompressed_bytes,
    "KB_PARSE_TIMEOUT": lambda s: s.limits.timeout_seconds,
    "KB_PARSE_MAX_MEMORY_MB": lambda s: s.limits.max_memory_bytes / 2**20,
    "KB_CHUNK_CHARS": lambda s: s.chunk_chars,
    "KB_OCR_MAX_PAGES": lambda s: s.limits.ocr_max_pages,
    "KB_OCR_MAX_MEMORY_MB": lambda s: s.limits.ocr_max_memory_bytes / 2**20,
    "KB_EMBEDDING_BATCH": lambda s: s.embeddings.batch_size,
    "KB_EMBEDDING_TIMEOUT": lambda s: s.embeddings.timeout_seconds,
    "KB_RERANK_TIMEOUT": lambda s: s.rerank.timeout_seconds,
    "KB_RERANK_DEPTH": lambda s: s.rerank.depth,
    "KB_VECTOR_INDEX_MIN_CHUNKS": lambda s: s.vector_index_min_chunks,
}


def option_defaults() -> dict[str, object]:
    """Every option of every command (and its variable, where it has one): its default."""
    found: dict[str, object] = {}

    def walk(command) -> None:
        for param in getattr(command, "params", []):
            if not isinstance(param.default, int | float) or isinstance(param.default, bool):
                continue
            for name in [*param.opts, *([param.envvar] if isinstance(param.envvar, str) else [])]:
                found.setdefault(name, set()).add(param.default)  # type: ignore[union-attr]
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    return found


def stated_defaults() -> Iterator[tuple[str, str, str]]:
    """(document, name, the default it states) for each default in the documents."""
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        for name, value in [*PROSE.findall(text), *BRACKETED.findall(text)]:
            yield path.name, name, value
        column = None
        for line in text.splitlines():
            if not line.startswith("|"):
                column = None
                continue
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            if column is None:
                heads = [cell.lower() for cell in cells]
                column = next((i for i, h in enumerate(heads) if h.startswith("default")), -1)
                continue
            if column < 0 or set(cells[0]) <= {"-", " "}:
                continue
            names = NAMES.findall(cells[0])
            values = [v for v in NUMBER.findall(cells[column].split("(")[0])]
            if not names or not values:
                continue  # "unset", "see ...", "the provider's": no number stated
            if len(values) == 1:
                values = values * len(names)
            for name, value in zip(names, values, strict=True):
                yield path.name, name, value


def code_default(name: str, settings: Settings, options: dict[str, object]) -> set[float]:
    if name in VARIABLES:
        return {float(VARIABLES[name](settings))}  # type: ignore[arg-type]
    assert name in options, f"{name}: a default in the docs, but no such setting or option"
    return {float(value) for value in options[name]}  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def empty_environment_settings() -> Settings:
    with pytest.MonkeyPatch.context() as patch:
        for name in [name for name in __import__("os").environ if name.startswith("KB_")]:
            patch.delenv(name)
        return resolve_settings(home="/nonexistent-kb-home")


def test_every_default_the_documents_state_is_the_codes(empty_environment_settings):
    options = option_defaults()
    stated = list(stated_defaults())
    assert len(stated) >= 25, stated  # the tables were read, not silently skipped
    wrong = []
    for document, name, value in stated:
        number = float(value.replace(",", ""))
        if number not in code_default(name, empty_environment_settings, options):
            wrong.append(f"{document}: {name} default {value}")
    assert not wrong, wrong


def test_the_demo_uploads_as_many_files_as_the_docs_say():
    from kb_cli.parsers.detect import kind_for_filename

    count = sum(1 for path in samples_dir().iterdir() if kind_for_filename(path.name))
    words = {6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten", 11: "eleven"}
    text = (ROOT / "docs" / "workers.md").read_text(encoding="utf-8")
    assert f"the {words[count]} files of `sample_docs/`" in " ".join(text.split())
