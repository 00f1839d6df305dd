"""Pure pieces of retrieval: headings as paths, a chunk's context, passages, fusion
weights, spreading hits over documents, reranking, the query's script."""

from __future__ import annotations

from pathlib import Path

import pytest

from kb_cli.chunking import chunk_blocks, merge_passage, with_context
from kb_cli.parsers import Block, Budget, ParseLimits, text
from kb_cli.ranking import (
    Hit,
    Ranking,
    discount_repeats,
    distinct_rankings,
    fuse,
    named_in_shown_documents,
    rerank,
)
from kb_cli.textsearch import script_of


def _parse(tmp_path: Path, source: str, markdown: bool) -> list[Block]:
    path = tmp_path / ("doc.md" if markdown else "doc.txt")
    path.write_text(source, encoding="utf-8")
    return text.parse(path, lambda *_: None, Budget(ParseLimits()), markdown=markdown)


def test_markdown_headings_nest_and_code_comments_are_no_headings(tmp_path):
    source = (
        "# Guide\n\nIntro.\n\n## Clients\n\n```python\n# a comment\nx = 1\n```\n\n"
        "Pools\n-----\n\nSizes.\n\n### Limits\n\nMax.\n\n# Other\n\nMore."
    )
    blocks = _parse(tmp_path, source, markdown=True)
    assert [(b.parents, b.heading) for b in blocks] == [
        ((), "Guide"),
        (("Guide",), "Clients"),
        (("Guide",), "Pools"),
        (("Guide", "Pools"), "Limits"),
        ((), "Other"),
    ]
    assert "# a comment" in blocks[1].text


def test_plain_text_titles_are_levelled_by_their_adornment_as_in_restructuredtext(tmp_path):
    source = (
        "=====\nFlask\n=====\n\nIntro.\n\nInstall\n-------\n\nPip.\n\nVenv\n~~~~\n\nMake one."
        "\n\nDeploy\n------\n\nGo.\n\nA paragraph line\n----\n"
    )
    blocks = _parse(tmp_path, source, markdown=False)
    assert [(b.parents, b.heading) for b in blocks] == [
        ((), "Flask"),
        (("Flask",), "Install"),
        (("Flask", "Install"), "Venv"),
        (("Flask",), "Deploy"),
    ]
    assert blocks[-1].text.endswith("A paragraph line\n----\n")  # shorter than its text


def test_a_chunk_knows_its_title_and_section_path():
    blocks = [
        Block("Body one.", heading="Clients", parents=("Guide",)),
        Block("Body two.", heading="Timeouts", parents=("Guide", "Clients")),
    ]
    chunks = with_context(chunk_blocks(blocks), "advanced--clients.md")
    assert [chunk.context for chunk in chunks] == [
        "Guide › Clients",
        "Guide › Clients › Timeouts",
    ]
    [untitled] = with_context(chunk_blocks([Block("Just text.")]), "travel_expense-policy.txt")
    assert untitled.context == "travel expense policy"


def test_a_passage_of_consecutive_chunks_holds_each_sentence_once():
    paragraphs = [f"Paragraph {i} says something about topic {i}, in few words." for i in range(40)]
    chunks = chunk_blocks([Block("\n\n".join(paragraphs))], target=300, overlap=60)
    assert len(chunks) > 5
    assert all(chunk.text.count("\n") for chunk in chunks[1:])  # each repeats a tail
    assert merge_passage([chunk.text for chunk in chunks]) == "\n".join(paragraphs)
    assert merge_passage([chunks[2].text]) == chunks[2].text


def _hit(chunk: int, score: float, words: int | None = None, meaning: int | None = None) -> Hit:
    """A hit with its words (lexical) and meaning (vector) ranks, where it has them."""
    ranks = {Ranking.LEXICAL: words, Ranking.VECTOR: meaning}
    return Hit(chunk, score, {name: rank for name, rank in ranks.items() if rank is not None})


def _fused(lexical, vector, vector_weight: float = 1.0) -> list[Hit]:
    return fuse([(Ranking.LEXICAL, lexical, 1.0), (Ranking.VECTOR, vector, vector_weight)])


