"""The parsers of slides, spreadsheets, CSV, web pages, mail and e-books, on files the
generator writes: what each keeps, how a file is recognised, and how a malformed or
hostile one fails (a ParseError naming the part, or DocumentTooLarge)."""

from __future__ import annotations

import io
import time
import zipfile
from pathlib import Path

import pytest

from kb_cli.errors import DocumentTooLarge, ParseError
from kb_cli.parsers import (
    KINDS,
    Block,
    Budget,
    ParseLimits,
    delimited,
    epub,
    html_page,
    mail,
    parse,
    sheets,
    slides,
)
from kb_cli.parsers.detect import detect, detect_bytes
from kb_cli.parsers.numformat import render
from tests.docgen import (
    FIELD_GUIDE,
    ROADMAP_SLIDES,
    STATUS_PAGE_HTML,
    budget_sheets,
    make_docx,
    make_eml,
    make_epub,
    make_pdf,
    make_pptx,
    make_xlsx,
    many_part_mail,
    zip_bomb,
    zip_package,
)

OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504


def write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def read(module, path: Path, limits: ParseLimits | None = None) -> list[Block]:
    return module.parse(path, lambda done, total: None, Budget(limits or ParseLimits()))


# --- detection ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "data", "extension"),
    [
        ("deck.bin", make_pptx([{"title": "T"}]), ".pptx"),
        ("sheet", make_xlsx({"S": [["a"]]}), ".xlsx"),
        ("book.zip", make_epub("B", [("C", "<p>x</p>")]), ".epub"),
        ("letter.pptx", make_docx("H", ["p"]), ".docx"),  # content beats the name
        ("scan.txt", make_pdf(["text"]), ".pdf"),
        ("saved-page", "<!DOCTYPE html><html><body>x</body></html>", ".html"),
        ("page", '<?xml version="1.0"?>\n<html xmlns="http://www.w3.org/1999/xhtml">', ".html"),
        ("message", make_eml("Hi", "a@example.com", "Tue, 1 Dec 2026 10:00:00 +0000", "x"), ".eml"),
        ("notes.txt", "<html><body>a page named as text stays text</body></html>", ".txt"),
        ("table.tsv", "a\tb\n1\t2\n", ".tsv"),
        ("damaged.xlsx", b"PK\x03\x04 not really a zip", ".xlsx"),  # parse_error later
    ],
)
def test_a_file_is_recognised_by_its_content_first(tmp_path, name, data, extension):
    kind = detect(write(tmp_path, name, data), name)
    assert kind is not None and kind.extension == extension


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("old.doc", OLE2),
        ("old.docx", OLE2),  # a legacy file renamed is still legacy
        ("photos.zip", zip_package({"a.jpg": b"x"})),
        ("archive.txt", zip_package({"a.jpg": b"x"})),
        ("program", b"\x7fELF\x02\x01\x01"),
        ("notes", "just some words, no headers"),
    ],
)
def test_what_kb_does_not_read_is_not_recognised(tmp_path, name, data):
    assert detect(write(tmp_path, name, data), name) is None


def test_an_attachment_is_recognised_in_memory():
    kind = detect_bytes(make_pptx([{"title": "T"}]), "attachment")
    assert kind is not None and kind.module == "slides"


# --- slides ------------------------------------------------------------------------


def test_a_slide_keeps_its_number_title_table_and_notes(tmp_path):
    blocks = read(slides, write(tmp_path, "d.pptx", make_pptx(ROADMAP_SLIDES)))
    assert [(b.page, b.heading) for b in blocks] == [
        (1, "Product roadmap 2027"),
        (2, "Q1: Offline search"),
        (3, "Q2: Mobile uploads"),
        (4, "Risks"),
    ]
    paragraphs = blocks[1].text.split("\n\n")
    assert paragraphs[0] == "Q1: Offline search"
    assert "Speaker notes:" in paragraphs
    assert "Say that the offline index ships in March, after the security review." in paragraphs
    assert "2" not in paragraphs  # the notes page's slide number is not text
    assert "Camera capture | Mobile team | April" in blocks[2].text.split("\n\n")


