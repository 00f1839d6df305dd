"""Retrieval quality on public documentation that nobody here wrote.

Each folder under benchmarks/corpora/ holds a documentation set (docs/), its licence
and source (SOURCE.md), and questions.jsonl: questions written as users ask them,
each naming the page(s) that answer it. This script ingests every corpus into a
fresh home of its own (upload, the worker, publish: the real pipeline, in-process),
then asks every question through `kb search` in each configuration and prints, per
corpus and per language, hit@1, hit@3 and MRR side by side, at two levels:

  default       `kb search Q` (hybrid when the chunks have vectors)
  per-document  `kb search Q --per-document`
  lexical       `kb search Q --mode lexical`
  vector        `kb search Q --mode vector`

Document level: a question is a hit at k when a page it names is among the first k
hits, as a person reading the results sees them. Passage level (the questions that
give `answer`, strings written from the answering page): a hit at k when one of the
first k hits' text holds an answer (whitespace runs as one space, case folded), as
`kb eval` scores it. MRR uses the first 10 hits. `--discount X` ranks with another
REPEAT_DISCOUNT (kb_cli/services/search.py), to compare orderings.

Cross-language sets: crosslingual.jsonl holds questions asked in the other language
than their corpus's (English questions over the Chinese pages, `en>zh`; Chinese
questions over the English pages, `zh>en`), document level only; each corpus's home
answers them too, in rows of their own. `--model M` (repeatable: `local`,
`multilingual`, ...; default KB_EMBEDDINGS, else `local`) ingests and asks everything
once per embedding model, each in homes of its own, and ends with the models side by
side (hit@3 of each set and mode).

    uv run python benchmarks/retrieval.py [--corpus NAME ...] [--model M ...] [--json] [--misses]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CORPORA = Path(__file__).resolve().parent / "corpora"
CROSSLINGUAL = Path(__file__).resolve().parent / "crosslingual.jsonl"
K = 3
DEPTH = 10  # hits read for MRR
CONFIGS = {
    "default": {},
    "per-document": {"per_document": True},
    "lexical": {"mode": "lexical"},
    "vector": {"mode": "vector"},
}


@dataclass
class Corpus:
    name: str
    language: str
    pages: list[Path]
    questions: list[dict]


def load_corpora(names: list[str] | None) -> list[Corpus]:
    corpora = []
    for folder in sorted(CORPORA.iterdir()):
        if not (folder / "questions.jsonl").is_file() or (names and folder.name not in names):
            continue
        lines = (folder / "questions.jsonl").read_text(encoding="utf-8").splitlines()
        questions = [json.loads(line) for line in lines if line.strip()]
        language = "zh" if folder.name.endswith("-zh") else "en"
        pages = sorted(path for path in (folder / "docs").iterdir() if path.is_file())
        corpora.append(Corpus(folder.name, language, pages, questions))
    return corpora


def crosslingual(corpus: Corpus) -> tuple[str, list[dict]]:
    """The cross-language set over this corpus's pages: its name (`en>zh`: asked in
    English over Chinese pages) and its questions."""
    asked = "zh" if corpus.language == "en" else "en"
    lines = CROSSLINGUAL.read_text(encoding="utf-8").splitlines()
    questions = [json.loads(line) for line in lines if line.strip()]
    return f"{asked}>{corpus.language}", [q for q in questions if q["corpus"] == corpus.name]


def ingest(corpus: Corpus, home: Path):
    """A home holding the corpus published, through upload, the worker and publish."""
    from kb_cli.app import Kb
    from kb_cli.config import resolve_settings
    from kb_cli.services.documents import publish_document, upload_files
    from kb_cli.worker import Worker, WorkerOptions

    kb = Kb.open(resolve_settings(str(home)), actor="bench")
    documents = upload_files(kb, corpus.pages, submit=True)
    results = list(Worker(kb, WorkerOptions(worker_id="bench")).run(max_tasks=None))
    failed = [r.task for r in results if r.task and r.task.status != "succeeded"]
    if failed:
        raise SystemExit(f"{corpus.name}: {len(failed)} tasks did not succeed: {failed[0]}")
    for task in documents:
        publish_document(kb, task.document_id)
    return kb


def first_ranks(kb, question: dict, config: dict) -> tuple[int | None, int | None]:
    """The 1-based ranks, as the hits are printed, of the first hit from an expected page
    and of the first hit holding an answer (None: not in the first DEPTH, or no answer)."""
    from kb_cli.services.search import search

    hits = search(kb, request(question["question"], config)).hits
    expected = set(question["expected"])
    page = next((rank for rank, hit in enumerate(hits, 1) if hit.filename in expected), None)
    answers = question.get("answer", [])
    answers = [folded(a) for a in ([answers] if isinstance(answers, str) else answers)]
    passage = next(
        (rank for rank, hit in enumerate(hits, 1) if any(a in folded(hit.text) for a in answers)),
        None,
    )
    return page, passage


def request(text: str, config: dict):
    """The search request of a configuration (CONFIGS) for a question."""
    from kb_cli.ranking import SearchMode
    from kb_cli.services.search import SearchRequest

    unknown = set(config) - {"mode", "per_document"}
    if unknown:
        raise ValueError(f"a configuration this benchmark cannot ask for: {sorted(unknown)}")
    mode = config.get("mode")
    return SearchRequest(
        text, DEPTH, SearchMode(mode) if mode else None, config.get("per_document", False)
    )


def folded(text: str) -> str:
    return " ".join(text.split()).casefold()


def score(ranks: list[int | None]) -> dict[str, float]:
    count = len(ranks) or 1
    return {
        "hit@1": sum(rank == 1 for rank in ranks) / count,
        f"hit@{K}": sum(rank is not None and rank <= K for rank in ranks) / count,
        "mrr": sum(1 / rank for rank in ranks if rank) / count,
    }


def evaluate(
    kb, corpus: Corpus, questions: list[dict] | None = None
) -> dict[str, list[int | None]]:
    """Per configuration, the document-level ranks (`name`) and the passage-level ranks
    of the questions that give an answer (`name:passage`); the corpus's own questions
    unless others are given."""
    ranks: dict[str, list[int | None]] = {}
    questions = corpus.questions if questions is None else questions
    answered = [bool(question.get("answer")) for question in questions]
    for name, config in CONFIGS.items():
        pairs = [first_ranks(kb, question, config) for question in questions]
        ranks[name] = [page for page, _passage in pairs]
        ranks[f"{name}:passage"] = [
            passage for (_page, passage), has in zip(pairs, answered, strict=True) if has
        ]
    return ranks


def table(rows: list[tuple[str, str, int, dict[str, list]]]) -> str:
    """One row per corpus (and language): per configuration, documents and passages."""
    head = "| corpus | lang | questions (with answer) | " + " | ".join(
        f"{name}: documents / passages, hit@1 / hit@{K} / MRR" for name in CONFIGS
    )
    lines = [head + " |", "|" + " --- |" * (3 + len(CONFIGS))]
    for corpus, language, count, ranks in rows:
        cells = []
        for name in CONFIGS:
            d, p = score(ranks[name]), score(ranks[f"{name}:passage"])
            passages = f"{p['hit@1']:.2f} / {p[f'hit@{K}']:.2f} / {p['mrr']:.2f}"
            cells.append(
                f"{d['hit@1']:.2f} / {d[f'hit@{K}']:.2f} / {d['mrr']:.2f} ; "
                + (passages if ranks[f"{name}:passage"] else "-")
            )
        answered = len(ranks["default:passage"])
        lines.append(
            f"| {corpus} | {language} | {count} ({answered}) | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def by_language(rows) -> list[tuple[str, str, int, dict[str, list]]]:
    merged: dict[str, dict[str, list]] = {}
    for _corpus, language, _count, ranks in rows:
        into = merged.setdefault(language, {name: [] for name in ranks})
        for name in ranks:
            into[name].extend(ranks[name])
    return [
        (f"**all {language}**", language, len(r["default"]), r) for language, r in merged.items()
    ]


def side_by_side(rows_of: dict[str, list]) -> str:
    """Per question set (a language, or a cross-language set), each model's hit@3 in
    each mode: default / lexical / vector."""
    models = list(rows_of)
    head = "| set | questions | " + " | ".join(
        f"{model}: default / lexical / vector hit@{K}" for model in models
    )
    lines = [head + " |", "|" + " --- |" * (2 + len(models))]
    merged = {model: by_language(rows) for model, rows in rows_of.items()}
    for index, (name, _language, count, _ranks) in enumerate(merged[models[0]]):
        cells = []
        for model in models:
            ranks = merged[model][index][3]
            cells.append(
                " / ".join(
                    f"{score(ranks[mode])[f'hit@{K}']:.2f}"
                    for mode in ("default", "lexical", "vector")
                )
            )
        lines.append(f"| {name} | {count} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", action="append", help="only this corpus (repeatable)")
    parser.add_argument("--json", action="store_true", help="one JSON object per corpus")
    parser.add_argument("--misses", action="store_true", help="list the default's misses")
    parser.add_argument("--keep", type=Path, help="build (or reuse) the homes in this folder")
    parser.add_argument("--discount", type=float, help="rank with this REPEAT_DISCOUNT")
    parser.add_argument(
        "--model", action="append", help="embedding model (KB_EMBEDDINGS value; repeatable)"
    )
    args = parser.parse_args()
    if args.discount is not None:
        from kb_cli.services import search

        search.REPEAT_DISCOUNT = args.discount
    os.environ.setdefault("KB_EMBEDDINGS", "local")
    models = args.model or [os.environ["KB_EMBEDDINGS"]]
    rows_of: dict[str, list] = {}
    with tempfile.TemporaryDirectory(prefix="kb-retrieval-") as scratch:
        root = args.keep or Path(scratch)
        for model in models:
            os.environ["KB_EMBEDDINGS"] = model
            folder = root if args.model is None else root / model
            folder.mkdir(parents=True, exist_ok=True)
            rows_of[model] = run_model(model, folder, load_corpora(args.corpus), args)
    if not args.json:
        for model, rows in rows_of.items():
            if len(models) > 1:
                print(f"\nKB_EMBEDDINGS={model}\n")
            print(table(rows + by_language(rows)))
        print()
        print(side_by_side(rows_of))


def run_model(model: str, root: Path, corpora: list[Corpus], args) -> list:
    """Every corpus ingested (or reopened) with this model, its own questions and its
    cross-language ones asked: one row each."""
    rows = []
    for corpus in corpora:
        home = root / corpus.name
        started = time.perf_counter()
        if (home / "kb.sqlite3").exists():
            from kb_cli.app import Kb
            from kb_cli.config import resolve_settings

            kb = Kb.open(resolve_settings(str(home)), actor="bench")
        else:
            kb = ingest(corpus, home)
        ingested = time.perf_counter() - started
        ranks = evaluate(kb, corpus)
        rows.append((corpus.name, corpus.language, len(corpus.questions), ranks))
        across, questions = crosslingual(corpus)
        cross = evaluate(kb, corpus, questions)
        rows.append((f"{corpus.name} ({across})", across, len(questions), cross))
        if args.json:
            record = {"model": model, "corpus": corpus.name, "language": corpus.language}
            record |= {name: score(r) for name, r in ranks.items()}
            record |= {f"{across} {name}": score(r) for name, r in cross.items()}
            print(json.dumps(record | {"ingest_seconds": round(ingested, 1)}))
        if args.misses:
            asked = [(corpus.questions, ranks), (questions, cross)]
            for each, found in asked:
                for question, rank in zip(each, found["default"], strict=True):
                    if rank is None or rank > K:
                        print(f"miss {model} {corpus.name}: {question['question']} -> {rank}")
            answered = [question for question in corpus.questions if question.get("answer")]
            for question, rank in zip(answered, ranks["default:passage"], strict=True):
                if rank is None or rank > K:
                    print(f"passage miss {model} {corpus.name}: {question['question']} -> {rank}")
    return rows


if __name__ == "__main__":
    main()