def test_fusion_weights_the_meaning_ranking():
    lexical = [(1, 9.0), (2, 8.0), (3, 7.0)]
    vector = [(3, 0.9), (4, 0.8)]
    assert [hit.chunk for hit in _fused(lexical, vector)] == [3, 1, 2, 4]  # plain RRF
    assert [hit.chunk for hit in _fused(lexical, vector, vector_weight=0.0)] == [1, 2, 3, 4]
    # 3: 1/63 + 0.02/61 = 0.01620, between 1 (1/61 = 0.01639) and 2 (1/62 = 0.01613)
    weighted = _fused(lexical, vector, vector_weight=0.02)
    assert weighted[0] == _hit(1, 1 / 61, words=1)
    assert [hit.chunk for hit in weighted] == [1, 3, 2, 4]


def test_a_documents_later_hits_are_discounted_in_the_score_they_show():
    hits = [_hit(1, 0.9, 1), _hit(2, 0.8, 2), _hit(3, 0.75, 3), _hit(4, 0.6, 4)]
    document = {1: "a", 2: "a", 3: "b", 4: "a"}
    # a's second hit scores 0.8 * 0.9 = 0.72, below b's 0.75; its third 0.6 * 0.81
    discounted = discount_repeats(hits, document.get, 0.9)
    assert [hit.chunk for hit in discounted] == [1, 3, 2, 4]
    assert [hit.score for hit in discounted] == pytest.approx([0.9, 0.75, 0.72, 0.486])
    # a small gap is not bridged: a's second hit at 0.8 stays above b's 0.7
    close = [_hit(1, 0.9, 1), _hit(2, 0.8, 2), _hit(3, 0.7, 3)]
    assert [hit.chunk for hit in discount_repeats(close, document.get, 0.9)] == [1, 2, 3]
    assert discount_repeats(hits, document.get, 1.0) == hits
    # A reranker's head (scores on its own scale) stays first, each part in score order.
    reranked = [_hit(4, 0.2, 4), _hit(3, 0.1, 3), _hit(1, 0.9, 1), _hit(2, 0.8, 2)]
    kept = discount_repeats(reranked, document.get, 0.9, head=2)
    assert [hit.chunk for hit in kept] == [4, 3, 1, 2]
    assert [hit.score for hit in kept] == pytest.approx([0.2, 0.1, 0.81, 0.648])


def _kept(rankings, text, limit=10):
    """Each ranking's chunk ids once copies are out, and the copies of each kept chunk."""
    kept, copies = distinct_rankings(rankings, text.__getitem__, limit)
    return [[chunk for chunk, _score in ranking] for ranking in kept], copies


def test_copies_collapse_into_the_first_hit_that_holds_their_text():
    ranking = [(1, 0.9), (2, 0.8), (3, 0.7), (4, 0.6)]
    text = {1: "Keep  receipts\nfor 15 days.", 2: "other", 3: "Keep receipts for 15 days.", 4: "x"}
    assert _kept([ranking], text) == ([[1, 2, 4]], {1: [3]})


def test_copies_take_one_rank_so_the_texts_below_them_rise_and_the_limit_counts_texts():
    """A text held by three documents is one rank in each ranking, named alike in both
    (by its best-ranked member), so the fusion scores it once; the limit counts texts."""
    text = {1: "a module", 2: "a module", 3: "a module", 4: "the answer", 5: "more", 6: "last"}
    lexical = [(1, 9.0), (2, 9.0), (3, 9.0), (4, 5.0), (5, 4.0), (6, 3.0)]
    vector = [(4, 0.9), (3, 0.8), (6, 0.7)]
    assert _kept([lexical, vector], text, limit=3) == ([[1, 4, 5], [4, 1, 6]], {1: [2, 3]})
    (words, meaning), _copies = distinct_rankings([lexical, vector], text.__getitem__, 3)
    assert words[1] == (4, 5.0) and meaning[1] == (1, 0.8)  # a member's own score, its place
    fused = _fused(words, meaning)
    assert [hit.chunk for hit in fused][:2] == [1, 4] and len(fused) == 4


def test_a_page_held_by_two_documents_shows_as_one_documents_chunks():
    """Chunks 1-2 of document X are copies of chunks 3-4 of document Y. The rankings
    named the second chunk's group by Y's copy; after X's first chunk it is named by
    X's, so a passage around each hit does not repeat the page."""
    document = {1: "X", 2: "X", 3: "Y", 4: "Y", 5: "Z"}
    hits = [_hit(1, 0.9, 1), _hit(4, 0.8, 2), _hit(5, 0.7, 3)]
    named, copies = named_in_shown_documents(hits, {1: [3], 4: [2]}, document.get)
    assert named == [_hit(1, 0.9, 1), _hit(2, 0.8, 2), _hit(5, 0.7, 3)]
    assert copies == {1: [3], 2: [4]}


