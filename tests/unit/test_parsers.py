"""Parsers on real files written to tmp_path: PDF, DOCX, plain text and Markdown."""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import docx
import pytest
from pypdf import PdfReader, PdfWriter

from kb_cli.errors import ParseError
from kb_cli.parsers import KINDS, Block, ParseLimits, kind_for_filename, parse
from kb_cli.parsers.common import clean_heading
from tests.docgen import CHINESE_MARKDOWN, make_docx, make_encrypted_pdf, make_pdf, paged_text

PDF = KINDS[".pdf"].content_type
DOCX = KINDS[".docx"].content_type
TXT = KINDS[".txt"].content_type
MD = KINDS[".md"].content_type


@pytest.fixture(params=["pypdf", "pdfium"])
def limits(request) -> ParseLimits:
    """Every PDF test runs against both PDF backends."""
    return ParseLimits(pdf_backend=request.param)


class Progress:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total))


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def parse_bytes(
    tmp_path: Path, name: str, data: bytes, content_type: str, limits: ParseLimits | None = None
) -> list[Block]:
    return parse(write(tmp_path, name, data), content_type, Progress(), limits)


# --- PDF ---------------------------------------------------------------------------


def test_pdf_blocks_carry_page_numbers_and_progress_per_page(
    tmp_path: Path, limits: ParseLimits
) -> None:
    path = write(tmp_path, "three.pdf", make_pdf(["first page", "second page", "third page"]))
    progress = Progress()
    blocks = parse(path, PDF, progress, limits)
    assert [block.page for block in blocks] == [1, 2, 3]
    assert ["first" in blocks[0].text, "second" in blocks[1].text, "third" in blocks[2].text] == [
        True,
        True,
        True,
    ]
    assert all(block.heading is None for block in blocks)
    assert progress.calls == [(1, 3), (2, 3), (3, 3)]


def test_pdf_blank_page_gives_no_block_but_still_reports_progress(
    tmp_path: Path, limits: ParseLimits
) -> None:
    path = write(tmp_path, "gap.pdf", make_pdf(["alpha", "", "gamma"]))
    progress = Progress()
    blocks = parse(path, PDF, progress, limits)
    assert [block.page for block in blocks] == [1, 3]
    assert "gamma" in blocks[1].text
    assert progress.calls == [(1, 3), (2, 3), (3, 3)]


def test_pdf_thirty_pages(tmp_path: Path, limits: ParseLimits) -> None:
    pages = paged_text(30)
    path = write(tmp_path, "long.pdf", make_pdf(pages))
    progress = Progress()
    blocks = parse(path, PDF, progress, limits)
    assert [block.page for block in blocks] == list(range(1, 31))
    for block in blocks:
        markers = re.findall(r"page marker p(\d+)\b", block.text)
        assert markers == [str(block.page)]
        assert block.text.split() == pages[block.page - 1].split()
    assert progress.calls == [(n, 30) for n in range(1, 31)]
    assert progress.calls[-1] == (30, 30)


def test_pdf_encrypted_with_password_is_rejected(tmp_path: Path, limits: ParseLimits) -> None:
    path = write(tmp_path, "locked.pdf", make_encrypted_pdf("top secret text", "secret"))
    with pytest.raises(Exception, match=r"(?i)encrypt") as caught:
        parse(path, PDF, Progress(), limits)
    assert "top secret" not in str(caught.value)


def test_pdf_encrypted_with_empty_user_password_is_read(
    tmp_path: Path, limits: ParseLimits
) -> None:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf(["open text", "more text"]))))
    writer.encrypt(user_password="", owner_password="x")
    out = io.BytesIO()
    writer.write(out)
    progress = Progress()
    blocks = parse(write(tmp_path, "owner-only.pdf", out.getvalue()), PDF, progress, limits)
    assert [(block.page, block.text.strip()) for block in blocks] == [
        (1, "open text"),
        (2, "more text"),
    ]
    assert progress.calls[-1] == (2, 2)


@pytest.mark.parametrize("cut", [0, 10, 60, 200, -80, -30])
def test_pdf_truncated_raises(tmp_path: Path, cut: int, limits: ParseLimits) -> None:
    data = make_pdf(["some text", "other text"])
    with pytest.raises(Exception):  # noqa: B017 - the worker maps any exception to parse_error
        parse_bytes(tmp_path, "cut.pdf", data[:cut], PDF, limits)


@pytest.mark.parametrize(
    "data",
    [
        b"this is not a pdf at all",
        b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages" + b"\x00" * 64,
        bytes(range(256)) * 4,
    ],
)
def test_pdf_garbage_raises(tmp_path: Path, data: bytes, limits: ParseLimits) -> None:
    with pytest.raises(Exception):  # noqa: B017 - the worker maps any exception to parse_error
        parse_bytes(tmp_path, "garbage.pdf", data, PDF, limits)


# --- DOCX --------------------------------------------------------------------------


