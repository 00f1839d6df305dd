"""Words for the lexical index and for queries, English and Chinese alike.

The full-text index (FTS5 on SQLite, tsvector on PostgreSQL) splits text at spaces
and punctuation, which finds English words but turns a Chinese sentence into one
unsplittable token. So every chunk is also stored as `terms`: its text with each run
of Chinese characters segmented into words by jieba (rjieba) in search mode, which
emits a long word and the shorter words inside it (知识库 -> 知识, 知识库), so a query
word of one, two or more characters matches. A query is segmented in accurate mode:
one reading of the sentence, so that a question's words do not count twice.

A hit's snippet, which marks what the index matched, is kb_cli/lexical/snippets.py's.

rjieba loads its dictionary on import (~0.1 s); it is imported only for text that
holds Chinese characters.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from types import ModuleType

from kb_cli.stopwords import is_stopword

# Scripts written without spaces between words.
UNSPACED = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
UNSPACED_RUN = re.compile(f"[{UNSPACED}]+")
# Chinese characters (Han), as distinct from kana and Hangul, which jieba cuts one
# character at a time: a lone Hangul syllable can be a whole word's part of a query.
_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_WORD = re.compile(rf"[{UNSPACED}]+|[^\W_]+")
# The lexical index's tokenizer (SQLite FTS5; migration 0004 names the same).
TOKENIZER = "porter unicode61 remove_diacritics 2"
_PHRASE = re.compile(r'"([^"]*)"|“([^”]*)”|「([^」]*)」')
# Control characters separate words, as spaces do: no indexed text holds one (and
# PostgreSQL refuses a NUL in any parameter).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


@functools.cache
def chinese_words() -> ModuleType:
    """rjieba, loaded at its first use (its dictionary takes ~0.1 s)."""
    import rjieba

    return rjieba


def index_terms(text: str) -> str:
    """The chunk's text for the lexical index: Chinese runs as space-separated words."""
    if not UNSPACED_RUN.search(text):
        return text
    cut_for_search = chinese_words().cut_for_search
    return UNSPACED_RUN.sub(lambda run: " " + " ".join(cut_for_search(run.group())) + " ", text)


_INDEX_TOKEN = re.compile(r"[^\W_]+")


def count_words(terms: str) -> int:
    """Length of indexed text in words, as the index tokenizer counts them (for BM25)."""
    return len(_INDEX_TOKEN.findall(terms))


def words(text: str) -> list[str]:
    """Words of a query or a phrase, in order: Latin words as the index tokenizer sees
    them (letters and digits; punctuation splits), Chinese runs in accurate mode."""
    found: list[str] = []
    for token in _WORD.findall(text):
        if UNSPACED_RUN.fullmatch(token):
            found.extend(chinese_words().cut(token))
        else:
            found.append(token)
    return found


def script_of(text: str) -> str:
    """cjk when the text has Chinese characters (a Chinese question that names Spring
    Boot is still Chinese), else latin."""
    return "cjk" if _HAN.search(text) else "latin"


# Letters of a word of a latin script, on average: a Chinese character counts as a word.
LETTERS_PER_WORD = 5


def script_of_passage(text: str) -> str:
    """cjk when Chinese characters are at least half the passage's words (each
    character counted as a word), else latin: an English page that quotes a Chinese
    name stays English, a Chinese page that names English terms stays Chinese."""
    han = len(_HAN.findall(text))
    if not han:
        return "latin"
    other_letters = sum(1 for char in text if char.isalpha()) - han
    return "cjk" if han >= other_letters / LETTERS_PER_WORD else "latin"


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
    text = _CONTROL.sub(" ", text)
    # One group of each match holds the phrase (the others are ""); an empty or blank
    # phrase ("", “ ”) asks for nothing and is dropped.
    phrases = ["".join(groups) for groups in _PHRASE.findall(text)]
    phrases = [" ".join(phrase.split()) for phrase in phrases if phrase.strip()]
    loose = words(_PHRASE.sub(" ", text))
    phrase_words = [word for phrase in phrases for word in words(phrase)]
    meaningful = [word for word in loose if not is_stopword(word)]
    topical = [word for word in meaningful if not _is_lone_chinese(word)]
    ranking = topical or meaningful or ([] if phrase_words else loose)
    terms = list(dict.fromkeys(ranking + phrase_words))
    return Query(terms, phrases)
