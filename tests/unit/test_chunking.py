"""chunk_blocks: size bound, indexes, determinism, no text lost, overlap, sections, pages."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kb_cli.chunking import OVERLAP_CHARS, TARGET_CHARS, ChunkText, chunk_blocks, pages_of
from kb_cli.parsers import Block
from tests.docgen import VOCABULARY

WORDS = VOCABULARY


def english(sentences: int, seed: int = 0, words: int = 11) -> str:
    """Deterministic sentences, each made unique by its number."""
    out = []
    for s in range(seed, seed + sentences):
        body = " ".join(WORDS[(s * 7 + i * 3) % len(WORDS)] for i in range(words))
        out.append(f"Sentence {s} says {body}.")
    return " ".join(out)


def chinese(chars: int, start: int = 0) -> str:
    """Distinct CJK ideographs, no spaces and no punctuation: only hard cuts possible."""
    return "".join(chr(0x4E00 + start + i) for i in range(chars))


def chinese_sentences(count: int) -> list[str]:
    return [chinese(5 + i % 23, start=i * 40) + "。" for i in range(count)]


def overlap_length(previous: str, following: str) -> int:
    """Length of the longest suffix of `previous` that starts `following`."""
    for size in range(min(len(previous), len(following)), 0, -1):
        if following.startswith(previous[-size:]):
            return size
    return 0


def assert_well_formed(chunks: list[ChunkText], target: int) -> None:
    assert [chunk.index for chunk in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert chunk.text.strip() == chunk.text
        assert chunk.text
        assert len(chunk.text) <= target, (len(chunk.text), target)


# --- size and indexes --------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "overlap"), [(TARGET_CHARS, OVERLAP_CHARS), (200, 30), (120, 0), (300, 149)]
)
def test_english_chunks_within_target_and_indexed(target: int, overlap: int) -> None:
    blocks = [
        Block(english(40), page=1),
        Block("\n\n".join(english(3, seed=100 + p) for p in range(10)), page=2),
        Block("short paragraph", page=3),
    ]
    chunks = chunk_blocks(blocks, target=target, overlap=overlap)
    assert len(chunks) > 1
    assert_well_formed(chunks, target)


def test_default_sizes() -> None:
    chunks = chunk_blocks([Block(english(200))])
    assert len(chunks) > 3
    assert_well_formed(chunks, TARGET_CHARS)
    assert max(len(chunk.text) for chunk in chunks) > TARGET_CHARS // 2


@pytest.mark.parametrize(("target", "overlap"), [(200, 30), (1000, 150), (100, 0)])
def test_unspaced_chinese_within_target(target: int, overlap: int) -> None:
    chunks = chunk_blocks([Block(chinese(3000))], target=target, overlap=overlap)
    assert_well_formed(chunks, target)


def test_paragraphs_near_the_limit_within_target() -> None:
    # Paragraphs of exactly target - overlap characters, after an overlap tail.
    text = "\n\n".join(chr(ord("a") + i) * 170 for i in range(6))
    chunks = chunk_blocks([Block(text)], target=200, overlap=30)
    assert_well_formed(chunks, 200)


# --- determinism -------------------------------------------------------------------


def test_deterministic() -> None:
    def blocks() -> list[Block]:
        return [
            Block(english(30), page=1, heading="A"),
            Block("\n\n".join(chinese_sentences(60)), page=2, heading="A"),
            Block(english(25, seed=50), page=3, heading="B"),
        ]

    first = chunk_blocks(blocks(), target=300, overlap=40)
    second = chunk_blocks(blocks(), target=300, overlap=40)
    assert first == second
    assert len(first) > 3


# --- no text lost ------------------------------------------------------------------


def test_every_english_sentence_kept() -> None:
    text = english(120)
    sentences = [f"{s}." for s in text.split(". ")]
    sentences[-1] = sentences[-1][:-1]
    chunks = chunk_blocks([Block(text)], target=400, overlap=60)
    joined = [chunk.text for chunk in chunks]
    for sentence in sentences:
        assert any(sentence in chunk for chunk in joined), sentence


def test_long_chinese_paragraph_every_sentence_kept() -> None:
    sentences = chinese_sentences(400)
    paragraph = "".join(sentences)  # one paragraph, no spaces at all
    assert len(paragraph) > 5 * 1000
    chunks = chunk_blocks([Block(paragraph)])
    assert_well_formed(chunks, TARGET_CHARS)
    for sentence in sentences:
        assert any(sentence in chunk.text for chunk in chunks), sentence
    assert all(" " not in chunk.text for chunk in chunks)


def test_unpunctuated_chinese_fully_covered() -> None:
    text = chinese(2500)
    chunks = chunk_blocks([Block(text)], target=200, overlap=30)
    end = 0
    for chunk in chunks:
        piece = chunk.text.replace("\n", "")
        start = text.find(piece)
        assert start != -1, piece  # chunks are untouched runs of the original
        assert start <= end  # no gap between consecutive chunks
        end = start + len(piece)
    assert end == len(text)


def test_decimals_and_domains_not_altered_in_long_paragraph() -> None:
    sentence = "Version 3.14 is on example.com, e.g. in the docs; read it! "
    text = sentence * 40  # one long paragraph that has to be split
    chunks = chunk_blocks([Block(text)], target=300, overlap=40)
    assert len(chunks) > 1
    for chunk in chunks:
        assert "3. 14" not in chunk.text
        assert "example. com" not in chunk.text
    assert any(sentence.strip() in chunk.text for chunk in chunks)


_word = st.sampled_from(WORDS)
_english_sentence = st.lists(_word, min_size=1, max_size=12).map(
    lambda words: " ".join(words).capitalize() + "."
)
_cjk_char = st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF)
_cjk_sentence = st.builds(
    lambda body, end: body + end,
    st.text(_cjk_char, min_size=1, max_size=60),
    st.sampled_from(["。", "！", "？", "；"]),
)
_sentence = st.one_of(_english_sentence, _cjk_sentence)
_paragraph = st.one_of(
    st.lists(_sentence, min_size=1, max_size=30).map(" ".join),
    st.lists(_cjk_sentence, min_size=1, max_size=40).map("".join),  # unspaced Chinese
)
_blocks = st.lists(
    st.builds(
        lambda paragraphs, page, heading: Block("\n\n".join(paragraphs), page, heading),
        st.lists(_paragraph, min_size=1, max_size=6),
        st.integers(min_value=1, max_value=5),
        st.sampled_from([None, "Intro", "Details"]),
    ),
    min_size=1,
    max_size=5,
)
_sizes = st.sampled_from([(200, 30), (300, 0), (500, 120), (TARGET_CHARS, OVERLAP_CHARS)])

# No shrinking: a failure is reported at once instead of after a long minimisation.
_settings = settings(
    max_examples=80,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)


@_settings
@given(blocks=_blocks, sizes=_sizes)
def test_property_every_sentence_kept(blocks: list[Block], sizes: tuple[int, int]) -> None:
    target, overlap = sizes
    chunks = chunk_blocks(blocks, target=target, overlap=overlap)
    for block in blocks:
        texts = [chunk.text for chunk in chunks if chunk.heading == block.heading]
        for paragraph in block.text.split("\n\n"):
            for sentence in _split_sentences(paragraph):
                assert any(sentence in text for text in texts), sentence


@_settings
@given(blocks=_blocks, sizes=_sizes)
def test_property_size_indexes_determinism(blocks: list[Block], sizes: tuple[int, int]) -> None:
    target, overlap = sizes
    chunks = chunk_blocks(blocks, target=target, overlap=overlap)
    assert chunks
    assert_well_formed(chunks, target)
    assert chunk_blocks(list(blocks), target=target, overlap=overlap) == chunks


def _split_sentences(paragraph: str) -> list[str]:
    """The generated sentences back: each ends in . 。 ！ ？ or ；."""
    out, current = [], ""
    for char in paragraph:
        if char == " " and not current:
            continue
        current += char
        if char in ".。！？；":
            out.append(current)
            current = ""
    return out


# --- overlap -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", [english(60), "\n\n".join(english(2, seed=s) for s in range(0, 60, 2)), chinese(2000)]
)
def test_consecutive_chunks_of_a_section_overlap(text: str) -> None:
    overlap = 60
    chunks = chunk_blocks([Block(text, heading="Only")], target=300, overlap=overlap)
    assert len(chunks) > 2
    for previous, following in itertools.pairwise(chunks):
        shared = overlap_length(previous.text, following.text)
        assert overlap // 3 <= shared <= overlap, (shared, previous.text, following.text)


def test_zero_overlap_shares_nothing() -> None:
    text = english(60)
    chunks = chunk_blocks([Block(text)], target=300, overlap=0)
    assert len(chunks) > 2
    assert [word for chunk in chunks for word in chunk.text.split()] == text.split()


# --- sections and pages ------------------------------------------------------------


def test_chunks_never_mix_two_headings() -> None:
    blocks = [
        Block("alpha " * 10, heading="Alpha"),
        Block("beta " * 200, heading="Beta"),
        Block("gamma " * 3, heading="Gamma"),
        Block("delta " * 3, heading="Alpha"),  # same heading again, later: its own section
    ]
    chunks = chunk_blocks(blocks, target=200, overlap=40)
    assert chunks[0].heading == "Alpha"
    assert chunks[-1].heading == "Alpha"
    words = {"Alpha": {"alpha", "delta"}, "Beta": {"beta"}, "Gamma": {"gamma"}}
    for chunk in chunks:
        assert set(chunk.text.split()) <= words[chunk.heading], chunk
    # The first chunk of a new section carries nothing over from the previous one.
    beta = [chunk for chunk in chunks if chunk.heading == "Beta"]
    gamma = [chunk for chunk in chunks if chunk.heading == "Gamma"]
    assert len(beta) > 1
    assert gamma[0].text == "gamma gamma gamma"
    assert chunks[-1].text == "delta delta delta"
    assert_well_formed(chunks, 200)


def test_short_sections_are_separate_chunks() -> None:
    blocks = [Block("one", heading="H1"), Block("two", heading="H2"), Block("three", heading=None)]
    chunks = chunk_blocks(blocks)
    assert [(c.index, c.text, c.heading) for c in chunks] == [
        (0, "one", "H1"),
        (1, "two", "H2"),
        (2, "three", None),
    ]


def test_chunk_page_is_the_page_it_starts_on() -> None:
    blocks = [
        Block("a" * 50, page=1),
        Block("b" * 50, page=2),  # joins the chunk started on page 1
        Block("c" * 120, page=3),  # does not fit: starts a chunk on page 3
        Block("d" * 120, page=4),  # does not fit either: chunk on page 4
        Block("e" * 20, page=5),  # fits after d: stays in the page-4 chunk
    ]
    chunks = chunk_blocks(blocks, target=200, overlap=30)
    assert [chunk.page for chunk in chunks] == [1, 3, 4]
    assert chunks[0].text == "a" * 50 + "\n" + "b" * 50
    assert chunks[1].text.endswith("c" * 120)
    assert chunks[2].text.endswith("d" * 120 + "\n" + "e" * 20)
    # ... and the last page its text reaches, when that is another.
    assert [chunk.page_end for chunk in chunks] == [2, None, 5]


def test_the_pages_of_a_passage_run_from_its_first_chunk_to_the_last_page_reached() -> None:
    assert pages_of([(3, None), (3, 4), (4, None)]) == (3, 4)
    assert pages_of([(2, None), (2, None)]) == (2, None)
    assert pages_of([(None, None)]) == (None, None)


def test_page_of_each_chunk_is_where_its_own_text_starts() -> None:
    # Sentence numbers encode their page: page p holds sentences 100p, 100p+1, ...
    blocks = [Block(english(12, seed=100 * p), page=p) for p in range(1, 6)]
    chunks = chunk_blocks(blocks, target=400, overlap=50)
    assert len(chunks) > 5
    previous = ""
    for chunk in chunks:
        carried = overlap_length(previous, chunk.text) if previous else 0
        own = chunk.text[carried:].lstrip()
        match = re.match(r"Sentence (\d+) ", own)
        assert match, own
        assert int(match.group(1)) // 100 == chunk.page
        previous = chunk.text
    assert {chunk.page for chunk in chunks} == {1, 2, 3, 4, 5}


# --- empty input and arguments -----------------------------------------------------


@pytest.mark.parametrize(
    "blocks",
    [[], [Block("")], [Block("   \n\n \t \n")], [Block("", page=1), Block("\n\n\n", heading="H")]],
)
def test_empty_or_whitespace_blocks_give_no_chunks(blocks: list[Block]) -> None:
    assert chunk_blocks(blocks) == []


def test_whitespace_blocks_between_real_ones_are_skipped() -> None:
    chunks = chunk_blocks([Block("  \n"), Block("real text", page=2), Block("\n\n")])
    assert [(c.index, c.text, c.page) for c in chunks] == [(0, "real text", 2)]


@pytest.mark.parametrize(
    ("target", "overlap"), [(1000, 500), (1000, 600), (1000, 1000), (200, 100), (1000, -1)]
)
def test_bad_overlap_raises(target: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        chunk_blocks([Block("text")], target=target, overlap=overlap)


@pytest.mark.parametrize(("target", "overlap"), [(1000, 499), (200, 99), (200, 0)])
def test_overlap_just_under_half_is_allowed(target: int, overlap: int) -> None:
    assert chunk_blocks([Block("text")], target=target, overlap=overlap)[0].text == "text"