def test_slides_follow_the_deck_order_and_untitled_slides_are_numbered(tmp_path):
    deck = make_pptx([{"lines": ["first"]}, {"title": "Second", "lines": ["x"]}])
    # the deck's order is its slide list, whatever the parts are called
    rels = "ppt/_rels/presentation.xml.rels"
    with zipfile.ZipFile(io.BytesIO(deck)) as package:
        order = package.read(rels).replace(b"slide1.xml", b"slideX.xml")
    order = order.replace(b"slide2.xml", b"slide1.xml").replace(b"slideX.xml", b"slide2.xml")
    swapped = _replace_member(deck, rels, order)
    blocks = read(slides, write(tmp_path, "d.pptx", swapped))
    assert [(b.page, b.heading) for b in blocks] == [(1, "Second"), (2, "Slide 2")]


def test_a_malformed_slide_is_a_parse_error_naming_it(tmp_path):
    deck = make_pptx([{"title": "One"}, {"title": "Two"}, {"title": "Three"}])
    broken = _replace_member(deck, "ppt/slides/slide3.xml", b"<p:sld><unclosed>")
    with pytest.raises(ParseError, match=r"^slide 3: not well-formed XML"):
        read(slides, write(tmp_path, "d.pptx", broken))


def test_a_deck_without_its_presentation_part_says_so(tmp_path):
    deck = zip_package({"ppt/slides/slide1.xml": "<x/>"})
    with pytest.raises(ParseError, match=r"presentation.*missing"):
        read(slides, write(tmp_path, "d.pptx", deck))


# --- spreadsheets and CSV ----------------------------------------------------------


def test_sheet_rows_come_in_blocks_with_the_header_repeated(tmp_path):
    blocks = read(sheets, write(tmp_path, "b.xlsx", make_xlsx(budget_sheets())))
    headings = [block.heading for block in blocks]
    assert headings == [
        "Budget, rows 1–15",
        "Budget, rows 16–29",
        "Budget, rows 30–42",
        "Headcount, rows 1–4",
    ]
    header = "Region | Team | Quarter | Budget | Approved on | Share"
    assert all(block.text.split("\n\n")[0] == header for block in blocks[:3])
    assert all(len(block.text) <= 1000 for block in blocks)  # one chunk each
    assert "Engineering | 1,204 | 40" in blocks[3].text.split("\n\n")


@pytest.mark.parametrize(
    ("value", "code", "shown"),
    [
        (1234.5, "#,##0.00", "1,234.50"),
        (0.125, "0.0%", "12.5%"),
        (46217, "yyyy-mm-dd", "2026-07-14"),
        (46217.75, "m/d/yyyy h:mm", "7/14/2026 18:00"),
        (0.75, "h:mm AM/PM", "6:00 PM"),
        (1234.5, '"$"#,##0.00', "$1,234.50"),
        (-1234.5, "#,##0.00;(#,##0.00)", "(1,234.50)"),
        (1234.5, "[$€-407] #,##0", "€ 1,234"),
        (12, '0" units"', "12 units"),
        (46217, "d-mmm-yy", "14-Jul-26"),
        (46217, "mmmm d, yyyy", "July 14, 2026"),
        (3.14159, "General", "3.14159"),
        (1e20, "0.00E+00", "1.00E+20"),
        (42, "[Red]0", "42"),
    ],
)
def test_numbers_and_dates_read_as_the_cell_shows_them(value, code, shown):
    assert render(value, code) == shown


def test_a_sheet_declaring_billions_of_cells_is_refused_before_its_rows(tmp_path):
    # The guide's hostile input: only A1 and XFD1048576, a few KB on disk.
    sparse = make_xlsx({"Sparse": [["a"]]}, dimension={"Sparse": "A1:XFD1048576"})
    started = time.monotonic()
    with pytest.raises(DocumentTooLarge, match="sheet Sparse declares A1:XFD1048576"):
        read(sheets, write(tmp_path, "s.xlsx", sparse))
    assert time.monotonic() - started < 5


