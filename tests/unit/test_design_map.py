"""The documents checked against the code, as sqlite-utils and datasette check theirs:
docs/design.md's module map names every module of kb_cli and nothing that is gone, its
layer list is the import contract's, every kb_cli path a document names exists, and
the code cites documents by file and heading, which exist too."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SOURCES = sorted([*(ROOT / "kb_cli").rglob("*.py"), *(ROOT / "tests").rglob("*.py")])

PATH = re.compile(r"kb_cli/[\w./-]*[\w/]")
# docs/access.md, "Knowledge bases": a heading may wrap onto a comment's next line.
CITATION = re.compile(r'(docs/[\w-]+\.md), "([^"]+)"')
NUMBERED = re.compile(r"\b(contract sections?|sections?) \d+|section \d+ of the contract")


def section(text: str, heading: str) -> str:
    """The text under `heading` up to the next heading of its level or above."""
    level = heading.split(" ")[0]
    start = text.index(f"\n{heading}\n")
    ends = [
        match.start()
        for match in re.finditer(r"\n(#+) ", text[start + 1 :])
        if len(match.group(1)) <= len(level)
    ]
    return text[start : start + 1 + ends[0]] if ends else text[start:]


def test_the_module_map_names_every_module_of_kb_cli():
    module_map = section(DESIGN.read_text(), "### Module map")
    mapped = set(re.findall(r"`(kb_cli/[\w./]+\.py)`", module_map))
    modules = {path.relative_to(ROOT).as_posix() for path in (ROOT / "kb_cli").rglob("*.py")}
    unmapped, gone = sorted(modules - mapped), sorted(mapped - modules)
    assert not unmapped, f"not in docs/design.md's module map: {unmapped}"
    assert not gone, f"in docs/design.md's module map, gone from kb_cli: {gone}"


def test_every_kb_cli_path_a_document_names_exists():
    missing = {
        f"{document.name}: {path}"
        for document in DOCUMENTS
        for path in PATH.findall(document.read_text())
        if not (ROOT / path).exists()
    }
    assert not missing


def test_the_layers_in_the_design_are_the_import_contract():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in contracts["contracts"] if c["id"] == "layers"]
    block = section(DESIGN.read_text(), "## Layers").split("```\n")[1]
    assert block.splitlines() == layers


def test_citations_name_a_document_and_one_of_its_headings():
    cited = 0
    for source in SOURCES:
        for document, heading in CITATION.findall(source.read_text(encoding="utf-8")):
            heading = " ".join(word for word in heading.split() if word != "#")
            prose = re.sub(r"```.*?```", "", (ROOT / document).read_text(), flags=re.DOTALL)
            headings = re.findall(r"^#+ (.+)$", prose, re.MULTILINE)
            assert heading in headings, f"{source.name} cites {document}, {heading!r}"
            cited += 1
    assert cited >= 8


def test_nothing_cites_a_document_by_a_section_number():
    numbered = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in [*SOURCES, *DOCUMENTS]
        if path.name != Path(__file__).name
        for match in NUMBERED.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not numbered
