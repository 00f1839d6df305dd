"""Ranking arithmetic, free of the database: BM25, vector similarity, Reciprocal Rank
Fusion, one hit per document, repeats discounted, copies taken out of each ranking."""

from __future__ import annotations

import dataclasses
import heapq
import math
import re
import string
import zlib
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


class SearchMode(StrEnum):
    HYBRID = "hybrid"  # both rankings, fused
    LEXICAL = "lexical"  # words: BM25
    VECTOR = "vector"  # meaning: embedding similarity


class Ranking(StrEnum):
    """The rankings search fuses, each from an index of its own."""

    LEXICAL = "lexical"  # words: BM25 (kb_cli/lexical/)
    VECTOR = "vector"  # meaning: embedding similarity (kb_cli/vectors/)


RRF_K = 60  # the constant of Cormack et al.; damps the weight of the very first ranks
BM25_K1, BM25_B = 1.2, 0.75  # SQLite FTS5's bm25() constants, on both engines

Scored = tuple[int, float]  # (chunk id, score) of one ranking, best first


@dataclass(frozen=True, slots=True)
class Hit:
    """A chunk as search orders it: its score, and its 1-based rank in each ranking
    that returned it (in the order the rankings were fused)."""

    chunk: int
    score: float
    ranks: Mapping[Ranking, int] = field(hash=False)  # never changed once made

    def rank(self, ranking: Ranking) -> int | None:
        """Its rank in `ranking`; None when that ranking did not return it."""
        return self.ranks.get(ranking)


@dataclass(frozen=True)
class Corpus:
    """What BM25 counts: the chunks a caller may search, and nothing else, so that
    documents outside the caller's scope (or not published) never shift a score."""

    chunks: int
    mean_length: float
    frequency: dict[str, int]  # term: how many of those chunks contain it


def bm25(corpus: Corpus, matches: Iterable[tuple[int, str, int, int]]) -> dict[int, float]:
    """Chunk id: BM25 score, from (chunk id, term, occurrences, chunk length) rows; the
    same formula as FTS5's bm25() (an idf floor of 1e-6 instead of negative weights)."""
    mean_length = max(corpus.mean_length, 1.0)
    weight = {term: idf(corpus.chunks, df) for term, df in corpus.frequency.items()}
    scores: dict[int, float] = defaultdict(float)
    for chunk, term, tf, length in matches:
        norm = BM25_K1 * (1 - BM25_B + BM25_B * length / mean_length)
        scores[chunk] += weight[term] * tf * (BM25_K1 + 1) / (tf + norm)
    return scores


def idf(chunks: int, holding: float) -> float:
    """A word's weight: FTS5's, floored at 1e-6 where a word in most chunks would weigh
    less than nothing."""
    return max(math.log((chunks - holding + 0.5) / (holding + 0.5)), 1e-6)


def best_scored(scores: dict[int, float], limit: int) -> list[Scored]:
    """The `limit` best, ties by chunk id."""
    return heapq.nsmallest(
        limit,
        ((chunk, score) for chunk, score in scores.items()),
        key=lambda item: (-item[1], item[0]),
    )


def top_similar(
    chunk_ids: list[int], matrix: np.ndarray, query: np.ndarray, floor: float, limit: int
) -> list[Scored]:
    """The `limit` rows most similar to `query` (unit vectors: dot = cosine), at or
    above `floor`, best first; ties by chunk id."""
    import numpy as np

    similarities = matrix @ query.astype(np.float32)
    above = np.flatnonzero(similarities >= floor)
    if above.size > limit:
        above = above[np.argpartition(-similarities[above], limit - 1)[:limit]]
    ranked = sorted(
        ((chunk_ids[i], float(similarities[i])) for i in above),
        key=lambda item: (-item[1], item[0]),
    )
    return ranked


def single(ranking: Ranking, scored: list[Scored]) -> list[Hit]:
    """One ranking's results as hits, its rank filled in."""
    return [Hit(chunk, score, {ranking: rank}) for rank, (chunk, score) in enumerate(scored, 1)]