def test_a_malformed_sheet_is_a_parse_error_naming_the_sheet(tmp_path):
    book = make_xlsx({"Budget": [["a", "b"], ["c", "d"]]})
    broken = _replace_member(book, "xl/worksheets/sheet1.xml", b"<worksheet><sheetData><row>")
    with pytest.raises(ParseError, match=r"^sheet Budget: not well-formed XML"):
        read(sheets, write(tmp_path, "b.xlsx", broken))
    missing = _replace_member(book, "xl/sharedStrings.xml", b'<sst xmlns="x"/>')
    with pytest.raises(ParseError, match=r"^sheet Budget, row 1: shared string 0"):
        read(sheets, write(tmp_path, "b.xlsx", missing))


def test_a_csv_and_a_tsv_read_as_tables(tmp_path):
    text = 'city,note\nOslo,"two\nlines"\nBergen,rain\n'
    blocks = read(delimited, write(tmp_path, "t.csv", text))
    assert blocks == [Block("city | note\n\nOslo | two lines\n\nBergen | rain", heading="rows 1–3")]
    tsv = read(delimited, write(tmp_path, "t.tsv", "a\tb,c\n1\t2,3\n"))
    assert tsv[0].text == "a | b,c\n\n1 | 2,3"


def test_a_long_csv_repeats_its_header_in_each_block(tmp_path):
    rows = ["id,description"] + [
        f"{n},item number {n} of the inventory list" for n in range(1, 200)
    ]
    blocks = read(delimited, write(tmp_path, "t.csv", "\n".join(rows)))
    assert len(blocks) > 5
    assert all(block.text.startswith("id | description\n\n") for block in blocks)
    assert blocks[1].heading.startswith(f"rows {int(blocks[0].heading.split('–')[1]) + 1}–")


# --- HTML --------------------------------------------------------------------------


def test_a_page_keeps_its_main_content_and_headings(tmp_path):
    blocks = read(html_page, write(tmp_path, "p.html", STATUS_PAGE_HTML))
    text = "\n".join(block.text for block in blocks)
    for boilerplate in ("Status home", "History", "analytics", "font-family", "Related:", "©"):
        assert boilerplate not in text, boilerplate
    assert blocks[0] == Block(
        "Incident report: slow search on 3 November",
        heading="Incident report: slow search on 3 November",
    )
    assert ("Cause", ("Incident report: slow search on 3 November",)) in {
        (block.heading, block.parents) for block in blocks
    }
    assert "10:30 | Reindexing job paused" in text


def test_a_page_without_marked_main_content_drops_only_the_boilerplate():
    page = (
        "<html><head><title>Cafeteria menu</title></head><body><nav>Home</nav>"
        "<header>Intranet</header><div><p>Soup of the day: lentil.</p></div>"
        "<footer>Contact</footer></body></html>"
    )
    blocks = html_page.html_blocks(page, Budget(ParseLimits()))
    assert blocks == [Block("Soup of the day: lentil.", heading="Cafeteria menu")]


def test_a_hundred_thousand_nested_divs_lose_no_text():
    """lxml, justext and trafilatura return nothing here without an error (the guide)."""
    depth = 100_000
    page = "<html><body>" + "<div>" * depth + "<p>the deepest sentence</p>" + "</div>" * depth
    blocks = html_page.html_blocks(page + "<p>after it</p></body></html>", Budget(ParseLimits()))
    assert [block.text for block in blocks] == ["the deepest sentence", "after it"]


def test_a_page_counts_toward_the_character_limit():
    page = "<p>" + "word " * 1000 + "</p>"
    with pytest.raises(DocumentTooLarge, match="KB_MAX_CHARS"):
        html_page.html_blocks(page, Budget(ParseLimits(max_chars=1000)))


# --- mail --------------------------------------------------------------------------

