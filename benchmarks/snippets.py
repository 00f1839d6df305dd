"""What search snippets mark, on the public corpora of `retrieval.py`: the snippet of
`kb_cli.textsearch` against the one it replaced (kept below as the reference).

For the first 3 hits of every question (default mode), each implementation's snippet
is checked: marks the lexical index did not match (a word whose stem is no query
word's stem, a stopword, a single letter, a Chinese string that is not one of the
words jieba's search mode cuts, i.e. what the index holds), snippets with no mark
although the index matched a word of the chunk, snippets that cut a word at either
end, and the time per snippet.

    uv run python benchmarks/snippets.py [--corpus NAME ...]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from retrieval import ingest, load_corpora

from kb_cli import textsearch
from kb_cli.lexical import snippets
from kb_cli.stopwords import is_stopword

MARK = re.compile(r"\[([^\[\]]+)\]")
LATIN = snippets._LATIN_WORD  # a letter or digit of a spaced script


def reference_snippet(text: str, needles: list[str], width: int = 60) -> str:
    """main's snippet before this change: the first needle found from a word's start."""

    def find(needle: str) -> tuple[int, int] | None:
        if textsearch.UNSPACED_RUN.search(needle):
            position = text.lower().find(needle.lower())
            return (position, position + len(needle)) if position >= 0 else None
        match = re.search(rf"(?<![^\W_]){re.escape(needle)}[^\W_]*", text, re.IGNORECASE)
        return match.span() if match else None

    found = [match for needle in needles if needle and (match := find(needle))]
    if not found:
        stems = [n[: max(4, len(n) - 3)] for n in needles if not textsearch.UNSPACED_RUN.search(n)]
        found = [match for stem in stems if (match := find(stem))]
    if not found:
        return text[: 2 * width]
    position, end_of_match = min(found, key=lambda span: (span[0], -span[1]))
    start, end = max(0, position - width), end_of_match + width
    before = ("…" if start else "") + text[start:position]
    after = text[end_of_match:end] + ("…" if end < len(text) else "")
    return f"{before}[{text[position:end_of_match]}]{after}"


def index_matched(mark: str, query: textsearch.Query) -> bool:
    """Whether the lexical index matched `mark` for this query (a phrase, a word by its
    stem, a Chinese word of the query)."""
    if any(mark.lower() == phrase.lower() for phrase in query.phrases):
        return True
    if is_stopword(mark) or (len(mark) == 1 and not textsearch.UNSPACED_RUN.match(mark)):
        return False
    if textsearch.UNSPACED_RUN.fullmatch(mark):
        return mark in query.terms
    stems = snippets._STEMMER.stems([mark, *query.terms])
    return stems[mark] in {stems[term] for term in query.terms}


def cuts_a_word(shown: str, text: str) -> bool:
    plain = MARK.sub(lambda m: m.group(1), shown)
    body = plain.removeprefix("…").removesuffix("…")
    at = text.find(body)
    if at < 0:
        return False
    end = at + len(body)
    return any(
        0 < i < len(text) and LATIN.fullmatch(text[i - 1]) and LATIN.fullmatch(text[i])
        for i in (at, end)
    )


def measure(kb, questions: list[dict]) -> dict[str, dict[str, float]]:
    from kb_cli.services.search import SearchRequest, search

    counts: dict[str, dict[str, float]] = {
        name: {
            "snippets": 0,
            "marks": 0,
            "unmatched marks": 0,
            "no mark": 0,
            "cut words": 0,
            "µs": 0,
        }
        for name in ("before", "now")
    }
    for question in questions:
        query = textsearch.parse_query(question["question"])
        needles = query.phrases + sorted(query.terms, key=len, reverse=True)
        for hit in search(kb, SearchRequest(question["question"], 3)).hits:
            # Brackets of the text (Markdown links, lists) would read as marks.
            text = hit.text.replace("[", "(").replace("]", ")")
            matched = bool(snippets.matched_spans(text, query))
            for name, make, argument in (
                ("before", reference_snippet, needles),
                ("now", snippets.snippet, query),
            ):
                started = time.perf_counter()
                shown = make(text, argument)
                counts[name]["µs"] += (time.perf_counter() - started) * 1e6
                marks = MARK.findall(shown)
                row = counts[name]
                row["snippets"] += 1
                row["marks"] += len(marks)
                row["unmatched marks"] += sum(not index_matched(m, query) for m in marks)
                row["no mark"] += matched and not marks
                row["cut words"] += cuts_a_word(shown, text)
    for row in counts.values():
        row["µs"] = round(row["µs"] / max(row["snippets"], 1))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append")
    args = parser.parse_args()
    print(
        "| corpus | snippet | snippets | marks | marks the index did not match | "
        "no mark (index matched) | cut a word | µs per snippet |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for corpus in load_corpora(args.corpus):
        with tempfile.TemporaryDirectory() as home:
            kb = ingest(corpus, Path(home))
            for name, row in measure(kb, corpus.questions).items():
                values = " | ".join(str(int(value)) for value in row.values())
                print(f"| {corpus.name} | {name} | {values} |")
            kb.db.close()


if __name__ == "__main__":
    main()
