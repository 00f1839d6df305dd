"""The kb benchmark suite: every case against a reference measured in the same run.

    uv run --group bench python benchmarks/run.py             # full sizes, 3 runs each
    uv run --group bench python benchmarks/run.py --quick     # tiny sizes, 1 run (smoke)
    uv run --group bench python benchmarks/run.py --case 3    # by number or name, or several
    uv run --group bench python benchmarks/run.py --list      # the cases, in order

Each case is a module of benchmarks/cases/ named NN_name.py (its number is the one
benchmarks/README.md reports it under) with a TITLE and a `run(ctx)` that returns its
rows. Cases build all of their data (text, PDF, DOCX) themselves; the runner prints a
table of medians and ratios and writes benchmarks/results/latest.json. Times are never
asserted anywhere: these machines are shared and noisy, so only ratios from one run are
compared.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.harness import QUICK, Context, Row, Sizes  # noqa: E402

CASES_DIR = Path(__file__).resolve().parent / "cases"


@dataclass(frozen=True)
class Case:
    number: int
    name: str
    stem: str  # the module's file name without .py: "03_contention"

    def load(self) -> ModuleType:
        return importlib.import_module(f"benchmarks.cases.{self.stem}")

    def answers_to(self, word: str) -> bool:
        return word in (self.name, self.stem) or (word.isdigit() and int(word) == self.number)


def all_cases() -> list[Case]:
    cases = []
    for path in sorted(CASES_DIR.glob("[0-9][0-9]_*.py")):
        number, name = path.stem.split("_", 1)
        cases.append(Case(int(number), name, path.stem))
    return cases


def chosen(cases: list[Case], words: list[str] | None) -> list[Case]:
    """The cases named by number or name, in the suite's order; all when none is named."""
    if not words:
        return cases
    unknown = [word for word in words if not any(case.answers_to(word) for case in cases)]
    if unknown:
        raise SystemExit(f"no case {', '.join(unknown)}: `--list` shows them")
    return [case for case in cases if any(case.answers_to(word) for word in words)]


def render(rows: list[Row]) -> str:
    lines = [
        "| case | metric | kb | reference | ratio | target | note |",
        "| --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        ref = "-" if row.reference is None else f"{row.reference:,.3g}"
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}x"
        lines.append(
            f"| {row.case} | {row.metric} | {row.kb:,.3g} {row.unit} | {ref} | "
            f"{ratio} | {row.target} | {row.note} |"
        )
    return "\n".join(lines)


def run_case(case: Case, scratch: Path, sizes: Sizes) -> list[Row]:
    module = case.load()
    work = scratch / case.stem
    work.mkdir()
    rows = module.run(Context(work, sizes))
    for row in rows:
        row.case = f"{case.number} {module.TITLE}"
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run (smoke)")
    parser.add_argument(
        "--case", "--only", nargs="+", metavar="CASE", help="run these cases (number or name)"
    )
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks/results/latest.json")
    args = parser.parse_args()
    cases = chosen(all_cases(), args.case)
    if args.list:
        for case in cases:
            print(f"{case.number:>2}  {case.name:<14} {case.load().TITLE}")
        return
    sizes = QUICK if args.quick else Sizes()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="kb-bench-") as scratch:
        for case in cases:
            print(f"running {case.number} {case.name} ...", file=sys.stderr, flush=True)
            new_rows = run_case(case, Path(scratch), sizes)
            measured = render(new_rows).split("\n", 2)[2:] or [
                "(nothing measured: an extra it needs is not installed)"
            ]
            print(measured[0], file=sys.stderr, flush=True)
            rows += new_rows
    print(render(rows))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} "
                f"{platform.release()}, Python {platform.python_version()}, "
                f"SQLite {sqlite3.sqlite_version}",
                "quick": args.quick,
                "rows": [{**row.__dict__, "ratio": row.ratio} for row in rows],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