SUBJECT = "Quarterly access review"
DATE = "Mon, 30 Nov 2026 08:15:00 +0000"


def test_a_mail_keeps_subject_sender_date_body_and_attachments(tmp_path):
    message = make_eml(
        SUBJECT,
        "Ana Silva <ana@example.com>",
        DATE,
        "Please review the attached list by Friday.",
        [
            (
                "list.docx",
                "application/octet-stream",
                make_docx("Access list", ["Team A: 4 people"]),
            ),
            ("photo.jpg", "image/jpeg", b"\xff\xd8\xff\xe0 not text"),
            ("terms.pdf", "application/pdf", make_pdf(["Terms page one", "Terms page two"])),
        ],
    )
    blocks = read(mail, write(tmp_path, "m.eml", message))
    assert blocks[0].heading == SUBJECT
    assert blocks[0].text.split("\n\n")[:3] == [
        f"Subject: {SUBJECT}",
        "From: Ana Silva <ana@example.com>",
        "To: knowledge-base@example.com",
    ]
    assert f"Date: {DATE}" in blocks[0].text
    assert Block("Please review the attached list by Friday.", heading=SUBJECT) in blocks
    docx_block = next(block for block in blocks if "Team A" in block.text)
    assert docx_block.heading == "Access list"
    assert docx_block.parents == (SUBJECT, "attachment 1: list.docx")
    pdf_pages = [block for block in blocks if "Terms page" in block.text]
    # the image is left out; the PDF is the third attachment and keeps its pages
    assert [(b.page, b.heading) for b in pdf_pages] == [
        (1, "attachment 3: terms.pdf"),
        (2, "attachment 3: terms.pdf"),
    ]


def test_an_html_only_mail_reads_its_html_body(tmp_path):
    from email.message import EmailMessage

    message = EmailMessage()
    message["Subject"], message["From"], message["Date"] = SUBJECT, "a@example.com", DATE
    message.set_content(
        "<html><body><nav>menu</nav><h1>Review</h1><p>Due Friday.</p></body></html>", subtype="html"
    )
    blocks = read(mail, write(tmp_path, "m.eml", message.as_bytes()))
    assert Block("Due Friday.", heading="Review", parents=(SUBJECT,)) in blocks
    assert not any("menu" in block.text for block in blocks)


def test_a_damaged_attachment_is_a_parse_error_naming_it(tmp_path):
    message = make_eml(
        SUBJECT,
        "a@example.com",
        DATE,
        "body",
        [("report.pdf", "application/pdf", b"%PDF-1.4 broken")],
    )
    with pytest.raises(ParseError, match=r"^attachment 1 \(report.pdf\): "):
        read(mail, write(tmp_path, "m.eml", message))


def test_a_mail_of_more_than_a_thousand_parts_is_too_large(tmp_path):
    """One part over the limit (the mail, its body, 999 attachments), refused before the
    parse; the process tests send 10,000 parts with bounded memory."""
    path = write(tmp_path, "many.eml", many_part_mail(999))
    with pytest.raises(DocumentTooLarge, match=r"more than 1000 MIME parts \(1001\)"):
        read(mail, path)


def test_the_parts_counted_before_the_parse_are_the_parts_the_parse_finds():
    """The refusal above happens on the raw bytes; it must count what the parser counts,
    for a mail with an HTML alternative (a nested multipart) and attachments."""
    from email import message_from_bytes

    from kb_cli.parsers.mail import _counted_parts

    attachments = [("a.txt", "text/plain", b"x"), ("b.pdf", "application/pdf", b"%PDF-1.4")]
    for message in (
        make_eml("s", "a@example.com", DATE, "plain body", attachments, html="<p>html</p>"),
        make_eml("s", "a@example.com", DATE, "only a body"),
        many_part_mail(40),
    ):
        assert _counted_parts(message) == sum(1 for _ in message_from_bytes(message).walk())


# --- EPUB --------------------------------------------------------------------------