_MODULE = " ".join(
    f"def step_{i}(buffer, size): return buffer.read(size) + checksum(buffer, {i})"
    for i in range(40)
)


def test_near_copies_collapse_but_neighbours_and_other_texts_do_not():
    """A module kept in two versions (one line changed, the chunk cut a little later)
    is one hit; the next chunk of the same module, which repeats only its overlap, and
    a different text on the same subject stay hits of their own."""
    newer = _MODULE[:1000]
    older = _MODULE[40:1040].replace("step_7(", "step_seven(")
    neighbour = _MODULE[850:1850]
    other = " ".join(f"The buffer holds {i} bytes before read returns the size" for i in range(20))
    text = {1: newer, 2: other, 3: older, 4: neighbour}
    ranking = [(chunk, 1.0 - chunk / 10) for chunk in (1, 2, 3, 4)]
    assert _kept([ranking], text) == ([[1, 2, 4]], {1: [3]})
    # Short texts that differ in a word are not copies: too little to compare.
    short = {1: "Keep receipts for 15 days.", 2: "Keep receipts for 30 days."}
    assert _kept([[(1, 0.9), (2, 0.8)]], short) == ([[1, 2]], {})


def test_rerank_reorders_the_head_and_keeps_the_tail():
    hits = [_hit(1, 0.9, 1, 1), _hit(2, 0.8, 2), _hit(3, 0.7, None, 1), _hit(4, 0.6, 4)]
    reranked = rerank(hits, [0.1, 0.7, 0.3])
    assert reranked == [_hit(2, 0.7, 2), _hit(3, 0.3, None, 1), _hit(1, 0.1, 1, 1), _hit(4, 0.6, 4)]


def test_a_chinese_question_naming_an_english_product_is_chinese():
    assert script_of("怎么在 Spring Boot 应用里拿到 ApplicationContext？") == "cjk"
    assert script_of("How long do we keep invoices?") == "latin"


def test_a_longer_fence_holds_a_shorter_one_and_a_front_matter_gives_the_title(tmp_path):
    source = (
        "---\ntitle: Deployment guide\nlayout: page\n---\n\n## Install\n\nSteps.\n\n"
        "````markdown\n```python\n# not a heading\n```\n# still code\n````\n\n"
        "~~~\n# code too\n~~~~\n\n## Run\n\nGo."
    )
    blocks = _parse(tmp_path, source, markdown=True)
    assert [(b.parents, b.heading) for b in blocks] == [
        (("Deployment guide",), "Install"),
        (("Deployment guide",), "Run"),
    ]
    assert "layout: page" not in "".join(b.text for b in blocks)
    chunks = with_context(chunk_blocks(blocks), "deploy.md")
    assert chunks[0].context == "Deployment guide › Install"


def test_a_table_header_over_dashes_is_no_title(tmp_path):
    source = "Name        Amount\n----------  ------\n\nTotals\n------\n\nAll of it."
    blocks = _parse(tmp_path, source, markdown=False)
    assert [b.heading for b in blocks] == [None, "Totals"]


def test_sibling_sections_without_a_common_heading_take_the_file_name_as_title():
    blocks = [Block("One.", heading="Installation"), Block("Two.", heading="Zebra feeding")]
    chunks = with_context(chunk_blocks(blocks), "zoo-handbook.md")
    assert [chunk.context for chunk in chunks] == [
        "zoo handbook › Installation",
        "zoo handbook › Zebra feeding",
    ]


def test_lone_characters_rank_only_when_chinese_and_not_alone():
    from kb_cli.textsearch import parse_query

    assert parse_query("锁 的").terms == ["锁"]  # lone characters before stopwords
    assert "재" in parse_query("VPN 비밀번호 재설정").terms  # Hangul is cut per syllable
    assert parse_query("IT department policy").terms == ["IT", "department", "policy"]
    assert script_of("パスワードをリセット") == "latin"  # kana, no Chinese characters


def test_a_passage_is_chinese_when_chinese_characters_are_half_its_words():
    from kb_cli.textsearch import script_of_passage

    assert script_of_passage("Backups run nightly; ask 张伟 in the primary region team.") == "latin"
    assert script_of_passage("备份每天晚上在主区域运行，使用 Kubernetes 集群。") == "cjk"
    assert script_of_passage("") == "latin"
