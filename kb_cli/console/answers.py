"""Search hits and the scores of `kb eval`."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

from kb_cli.console.core import (
    counted,
    emit,
    is_fancy,
    log_wrapped,
    quoted,
    rich_console,
    visible,
    warn,
    write_json_lines,
)
from kb_cli.records import SearchHit

if TYPE_CHECKING:
    from kb_cli.services.evaluation import EvalSummary, QuestionResult
    from kb_cli.services.search import SearchResult


def search_line(hit: SearchHit) -> str:
    return f"{hit.score:.3f} {_where(hit)}\n{SNIPPET_INDENT}{_snippet(hit)}"


SNIPPET_INDENT = "    "
_MARK = re.compile(r"\[[^\[\]]+\]")


def _where(hit: SearchHit) -> str:
    """File, revision, chunk, page, heading and ranks of a hit, space separated."""
    place = f" page={hit.page}" if hit.page else ""
    if hit.page and hit.page_end:
        place = f" pages={hit.page}-{hit.page_end}"
    place += f" heading={quoted(hit.heading)}" if hit.heading else ""
    ranks = "".join(
        f" {name}#{rank}"
        for name, rank in (("words", hit.lexical_rank), ("meaning", hit.vector_rank))
        if rank is not None
    )
    chunks = f" chunks={hit.passage[0]}-{hit.passage[1]}" if hit.passage else ""
    copies = ",".join(visible(copy.filename) for copy in hit.also_in)
    also = f" also_in={quoted(copies)}" if copies else ""
    return (
        f"{visible(hit.filename)} rev={hit.revision} chunk={hit.chunk_index}{place}{ranks}"
        f"{chunks}{also}"
    )


def _snippet(hit: SearchHit) -> str:
    return visible(" ".join(hit.snippet.split()))


def print_search(result: SearchResult, as_json: bool) -> None:
    for warning in result.warnings:
        warn(warning)
    if result.hits and not as_json and is_fancy(sys.stdout):
        _print_hits_on_terminal(result.hits)
    elif as_json:
        write_json_lines(result.hits)
    else:
        for hit in result.hits:
            emit(search_line(hit))
    if not as_json and is_fancy(sys.stderr):
        for message in [
            *([result.nothing_because] if result.nothing_because else []),
            *result.hints,
        ]:
            log_wrapped(message)


def print_eval(results: list[QuestionResult], summary: EvalSummary) -> None:
    """One line per question (rank of the first expected document), then the scores."""
    for result in results:
        rank = f"#{result.first_expected_rank}" if result.first_expected_rank else "miss"
        leak = f"  LEAK {_names(result.forbidden_returned)}" if result.forbidden_returned else ""
        answer = ""
        if result.answer:
            found = f"#{result.first_answer_rank}" if result.first_answer_rank else "miss"
            answer = f"  answer {found}"
        question = visible(result.question)
        emit(f"{rank:>4}  {question}  -> {_names(result.expected)}{answer}{leak}")
    emit(
        f"{summary.questions} questions, k={summary.k}: hit@1 {summary.hit_at_1:.2f}  "
        f"hit@{summary.k} {summary.hit_at_k:.2f}  recall@{summary.k} {summary.recall_at_k:.2f}  "
        f"MRR {summary.mrr:.2f}  forbidden returned {summary.forbidden_leaks}"
    )
    if summary.passage_questions:
        emit(
            f"passages ({summary.passage_questions} questions with an answer): "
            f"hit@1 {summary.passage_hit_at_1:.2f}  hit@{summary.k} "
            f"{summary.passage_hit_at_k:.2f}  MRR {summary.passage_mrr:.2f}"
        )
    if len(summary.by_language) > 1:  # a cross-language set, or two languages
        rates = [
            f"{language} ({counted(int(r['questions']), 'question')}) hit@{summary.k} "
            f"{r['hit_at_k']:.2f}"
            for language, r in summary.by_language.items()
        ]
        emit(f"by language: {', '.join(rates)}")
    if len(set(summary.models.values())) > 1:
        emit("models: " + ", ".join(f"{b}={m or 'none'}" for b, m in summary.models.items()))


def _names(names: list[str]) -> str:
    return ", ".join(visible(name) for name in names)


def _print_hits_on_terminal(hits: list[SearchHit]) -> None:
    """Each hit as its plain lines, wrapped to the terminal between words: the header
    under itself after the score, the snippet under its indent, matched words bold."""
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    console = rich_console()
    for hit in hits:
        header = Table.grid(padding=(0, 1))
        header.add_column(no_wrap=True)
        header.add_column(overflow="fold")
        header.add_row(Text(f"{hit.score:.3f}", style="bold"), Text(_where(hit), style="cyan"))
        snippet = Text(_snippet(hit), overflow="fold")
        for mark in _MARK.finditer(snippet.plain):
            snippet.stylize("bold yellow", mark.start(), mark.end())
        console.print(header)
        console.print(Padding(snippet, (0, 0, 0, len(SNIPPET_INDENT))))
