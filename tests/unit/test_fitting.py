"""Fitting names and lines into a terminal's columns, and what the command line accepts
beyond the contract: pure functions, no terminal."""

from __future__ import annotations

from typing import Annotated

import pytest
import typer
from rich.cells import cell_len

from kb_cli.cli import commandline
from kb_cli.cli.shared import Globals, Invocation
from kb_cli.console.core import counted, cut_name, cut_names


@pytest.mark.parametrize("width", [8, 12, 20, 40])
def test_a_cut_name_fits_and_keeps_its_start_and_its_extension(width):
    name = "Quarterly report for the board of directors, final version 2026.pdf"
    cut = cut_name(name, width)
    assert cell_len(cut) <= width and "…" in cut
    assert cut.startswith(name[:2]) and cut.endswith(name[-(width // 3) :])


def test_a_name_that_fits_is_not_cut():
    assert cut_name("a.md", 4) == "a.md"
    assert cut_name("员工手册.md", 11) == "员工手册.md"


def test_chinese_names_are_cut_by_cells_not_characters():
    cut = cut_name("员工手册（二零二六年版）.md", 12)
    assert cell_len(cut) <= 12 and cut.startswith("员工") and cut.endswith(".md")


def test_names_cut_alike_are_told_apart_where_the_width_allows():
    names = [
        "big-manual-part-one-2024.pdf",
        "big-manual-part-two-2024.pdf",
        "big-manual.pdf",
        "big-manual.docx",
    ]
    for width in (12, 14, 20):
        cuts = cut_names(names, width)
        assert len(set(cuts.values())) == len(names), cuts
        assert all(cell_len(cut) <= width for cut in cuts.values())


@pytest.mark.parametrize("width", [12, 15, 17])
def test_names_alike_at_both_ends_show_the_middle_where_they_differ(width):
    """14 files read `r…-password.pdf` when only the start and the end were kept."""
    people = ["alice", "bob", "carol-smith", "dave", "eve-long-name", "frank", "al", "alf"]
    names = [f"reset-{who}-password.pdf" for who in people]
    names += ["team-a-content.docx", "team-b-content.docx"]
    cuts = cut_names(names, width)
    assert len(set(cuts.values())) == len(names), cuts
    assert all(cell_len(cut) <= width for cut in cuts.values())


def test_counts_agree_with_their_nouns():
    assert [counted(n, "document") for n in (0, 1, 2)] == [
        "0 documents",
        "1 document",
        "2 documents",
    ]


def _toy_app(seen: dict) -> typer.Typer:
    """A root with the real global options' names, one command that has its own
    --home, one that has none, and a help paragraph written over two lines."""
    app = typer.Typer()

    @app.callback()
    def root(
        ctx: typer.Context,
        home: Annotated[str | None, typer.Option("--home")] = None,
        database_url: Annotated[str | None, typer.Option("--database-url")] = None,
        object_store: Annotated[str | None, typer.Option("--object-store")] = None,
    ) -> None:
        ctx.obj.options = Globals(home, database_url, object_store)

    @app.command()
    def plain(ctx: typer.Context) -> None:
        """First line.

        A paragraph written
        over two lines.
        """
        seen["plain"] = ctx.find_root().obj.options

    @app.command()
    def own(ctx: typer.Context, home: Annotated[str, typer.Option("--home")] = "") -> None:
        seen["own"] = (home, ctx.find_root().obj.options)

    return app


def _run(app: typer.Typer, *args: str) -> None:
    commandline.build(app).main(list(args), standalone_mode=False, obj=Invocation())


def test_global_options_after_the_command_beat_those_before_it():
    seen: dict = {}
    _run(_toy_app(seen), "--home", "before", "plain", "--home", "after", "--object-store", "o")
    assert seen["plain"] == Globals("after", None, "o")


def test_a_commands_own_option_of_the_same_name_is_its_own():
    seen: dict = {}
    _run(_toy_app(seen), "--home", "global", "own", "--home", "mine")
    assert seen["own"] == ("mine", Globals("global", None, None))


def test_help_paragraphs_are_one_line_each_so_the_terminal_wraps_them():
    command = commandline.build(_toy_app({}))
    assert command.commands["plain"].help == "First line.\n\nA paragraph written over two lines."
