"""Search hits on an 80-column terminal: headers wrap between words, never inside one,
and a wrapped snippet stays under its indent."""

from __future__ import annotations

import pytest
from rich.cells import cell_len

from tests.helpers import ingest, publish, run_kb
from tests.terminal import ANSI, run_in_terminal

pytestmark = pytest.mark.display

LONG_NAME = "Business travel and expenses handbook for engineering staff, 2026 edition.md"
ENGLISH = (
    "# Business Travel Policy for Engineering Teams and Everyone Else\n\n"
    "Mileage for a work trip is paid per kilometre driven with a private car, after the "
    "trip, against a log of the route. Engineering splits the other costs of a business "
    "trip with the team that asked for it, and approval comes before booking.\n"
)
CHINESE = (
    "# 差旅报销制度\n\n"
    + "员工出差回来后十五天内提交报销单，附上发票和行程单，由部门经理审批。" * 3
)


def screen_lines(screen: str) -> list[str]:
    return [line.rstrip() for line in ANSI.sub("", screen).replace("\r", "").split("\n")]


def test_hits_wrap_between_words_and_snippets_keep_their_indent(invoke, tmp_path):
    publish(invoke, ingest(invoke, tmp_path, LONG_NAME, ENGLISH)["document_id"])
    publish(invoke, ingest(invoke, tmp_path, "差旅.md", CHINESE)["document_id"])
    question = "mileage for a work trip"
    piped = run_kb("search", question, "--mode", "lexical")
    assert piped.code == 0 and piped.stdout.count("\n") == 2  # header + snippet: one hit
    code, screen = run_in_terminal("search", question, "--mode", "lexical", COLUMNS="80")
    assert code == 0
    lines = [line for line in screen_lines(screen) if line.strip()]
    assert len(lines) > 2 and all(cell_len(line) <= 80 for line in lines), lines
    # Every word on the screen is a whole word of the piped lines: none was cut in two.
    assert set(" ".join(lines).split()) == set(piped.stdout.split())
    snippet_at = next(i for i, line in enumerate(lines) if line.startswith("    "))
    assert lines[0].startswith("0.") and "[Mileage]" in piped.stdout
    assert all(line.startswith("    ") for line in lines[snippet_at:]), lines
    assert len(lines) - snippet_at > 1  # the snippet did wrap, under its indent

    code, screen = run_in_terminal("search", "报销单", "--mode", "lexical", COLUMNS="80")
    lines = [line for line in screen_lines(screen) if line.strip()]
    assert code == 0 and "差旅.md" in lines[0] and "[报销]" in "".join(lines)
    assert all(cell_len(line) <= 80 for line in lines[1:]) and len(lines) > 2
    assert all(line.startswith("    ") for line in lines[1:]), lines