# A ranking's chunks, best first, and its weight in the fusion. One ranking may come in
# several parts: the meaning ranking of each embedding model that embeds some of the
# bases searched.
Part = tuple[Ranking, list[Scored], float]


def fuse(parts: Sequence[Part], k: int = RRF_K) -> list[Hit]:
    """Weighted Reciprocal Rank Fusion of the parts: a chunk scores the sum of weight /
    (k + its rank in the part) over the parts that returned it, each in the order given;
    its rank in a ranking of several parts is its best. (A group of copies in two bases
    of two models is returned by both parts: each adds its share.) Ties by the best of
    its ranks, then by chunk id."""
    ranks: dict[int, dict[Ranking, int]] = defaultdict(dict)
    scores: dict[int, float] = defaultdict(float)
    for ranking, scored, weight in parts:
        for rank, (chunk, _score) in enumerate(scored, 1):
            ranks[chunk][ranking] = min(rank, ranks[chunk].get(ranking, rank))
            scores[chunk] += weight / (k + rank)
    hits = [Hit(chunk, scores[chunk], held) for chunk, held in ranks.items()]
    hits.sort(key=lambda hit: (-hit.score, min(hit.ranks.values()), hit.chunk))
    return hits


def best_per_document(hits: list[Hit], document_of: Callable[[int], Hashable]) -> list[Hit]:
    """The first (best) hit of each document, in order."""
    seen: set[Hashable] = set()
    best = []
    for hit in hits:
        document = document_of(hit.chunk)
        if document not in seen:
            seen.add(document)
            best.append(hit)
    return best


def discount_repeats(
    hits: list[Hit], document_of: Callable[[int], Hashable], factor: float, head: int = 0
) -> list[Hit]:
    """The hits re-scored and re-sorted: a document's n-th hit (in its own order) scores
    its score times factor ** (n - 1), so a page's later chunks yield to other pages'
    close ones without ever passing above a better score. The discount is the score
    that is printed: scores never rise down the list. The first `head` hits (a
    reranker's, whose scores are on another scale) stay before the rest, each part
    sorted on its own."""
    counts: dict[Hashable, int] = defaultdict(int)
    discounted = []
    for order, hit in enumerate(hits):
        document = document_of(hit.chunk)
        score = hit.score * factor ** counts[document]
        counts[document] += 1
        discounted.append((order >= head, -score, order, dataclasses.replace(hit, score=score)))
    discounted.sort(key=lambda item: item[:3])
    return [item[3] for item in discounted]


def distinct_rankings(
    rankings: Sequence[list[Scored]], text_of: Callable[[int], str], limit: int
) -> tuple[list[list[Scored]], dict[int, list[int]]]:
    """Each ranking with copies taken out before its ranks are counted, at most `limit`
    each, and for each chunk kept the chunk ids of its copies. A copy is the same text
    once runs of whitespace are one space, or nearly the same (a module kept in several
    versions, a page edited in one line). Counted after the copies, a text held by
    eight documents takes one rank, not eight, and the texts below it rise. A group of
    copies is named by its member ranked best (the rankings walked rank by rank, the
    first ranking first at each rank), in every ranking, so the fusion scores it once;
    its place in a ranking is that of its best member there."""
    holder_of: dict[int, int] = {}  # chunk: the chunk that names its group
    first_of: dict[str, int] = {}  # normalised text: the chunk that names it
    near = NearCopies()
    copies: dict[int, list[int]] = defaultdict(list)

    def holder(chunk: int) -> int:
        if chunk not in holder_of:
            text = text_of(chunk)
            key = normalised(text)
            named = first_of.get(key)
            if named is None:
                named = near.copied_or_added(text, chunk)
            if named is None:
                first_of[key] = named = chunk
            else:
                copies[named].append(chunk)
            holder_of[chunk] = named
        return holder_of[chunk]

    kept: list[list[Scored]] = [[] for _ranking in rankings]
    taken: list[set[int]] = [set() for _ranking in rankings]
    for position in range(max(map(len, rankings), default=0)):
        for ranking, into, held in zip(rankings, kept, taken, strict=True):
            if position < len(ranking) and len(into) < limit:
                chunk, score = ranking[position]
                named = holder(chunk)
                if named not in held:
                    held.add(named)
                    into.append((named, score))
    return kept, dict(copies)


