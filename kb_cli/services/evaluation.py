"""`kb eval`: a fixed question set run through search, scored per question and overall.

Each question is ranked at the document level (search with one hit per document), so
"rank 2" means the second distinct document, which is what a person reading the
results sees. Expected and forbidden documents are named by filename or document id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kb_cli.app import Kb
from kb_cli.errors import UsageError
from kb_cli.services.search import search


@dataclass
class Question:
    question: str
    expected: list[str]
    forbidden: list[str]


@dataclass
class QuestionResult:
    question: str
    expected: list[str]
    first_expected_rank: int | None
    hit: bool
    forbidden_returned: list[str]
    expected_found: list[str]  # the expected names among the top k

    def to_dict(self) -> dict[str, object]:
        return {
            "question": self.question,
            "expected": self.expected,
            "first_expected_rank": self.first_expected_rank,
            "hit": self.hit,
            "forbidden_returned": self.forbidden_returned,
        }


@dataclass
class EvalSummary:
    questions: int
    k: int
    hit_at_1: float
    hit_at_k: float
    recall_at_k: float
    mrr: float
    forbidden_leaks: int

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def load_questions(path: Path) -> list[Question]:
    """Questions from a JSON Lines file; a bad line is a usage error naming its number."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or "not UTF-8 text"
        raise UsageError(f"cannot read the question file {path.name!r}: {reason}") from None
    questions = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            question = Question(
                str(data["question"]), _names(data["expected"]), _names(data.get("forbidden", []))
            )
        except (ValueError, KeyError, TypeError):
            raise UsageError(
                f"line {number} of {path.name!r} is not "
                '{"question": "...", "expected": ["FILE or ID", ...], "forbidden": [...]}'
            ) from None
        if not question.question.strip() or not question.expected:
            raise UsageError(f"line {number} of {path.name!r} needs a question and an expected")
        questions.append(question)
    if not questions:
        raise UsageError(f"{path.name!r} holds no questions")
    return questions


def _names(value) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise TypeError("a list of strings")
    return value


def evaluate(
    kb: Kb, questions: list[Question], k: int = 3, base: str | None = None
) -> tuple[list[QuestionResult], EvalSummary]:
    """Each question searched as the caller, in the bases the caller may read (or `base`)."""
    results = [_ask(kb, question, k, base) for question in questions]
    count = len(results)
    reciprocal = [1 / r.first_expected_rank if r.first_expected_rank else 0.0 for r in results]
    recall = [
        len(set(r.expected_found)) / len(q.expected)
        for q, r in zip(questions, results, strict=True)
    ]
    summary = EvalSummary(
        questions=count,
        k=k,
        hit_at_1=_rate(sum(r.first_expected_rank == 1 for r in results), count),
        hit_at_k=_rate(sum(r.hit for r in results), count),
        recall_at_k=round(sum(recall) / count, 4),
        mrr=round(sum(reciprocal) / count, 4),
        forbidden_leaks=sum(len(r.forbidden_returned) for r in results),
    )
    return results, summary


def _ask(kb: Kb, question: Question, k: int, base: str | None) -> QuestionResult:
    hits = search(kb, question.question, limit=k, per_document=True, base=base).hits
    # A document answers to its filename and to its id.
    names = [{hit.filename, hit.document_id} for hit in hits]
    rank = next(
        (i for i, found in enumerate(names, 1) if found & set(question.expected)),
        None,
    )
    forbidden = [name for name in question.forbidden if any(name in found for found in names)]
    expected_found = [name for name in question.expected if any(name in found for found in names)]
    return QuestionResult(
        question.question, question.expected, rank, rank is not None, forbidden, expected_found
    )


def _rate(part: int, whole: int) -> float:
    return round(part / whole, 4)