def test_docx_heading_carried_and_table_in_order(tmp_path: Path) -> None:
    data = make_docx(
        "Release notes",
        ["Version 2 adds audits.", "The worker reports progress."],
        [["component", "change"], ["worker", "leases and heartbeats"]],
    )
    progress = Progress()
    blocks = parse(write(tmp_path, "notes.docx", data), DOCX, progress)
    assert [block.text for block in blocks] == [
        "Release notes",
        "Version 2 adds audits.",
        "The worker reports progress.",
        "component | change\nworker | leases and heartbeats",
    ]
    assert all(block.heading == "Release notes" for block in blocks)
    assert all(block.page is None for block in blocks)
    assert progress.calls
    done, total = progress.calls[-1]
    assert done == total
    assert [done for done, _ in progress.calls] == list(range(1, total + 1))


def test_docx_document_order_across_headings_and_tables(tmp_path: Path) -> None:
    document = docx.Document()
    document.add_paragraph("Preamble before any heading.")
    document.add_heading("Alpha", level=1)
    document.add_paragraph("alpha one")
    table = document.add_table(rows=2, cols=2)
    for r, row in enumerate([["a1", "a2"], ["b1", "b2"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_paragraph("alpha after table")
    document.add_heading("Beta", level=2)
    document.add_paragraph("")  # empty paragraphs are dropped
    document.add_paragraph("beta one")
    out = io.BytesIO()
    document.save(out)

    blocks = parse_bytes(tmp_path, "order.docx", out.getvalue(), DOCX)
    assert [(block.text, block.heading) for block in blocks] == [
        ("Preamble before any heading.", None),
        ("Alpha", "Alpha"),
        ("alpha one", "Alpha"),
        ("a1 | a2\nb1 | b2", "Alpha"),
        ("alpha after table", "Alpha"),
        ("Beta", "Beta"),
        ("beta one", "Beta"),
    ]


def test_docx_that_is_not_a_zip_raises(tmp_path: Path) -> None:
    with pytest.raises(Exception):  # noqa: B017 - the worker maps any exception to parse_error
        parse_bytes(tmp_path, "fake.docx", b"plain text pretending to be a docx", DOCX)


def test_docx_zip_without_document_raises_parse_error(tmp_path: Path) -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("hello.txt", "hi")
    with pytest.raises(ParseError):
        parse_bytes(tmp_path, "zip.docx", out.getvalue(), DOCX)


# --- text and Markdown -------------------------------------------------------------


def test_text_utf8(tmp_path: Path) -> None:
    text = "héllo wörld — 中文 ✓\nsecond line"
    progress = Progress()
    blocks = parse(write(tmp_path, "u.txt", text.encode("utf-8")), TXT, progress)
    assert blocks == [Block(text)]
    assert progress.calls == [(1, 1)]


def test_text_utf8_bom_is_dropped(tmp_path: Path) -> None:
    blocks = parse_bytes(tmp_path, "bom.txt", b"\xef\xbb\xbf" + "café".encode(), TXT)
    assert [block.text for block in blocks] == ["café"]
    assert "\ufeff" not in blocks[0].text


def test_text_gbk_chinese_decoded(tmp_path: Path) -> None:
    text = "知识库入库流程：文档上传后成为草稿，提交后由后台工作进程解析。"
    blocks = parse_bytes(tmp_path, "gbk.txt", text.encode("gbk"), TXT)
    assert [block.text for block in blocks] == [text]


def test_markdown_gbk_chinese_headings(tmp_path: Path) -> None:
    blocks = parse_bytes(tmp_path, "gbk.md", CHINESE_MARKDOWN.encode("gbk"), MD)
    assert [block.heading for block in blocks] == ["知识库入库流程", "审核与发布", "检索"]


def test_text_cp1252_fallback(tmp_path: Path) -> None:
    text = "Café au lait, déjà vu — 20 €"
    blocks = parse_bytes(tmp_path, "latin.txt", text.encode("cp1252"), TXT)
    assert [block.text for block in blocks] == [text]


@pytest.mark.parametrize("newline", [b"\r\n", b"\r"])
def test_text_line_endings_normalised(tmp_path: Path, newline: bytes) -> None:
    data = newline.join([b"line one", b"line two", b"", b"line four", b""])
    blocks = parse_bytes(tmp_path, "crlf.txt", data, TXT)
    assert [block.text for block in blocks] == ["line one\nline two\n\nline four\n"]
    assert "\r" not in blocks[0].text


def test_text_with_nul_bytes_raises(tmp_path: Path) -> None:
    with pytest.raises(Exception):  # noqa: B017 - the worker maps any exception to parse_error
        parse_bytes(tmp_path, "binary.txt", b"MZ\x90\x00\x03\x00\x00\x00text", TXT)


@pytest.mark.parametrize("data", [b"", b"   \n\r\n\t  \n"])
def test_text_empty_gives_no_blocks(tmp_path: Path, data: bytes) -> None:
    progress = Progress()
    assert parse(write(tmp_path, "empty.txt", data), TXT, progress) == []
    assert progress.calls == [(1, 1)]


def test_markdown_headings_carried_on_blocks(tmp_path: Path) -> None:
    source = (
        "Intro before headings.\n"
        "\n"
        "# Title\n"
        "First section text.\n"
        "#not-a-heading because no space\n"
        "## Sub section ##\n"
        "Second section text.\n"
        "###### Deep\n"
        "Deep text.\n"
    )
    blocks = parse_bytes(tmp_path, "doc.md", source.encode(), MD)
    assert [block.heading for block in blocks] == [None, "Title", "Sub section", "Deep"]
    assert blocks[0].text.strip() == "Intro before headings."
    assert blocks[1].text.startswith("Title\n")
    assert "First section text." in blocks[1].text
    assert "#not-a-heading because no space" in blocks[1].text
    assert blocks[2].text.startswith("Sub section\n")
    assert "Second section text." in blocks[2].text
    assert "Deep text." in blocks[3].text
    assert all(block.page is None for block in blocks)


def test_markdown_chinese_sample(tmp_path: Path) -> None:
    blocks = parse_bytes(tmp_path, "zh.md", CHINESE_MARKDOWN.encode("utf-8"), MD)
    assert [block.heading for block in blocks] == ["知识库入库流程", "审核与发布", "检索"]
    assert "后台工作进程" in blocks[0].text
    assert "错误码" in blocks[1].text
    assert "中文检索" in blocks[2].text


def test_plain_text_is_not_split_at_hash_lines(tmp_path: Path) -> None:
    source = "# Looks like a heading\nbody\n## another\nmore\n"
    blocks = parse_bytes(tmp_path, "hash.txt", source.encode(), TXT)
    assert blocks == [Block(source)]


# --- file kinds --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filename", "extension"),
    [
        ("report.pdf", ".pdf"),
        ("REPORT.PDF", ".pdf"),
        ("Notes.DocX", ".docx"),
        ("readme.MD", ".md"),
        ("a.b.Txt", ".txt"),
    ],
)
def test_kind_for_filename_is_case_insensitive(filename: str, extension: str) -> None:
    kind = kind_for_filename(filename)
    assert kind is not None
    assert kind is KINDS[extension]
    assert kind.extension == extension


@pytest.mark.parametrize(
    "filename", ["setup.exe", "SETUP.EXE", "old.doc", "noextension", "archive.pdf.zip", ".pdf"]
)
def test_kind_for_filename_rejects_unsupported(filename: str) -> None:
    assert kind_for_filename(filename) is None


# --- headings without generator attributes ---------------------------------------------


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("计算属性缓存 vs 方法 {#computed-caching-vs-methods}", "计算属性缓存 vs 方法"),
        ("Path Parameters { #path-parameters }", "Path Parameters"),
        ("Install {.tabbed}", "Install"),
        ("Install {#install .tabbed data-x=1}", "Install"),
        ("Setup {: #setup }", "Setup"),
        ("Quickstart¶", "Quickstart"),
        ("Quickstart Permalink to this heading", "Quickstart"),
        ("C# {#c-sharp}", "C#"),
        ("Sets {a, b}", "Sets {a, b}"),  # braces that are words stay
        ("{#only-an-anchor}", "{#only-an-anchor}"),  # nothing else left: kept
    ],
)
def test_a_heading_loses_its_generator_attributes(raw, clean):
    assert clean_heading(raw) == clean


