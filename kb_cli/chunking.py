"""Text blocks -> chunks: deterministic, paragraph-aware, and fine with Chinese text.

Paragraphs are packed into chunks of at most TARGET_CHARS characters. A paragraph
longer than that is split at sentence ends (Latin or CJK punctuation), then at spaces,
and as a last resort at the character limit, which is what unspaced Chinese needs.
Each chunk after the first of a section starts with up to OVERLAP_CHARS characters
from the end of the previous one, so a sentence cut at a border is still findable.
A chunk never spans two headings; it keeps the page and heading it starts in, the last
page it reaches when that is another (`page_end`), and knows the headings above (its
section's path). The document's title and that path
are the chunk's context: embedded and indexed with its text, never shown as part of it.
Time is linear in the length of the text, punctuated or not.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from kb_cli.errors import DocumentTooLarge
from kb_cli.parsers import Block

TARGET_CHARS = 1000
OVERLAP_CHARS = 150
CONTEXT_SEPARATOR = " › "
MAX_CONTEXT_CHARS = 500
_FILENAME_SEPARATORS = re.compile(r"[-_.\s]+")

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
# Latin sentences end at punctuation followed by a space (so 3.14 and example.com stay
# whole); CJK sentences end at full-width punctuation, space or not.
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])\s*")
_SPACES = re.compile(r"\s+")
_CJK = "\u2e80-\u9fff\uf900-\uffef"
# PDF extraction breaks lines inside Chinese words (稳定 -> 稳\n定); a line break between
# two CJK characters is no word boundary, so it is dropped rather than made a space.
_CJK_LINE_BREAK = re.compile(rf"(?<=[{_CJK}])[^\S\n]*\n\s*(?=[{_CJK}])")


@dataclass(frozen=True)
class ChunkText:
    index: int
    text: str
    page: int | None
    heading: str | None
    parents: tuple[str, ...] = ()  # the headings above `heading`, outermost first
    context: str = ""  # the document's title and the heading path (with_context)
    page_end: int | None = None  # the last page it covers, when not `page`


def chunk_blocks(
    blocks: Iterable[Block],
    target: int = TARGET_CHARS,
    overlap: int = OVERLAP_CHARS,
    max_chunks: int | None = None,
    checkpoint: Callable[[], None] = lambda: None,
) -> list[ChunkText]:
    """Chunks of the blocks; DocumentTooLarge past `max_chunks`. `checkpoint` is called
    every few hundred chunks, so that a stop is noticed on a long document."""
    if not 0 <= overlap < target // 2:
        raise ValueError("overlap must be less than half the target size")
    chunks: list[ChunkText] = []
    for (heading, parents), section in itertools.groupby(
        blocks, key=lambda block: (block.heading, block.parents)
    ):
        for text, page, page_end in _pack_section(list(section), target, overlap):
            chunks.append(ChunkText(len(chunks), text, page, heading, parents, page_end=page_end))
            if max_chunks is not None and len(chunks) > max_chunks:
                raise DocumentTooLarge(f"more than {max_chunks} chunks (KB_MAX_CHUNKS)")
            if len(chunks) % 256 == 0:
                checkpoint()
    return chunks


def with_context(chunks: list[ChunkText], filename: str) -> list[ChunkText]:
    """The chunks, each knowing its document's title and its section's heading path."""
    title = document_title(chunks, filename)
    return [dataclasses.replace(chunk, context=section_context(title, chunk)) for chunk in chunks]


def document_title(chunks: list[ChunkText], filename: str) -> str:
    """The heading above all the document's others (its first heading when that is
    the only outermost one), or else its file name in words."""
    outermost = {(chunk.parents or (chunk.heading,))[0] for chunk in chunks if chunk.heading}
    if len(outermost) == 1:
        return outermost.pop()
    return _FILENAME_SEPARATORS.sub(" ", filename.rsplit(".", 1)[0]).strip() or filename


def section_context(title: str, chunk: ChunkText) -> str:
    """Where a chunk stands: the document's title and its section's heading path."""
    path = [title, *chunk.parents, *([chunk.heading] if chunk.heading else [])]
    context = CONTEXT_SEPARATOR.join(dict.fromkeys(heading.strip() for heading in path))
    return context[:MAX_CONTEXT_CHARS]


def contextual_text(context: str | None, text: str) -> str:
    """What is embedded and indexed for a chunk: its context, then its text."""
    return f"{context}\n{text}" if context else text


def merge_passage(texts: list[str]) -> str:
    """Consecutive chunks as one passage: the overlap each chunk repeats from the one
    before (its first OVERLAP_CHARS at most) appears once."""
    passage = texts[0] if texts else ""
    for text in texts[1:]:
        rest = _after_overlap(passage, text)
        passage = f"{passage}\n{rest}" if rest else passage
    return passage


def own_parts(texts: list[str], starts: list[bool]) -> list[str]:
    """Each chunk's text without the overlap it repeats from the one before, where it
    does not start a section (`starts`): the chunks read one after the other as the
    text they were cut from."""
    return [
        text if start or index == 0 else _after_overlap(texts[index - 1], text)
        for index, (text, start) in enumerate(zip(texts, starts, strict=True))
    ]


def _after_overlap(before: str, text: str) -> str:
    """`text` without the start it repeats of the end of `before`."""
    repeated = next(
        (
            size
            for size in range(min(len(text), len(before), 2 * OVERLAP_CHARS), 0, -1)
            if before.endswith(text[:size])
        ),
        0,
    )
    return text[repeated:].lstrip("\n")


def pages_of(spans: Sequence[tuple[int | None, int | None]]) -> tuple[int | None, int | None]:
    """The pages a run of chunks covers, from each one's (page, page_end): the first
    one's page, and the last page any reaches when that is another."""
    pages = [page for span in spans for page in span if page is not None]
    if not pages:
        return None, None
    first = spans[0][0] if spans[0][0] is not None else min(pages)
    return first, _page_end(first, max(pages))


