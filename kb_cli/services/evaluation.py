"""`kb eval`: a fixed question set run through search, scored per question and overall.

Each question is ranked at the document level (search with one hit per document), so
"rank 2" means the second distinct document. Expected and forbidden documents are named
by filename or document id. A question that gives `answer` (strings, any of which
answers it) is also ranked at the passage level: the first hit of a plain search, as a
reader sees the list, whose text holds an answer (whitespace and case aside).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from kb_cli.app import Kb
from kb_cli.errors import UsageError
from kb_cli.ranking import normalised
from kb_cli.services.search import MAX_HITS, SearchRequest, search


@dataclass
class Question:
    question: str
    expected: list[str]
    forbidden: list[str]
    answer: list[str] = field(default_factory=list)  # empty: not scored by passage


@dataclass
class QuestionResult:
    question: str
    expected: list[str]
    first_expected_rank: int | None
    hit: bool
    forbidden_returned: list[str]
    expected_found: list[str]  # the expected names among the top k
    # Passage level, when the question gives an answer (else None): the rank of the
    # first hit holding one, whether it is in the top k, and that hit's file.
    answer: list[str] = field(default_factory=list)
    first_answer_rank: int | None = None
    answer_hit: bool | None = None
    answer_filename: str | None = None

    def to_dict(self) -> dict[str, object]:
        record: dict[str, object] = {
            "question": self.question,
            "expected": self.expected,
            "first_expected_rank": self.first_expected_rank,
            "hit": self.hit,
            "forbidden_returned": self.forbidden_returned,
        }
        if self.answer:
            record |= {
                "answer": self.answer,
                "first_answer_rank": self.first_answer_rank,
                "answer_hit": self.answer_hit,
                "answer_filename": self.answer_filename,
            }
        return record


@dataclass
class EvalSummary:
    questions: int
    k: int
    hit_at_1: float
    hit_at_k: float
    recall_at_k: float
    mrr: float
    forbidden_leaks: int
    # Over the questions that give an answer (None when none does).
    passage_questions: int = 0
    passage_hit_at_1: float | None = None
    passage_hit_at_k: float | None = None
    passage_mrr: float | None = None

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
                str(data["question"]),
                _names(data["expected"]),
                _names(data.get("forbidden", [])),
                _answers(data.get("answer", [])),
            )
        except (ValueError, KeyError, TypeError):
            raise UsageError(
                f"line {number} of {path.name!r} is not "
                '{"question": "...", "expected": ["FILE or ID", ...], "forbidden": [...], '
                '"answer": "TEXT" or ["TEXT", ...]}'
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


def _answers(value) -> list[str]:
    """One answer string or a list of them, none blank."""
    answers = _names([value] if isinstance(value, str) else value)
    if not all(answer.strip() for answer in answers):
        raise ValueError("a blank answer")
    return answers


def evaluate(
    kb: Kb, questions: list[Question], k: int = 3, base: str | None = None
) -> tuple[list[QuestionResult], EvalSummary]:
    """Each question searched as the caller, in the bases the caller may read (or `base`)."""
    if not 1 <= k <= MAX_HITS:
        raise UsageError(f"--k must be between 1 and {MAX_HITS}")
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
    answered = [r for r in results if r.answer]
    if answered:
        summary.passage_questions = len(answered)
        summary.passage_hit_at_1 = _rate(
            sum(r.first_answer_rank == 1 for r in answered), len(answered)
        )
        summary.passage_hit_at_k = _rate(sum(bool(r.answer_hit) for r in answered), len(answered))
        summary.passage_mrr = round(
            sum(1 / r.first_answer_rank for r in answered if r.first_answer_rank) / len(answered), 4
        )
    return results, summary


def _ask(kb: Kb, question: Question, k: int, base: str | None) -> QuestionResult:
    hits = search(kb, SearchRequest(question.question, k, per_document=True, base=base)).hits
    # A document answers to its filename and to its id.
    names = [{hit.filename, hit.document_id} for hit in hits]
    rank = next(
        (i for i, found in enumerate(names, 1) if found & set(question.expected)),
        None,
    )
    forbidden = [name for name in question.forbidden if any(name in found for found in names)]
    expected_found = [name for name in question.expected if any(name in found for found in names)]
    result = QuestionResult(
        question.question, question.expected, rank, rank is not None, forbidden, expected_found
    )
    if question.answer:
        _rank_answer(kb, question, k, base, result)
    return result


def _rank_answer(
    kb: Kb, question: Question, k: int, base: str | None, result: QuestionResult
) -> None:
    """The first hit of a plain search (top k, as a reader sees them) that holds an answer."""
    hits = search(kb, SearchRequest(question.question, k, base=base)).hits
    answers = [holds_form(answer) for answer in question.answer]
    rank = next(
        (i for i, hit in enumerate(hits, 1) if any(a in holds_form(hit.text) for a in answers)),
        None,
    )
    result.answer = question.answer
    result.first_answer_rank = rank
    result.answer_hit = rank is not None
    result.answer_filename = hits[rank - 1].filename if rank else None


def holds_form(text: str) -> str:
    """Text as answers are looked for in it: whitespace runs as one space, case folded."""
    return normalised(text).casefold()


def _rate(part: int, whole: int) -> float:
    return round(part / whole, 4)
