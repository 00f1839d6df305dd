"""Search over published revisions only: BM25 over words, vector similarity, or both
fused by Reciprocal Rank Fusion (hybrid, the default when the chunks have vectors)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from kb_cli import queries
from kb_cli.app import Kb, require_base
from kb_cli.chunking import contextual_text, merge_passage, pages_of
from kb_cli.db import Connection
from kb_cli.embeddings import Embedder
from kb_cli.errors import ProviderRejected, ProviderUnavailable, UsageError
from kb_cli.lexical.phrases import chunks_with_phrases
from kb_cli.lexical.snippets import snippet
from kb_cli.metadata import MetaFilter, describe_filter
from kb_cli.permissions import Scope
from kb_cli.queries import ChunkDetail, PassageChunk
from kb_cli.ranking import (
    Hit,
    Part,
    Ranking,
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
from kb_cli.records import AlsoIn, SearchHit
from kb_cli.textsearch import Query, parse_query, script_of, script_of_passage

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
# --limit (and eval's --k): each ranking is asked for 12 candidates a hit (36 with
# --per-document), read with their text; 1,000 hits took 3.7 s and 75 MiB on 72,000
# chunks (docs/limits.md).
MAX_HITS = 1000
# Bounds on what reaches SQL: each term and phrase is a parameter of one statement.
MAX_QUERY_CHARS = 10_000
MAX_QUERY_TERMS = 200
MAX_QUERY_PHRASES = 20
NOTHING_ASKED = "the question holds no word or phrase to search for"


@dataclass(frozen=True)
class SearchRequest:
    """What a caller asks of search: `kb search`'s argument and options."""

    text: str
    limit: int = 10
    mode: SearchMode | None = None  # None: hybrid when the chunks have vectors
    per_document: bool = False  # one hit per document: its best chunk
    base: str | None = None  # only this base of those the caller may read
    context: int = 0  # merge each hit with up to this many neighbours on each side
    where: tuple[MetaFilter, ...] = ()  # only documents whose metadata match

    def __post_init__(self) -> None:
        """A mode given as text (by a caller other than the command line) is checked."""
        mode: object = self.mode
        if mode is None or isinstance(mode, SearchMode):
            return
        if mode not in {known.value for known in SearchMode}:
            raise UsageError(f"unknown --mode {mode!r}; one of: {', '.join(SearchMode)}")
        object.__setattr__(self, "mode", SearchMode(str(mode)))


@dataclass
class SearchResult:
    hits: list[SearchHit]
    mode: SearchMode  # the ranking that ran (hybrid falls back to lexical without vectors)
    warnings: list[str] = field(default_factory=list)
    # With no hits: why, and what to do next (the reader's bases, their documents, what
    # is published, the metadata filters, or the question itself).
    nothing_because: str | None = None
    # With no good hit: what would help (a model that reads the question's language).
    hints: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ModelScope:
    """An embedding model and the bases searched that it embeds (the scope narrowed to
    them): the question is embedded once per model, and each model ranks its own bases'
    chunks (cosines of two models do not compare; ranks do, in the fusion)."""

    embedder: Embedder
    scope: Scope
    bases: tuple[str, ...]