def test_a_book_keeps_its_chapter_titles_in_reading_order(tmp_path):
    blocks = read(epub, write(tmp_path, "b.epub", make_epub("Field guide", FIELD_GUIDE)))
    assert [block.heading for block in blocks if not block.parents] == [
        "Chapter 1: Before the site visit",
        "Chapter 1: Before the site visit",
        "Chapter 2: Measuring the room",
        "Chapter 2: Measuring the room",
        "Chapter 3: Reporting",
        "Chapter 3: Reporting",
    ]
    packing = next(block for block in blocks if block.heading == "Packing list")
    assert packing.parents == ("Chapter 1: Before the site visit",)


def test_a_chapter_title_comes_from_the_table_of_contents(tmp_path):
    book = make_epub("B", [("The long winter", "<p>Snow until April.</p>")])
    blocks = read(epub, write(tmp_path, "b.epub", book))
    assert blocks == [Block("Snow until April.", heading="The long winter")]


def test_a_missing_chapter_is_a_parse_error_naming_it(tmp_path):
    book = make_epub("B", [("One", "<p>1</p>"), ("Two", "<p>2</p>")])
    broken = _drop_member(book, "OEBPS/text/chapter2.xhtml")
    with pytest.raises(
        ParseError, match=r"^chapter 2: the part OEBPS/text/chapter2.xhtml is missing"
    ):
        read(epub, write(tmp_path, "b.epub", broken))


# --- zip bombs, in the parse child -------------------------------------------------

BOMBS = {
    ".pptx": (make_pptx([{"title": "T"}]), "ppt/slides/slide1.xml"),
    ".xlsx": (make_xlsx({"S": [["a"]]}), "xl/worksheets/sheet1.xml"),
    ".epub": (make_epub("B", [("C", "<p>x</p>")]), "OEBPS/text/chapter1.xhtml"),
}


@pytest.mark.parametrize("extension", sorted(BOMBS))
def test_a_member_that_inflates_past_the_limit_is_refused_before_it_is_read(tmp_path, extension):
    package, member = BOMBS[extension]
    bomb = write(tmp_path, f"bomb{extension}", zip_bomb(package, member, 64 << 20))
    assert bomb.stat().st_size < 1 << 20
    limits = ParseLimits(max_decompressed_bytes=32 << 20, max_memory_bytes=256 << 20)
    with pytest.raises(DocumentTooLarge, match="KB_MAX_DECOMPRESSED_BYTES"):
        parse(bomb, KINDS[extension].content_type, lambda done, total: None, limits)


@pytest.mark.parametrize("extension", [".pptx", ".xlsx", ".epub", ".html", ".csv", ".eml"])
def test_a_truncated_file_is_a_parse_error_in_the_parse_child(tmp_path, extension):
    whole = {
        ".pptx": make_pptx(ROADMAP_SLIDES),
        ".xlsx": make_xlsx(budget_sheets()),
        ".epub": make_epub("Field guide", FIELD_GUIDE),
        ".html": STATUS_PAGE_HTML.encode(),
        ".csv": b'a,b\n1,"unclosed\n',
        ".eml": make_eml(
            SUBJECT, "a@example.com", DATE, "body", [("t.pdf", "application/pdf", make_pdf(["x"]))]
        ),
    }[extension]
    path = write(tmp_path, f"cut{extension}", whole[: len(whole) // 2])
    try:
        blocks = parse(path, KINDS[extension].content_type, lambda done, total: None)
    except ParseError as error:
        assert "Traceback" not in str(error) and str(error)
    else:  # text formats read what there is
        assert extension in (".html", ".csv", ".eml") and isinstance(blocks, list)


def _replace_member(package: bytes, member: str, data: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(package)) as source:
        parts: dict[str, str | bytes] = {name: source.read(name) for name in source.namelist()}
    parts[member] = data
    return zip_package(parts)


def _drop_member(package: bytes, member: str) -> bytes:
    with zipfile.ZipFile(io.BytesIO(package)) as source:
        return zip_package({n: source.read(n) for n in source.namelist() if n != member})
