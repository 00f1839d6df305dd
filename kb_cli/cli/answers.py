"""Search and its evaluation: `kb search`, `kb eval`."""

from pathlib import Path
from typing import Annotated

import typer

from kb_cli import console
from kb_cli.cli.shared import BaseOption, JsonFlag, WhereOption, finite_number, open_kb
from kb_cli.permissions import READERS, SEARCH, Rule, Target
from kb_cli.ranking import SearchMode


def search(
    ctx: typer.Context,
    query: Annotated[
        str,
        typer.Argument(
            metavar="QUERY", help='A question or words; a "quoted phrase" must match exactly.'
        ),
    ],
    limit: Annotated[
        int, typer.Option("--limit", metavar="K", min=1, help="Print at most K hits.")
    ] = 10,
    mode: Annotated[
        SearchMode | None,
        typer.Option(
            "--mode",
            metavar="MODE",
            help="The ranking: lexical (words, BM25), vector (meaning), or hybrid (both "
            "fused; the default when the chunks have vectors).",
            show_default=False,
        ),
    ] = None,
    per_document: Annotated[
        bool,
        typer.Option("--per-document", help="Print one hit per document: its best chunk."),
    ] = False,
    context: Annotated[
        int,
        typer.Option(
            "--context",
            metavar="N",
            help="Merge each hit with up to N (0-10) neighbouring chunks of its section on "
            "each side (a passage for a language model); the record names its chunk range.",
        ),
    ] = 0,
    base: BaseOption = None,
    where: WhereOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Search published documents, best hit first. Questions are ranked, not filtered.

    Examples: kb search "How do I reset my VPN password?"; kb search 出差报销 --per-document;
    kb search "invoice retention" --context 1 --json; kb search "on-call" --where path^=runbooks/
    """
    from kb_cli import metadata
    from kb_cli.services import search as search_service

    filters = metadata.parse_where(where or [])
    kb = open_kb(ctx, SEARCH, base)
    request = search_service.SearchRequest(
        query, limit, mode, per_document=per_document, base=base, context=context, where=filters
    )
    console.print_search(search_service.search(kb, request), json_out)


EVAL = Rule("eval", READERS, Target.BASE)


def eval_command(
    ctx: typer.Context,
    questions_file: Annotated[
        Path,
        typer.Argument(
            metavar="QUESTIONS_FILE",
            help='A JSON Lines file, one {"question": ..., "expected": [FILE or ID, ...], '
            '"forbidden": [...]} per line.',
        ),
    ],
    k: Annotated[
        int,
        typer.Option("--k", metavar="K", min=1, help="How many hits count as found (hit@K)."),
    ] = 3,
    min_hit_rate: Annotated[
        float | None,
        typer.Option(
            "--min-hit-rate",
            metavar="X",
            min=0,
            max=1,
            callback=finite_number,
            help="Exit 4 when hit@K is below X (a rate from 0 to 1).",
        ),
    ] = None,
    min_passage_hit_rate: Annotated[
        float | None,
        typer.Option(
            "--min-passage-hit-rate",
            metavar="X",
            min=0,
            max=1,
            callback=finite_number,
            help="Exit 4 when the passage hit@K (questions with an answer) is below X.",
        ),
    ] = None,
    base: BaseOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Score search on a fixed question set: hit@1, hit@k, recall@k, MRR, leaks.

    Each question is searched as the caller, one hit per document; a question that
    gives "answer" is also scored by passage (a hit among the top K holding it). Exits 4
    when hit@k is below --min-hit-rate, the passage hit@k below --min-passage-hit-rate,
    or any forbidden document was returned.

    Example: kb eval sample_docs/knowledge/questions.jsonl --k 3 --min-hit-rate 0.9
    """
    from kb_cli.errors import QualityBelowThreshold, UsageError
    from kb_cli.services import evaluation

    questions = evaluation.load_questions(questions_file)
    if min_passage_hit_rate is not None and not any(q.answer for q in questions):
        raise UsageError(
            '--min-passage-hit-rate needs questions that give an "answer"; '
            f"none in {questions_file.name!r} does"
        )
    results, summary = evaluation.evaluate(
        open_kb(ctx, EVAL, base, create=False), questions, k, base
    )
    if json_out:
        console.print_records([*results, summary], True)
    else:
        console.print_eval(results, summary)
    if summary.forbidden_leaks:
        raise QualityBelowThreshold(f"{summary.forbidden_leaks} forbidden document(s) returned")
    if min_hit_rate is not None and summary.hit_at_k < min_hit_rate:
        raise QualityBelowThreshold(
            f"hit@{k} {summary.hit_at_k:.2f} is below --min-hit-rate {min_hit_rate:g}"
        )
    passage = summary.passage_hit_at_k
    if min_passage_hit_rate is not None and passage is not None and passage < min_passage_hit_rate:
        raise QualityBelowThreshold(
            f"passage hit@{k} {passage:.2f} is below --min-passage-hit-rate "
            f"{min_passage_hit_rate:g}"
        )
