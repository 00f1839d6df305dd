"""Snippets mark what the lexical index matched: whole words by their stem, Chinese
words as jieba segments them, quoted phrases; never a letter inside a word, a single
letter or a stopword."""

from __future__ import annotations

import re

from kb_cli.lexical.snippets import snippet
from kb_cli.textsearch import parse_query

POLICY = (
    "Business Travel Policy: mileage for trips. Engineering splits the other costs. "
    "Approval before Booking is needed for a business trip."
)
CHINESE = "出差回来后十五天内提交报销单。知识库的社会议题要在会议上讨论。"


def marks(text: str, question: str) -> list[str]:
    return re.findall(r"\[([^\]]*)\]", snippet(text, parse_query(question)))


def test_english_marks_whole_words_with_their_stemmed_forms():
    assert marks(POLICY, "What is the mileage for a work trip?") == ["mileage", "trips"]
    assert marks(POLICY, "engineer") == ["Engineering"]  # not [Engineer]ing
    assert marks(POLICY, "policies approvals") == ["Policy", "Approval"]
    assert marks("Café rules: the cafe opens at 8.", "CAFE") == ["Café", "cafe"]


def test_single_letters_and_stopwords_are_never_marked():
    # Questions made only of such words still rank by them; nothing is marked.
    for question in ("s", "a", "i", "the other", "What is it?", "o"):
        assert marks(POLICY, question) == [], question
    assert "o[the]r" not in snippet(POLICY, parse_query("the"))
    # An all-caps query word names something (IT); the stopword "it" is not that.
    assert marks("IT support: ask it twice.", "IT desk") == ["IT"]


def test_a_word_that_only_starts_like_a_query_word_is_not_marked():
    assert marks("The article covers art history.", "art") == ["art"]  # not [art]icle
    assert marks("Bus stops and Business hours.", "bus") == ["Bus"]


def test_chinese_marks_the_words_jieba_segments_never_across_words():
    assert marks(CHINESE, "报销") == ["报销"]  # a word inside 报销单, as the index has it
    assert marks(CHINESE, "会议") == ["会议"]  # not the 会议 across 社会|议题
    assert "社会议题" in snippet(CHINESE, parse_query("会议"))
    assert marks(CHINESE, "知识库") == ["知识库"]
    assert marks(CHINESE, "怎么提交报销单") == ["提交", "报销"]  # 怎么 is a stopword
    assert marks(CHINESE, "的") == []


def test_quoted_phrases_are_marked_as_written_never_inside_a_word():
    assert marks(POLICY, '"other costs" engineer') == ["Engineering", "other costs"]
    assert marks("Mother and the other one", '"the"') == ["the"]  # not Mo[the]r, o[the]r
    assert marks("报销单提交", '"报销"') == ["报销"]


def test_the_snippet_shows_the_passage_with_most_query_words_cut_at_word_boundaries():
    text = " ".join(f"filler{i}" for i in range(60)) + " " + POLICY * 2
    shown = snippet(text, parse_query("approval booking trip"))
    assert marks(text, "approval booking trip") == ["trips", "Approval", "Booking", "trip"]
    assert shown.startswith("…") and shown.endswith("…")
    words = set(re.findall(r"\w+", text))
    assert all(word in words for word in re.findall(r"\w+", shown))  # no cut words


def test_without_a_match_the_snippet_is_the_start_of_the_text_cut_at_a_word():
    text = " ".join(f"word{i}" for i in range(100))
    shown = snippet(text, parse_query("nothing here"))
    assert shown.startswith("word0 ") and shown.endswith("…")
    assert shown[:-1].split()[-1] in text.split()
