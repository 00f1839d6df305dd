"""Document formats: kb's own readers (zipfile + lxml, the standard library's HTML,
csv and email parsers) against the libraries they could have used, on generated
inputs. One run; numbers are medians (import) or the best of three (parse).

    uv run python benchmarks/formats.py [--others PYTHON]

PYTHON is an interpreter of a separate environment holding python-pptx, openpyxl,
selectolax and beautifulsoup4 (kb does not depend on them), e.g.
`uv venv /tmp/others && VIRTUAL_ENV=/tmp/others uv pip install python-pptx openpyxl
selectolax beautifulsoup4`, then `--others /tmp/others/bin/python`."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.docgen import make_eml, make_pdf, make_pptx, make_xlsx  # noqa: E402

NESTED_DIVS = 100_000
TIMEOUT = 90


def inputs(folder: Path) -> dict[str, Path]:
    slides = [
        {"title": f"Slide {n}", "lines": [f"point {n}.{i} about the roadmap" for i in range(6)],
         }
        for n in range(1, 51)
    ]  # fmt: skip
    rows = [[f"h{c}" for c in range(8)]] + [
        [f"r{r}c{c}" if c % 2 else (r * 8 + c, "thousands") for c in range(8)]
        for r in range(10_000)
    ]
    paragraphs = "".join(
        f"<h2>Section {n}</h2>" + "".join(f"<p>{'word ' * 40}{n}.{i}</p>" for i in range(20))
        for n in range(110)
    )
    page = (
        "<html><head><title>t</title></head><body><nav>menu</nav>"
        f"<main>{paragraphs}</main></body></html>"
    )
    files = {
        "deck.pptx": make_pptx(slides),
        "sheet.xlsx": make_xlsx({"Data": rows}),
        "page.html": page.encode(),
        "nested.html": (
            "<html><body>" + "<div>" * NESTED_DIVS + "<p>deep</p>" + "</div>" * NESTED_DIVS
        ).encode(),
        "mail.eml": make_eml(
            "Report", "a@example.com", "Tue, 1 Dec 2026 10:00:00 +0000", "word " * 1000,
            [("r.pdf", "application/pdf", make_pdf([f"p{n} " + "text " * 99 for n in range(300)]))],
        ),
    }  # fmt: skip
    paths = {}
    for name, data in files.items():
        paths[name] = folder / name
        paths[name].write_bytes(data)
    return paths


# Each snippet reads the file at sys.argv[1] and prints the number of characters it kept.
OURS = {
    "deck.pptx": ("kb_cli.parsers.slides", "slides"),
    "sheet.xlsx": ("kb_cli.parsers.sheets", "sheets"),
    "page.html": ("kb_cli.parsers.html_page", "html_page"),
    "nested.html": ("kb_cli.parsers.html_page", "html_page"),
    "mail.eml": ("kb_cli.parsers.mail", "mail"),
}
OUR_SNIPPET = """
import sys, time
from pathlib import Path
from kb_cli.parsers import Budget, ParseLimits
import importlib
module = importlib.import_module(sys.argv[2])
best = None
for _ in range(3):
    started = time.perf_counter()
    blocks = module.parse(Path(sys.argv[1]), lambda d, t: None, Budget(ParseLimits()))
    spent = time.perf_counter() - started
    best = spent if best is None else min(best, spent)
print(best, sum(len(b.text) for b in blocks))
"""
OTHERS = {
    "deck.pptx": (
        "python-pptx",
        "pptx",
        """
from pptx import Presentation
deck = Presentation(sys.argv[1])
out = []
for slide in deck.slides:
    for shape in slide.shapes:
        if shape.has_text_frame: out.append(shape.text_frame.text)
    if slide.has_notes_slide: out.append(slide.notes_slide.notes_text_frame.text)
kept = sum(map(len, out))
""",
    ),
    "sheet.xlsx": (
        "openpyxl (read-only)",
        "openpyxl",
        """
import openpyxl
book = openpyxl.load_workbook(sys.argv[1], read_only=True, data_only=True)
cells = (v for ws in book.worksheets for row in ws.iter_rows(values_only=True) for v in row)
kept = sum(len(str(v)) for v in cells if v is not None)
""",
    ),
    "page.html": (
        "selectolax (lexbor)",
        "selectolax.lexbor",
        """
from selectolax.lexbor import LexborHTMLParser
tree = LexborHTMLParser(open(sys.argv[1], encoding="utf-8").read())
for node in tree.css("script, style, nav, header, footer"): node.decompose()
kept = len(tree.body.text(separator="\\n") if tree.body else "")
""",
    ),
    "nested.html": (
        "BeautifulSoup (html.parser)",
        "bs4",
        """
import sys
sys.setrecursionlimit(1_000_000)
from bs4 import BeautifulSoup
soup = BeautifulSoup(open(sys.argv[1], encoding="utf-8").read(), "html.parser")
kept = len(soup.get_text())
""",
    ),
}
OTHER_SNIPPET = """
import sys, time
best = None
for _ in range(3):
    started = time.perf_counter()
{body}
    spent = time.perf_counter() - started
    best = spent if best is None else min(best, spent)
print(best, kept)
"""


def import_ms(python: str, module: str, runs: int = 7) -> float:
    def once(code: str) -> float:
        started = time.perf_counter()
        subprocess.run([python, "-c", code], check=True, cwd=REPO)
        return time.perf_counter() - started

    bare = statistics.median(once("pass") for _ in range(runs))
    return 1000 * (statistics.median(once(f"import {module}") for _ in range(runs)) - bare)


def parse_run(python: str, code: str, *args: str) -> tuple[float | None, int | str]:
    try:
        done = subprocess.run(
            [python, "-c", code, *args], capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO
        )
    except subprocess.TimeoutExpired:
        return None, f"still running at {TIMEOUT} s"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return None, lines[-1][:120] if lines else f"exit status {done.returncode}"
    seconds, kept = done.stdout.split()
    return float(seconds), int(kept)


def _row(name: str, reader: str, imported: float, seconds: float | None, kept) -> dict:
    return {
        "input": name,
        "reader": reader,
        "import_ms": round(imported),
        "parse_ms": None if seconds is None else round(seconds * 1000),
        "kept_chars": kept,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--others", help="a Python with python-pptx, openpyxl, selectolax, bs4")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        paths = inputs(Path(folder))
        for name, path in paths.items():
            module, short = OURS[name]
            imported = f"{module}, lxml.etree" if short in ("slides", "sheets") else module
            seconds, kept = parse_run(sys.executable, OUR_SNIPPET, str(path), module)
            rows.append(
                _row(name, f"kb ({short})", import_ms(sys.executable, imported), seconds, kept)
            )
            if args.others and name in OTHERS:
                label, imported, body = OTHERS[name]
                indented = "\n".join("    " + line for line in body.strip().splitlines())
                code = OTHER_SNIPPET.format(body=indented)
                seconds, kept = parse_run(args.others, code, str(path))
                rows.append(_row(name, label, import_ms(args.others, imported), seconds, kept))
    print("| input | reader | import ms | parse ms (best of 3) | characters kept |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(str(value) for value in row.values()) + " |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
