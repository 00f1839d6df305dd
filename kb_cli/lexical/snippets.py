"""A hit's snippet: about two lines of its text around what the words index matched,
each match marked [like this], found the index's way: whole words by the index's own
stemmer (Engineering for "engineer"), Chinese words as its search mode segments them;
never a letter inside a word, a single letter or a stopword.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from dataclasses import dataclass

from kb_cli.stopwords import is_stopword
from kb_cli.textsearch import TOKENIZER, UNSPACED, UNSPACED_RUN, Query, chinese_words


def snippet(text: str, query: Query, heading: str | None = None, width: int = 60) -> str:
    """About `2 * width` characters of `text` around its matched query words, each
    marked [like this]: the passage with the most distinct matched words, cut at word
    boundaries. Nothing matched (a hit of the meaning ranking): the text's start. A
    first line that is the chunk's `heading` is left out: the hit shows it already."""
    text = _without_heading(text, heading)
    spans = matched_spans(text, query)
    if not spans:
        end = _word_end(text, min(len(text), 2 * width), floor=0)
        return text[:end] + ("…" if end < len(text) else "")
    anchor = _anchor(spans, 2 * width)
    start = _word_start(text, max(0, anchor.start - width // 3), ceiling=anchor.start)
    start = min([start] + [span.start for span in spans if span.start < start < span.end])
    shown = [span for span in spans if start <= span.start < start + 2 * width]
    end = _word_end(text, max(start + 2 * width, shown[-1].end), floor=shown[-1].end)
    parts, at = ["…" if start else ""], start
    for span in shown:
        parts += [text[at : span.start], "[", text[span.start : span.end], "]"]
        at = span.end
    parts += [text[at:end], "…" if end < len(text) else ""]
    return "".join(parts)


def _without_heading(text: str, heading: str | None) -> str:
    first, newline, rest = text.partition("\n")
    if heading and newline and rest.strip() and first.strip() == heading.strip():
        return rest.lstrip("\n")
    return text


@dataclass(frozen=True)
class Span:
    """Where `text` holds query words: `keys` names which (stems, Chinese words, phrases)."""

    start: int
    end: int
    keys: frozenset[str]


def marked_terms(query: Query) -> list[str]:
    """The query words a snippet marks: never a stopword nor a single letter or digit,
    even when the query ranks by them (a question made only of such words)."""
    return [
        term
        for term in query.terms
        if not is_stopword(term) and (len(term) > 1 or bool(UNSPACED_RUN.match(term)))
    ]


def matched_spans(text: str, query: Query) -> list[Span]:
    """The places the lexical index matched the query in `text`, in order, overlaps
    merged: whole words whose stem is a query word's stem (Engineering for "engineer",
    never the "s" in Business), Chinese words as the index segments them (报销 in 报销单,
    never 会议 across 社会/议题), and quoted phrases as they are written."""
    terms = marked_terms(query)
    latin = [term for term in terms if not UNSPACED_RUN.search(term)]
    unspaced = {term for term in terms if UNSPACED_RUN.search(term)}
    spans = _phrase_spans(text, query.phrases) + _latin_spans(text, latin)
    if unspaced:
        spans += _unspaced_spans(text, unspaced)
    return _merged(spans)


def _phrase_spans(text: str, phrases: list[str]) -> list[Span]:
    """Each phrase where it stands as written; a Latin end is a word's end ("the" is
    not marked inside "other", which the phrase filter's LIKE would accept)."""
    spans = []
    for phrase in phrases:
        pattern = r"\s+".join(re.escape(word) for word in phrase.split())
        if _LATIN_WORD.match(phrase[0]):
            pattern = r"(?<![^\W_])" + pattern
        if _LATIN_WORD.match(phrase[-1]):
            pattern += r"(?![^\W_])"
        for match in re.finditer(pattern, text, re.IGNORECASE):
            spans.append(Span(match.start(), match.end(), frozenset({f'"{phrase.lower()}"'})))
    return spans


_LATIN_WORD = re.compile(rf"[^\W_{UNSPACED}]+")


def _latin_spans(text: str, terms: list[str]) -> list[Span]:
    if not terms:
        return []
    tokens = list(_LATIN_WORD.finditer(text))
    stems = _STEMMER.stems([*terms, *(token.group() for token in tokens)])
    wanted = {stems[term] for term in terms} - {""}
    return [
        Span(token.start(), token.end(), frozenset({stem}))
        for token in tokens
        if (stem := stems[token.group()]) in wanted and not is_stopword(token.group())
    ]


def _unspaced_spans(text: str, terms: set[str]) -> list[Span]:
    """Words of each Chinese (kana, Hangul) run as the index stores them: jieba's search
    mode, whose words overlap (知识, 知识库)."""
    spans = []
    for run in UNSPACED_RUN.finditer(text):
        for word, start, end in chinese_words().tokenize(run.group(), mode="search"):
            if word in terms:
                spans.append(Span(run.start() + start, run.start() + end, frozenset({word})))
    return spans


def _merged(spans: list[Span]) -> list[Span]:
    merged: list[Span] = []
    for span in sorted(spans, key=lambda span: (span.start, -span.end)):
        if merged and span.start < merged[-1].end:
            last = merged.pop()
            span = Span(last.start, max(last.end, span.end), last.keys | span.keys)
        merged.append(span)
    return merged


def _anchor(spans: list[Span], length: int) -> Span:
    """The first span of the passage of `length` characters with the most distinct
    matched words (the earliest of equals)."""

    def distinct(first: Span) -> int:
        inside = (span.keys for span in spans if first.start <= span.start < first.start + length)
        return len(frozenset().union(*inside))

    return max(spans, key=lambda span: (distinct(span), -span.start))


def _inside_word(text: str, at: int) -> bool:
    """True when `at` falls between two letters of one spaced (Latin) word."""
    return 0 < at < len(text) and all(_LATIN_WORD.fullmatch(text[i]) for i in (at - 1, at))


def _word_start(text: str, at: int, ceiling: int) -> int:
    """`at`, moved forward out of a word it would cut, never past `ceiling`."""
    while at < ceiling and _inside_word(text, at):
        at += 1
    return at


def _word_end(text: str, at: int, floor: int) -> int:
    """`at`, moved back out of a word it would cut, never before `floor`."""
    while at > floor and _inside_word(text, at):
        at -= 1
    return at


class _Stemmer:
    """English words as the SQLite index stores them, by the index's own tokenizer
    (lower case, accents dropped, Porter stems) in an in-memory database: the snippet
    marks what the index matched. (PostgreSQL's Snowball stems differ in rare words.)"""

    _LIMIT = 100_000  # words remembered

    def __init__(self) -> None:
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    def stems(self, words: list[str]) -> dict[str, str]:
        with self._lock:
            unknown = [word for word in dict.fromkeys(words) if word not in self._known]
            if unknown:
                if len(self._known) > self._LIMIT:
                    self._known.clear()
                self._known.update(self._tokenize(unknown))
            return {word: self._known.get(word, "") for word in words}

    def _tokenize(self, words: list[str]) -> dict[str, str]:
        if self._conn is None:
            self._conn = sqlite3.connect(":memory:", check_same_thread=False)
            self._conn.execute(f"CREATE VIRTUAL TABLE w USING fts5(word, tokenize='{TOKENIZER}')")
            self._conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(w, instance)")
        self._conn.execute("DELETE FROM w")
        self._conn.executemany("INSERT INTO w (rowid, word) VALUES (?, ?)", enumerate(words))
        found = dict.fromkeys(words, "")
        for row, stem in self._conn.execute("SELECT doc, term FROM v"):
            found[words[row]] = stem
        return found


_STEMMER = _Stemmer()