def search(kb: Kb, request: SearchRequest) -> SearchResult:
    """Ranks published chunks of the bases the caller may read (narrowed to the
    request's base); the scope is part of every candidate query, so it is decided before
    any scoring. The fused candidates are reranked when a reranker is configured; a
    `context` merges each hit with up to that many neighbouring chunks of its section
    on each side."""
    text, mode = request.text, request.mode
    if not text.strip():
        raise UsageError("the search query is empty")
    if len(text) > MAX_QUERY_CHARS:
        raise UsageError(f"the search query is longer than {MAX_QUERY_CHARS} characters")
    if not 1 <= request.limit <= MAX_HITS:
        raise UsageError(f"--limit must be between 1 and {MAX_HITS}")
    if not 0 <= request.context <= MAX_CONTEXT:
        raise UsageError(f"--context must be between 0 and {MAX_CONTEXT}")
    query = parse_query(text)
    if len(query.phrases) > MAX_QUERY_PHRASES:
        raise UsageError(f"the search query has more than {MAX_QUERY_PHRASES} quoted phrases")
    if query.empty:  # only punctuation or operators: nothing that could match
        return SearchResult(
            [], mode or SearchMode.LEXICAL, nothing_because=f"no hits: {NOTHING_ASKED}"
        )
    depth = max(CANDIDATES, 3 * request.limit) * (3 if request.per_document else 1)
    result = SearchResult([], mode or SearchMode.HYBRID)
    # Metadata filters are part of the scope: every candidate query applies them.
    scope = dataclasses.replace(kb.actor.scope(request.base), where=request.where)
    if len(query.terms) > MAX_QUERY_TERMS:
        result.warnings.append(
            f"the query has {len(query.terms)} distinct words; ranked by the first "
            f"{MAX_QUERY_TERMS}"
        )
        query = Query(query.terms[:MAX_QUERY_TERMS], query.phrases)
    with kb.db.read() as conn:
        if request.base is not None:
            require_base(conn, scope, request.base)
        models = _model_scopes(kb, conn, scope, result.warnings)
        if mode in (SearchMode.HYBRID, SearchMode.VECTOR) and not models:
            raise UsageError(
                f"--mode {mode} needs embeddings, which are off for the bases searched "
                "(KB_EMBEDDINGS=none, or a base's model none)"
            )
        if mode is None and not any(
            queries.has_published_vectors(conn, model.embedder.model, model.scope)
            for model in models
        ):
            result.mode = SearchMode.LEXICAL
        parts = _rankings(kb, conn, text, query, depth, scope, models, result)
        # On PostgreSQL each statement reads what is committed when it starts: a chunk
        # deleted since the ranking read it is not shown.
        asked = {chunk for _ranking, scored, _weight in parts for chunk, _score in scored}
        details = queries.chunk_details(conn, list(asked))
        distinct, copied = distinct_rankings(
            [[item for item in scored if item[0] in details] for _r, scored, _w in parts],
            lambda chunk_id: details[chunk_id].text,
            depth,
        )
        kept = [
            (ranking, scored, weight)
            for (ranking, _asked, weight), scored in zip(parts, distinct, strict=True)
        ]

        def document_of(chunk_id: int) -> str:
            return details[chunk_id].document_id

        ranked = _fused(result.mode, kept)
        ranked, copied = named_in_shown_documents(ranked, copied, document_of)
        copies = {chunk: [details[c] for c in others] for chunk, others in copied.items()}
        ranked, reranked = _reranked(kb, text, ranked, details, result)
        if request.per_document:
            ranked = best_per_document(ranked, document_of)
        else:
            ranked = discount_repeats(ranked, document_of, REPEAT_DISCOUNT, reranked)
        shown = [(details[hit.chunk], hit, copies.get(hit.chunk, [])) for hit in ranked]
        result.hits = _hits(conn, shown, request.limit, query, request.context)
        model_of = {base: m.embedder.model for m in models for base in m.bases}
        for hit in result.hits:  # the model that ranked it by meaning, if one did
            hit.model = model_of.get(hit.base) if hit.vector_rank is not None else None
        if not result.hits:
            result.nothing_because = _why_nothing(conn, scope)
        if result.mode == SearchMode.HYBRID and not any(hit.lexical_rank for hit in result.hits):
            result.hints = _other_language_hints(conn, text, models)  # no word of it matched
    return result


# Published passages of a base read to tell its language, at most.
LANGUAGE_SAMPLE = 50
LANGUAGE_NAMES = {"latin": "English", "cjk": "Chinese"}


def _other_language_hints(conn: Connection, text: str, models: list[ModelScope]) -> list[str]:
    """For each base whose model reads one language (a script it gives no weight) and
    whose text is mostly in another script than the question's: name the switch to a
    model that reads both."""
    asked = script_of(text)
    hints = []
    for model in models:
        if min(model.embedder.fusion_weight.values()) > 0:
            continue  # it reads both scripts
        for base in model.bases:
            within = dataclasses.replace(model.scope, bases=(base,))
            written = main_script(queries.published_texts(conn, within, LANGUAGE_SAMPLE))
            if written is not None and written != asked:
                hints.append(
                    f"the question is in {LANGUAGE_NAMES[asked]} and base {base} is mostly "
                    f"{LANGUAGE_NAMES[written]}, which its model ({model.embedder.model}) does "
                    f"not match across: kb reindex --base {base} --model multilingual lets "
                    "questions in either language find its passages"
                )
    return hints


def main_script(texts: list[str]) -> str | None:
    """The script most of the passages are in; None without passages."""
    scripts = [script_of_passage(text) for text in texts]
    return max(set(scripts), key=scripts.count) if scripts else None


