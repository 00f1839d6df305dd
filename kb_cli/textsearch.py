"""Words for the lexical index and for queries, English and Chinese alike.

The full-text index (FTS5 on SQLite, tsvector on PostgreSQL) splits text at spaces
and punctuation, which finds English words but turns a Chinese sentence into one
unsplittable token. So every chunk is also stored as `terms`: its text with each run
of Chinese characters segmented into words by jieba (rjieba) in search mode, which
emits a long word and the shorter words inside it (知识库 -> 知识, 知识库), so a query
word of one, two or more characters matches. A query is segmented in accurate mode:
one reading of the sentence, so that a question's words do not count twice.

rjieba loads its dictionary on import (~0.1 s); it is imported only for text that
holds Chinese characters.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

from kb_cli.stopwords import is_stopword

# Scripts written without spaces between words.
UNSPACED = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_UNSPACED_RUN = re.compile(f"[{UNSPACED}]+")
# Chinese characters (Han), as distinct from kana and Hangul, which jieba cuts one
# character at a time: a lone Hangul syllable can be a whole word's part of a query.
_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_WORD = re.compile(rf"[{UNSPACED}]+|[^\W_]+")
_PHRASE = re.compile(r'"([^"]*)"|“([^”]*)”|「([^」]*)」')


@functools.cache
def _jieba() -> tuple[Callable[[str], list[str]], Callable[[str], list[str]]]:
    import rjieba

    return rjieba.cut, rjieba.cut_for_search


def index_terms(text: str) -> str:
    """The chunk's text for the lexical index: Chinese runs as space-separated words."""
    if not _UNSPACED_RUN.search(text):
        return text
    _cut, cut_for_search = _jieba()
    return _UNSPACED_RUN.sub(lambda run: " " + " ".join(cut_for_search(run.group())) + " ", text)


_INDEX_TOKEN = re.compile(r"[^\W_]+")


def count_words(terms: str) -> int:
    """Length of indexed text in words, as the index tokenizer counts them (for BM25)."""
    return len(_INDEX_TOKEN.findall(terms))


def words(text: str) -> list[str]:
    """Words of a query or a phrase, in order: Latin words as the index tokenizer sees
    them (letters and digits; punctuation splits), Chinese runs in accurate mode."""
    found: list[str] = []
    for token in _WORD.findall(text):
        if _UNSPACED_RUN.fullmatch(token):
            cut, _cut_for_search = _jieba()
            found.extend(cut(token))
        else:
            found.append(token)
    return found


def script_of(text: str) -> str:
    """cjk when the text has Chinese characters (a Chinese question that names Spring
    Boot is still Chinese), else latin."""
    return "cjk" if _HAN.search(text) else "latin"


@dataclass(frozen=True)
class Query:
    """A search query: words to rank by, phrases every hit must contain verbatim."""

    terms: list[str]
    phrases: list[str]

    @property
    def empty(self) -> bool:
        return not self.terms and not self.phrases


def _is_lone_chinese(word: str) -> bool:
    """jieba keeps a question's content words whole (超时, 日志级别), so a Chinese
    character it leaves single is mostly a particle or a generic verb (看, 改, 加);
    not ranking them lifted Chinese hit@3 on both benchmark corpora."""
    return len(word) == 1 and bool(_HAN.match(word))


def parse_query(text: str) -> Query:
    """Quoted phrases ("...", “...”, 「...」) must match exactly; every other word
    ranks, except lone Chinese characters and stopwords (kb_cli/stopwords.py): these
    rank only when the query has nothing else, lone characters first. Operators and
    punctuation are plain text, never query syntax."""
    phrases = [next(filter(None, groups)) for groups in _PHRASE.findall(text)]
    phrases = [" ".join(phrase.split()) for phrase in phrases if phrase.strip()]
    loose = words(_PHRASE.sub(" ", text))
    phrase_words = [word for phrase in phrases for word in words(phrase)]
    meaningful = [word for word in loose if not is_stopword(word)]
    topical = [word for word in meaningful if not _is_lone_chinese(word)]
    ranking = topical or meaningful or ([] if phrase_words else loose)
    terms = list(dict.fromkeys(ranking + phrase_words))
    return Query(terms, phrases)


def snippet(text: str, needles: list[str], width: int = 60) -> str:
    """The text around the first needle found (case-insensitive), marked [like this]. A
    Latin needle matches at the start of a word and marks the whole word (a search for
    "engineer" marks [Engineering], never the "s" inside Bu-s-iness); Chinese ones
    match anywhere."""
    found = [match for needle in needles if needle and (match := _find(text, needle))]
    if not found:  # the index matched a stem (policies -> policy): try the word's start
        stems = [n[: max(4, len(n) - 3)] for n in needles if not _UNSPACED_RUN.search(n)]
        found = [match for stem in stems if (match := _find(text, stem))]
    if not found:
        return text[: 2 * width]
    position, end_of_match = min(found, key=lambda span: (span[0], -span[1]))
    start, end = max(0, position - width), end_of_match + width
    before = ("…" if start else "") + text[start:position]
    after = text[end_of_match:end] + ("…" if end < len(text) else "")
    return f"{before}[{text[position:end_of_match]}]{after}"


def _find(text: str, needle: str) -> tuple[int, int] | None:
    """(start, end) of the first place `needle` stands in `text`, as `snippet` marks it."""
    if _UNSPACED_RUN.search(needle):
        position = text.lower().find(needle.lower())
        return (position, position + len(needle)) if position >= 0 else None
    match = re.search(rf"(?<![^\W_]){re.escape(needle)}[^\W_]*", text, re.IGNORECASE)
    return match.span() if match else None
