"""Bounded parsing: what parsing in the forked, limited parse child costs per document."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.harness import PY, Context, Row, Sizes, env_for, kb, median_of
from tests.docgen import make_docx, make_pdf

TITLE = "bounded parsing"


# In a process like a worker's (embedding model loaded): seconds per parse of one file,
# in a forked child with limits (what kb does) and in-process (what it did).
PARSE_COST = """
import json, sys, time
from pathlib import Path
from kb_cli.config import resolve_settings
from kb_cli.embeddings import make_embedder
from kb_cli.parsers import Budget, ParseLimits, parse
from kb_cli.parsers import docx, pdf

embedder = make_embedder(resolve_settings().embeddings)
if embedder is not None:
    embedder.embed(["warm up"])
path, kind, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
module = pdf if kind == "application/pdf" else docx
module.preload()

def per_parse(run):
    run()
    started = time.perf_counter()
    for _ in range(count):
        run()
    return (time.perf_counter() - started) / count

isolated = per_parse(lambda: parse(path, kind, lambda done, total: None))
in_process = per_parse(lambda: module.parse(path, lambda d, t: None, Budget(ParseLimits())))
print(json.dumps({"isolated": isolated, "in_process": in_process}))
"""


def run(ctx: Context) -> list[Row]:
    """Per document: what the forked, limited parse adds, against the whole cost of a
    tiny document of that kind in `kb work --drain`."""
    work, sizes = ctx.work, ctx.sizes
    files = {
        "application/pdf": ("tiny.pdf", make_pdf(["A tiny page about ledgers."])),
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document": (
            "tiny.docx",
            make_docx("Ledgers", ["A tiny paragraph about invoices."]),
        ),
    }
    rows = []
    for kind, (name, data) in files.items():
        path = work / name
        path.write_bytes(data)
        done = subprocess.run(
            [PY, "-c", PARSE_COST, str(path), kind, str(sizes.parse_cost_docs)],
            env=env_for(work / "unused-home"),
            capture_output=True,
            text=True,
            check=True,
        )
        cost = json.loads(done.stdout)
        per_document = median_of(sizes.runs, lambda p=path: drain_copies(work, p, sizes))
        added = cost["isolated"] - cost["in_process"]
        rows.append(
            Row(
                f"added by the parse child per tiny {name[5:]}, vs kb work per such document",
                added * 1000,
                per_document * 1000,
                "ms",
                "<= 0.10x",
                f"parse in-process {cost['in_process'] * 1000:.2f} ms, in the child "
                f"{cost['isolated'] * 1000:.2f} ms; .txt/.md parse in-process",
            )
        )
    return rows


def drain_copies(work: Path, path: Path, sizes: Sizes) -> float:
    """Seconds per document of `kb work --drain` over copies of one small file."""
    home = Path(tempfile.mkdtemp(dir=work)) / "home"
    folder = home.parent / "copies"
    folder.mkdir()
    copies = []
    for i in range(sizes.parse_cost_docs):
        copy = folder / f"c{i}{path.suffix}"
        copy.write_bytes(path.read_bytes())
        copies.append(str(copy))
    kb(home, "upload", *copies, "--submit")
    started = time.perf_counter()
    kb(home, "work", "--drain")
    return (time.perf_counter() - started) / sizes.parse_cost_docs
