"""Slides, spreadsheets, CSV, web pages, mail and e-books through the CLI: detected by
content at upload, ingested, and found by a question with where the answer stands (the
slide, the sheet and its rows, the mail). The parsers alone: tests/unit/test_formats.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.docgen import make_pptx
from tests.helpers import SAMPLES, hits, object_keys, publish

FORMATS = SAMPLES / "formats"
NEW_SAMPLES = [
    SAMPLES / "product-roadmap.pptx",
    SAMPLES / "regional-budget.xlsx",
    *sorted(FORMATS.iterdir()),
]


def _published(invoke, root) -> dict[str, str]:
    """Every new sample uploaded, processed and published: file name -> document id."""
    tasks = invoke("upload", *map(str, NEW_SAMPLES), "--submit", "--json").records
    assert invoke("work", "--drain", "--json").code == 0
    ids = {path.name: task["document_id"] for path, task in zip(NEW_SAMPLES, tasks, strict=True)}
    for document_id in ids.values():
        publish(invoke, document_id)
    return ids


@pytest.fixture(scope="module")
def published_home(build_home):
    return build_home(_published)


@pytest.fixture
def published(enter_home, published_home) -> dict[str, str]:
    """The published samples (`_published`), which these tests only read."""
    return enter_home(published_home)


def top_hit(invoke, question: str) -> dict:
    found = hits(invoke, question)
    assert found, question
    return found[0]


def test_each_format_is_stored_with_its_content_type(invoke):
    records = invoke("upload", *map(str, NEW_SAMPLES), "--json").records
    assert {record["filename"]: record["content_type"] for record in records} == {
        "product-roadmap.pptx": (
            "application/vnd.openxmlformats-officedocument.presentationml.presentation"
        ),
        "regional-budget.xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "field-guide.epub": "application/epub+zip",
        "status-page.html": "text/html",
        "support-hours.csv": "text/csv",
        "vendor-renewal.eml": "message/rfc822",
    }


def test_a_slide_is_found_with_its_number_and_title(invoke, published):
    hit = top_hit(invoke, "When does the offline index ship?")
    assert hit["filename"] == "product-roadmap.pptx"
    assert hit["page"] == 2 and hit["heading"] == "Q1: Offline search"
    assert "ships in March" in hit["text"]  # from the speaker notes


def test_a_spreadsheet_row_is_found_with_its_sheet_rows_and_header(invoke, published):
    hit = top_hit(invoke, "Nordics field operations budget")
    assert hit["filename"] == "regional-budget.xlsx"
    assert hit["heading"] == "Budget, rows 30–42"
    lines = hit["text"].splitlines()
    assert lines[0] == "Region | Team | Quarter | Budget | Approved on | Share"
    # as the cells show it: currency, date and percent formats applied
    assert "Nordics | Field operations | Q3 | $48,250.00 | 2026-07-14 | 2.41%" in lines


def test_a_mail_and_its_attachment_are_found(invoke, published):
    subject = "Renewal of the translation vendor contract"
    hit = top_hit(invoke, "By when must we cancel the translation vendor contract?")
    assert hit["filename"] == "vendor-renewal.eml"
    assert hit["heading"] == subject and "From: Maria Keller" in hit["text"]
    hit = top_hit(invoke, "What does urgent translation work cost per word?")
    assert hit["filename"] == "vendor-renewal.eml"
    assert hit["heading"] == "attachment 1: renewal-terms.pdf" and "0.16 EUR" in hit["text"]


def test_a_page_a_table_and_a_book_keep_their_headings(invoke, published):
    page = top_hit(invoke, "Which job held the index lock?")
    assert page["filename"] == "status-page.html" and page["heading"] == "Cause"
    assert "Status home" not in page["text"] and "All rights reserved" not in page["text"]
    table = top_hit(invoke, "weekend hours of customer support in EMEA")
    assert table["filename"] == "support-hours.csv" and table["heading"] == "rows 1–6"
    book = top_hit(invoke, "How often should a server room be measured?")
    assert book["filename"] == "field-guide.epub"
    assert book["heading"] == "Chapter 2: Measuring the room"


def test_content_decides_over_the_name(invoke, tmp_path: Path):
    deck = tmp_path / "quarterly-update.bin"
    deck.write_bytes(make_pptx([{"title": "Quarterly update", "lines": ["Revenue grew"]}]))
    page = shutil.copy(FORMATS / "status-page.html", tmp_path / "status")
    records = invoke("upload", str(deck), str(page), "--json").records
    assert [record["content_type"] for record in records] == [
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "text/html",
    ]


@pytest.mark.parametrize(("name", "convert_to"), [("minutes.doc", ".docx"), ("costs.xls", ".xlsx")])
def test_a_legacy_office_file_says_what_to_convert_it_to(invoke, tmp_path, name, convert_to):
    legacy = tmp_path / name
    legacy.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504)
    good = SAMPLES / "product-roadmap.pptx"
    result = invoke("upload", str(good), str(legacy), "--json")
    assert result.code == 6, result.stderr
    assert "invalid_input" in result.stderr and f"save it as {convert_to}" in result.stderr
    assert invoke("status", "--json").records == []  # nothing stored, not even the deck
    assert object_keys() == []


def test_an_unknown_binary_is_refused_whatever_its_name(invoke, tmp_path):
    archive = tmp_path / "photos.zip"
    archive.write_bytes(make_pptx([]).replace(b"ppt/presentation.xml", b"ppt/other_name.xml"))
    result = invoke("upload", str(archive), "--json")
    assert result.code == 6 and "unsupported file type" in result.stderr
