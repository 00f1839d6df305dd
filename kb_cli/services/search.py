"""Search over published revisions only: BM25 over words, vector similarity, or both
fused by Reciprocal Rank Fusion (hybrid, the default when the chunks have vectors)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from kb_cli import queries
from kb_cli.app import Kb, require_base
from kb_cli.chunking import contextual_text, merge_passage
from kb_cli.errors import ProviderRejected, ProviderUnavailable, UsageError
from kb_cli.metadata import MetaFilter
from kb_cli.permissions import Scope
from kb_cli.ranking import (
    Hit,
    Scored,
    SearchMode,
    best_per_document,
    discount_repeats,
    distinct_rankings,
    fuse,
    named_in_shown_documents,
    normalised,
    rerank,
    single,
)
from kb_cli.records import SearchHit
from kb_cli.textsearch import Query, parse_query, script_of, snippet

MODES = tuple(SearchMode)
# Each ranking offers this many candidates (or three times the limit) to the fusion.
CANDIDATES = 50
# Each ranking is asked for this many times its candidates, whose copies are taken out
# before ranks are counted: in a big base one module kept in eight versions would
# otherwise fill eight places of fifty, and the pages that answer fall out of the list.
COPIES_DEPTH = 4
# A document's n-th hit scores its score times this to the power n - 1 (the printed
# score): three chunks of one page yield to another page's close second without ever
# passing above a better score. Chosen on benchmarks/retrieval.py at passage level.
REPEAT_DISCOUNT = 0.97
MAX_CONTEXT = 10  # --context: neighbours on each side
# Bounds on what reaches SQL: each term and phrase is a parameter of one statement.
MAX_QUERY_CHARS = 10_000
MAX_QUERY_TERMS = 200
MAX_QUERY_PHRASES = 20


@dataclass
class SearchResult:
    hits: list[SearchHit]
    mode: str  # the ranking that ran (hybrid falls back to lexical without vectors)
    warnings: list[str] = field(default_factory=list)


def search(
    kb: Kb,
    text: str,
    limit: int = 10,
    mode: str | None = None,
    per_document: bool = False,
    base: str | None = None,
    context: int = 0,
    where: tuple[MetaFilter, ...] = (),
) -> SearchResult:
    """Ranks published chunks of the bases the caller may read (narrowed to `base`);
    the scope is part of every candidate query, so it is decided before any scoring.
    The fused candidates are reranked when a reranker is configured; `context` merges
    each hit with up to that many neighbouring chunks of its section on each side."""
    if not text.strip():
        raise UsageError("the search query is empty")
    if mode is not None and mode not in MODES:
        raise UsageError(f"unknown --mode {mode!r}; one of: {', '.join(MODES)}")
    if len(text) > MAX_QUERY_CHARS:
        raise UsageError(f"the search query is longer than {MAX_QUERY_CHARS} characters")
    if not 0 <= context <= MAX_CONTEXT:
        raise UsageError(f"--context must be between 0 and {MAX_CONTEXT}")
    query = parse_query(text)
    if len(query.phrases) > MAX_QUERY_PHRASES:
        raise UsageError(f"the search query has more than {MAX_QUERY_PHRASES} quoted phrases")
    if query.empty:  # only punctuation or operators: nothing that could match
        return SearchResult([], mode or "lexical")
    embedder = kb.embedder
    if mode in ("hybrid", "vector") and embedder is None:
        raise UsageError(f"--mode {mode} needs embeddings, which are off (KB_EMBEDDINGS=none)")
    depth = max(CANDIDATES, 3 * limit) * (3 if per_document else 1)
    result = SearchResult([], mode or "hybrid")
    # Metadata filters are part of the scope: every candidate query applies them.
    scope = dataclasses.replace(kb.actor.scope(base), where=where)
    if len(query.terms) > MAX_QUERY_TERMS:
        result.warnings.append(
            f"the query has {len(query.terms)} distinct words; ranked by the first "
            f"{MAX_QUERY_TERMS}"
        )
        query = Query(query.terms[:MAX_QUERY_TERMS], query.phrases)
    with kb.db.read() as conn:
        if base is not None:
            require_base(conn, scope, base)
        if mode is None and (
            embedder is None or not queries.has_published_vectors(conn, embedder.model, scope)
        ):
            result.mode = "lexical"
        lexical, vector, weight = _rankings(kb, conn, text, query, depth, scope, result)
        # On PostgreSQL each statement reads what is committed when it starts: a chunk
        # deleted since the ranking read it is not shown.
        details = queries.chunk_details(conn, list({c for c, _s in lexical + vector}))
        (lexical, vector), copied = distinct_rankings(
            [[item for item in ranking if item[0] in details] for ranking in (lexical, vector)],
            lambda chunk_id: details[chunk_id].text,
            depth,
        )

        def document_of(chunk_id: int) -> str:
            return details[chunk_id].document_id

        ranked = _fused(result.mode, lexical, vector, weight)
        ranked, copied = named_in_shown_documents(ranked, copied, document_of)
        copies = {chunk: [details[c] for c in others] for chunk, others in copied.items()}
        ranked, reranked = _reranked(kb, text, ranked, details, result)
        if per_document:
            ranked = best_per_document(ranked, document_of)
        else:
            ranked = discount_repeats(ranked, document_of, REPEAT_DISCOUNT, reranked)
        shown = [(details[hit[0]], hit, copies.get(hit[0], [])) for hit in ranked]
        result.hits = _hits(conn, shown, limit, query, context)
    return result


def _rankings(
    kb: Kb, conn, text: str, query: Query, depth: int, scope: Scope, result: SearchResult
) -> tuple[list[Scored], list[Scored], float]:
    """The words ranking, the meaning ranking, or both, each COPIES_DEPTH times `depth`
    deep, and the meaning ranking's weight in the fusion. A meaning ranking that counts
    for nothing in the fusion (weight 0) is only asked when words found none."""
    weight = 0.0
    embedder = kb.embedder
    if result.mode == "hybrid" and embedder is not None:  # hybrid needs an embedder
        configured = kb.settings.vector_weight
        weight = embedder.fusion_weight[script_of(text)] if configured is None else configured
    asked = depth * COPIES_DEPTH
    lexical: list[Scored] = []
    if result.mode != "vector" and query.terms:
        lexical = queries.lexical_ranking(conn, query.terms, query.phrases, asked, scope)
    vector: list[Scored] = []
    if result.mode == "vector" or (result.mode == "hybrid" and (weight > 0 or not lexical)):
        vector = _vector_ranking(kb, conn, text, query, asked, scope, result)
    return lexical, vector, weight


def _fused(mode: str, lexical: list[Scored], vector: list[Scored], weight: float) -> list[Hit]:
    """Both rankings fused (hybrid), or the one that ran as hits."""
    if mode == "hybrid":
        return fuse(lexical, vector, weight)
    return single(lexical, lexical=True) if lexical else single(vector, lexical=False)


def _reranked(
    kb: Kb, text: str, ranked: list[Hit], details, result: SearchResult
) -> tuple[list[Hit], int]:
    """The first KB_RERANK_DEPTH candidates in the reranker's order, and how many it
    scored; a reranker that fails leaves the order as it was, with a warning."""
    reranker = kb.reranker
    if reranker is None or not ranked:
        return ranked, 0
    head = ranked[: kb.settings.rerank.depth]
    passages = [contextual_text(details[hit[0]].context, details[hit[0]].text) for hit in head]
    try:
        scores = reranker.rerank(text, passages)
    except (ProviderUnavailable, ProviderRejected) as error:
        result.warnings.append(f"{error.message}; results are not reranked")
        return ranked, 0
    return rerank(ranked, scores), min(len(scores), len(head))


def _vector_ranking(
    kb, conn, text: str, query: Query, depth: int, scope: Scope, result: SearchResult
):
    """Published chunks embedded by the configured model, most similar first, above
    the similarity floor. A provider that fails turns hybrid into lexical, with a
    warning; `--mode vector` reports the failure."""
    embedder = kb.embedder
    try:
        query_vector = embedder.embed_query(text)
    except (ProviderUnavailable, ProviderRejected) as error:
        if result.mode == "vector":
            raise
        result.mode = "lexical"
        result.warnings.append(f"{error.message}; searched by words only")
        return []
    ranked = kb.vectors.nearest(
        conn, embedder.model, query_vector, depth, scope, kb.settings.vector_floor
    )
    if query.phrases:
        containing = queries.phrase_chunk_ids(conn, query.phrases, scope)
        ranked = [item for item in ranked if item[0] in containing]
    return ranked


def _hits(
    conn,
    ranked: list[tuple[queries.ChunkDetail, Hit, list[queries.ChunkDetail]]],
    limit: int,
    query: Query,
    context: int,
) -> list[SearchHit]:
    """The first `limit` hits, each naming the other documents that hold its text; with
    `context`, each a passage of chunks no earlier passage holds (a hit inside an
    earlier passage is left out: it would repeat it). A hit whose snippet lies within an
    earlier hit's neighbouring chunk (the overlap chunks repeat) is left out too."""
    hits: list[SearchHit] = []
    covered: set[tuple[str, int, int]] = set()  # (document, revision, chunk index)
    shown: dict[tuple[str, int, int], str] = {}  # the same key: the text shown
    for row, (_chunk, score, lexical_rank, vector_rank), copies in ranked:
        if len(hits) == limit:
            break
        if (row.document_id, row.revision, row.chunk_index) in covered:
            continue
        hit = _hit(row, score, lexical_rank, vector_rank, query, copies)
        if _repeats_a_neighbour(hit, shown):
            continue
        if context:
            passage = _passage(conn, row, context, covered)
            hit.text = merge_passage([chunk.text for chunk in passage])
            hit.passage = (passage[0].chunk_index, passage[-1].chunk_index)
            covered |= {(row.document_id, row.revision, c.chunk_index) for c in passage}
        shown[(row.document_id, row.revision, row.chunk_index)] = hit.text
        hits.append(hit)
    return hits


