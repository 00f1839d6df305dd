"""`kb eval`: a fixed question set run through search, scored per question and overall.

Each question is ranked at the document level (search with one hit per document), so
"rank 2" means the second distinct document. Expected and forbidden documents are named
by filename or document id. A question that gives `answer` (strings, any of which
answers it) is also ranked at the passage level: the first hit of a plain search, as a
reader sees the list, whose text holds an answer (whitespace and case aside).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from kb_cli import queries
from kb_cli.app import Kb
from kb_cli.errors import UsageError
from kb_cli.ranking import normalised
from kb_cli.services.search import MAX_HITS, SearchRequest, main_script, search
from kb_cli.textsearch import script_of

# A question set is read whole before the first question is asked: at most this many
# bytes (some 30,000 questions of the size of the bundled sets' 270 bytes, hours of
# searching) ...
MAX_QUESTIONS_BYTES = 8 * 2**20
# ... each line nesting arrays and objects at most this deep (a question needs 2; Python's
# JSON parser recurses once a level and fails at about a thousand).
MAX_JSON_DEPTH = 32
READ_BLOCK = 1 << 20


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
    # The question's script, then `>` and its expected documents' where theirs differs
    # (`latin`, `cjk`, `latin>cjk`, `cjk>latin`): a cross-language question.
    language: str = ""

    def to_dict(self) -> dict[str, object]:
        record: dict[str, object] = {
            "question": self.question,
            "expected": self.expected,
            "first_expected_rank": self.first_expected_rank,
            "hit": self.hit,
            "forbidden_returned": self.forbidden_returned,
            "language": self.language,
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
    # The same rates per language pair (QuestionResult.language), and the embedding
    # model of each base searched: a cross-language set is read per model.
    by_language: dict[str, dict[str, float]] = field(default_factory=dict)
    models: dict[str, str | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def load_questions(path: Path) -> list[Question]:
    """Questions from a JSON Lines file; a bad line is a usage error naming its number."""
    questions = []
    for number, line in enumerate(_question_text(path).splitlines(), 1):
        if not line.strip():
            continue
        if _nesting(line) > MAX_JSON_DEPTH:
            raise UsageError(
                f"line {number} of {path.name!r} nests arrays and objects more than "
                f"{MAX_JSON_DEPTH} deep; a question needs 2"
            )
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


def _question_text(path: Path) -> str:
    """The text of a question file, which must be a regular file of at most
    MAX_QUESTIONS_BYTES; never more is read. A device (/dev/zero), a FIFO or a folder is
    refused before a byte is read, and is opened without waiting for a writer
    (O_NONBLOCK)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as error:
        raise _unreadable(path, error.strerror) from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(
                f"the question file {path.name!r} is not a regular file (a device, a FIFO or "
                "a folder): give a JSON Lines file"
            )
        if info.st_size > MAX_QUESTIONS_BYTES:
            raise _too_large(path)
        blocks, left = [], MAX_QUESTIONS_BYTES + 1  # a file that grows meanwhile is cut too
        while left and (block := os.read(descriptor, min(left, READ_BLOCK))):
            blocks.append(block)
            left -= len(block)
    except OSError as error:
        raise _unreadable(path, error.strerror) from None
    finally:
        os.close(descriptor)
    if not left:
        raise _too_large(path)
    try:
        return b"".join(blocks).decode("utf-8")
    except UnicodeDecodeError:
        raise _unreadable(path, "not UTF-8 text") from None


def _unreadable(path: Path, reason: str | None) -> UsageError:
    return UsageError(f"cannot read the question file {path.name!r}: {reason}")


def _too_large(path: Path) -> UsageError:
    return UsageError(
        f"the question file {path.name!r} is larger than {MAX_QUESTIONS_BYTES // 2**20} MiB: "
        "split it into several sets"
    )


# A JSON string, escapes and all (unrolled: one pass, no backtracking).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _nesting(line: str) -> int:
    """How deep the arrays and objects of a JSON line nest, its strings left out:
    counted before json.loads, which recurses once a level."""
    brackets = _NOT_A_BRACKET.sub("", _JSON_STRING.sub("", line))
    return max(itertools.accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


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
    _tell_languages(kb, base, results)
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
    summary.by_language = {
        language: _rates([r for r in results if r.language == language])
        for language in sorted({r.language for r in results})
    }
    summary.models = _models(kb, base)
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


# Published passages of an expected document read to tell its language, at most.
LANGUAGE_SAMPLE = 20


def _tell_languages(kb: Kb, base: str | None, results: list[QuestionResult]) -> None:
    """Each result's language pair: the question's script, and its expected documents'
    (the script most of their passages are in) where it differs."""
    written: dict[str, str | None] = {}
    scope = kb.actor.scope(base)
    with kb.db.read() as conn:
        for result in results:
            asked = script_of(result.question)
            for name in result.expected:
                if name not in written:
                    texts = queries.published_texts_named(conn, scope, name, LANGUAGE_SAMPLE)
                    written[name] = main_script(texts)
            scripts = sorted({written[name] or asked for name in result.expected} - {asked})
            result.language = f"{asked}>{scripts[0]}" if scripts else asked


def _rates(results: list[QuestionResult]) -> dict[str, float]:
    count = len(results)
    reciprocal = sum(1 / r.first_expected_rank for r in results if r.first_expected_rank)
    return {
        "questions": count,
        "hit_at_1": _rate(sum(r.first_expected_rank == 1 for r in results), count),
        "hit_at_k": _rate(sum(r.hit for r in results), count),
        "mrr": round(reciprocal / count, 4),
    }


def _models(kb: Kb, base: str | None) -> dict[str, str | None]:
    """The embedding model of each base searched (None: its model is `none`)."""
    with kb.db.read() as conn:
        providers = kb.models_in(conn, kb.actor.scope(base))
    named: dict[str, str | None] = {}
    for provider, bases in providers.items():
        embedder = kb.embedder_for(provider)
        named |= dict.fromkeys(bases, embedder.model if embedder is not None else None)
    return dict(sorted(named.items()))


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