def _pack_section(
    section: list[Block], target: int, overlap: int
) -> Iterator[tuple[str, int | None, int | None]]:
    """Each chunk's text, the page its own text starts on (the overlap it repeats is the
    previous chunk's), and the last page it reaches when that is another."""
    current: list[str] = []
    length = 0  # of "\n".join(current)
    page: int | None = None
    last: int | None = None
    fresh = False  # whether `current` holds more than the overlap carried over
    # One character less than the room after an overlap, for the joining newline.
    for block in section:
        for paragraph in _paragraphs(block.text, target - overlap - 1):
            if fresh and length + 1 + len(paragraph) > target:
                text = _join(current)
                yield text, page, _page_end(page, last)
                tail = _tail(text, overlap)
                current = [tail] if tail else []
                length = len(tail)
                fresh = False
            if not fresh:
                page = block.page
            last = block.page
            length += len(paragraph) + (1 if current else 0)
            current.append(paragraph)
            fresh = True
    if fresh:
        yield _join(current), page, _page_end(page, last)


def _page_end(first: int | None, last: int | None) -> int | None:
    return last if last is not None and last != first else None


def _join(pieces: list[str]) -> str:
    return "\n".join(pieces)


def _paragraphs(text: str, limit: int) -> Iterator[str]:
    """Normalised paragraphs, none longer than `limit` characters."""
    for raw in _PARAGRAPH_BREAK.split(text):
        paragraph = _SPACES.sub(" ", _CJK_LINE_BREAK.sub("", raw)).strip()
        if paragraph:
            yield from _split_long(paragraph, limit)


def _split_long(paragraph: str, limit: int) -> Iterator[str]:
    if len(paragraph) <= limit:
        yield paragraph
        return
    current = ""
    for sentence in _SENTENCE_END.split(paragraph):
        for piece in _hard_wrap(sentence, limit):
            joined = _concat(current, piece)
            if current and len(joined) > limit:
                yield current
                joined = piece
            current = joined
    if current:
        yield current


def _hard_wrap(sentence: str, limit: int) -> Iterator[str]:
    """Cut an over-long sentence at the last space before the limit, else at the limit.

    Offsets, not slices of the remainder: cutting a 50 MB sentence by copying what is
    left after each cut took time quadratic in its length."""
    sentence = sentence.strip()
    start, end = 0, len(sentence)
    while end - start > limit:
        cut = sentence.rfind(" ", start, start + limit) - start
        cut = start + (cut if cut > limit // 2 else limit)
        yield sentence[start:cut].strip()
        start = cut
        while start < end and sentence[start].isspace():
            start += 1
    if start < end:
        yield sentence[start:end]


def _concat(left: str, right: str) -> str:
    """Join two pieces of one paragraph: no space between CJK characters."""
    if not left:
        return right
    return left + right if _is_cjk(left[-1]) or _is_cjk(right[0]) else f"{left} {right}"


def _is_cjk(char: str) -> bool:
    return "\u2e80" <= char <= "\u9fff" or "\uf900" <= char <= "\uffef"  # = _CJK


def _tail(text: str, overlap: int) -> str:
    """About the last `overlap` characters, starting after a space if one is near."""
    if overlap == 0 or len(text) <= overlap:
        return ""
    tail = text[-overlap:]
    space = tail.find(" ")
    if 0 <= space < overlap // 2:
        tail = tail[space + 1 :]
    return tail.strip()