def _why_nothing(conn: Connection, scope: Scope) -> str:
    """Why a search found nothing, from what lies in the caller's scope: no base to
    read, no document, nothing published, nothing that the metadata filters keep, or
    no passage that answers."""
    counts = queries.search_scope_counts(conn, scope)
    named = scope.bases
    within = f"base{'s' if len(named) > 1 else ''} {', '.join(named)}" if named else ""
    within = within or "the bases you may read"
    has = "has" if len(named) == 1 else "have"
    if not counts.bases:
        return (
            "no hits: you may read no knowledge base; an admin can give you one "
            "(kb base grant NAME USER)"
        )
    if not counts.documents:
        upload = f"kb upload FILE --base {named[0]}" if named else "kb upload FILE"
        return f"no hits: {within} {has} no document yet ({upload})"
    if not counts.published:
        return (
            "no hits: search serves published revisions only, and none is published in "
            f"{within}; `kb status --status review_pending` lists what waits for `kb publish`"
        )
    if scope.where and not counts.matching:
        asked = " ".join(describe_filter(condition) for condition in scope.where)
        return (
            f"no hits: no published document of {within} has metadata {asked} (keys and "
            "values are case-sensitive; `kb status` shows each document's metadata)"
        )
    searched = counts.matching if scope.where else counts.published
    return f"no hits: no passage of the {searched} published documents searched answers it"


def _model_scopes(kb: Kb, conn: Connection, scope: Scope, warnings: list[str]) -> list[ModelScope]:
    """The embedding models of the bases in `scope`, each with the scope narrowed to
    its bases (the scope as it is when one model embeds them all); a base whose model
    is none has no meaning ranking, nor one whose provider this process cannot build
    (said in `warnings`: its bases are searched by words)."""
    bases_of = kb.models_in(conn, scope)
    models = []
    for model, bases in bases_of.items():
        try:
            embedder = kb.embedder_for(model)
        except UsageError as error:
            warnings.append(f"{error.message}; base {', '.join(bases)} searched by words only")
            continue
        if embedder is None:
            continue
        narrowed = dataclasses.replace(scope, bases=tuple(bases)) if len(bases_of) > 1 else scope
        models.append(ModelScope(embedder, narrowed, tuple(bases)))
    return models


def _rankings(
    kb: Kb,
    conn: Connection,
    text: str,
    query: Query,
    depth: int,
    scope: Scope,
    models: list[ModelScope],
    result: SearchResult,
) -> list[Part]:
    """The words ranking and each model's meaning ranking, each COPIES_DEPTH times
    `depth` deep (none where the mode does not ask for it), with their weights in the
    fusion. A meaning ranking that counts for nothing in the fusion (weight 0) is only
    asked when words found none."""
    asked = depth * COPIES_DEPTH
    lexical: list[Scored] = []
    if result.mode != SearchMode.VECTOR and query.terms:
        lexical = kb.lexical.ranking(conn, query.terms, query.phrases, asked, scope)
    parts: list[Part] = [(Ranking.LEXICAL, lexical, 1.0)]
    for model in models:
        if result.mode == SearchMode.LEXICAL:
            break
        weight = _fusion_weight(kb, model.embedder, text)
        if result.mode == SearchMode.VECTOR or weight > 0 or not lexical:
            vector = _vector_ranking(kb, conn, text, query, asked, model, result)
            parts.append((Ranking.VECTOR, vector, weight))
    return parts


def _fusion_weight(kb: Kb, embedder: Embedder, text: str) -> float:
    """How much a model's ranking counts beside the words: its own weight for the
    question's script, unless KB_VECTOR_WEIGHT sets one for every model."""
    configured = kb.settings.vector_weight
    return embedder.fusion_weight[script_of(text)] if configured is None else configured


def _fused(mode: SearchMode, parts: list[Part]) -> list[Hit]:
    """Every ranking fused (hybrid, or the meaning rankings of several models), or the
    one that ran as hits."""
    _ranking, lexical, _weight = parts[0]
    vectors = parts[1:]
    if mode == SearchMode.HYBRID:
        return fuse(parts)
    if lexical:
        return single(Ranking.LEXICAL, lexical)
    if len(vectors) == 1:
        return single(Ranking.VECTOR, vectors[0][1])
    return fuse([(ranking, scored, 1.0) for ranking, scored, _weight in vectors])


