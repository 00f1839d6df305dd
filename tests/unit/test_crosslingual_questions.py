"""benchmarks/crosslingual.jsonl, the questions benchmarks/meaning_models.py asks
across languages: each names a corpus of the retrieval benchmark and pages it holds,
and is asked in the other language than the corpus's pages."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
HAN = re.compile(r"[\u4e00-\u9fff]")


def _questions() -> list[dict]:
    lines = (BENCHMARKS / "crosslingual.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_every_question_names_pages_of_its_corpus_and_crosses_languages():
    directions: Counter[str] = Counter()
    for question in _questions():
        docs = BENCHMARKS / "corpora" / question["corpus"] / "docs"
        assert question["expected"], question
        assert all((docs / page).is_file() for page in question["expected"]), question
        pages_in_chinese = question["corpus"].endswith("-zh")
        asked_in_chinese = bool(HAN.search(question["question"]))
        assert asked_in_chinese != pages_in_chinese, question
        directions["zh>en" if asked_in_chinese else "en>zh"] += 1
    assert directions["en>zh"] >= 20 and directions["zh>en"] >= 20, directions


def test_no_question_is_asked_twice():
    asked = [question["question"] for question in _questions()]
    assert len(asked) == len(set(asked))