def _repeats_a_neighbour(hit: SearchHit, shown: dict[tuple[str, int, int], str]) -> bool:
    """Whether the hit's snippet (its marks and cuts taken out) is part of the text of a
    hit already shown from the chunk before or after it: the sentence both hold."""
    if "[" not in hit.snippet:  # no words matched (a meaning hit): no sentence to compare
        return False
    sentence = normalised(hit.snippet.replace("[", "").replace("]", "").strip("…"))
    for step in (-1, 1):
        neighbour = shown.get((hit.document_id, hit.revision, hit.chunk_index + step))
        if neighbour is not None and sentence and sentence in normalised(neighbour):
            return True
    return False


def _hit(
    row, score: float, lexical_rank, vector_rank, query: Query, copies: list[queries.ChunkDetail]
) -> SearchHit:
    also_in: dict[str, str] = {}
    for copy in copies:
        if copy.document_id != row.document_id:
            also_in.setdefault(copy.document_id, copy.filename)
    return SearchHit(
        document_id=row.document_id,
        base=row.base,
        filename=row.filename,
        revision=row.revision,
        chunk_index=row.chunk_index,
        score=round(score, 6),
        text=row.text,
        lexical_rank=lexical_rank,
        vector_rank=vector_rank,
        page=row.page,
        heading=row.heading,
        snippet=snippet(row.text, query),
        content_type=row.content_type,
        also_in=[{"document_id": key, "filename": name} for key, name in also_in.items()],
    )


def _passage(
    conn, row: queries.ChunkDetail, context: int, covered: set[tuple[str, int, int]]
) -> Sequence[queries.ChunkDetail | queries.PassageChunk]:
    """The hit's chunk with its neighbours of the same section that no earlier passage
    holds, up to `context` on each side, contiguous. (On PostgreSQL a publish may
    delete the revision meanwhile: then the chunk alone, as the hit read it.)"""
    rows = queries.chunk_range(
        conn, row.document_id, row.revision, row.chunk_index - context, row.chunk_index + context
    )
    at = next((i for i, chunk in enumerate(rows) if chunk.chunk_index == row.chunk_index), None)
    if at is None:
        return [row]

    def joins(neighbour) -> bool:
        held = (row.document_id, row.revision, neighbour.chunk_index) in covered
        return not held and (neighbour.heading, neighbour.context) == (row.heading, row.context)

    first = at
    while first > 0 and joins(rows[first - 1]):
        first -= 1
    last = at
    while last + 1 < len(rows) and joins(rows[last + 1]):
        last += 1
    return rows[first : last + 1]
