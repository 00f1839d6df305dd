"""Search over published revisions only, in English and Chinese alike."""

from __future__ import annotations

import re
from dataclasses import dataclass

from kb_cli import queries
from kb_cli.errors import UsageError
from kb_cli.records import SearchHit
from kb_cli.services.context import Kb

# Scripts written without spaces between words: matched as substrings, not words.
_UNSPACED = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TERM = re.compile(rf"[{_UNSPACED}]+|[^\W_{_UNSPACED}]+")
TRIGRAM = 3


@dataclass(frozen=True)
class SearchPlan:
    words: list[str]  # spaced-script words: the stemmed word index
    trigrams: list[str]  # unspaced runs of 3+ characters: the trigram index
    substrings: list[str]  # unspaced runs of 1-2 characters: LIKE on the text

    @property
    def empty(self) -> bool:
        return not (self.words or self.trigrams or self.substrings)


def plan_query(query: str) -> SearchPlan:
    """Split a query into terms; punctuation and FTS operators are dropped, never run."""
    words, trigrams, substrings = [], [], []
    for term in _TERM.findall(query):
        if re.match(rf"[{_UNSPACED}]", term):
            (trigrams if len(term) >= TRIGRAM else substrings).append(term)
        else:
            words.append(term)
    return SearchPlan(words, trigrams, substrings)


def search(kb: Kb, query: str, limit: int = 10) -> list[SearchHit]:
    if not query.strip():
        raise UsageError("the search query is empty")
    plan = plan_query(query)
    if plan.empty:
        return []  # only punctuation or operators: nothing that could match
    with kb.db.read() as conn:
        rows = queries.search_published_chunks(
            conn, plan.words, plan.trigrams, plan.substrings, limit
        )
    return [
        SearchHit(
            document_id=row.document_id,
            filename=row.filename,
            revision=row.revision,
            chunk_index=row.chunk_index,
            score=round(float(row.score), 6),
            text=row.text,
            page=row.page,
            heading=row.heading,
            snippet=row.snippet or _snippet(row.text, plan.trigrams + plan.substrings),
        )
        for row in rows
    ]


def _snippet(text: str, terms: list[str], width: int = 60) -> str:
    """The text around the first term, with the term marked as FTS5 snippets are."""
    position = min((text.find(term) for term in terms if term in text), default=-1)
    if position < 0:
        return text[: 2 * width]
    term = next(term for term in terms if text.find(term) == position)
    start, end = max(0, position - width), position + len(term) + width
    before = ("…" if start else "") + text[start:position]
    after = text[position + len(term) : end] + ("…" if end < len(text) else "")
    return f"{before}[{term}]{after}"