def read_blocks(tmp_path: Path, name: str, text: str) -> list[Block]:
    kind = kind_for_filename(name)
    assert kind is not None
    return parse_bytes(tmp_path, name, text.encode(), kind.content_type)


def test_markdown_rst_and_html_headings_are_indexed_and_shown_clean(tmp_path):
    markdown = read_blocks(
        tmp_path, "a.md", "# Guide {#guide}\n\n## 计算属性缓存 vs 方法 {#computed}\n\nBody.\n"
    )
    assert [(b.heading, b.parents) for b in markdown][-1] == ("计算属性缓存 vs 方法", ("Guide",))
    assert markdown[-1].text.startswith("计算属性缓存 vs 方法\n")  # the heading line of the text
    rst = ".. _install-label:\n\nInstallation\n============\n\nRun pip.\n"
    [block] = read_blocks(tmp_path, "a.txt", rst)
    assert block.heading == "Installation" and "_install-label" not in block.text
    html = (
        "<html><body><h1>Guide<a class='headerlink' href='#guide'>¶</a></h1>"
        "<h2 id='x'>Setup {#setup}</h2><p>Run it.</p></body></html>"
    )
    blocks = read_blocks(tmp_path, "a.html", html)
    assert (blocks[-1].heading, blocks[-1].parents) == ("Setup", ("Guide",))
