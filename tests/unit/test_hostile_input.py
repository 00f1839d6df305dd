"""Hostile and damaged input met by the parsers and the chunker directly: a page limit,
unpunctuated megabytes, AES-encrypted PDFs, a page tree that is its own kid."""

from __future__ import annotations

import io
import time

import pytest
from pypdf import PdfReader, PdfWriter

from kb_cli.chunking import chunk_blocks
from kb_cli.errors import ParseError
from kb_cli.parsers import Block, ParseLimits, parse
from tests.docgen import make_pdf, raw_pdf

PDF = "application/pdf"


def test_too_many_pages_is_too_large(tmp_path):
    with pytest.raises(Exception, match="KB_MAX_PAGES"):
        path = tmp_path / "pages.pdf"
        path.write_bytes(make_pdf(["one", "two", "three"]))
        parse(path, PDF, lambda done, total: None, ParseLimits(max_pages=2))


def test_the_chunker_is_linear_on_unpunctuated_text():
    """8 MB without a sentence end or a space: the old chunker copied the rest of the
    text at every cut (minutes at this size); a linear one takes about a second."""
    started = time.monotonic()
    chunks = chunk_blocks([Block("x" * 8_000_000)])
    elapsed = time.monotonic() - started
    assert sum(len(chunk.text) for chunk in chunks) >= 8_000_000
    assert elapsed < 15, elapsed


def aes_pdf(user_password: str) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf(["aes secret text"]))))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


@pytest.mark.parametrize("backend", ["pypdf", "pdfium"])
def test_aes_pdfs_are_read_or_say_they_have_a_password(tmp_path, backend):
    limits = ParseLimits(pdf_backend=backend)
    open_file = tmp_path / "open.pdf"
    open_file.write_bytes(aes_pdf(""))
    [block] = parse(open_file, PDF, lambda done, total: None, limits)
    assert "aes secret text" in block.text
    locked = tmp_path / "locked.pdf"
    locked.write_bytes(aes_pdf("secret"))
    with pytest.raises(ParseError, match="encrypted with a password"):
        parse(locked, PDF, lambda done, total: None, limits)


def cyclic_page_tree_pdf() -> bytes:
    """A page tree whose kid is the tree itself: pdfium opens it, fails on the page."""
    return raw_pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [2 0 R] /Count 1 >>",
        ]
    )


def test_a_page_pdfium_cannot_load_falls_back_to_pypdf(tmp_path):
    path = tmp_path / "cyclic.pdf"
    path.write_bytes(cyclic_page_tree_pdf())
    with pytest.raises(ParseError) as caught:
        parse(path, PDF, lambda done, total: None)
    assert "pdfium" not in str(caught.value).lower(), caught.value  # pypdf's verdict