def _reranked(
    kb: Kb, text: str, ranked: list[Hit], details: dict[int, ChunkDetail], result: SearchResult
) -> tuple[list[Hit], int]:
    """The first KB_RERANK_DEPTH candidates in the reranker's order, and how many it
    scored; a reranker that fails leaves the order as it was, with a warning."""
    reranker = kb.reranker
    if reranker is None or not ranked:
        return ranked, 0
    head = ranked[: kb.settings.rerank.depth]
    passages = [
        contextual_text(details[hit.chunk].context, details[hit.chunk].text) for hit in head
    ]
    try:
        scores = reranker.rerank(text, passages)
    except (ProviderUnavailable, ProviderRejected) as error:
        result.warnings.append(f"{error.message}; results are not reranked")
        return ranked, 0
    return rerank(ranked, scores), min(len(scores), len(head))


def _vector_ranking(
    kb: Kb,
    conn: Connection,
    text: str,
    query: Query,
    depth: int,
    model: ModelScope,
    result: SearchResult,
) -> list[Scored]:
    """Published chunks of the model's bases embedded by it, most similar first, above
    the similarity floor. A provider that fails turns hybrid into lexical, with a
    warning; `--mode vector` reports the failure."""
    try:
        query_vector = model.embedder.embed_query(text)
    except (ProviderUnavailable, ProviderRejected) as error:
        if result.mode == SearchMode.VECTOR:
            raise
        result.mode = SearchMode.LEXICAL
        result.warnings.append(f"{error.message}; searched by words only")
        return []
    ranked = kb.vectors.nearest(
        conn, model.embedder.model, query_vector, depth, model.scope, kb.settings.vector_floor
    )
    if query.phrases:
        containing = chunks_with_phrases(conn, query.phrases, model.scope)
        ranked = [item for item in ranked if item[0] in containing]
    return ranked


def _hits(
    conn: Connection,
    ranked: list[tuple[ChunkDetail, Hit, list[ChunkDetail]]],
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
    for row, ranked_hit, copies in ranked:
        if len(hits) == limit:
            break
        if (row.document_id, row.revision, row.chunk_index) in covered:
            continue
        hit = _hit(row, ranked_hit, query, copies)
        if _repeats_a_neighbour(hit, shown):
            continue
        if context:
            passage = _passage(conn, row, context, covered)
            hit.text = merge_passage([chunk.text for chunk in passage])
            hit.passage = (passage[0].chunk_index, passage[-1].chunk_index)
            hit.page, hit.page_end = pages_of([(chunk.page, chunk.page_end) for chunk in passage])
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


def _hit(row: ChunkDetail, ranked: Hit, query: Query, copies: list[ChunkDetail]) -> SearchHit:
    also_in: dict[str, AlsoIn] = {}
    for copy in copies:
        if copy.document_id != row.document_id:
            also_in.setdefault(copy.document_id, AlsoIn(copy.document_id, copy.filename))
    return SearchHit(
        document_id=row.document_id,
        base=row.base,
        filename=row.filename,
        revision=row.revision,
        chunk_index=row.chunk_index,
        score=round(ranked.score, 6),
        text=row.text,
        lexical_rank=ranked.rank(Ranking.LEXICAL),
        vector_rank=ranked.rank(Ranking.VECTOR),
        page=row.page,
        page_end=row.page_end,
        heading=row.heading,
        snippet=snippet(row.text, query, row.heading),
        content_type=row.content_type,
        also_in=list(also_in.values()),
    )


def _passage(
    conn: Connection, row: ChunkDetail, context: int, covered: set[tuple[str, int, int]]
) -> Sequence[ChunkDetail | PassageChunk]:
    """The hit's chunk with its neighbours of the same section that no earlier passage
    holds, up to `context` on each side, contiguous. (On PostgreSQL a publish may
    delete the revision meanwhile: then the chunk alone, as the hit read it.)"""
    rows = queries.chunk_range(
        conn, row.document_id, row.revision, row.chunk_index - context, row.chunk_index + context
    )
    at = next((i for i, chunk in enumerate(rows) if chunk.chunk_index == row.chunk_index), None)
    if at is None:
        return [row]

    def joins(neighbour: PassageChunk) -> bool:
        held = (row.document_id, row.revision, neighbour.chunk_index) in covered
        return not held and (neighbour.heading, neighbour.context) == (row.heading, row.context)

    first = at
    while first > 0 and joins(rows[first - 1]):
        first -= 1
    last = at
    while last + 1 < len(rows) and joins(rows[last + 1]):
        last += 1
    return rows[first : last + 1]
