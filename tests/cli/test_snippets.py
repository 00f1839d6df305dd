"""`kb search` marks the words the lexical index matched in each hit's snippet: whole
words with their stemmed forms, Chinese words as segmented, never letters inside words
or stopwords."""

from __future__ import annotations

import re

from kb_cli.stopwords import is_stopword
from tests.helpers import hits, ingest, publish

ENGLISH = (
    "# Business Travel Policy\n\n"
    "Mileage for a work trip is paid per kilometre. Booking needs approval first. "
    "Engineering splits the other costs of business trips.\n"
)
CHINESE = "# 差旅报销制度\n\n员工出差回来后十五天内提交报销单。社会议题不在此列。\n"


def marks(hit: dict) -> list[str]:
    return re.findall(r"\[([^\]]*)\]", hit["snippet"])


def test_search_marks_whole_matched_words_in_english_and_chinese(invoke, tmp_path):
    for name, text in (("travel.md", ENGLISH), ("差旅.md", CHINESE)):
        publish(invoke, ingest(invoke, tmp_path, name, text)["document_id"])

    [english] = [
        h for h in hits(invoke, "mileage for a business trip?") if h["filename"] == "travel.md"
    ]
    words = set(re.findall(r"\w+", english["text"]))
    assert {"Mileage", "trip"} <= set(marks(english))
    # The heading the hit names is not its snippet's first line again.
    assert english["heading"] == "Business Travel Policy"
    assert "Travel Policy" not in english["snippet"]
    assert all(mark in words and not is_stopword(mark) for mark in marks(english))
    assert set(marks(english)) <= {"Mileage", "trip", "trips", "Business", "business"}

    [engineering] = hits(invoke, "engineer")
    assert marks(engineering) == ["Engineering"]

    [chinese] = [h for h in hits(invoke, "出差报销单怎么提交") if h["filename"] == "差旅.md"]
    assert set(marks(chinese)) == {"出差", "报销", "提交"}
    # 社会议题 is 社会|议题: the index holds no 会议, and a hit by meaning marks none.
    assert invoke("search", "会议", "--mode", "lexical").stdout == ""
    assert all("会议" not in marks(hit) for hit in hits(invoke, "会议"))


def test_a_snippet_does_not_repeat_the_heading_its_hit_names(invoke, tmp_path):
    text = "# Travel\n\n## Meals\n\nMeals during travel are paid up to 50 euros a day.\n"
    publish(invoke, ingest(invoke, tmp_path, "travel.md", text)["document_id"])
    [meals] = [hit for hit in hits(invoke, "meals") if hit["heading"] == "Meals"]
    assert meals["snippet"] == "[Meals] during travel are paid up to 50 euros a day."
    assert meals["text"].startswith("Meals\nMeals during")  # the chunk itself is whole