def named_in_shown_documents(
    hits: list[Hit], copies: dict[int, list[int]], document_of: Callable[[int], Hashable]
) -> tuple[list[Hit], dict[int, list[int]]]:
    """The hits, each named by its copy in a document an earlier hit comes from when it
    has one (else as it was), and the copies of each: a page held by two documents then
    shows as one document's chunks, not as halves of both (a passage around each half
    would repeat the same text)."""
    shown: set[Hashable] = set()
    named, named_copies = [], {}
    for hit in hits:
        members = [hit.chunk, *copies.get(hit.chunk, [])]
        chosen = next((m for m in members if document_of(m) in shown), hit.chunk)
        shown.add(document_of(chosen))
        named.append(dataclasses.replace(hit, chunk=chosen))
        others = [member for member in members if member != chosen]
        if others:
            named_copies[chosen] = others
    return named, named_copies


NEAR_COPY = 0.7  # share of word shingles two texts hold in common (Jaccard) to be copies
SHINGLE_WORDS = 5
_SHINGLE_TOKEN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\W_]+")


def shingles(text: str) -> frozenset[int]:
    """A sample of the text's runs of SHINGLE_WORDS words (case folded; a Chinese
    character counts as a word), each as a stable hash: about one in four, chosen by
    the hash, so two texts keep the same sample of what they share. A text too short
    for a sample of 4 keeps all of its runs."""
    codes = _word_codes(text)
    codes += [0] * (SHINGLE_WORDS - len(codes))  # a text shorter than a run is one run
    # A tuple of ints hashes the same in every process (unlike text).
    runs = set(map(hash, zip(codes, codes[1:], codes[2:], codes[3:], codes[4:], strict=False)))
    sample = frozenset(run for run in runs if run % 4 == 0)
    return sample if len(sample) >= 4 else frozenset(runs)


# Every byte but a lowercase ASCII letter or digit, as a space.
_ASCII_SEPARATORS = bytes(
    byte if chr(byte) in string.ascii_lowercase + string.digits else ord(" ") for byte in range(256)
)


def _word_codes(text: str) -> list[int]:
    """The crc32 of each word: an ASCII text split by bytes.translate, five times
    faster than the regular expression, which a search for copies spent most of its
    time in (~200 µs a chunk)."""
    if text.isascii():
        words = text.lower().encode().translate(_ASCII_SEPARATORS).split()
    else:
        words = [token.encode() for token in _SHINGLE_TOKEN.findall(text.casefold())]
    return list(map(zlib.crc32, words))


class NearCopies:
    """Texts seen so far, found again by their shingles: a text is a near copy of the
    first earlier one whose shingles it shares at NEAR_COPY (Jaccard) or more."""

    def __init__(self) -> None:
        self._sets: list[tuple[frozenset[int], int]] = []
        self._holders: dict[int, list[int]] = defaultdict(list)  # shingle: its texts

    def copied_or_added(self, text: str, label: int) -> int | None:
        """The label of the text this one nearly copies; None (and this text is kept
        under `label`) when there is none."""
        mine = shingles(text)
        candidates = {held for run in mine for held in self._holders.get(run, ())}
        for position in sorted(candidates):
            theirs, earlier = self._sets[position]
            shared = len(mine & theirs)
            if shared >= NEAR_COPY * (len(mine) + len(theirs) - shared):
                return earlier
        position = len(self._sets)
        self._sets.append((mine, label))
        for run in mine:
            self._holders[run].append(position)
        return None


def normalised(text: str) -> str:
    """Text compared as a reader sees it: whitespace runs as one space, no ends."""
    return " ".join(text.split())


def rerank(hits: list[Hit], scores: list[float]) -> list[Hit]:
    """The first len(scores) hits reordered by those scores (which become their score),
    best first, ties in their previous order; the rest follow unchanged."""
    head = sorted(
        (dataclasses.replace(hit, score=score) for hit, score in zip(hits, scores, strict=False)),
        key=lambda hit: -hit.score,
    )
    return head + hits[len(scores) :]
