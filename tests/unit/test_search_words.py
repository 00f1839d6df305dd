"""Pure pieces of search: the words indexed and asked for, rank fusion, the vector floor,
one hit per document, and the built-in model's vectors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kb_cli.chunking import chunk_blocks
from kb_cli.embeddings.local import TOKENIZER_FILE, WEIGHTS_FILE, LocalEmbedder, package_dir
from kb_cli.lexical.snippets import matched_spans, snippet
from kb_cli.parsers import Block
from kb_cli.ranking import Hit, Ranking, best_per_document, fuse, top_similar
from kb_cli.textsearch import index_terms, parse_query
from tests.helpers import hostile_queries

# --- words -----------------------------------------------------------------------------


def test_chinese_is_indexed_as_words_long_and_short():
    terms = index_terms("知识库入库流程 and English words.").split()
    assert {"知识", "知识库", "入库", "流程", "English"} <= set(terms)


def test_a_query_is_words_and_quoted_phrases_operators_are_text():
    query = parse_query('出差回来后最迟多久要提交报销？ "code freeze" NEAR(x* OR')
    assert query.phrases == ["code freeze"]
    assert {"出差", "报销", "NEAR", "x", "code", "freeze"} <= set(query.terms)
    assert parse_query("?!").empty
    assert parse_query("OR AND NOT").terms == ["OR", "AND", "NOT"]  # stopwords, but all it has


def test_stopwords_do_not_rank_but_a_phrase_keeps_its_words():
    assert parse_query("How do I stop waiting when the server is slow?").terms == [
        "stop",
        "waiting",
        "server",
        "slow",
    ]
    assert parse_query("怎么设置请求的超时时间？").terms == ["设置", "请求", "超时", "时间"]
    assert parse_query('what does "the end" mean').terms == ["mean", "the", "end"]
    assert parse_query('"the end"').terms == ["the", "end"]
    # A lone Chinese character is a particle or a generic verb, unless it is all there is.
    assert "跑" not in parse_query("进程已经在跑了，怎么打开 GC 日志？").terms
    assert parse_query("锁").terms == ["锁"]


@pytest.mark.parametrize("text", ['""', 'invoices ""', "budget “” review", "「」", '" "', "“ ”"])
def test_an_empty_quoted_phrase_is_dropped(text):
    query = parse_query(text)
    assert query.phrases == []
    assert query.terms == [word for word in ("invoices", "budget", "review") if word in text]


# No shrinking: a failure is reported at once instead of after a long minimisation.
@settings(
    max_examples=150,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)
@given(text=hostile_queries(), chunk=st.text(max_size=300))
def test_property_any_text_parses_into_a_query_a_snippet_can_mark(text, chunk):
    query = parse_query(text)
    assert all(phrase.strip() for phrase in query.phrases)
    assert all(term.strip() for term in query.terms)
    for span in matched_spans(chunk + " " + text, query):
        assert 0 <= span.start < span.end
    assert isinstance(snippet(chunk, query), str)


def test_a_line_break_inside_chinese_words_is_no_space():
    [chunk] = chunk_blocks([Block("系统运行稳\n定，性能\n良好。\nNext\nline")])
    assert chunk.text == "系统运行稳定，性能良好。 Next line"


# --- ranking ---------------------------------------------------------------------------


def test_reciprocal_rank_fusion_rewards_agreement():
    words, meaning = [(1, 9.0), (2, 5.0)], [(2, 0.9), (3, 0.8)]
    fused = fuse([(Ranking.LEXICAL, words, 1.0), (Ranking.VECTOR, meaning, 1.0)], k=60)
    assert [hit.chunk for hit in fused] == [2, 1, 3]
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61)
    assert fused[0].ranks == {Ranking.LEXICAL: 2, Ranking.VECTOR: 1}
    assert fused[1].ranks == {Ranking.LEXICAL: 1} and fused[2].ranks == {Ranking.VECTOR: 2}


def test_vector_candidates_below_the_floor_are_dropped():
    matrix = np.array([[1, 0], [0.6, 0.8], [0, 1]], dtype=np.float32)
    ranked = top_similar([10, 11, 12], matrix, np.array([1, 0]), floor=0.5, limit=5)
    assert [chunk for chunk, _ in ranked] == [10, 11]
    assert top_similar([10, 11, 12], matrix, np.array([1, 0]), 0.5, 1)[0][0] == 10


def test_one_hit_per_document_keeps_the_best():
    hits_ = [Hit(chunk, 1 - chunk / 10, {Ranking.LEXICAL: chunk}) for chunk in (1, 2, 3)]
    kept = best_per_document(hits_, {1: "a", 2: "a", 3: "b"}.__getitem__)
    assert [hit.chunk for hit in kept] == [1, 3]


# --- the built-in model ----------------------------------------------------------------


def test_local_model_gives_wordllamas_own_vectors():
    """The same vectors as WordLlama's own inference, for a query and for long chunks
    in both scripts (a batch that gathers rows, and one that counts tokens instead)."""
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer
    from wordllama.inference import WordLlamaInference

    package = package_dir()
    reference = WordLlamaInference(
        load_file(package / WEIGHTS_FILE)["embedding.weight"],
        Tokenizer.from_file(str(package / TOKENIZER_FILE)),
    )
    short = ["How can I protect a PDF with a password?", "出差回来后最迟多久要提交报销？"]
    chinese, english = ("知识库入库流程很重要。" * 80)[:800], ("Backups run nightly. " * 40)[:800]
    long = [chinese, english] * 20  # 26,000 tokens: gathered; doubled, counted
    for texts in (short, long, long * 2):
        ours = LocalEmbedder().embed(texts)
        theirs = reference.embed(texts, norm=True)
        assert ours.shape == (len(texts), 256)
        np.testing.assert_allclose(ours, theirs, atol=1e-5)
