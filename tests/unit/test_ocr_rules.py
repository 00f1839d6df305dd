"""Which PDF page OCR reads and the order its lines are put back in (kb_cli/parsers/ocr.py):
pure rules, no OCR engine needed. The engine itself: tests/processes/test_ocr.py."""

from __future__ import annotations

import pytest

from kb_cli.config import resolve_settings
from kb_cli.errors import UsageError
from kb_cli.parsers.ocr import needs_ocr, reading_order


def box(left: float, top: float, right: float, bottom: float) -> list[list[float]]:
    return [[left, top], [right, top], [right, bottom], [left, bottom]]


def test_a_page_with_little_text_and_mostly_images_is_read():
    assert needs_ocr("auto", "", lambda: 0.9)
    assert needs_ocr("auto", " 12 \n", lambda: 0.5)  # a scan with a page number layer


def test_a_page_with_text_or_without_images_is_not():
    assert not needs_ocr("auto", "A page of real text, long enough to count.", lambda: 1.0)
    assert not needs_ocr("auto", "", lambda: 0.2)  # a blank page with a small logo
    assert not needs_ocr("off", "", lambda: 1.0)


def test_force_reads_every_page_without_measuring_its_images():
    def never() -> float:
        raise AssertionError("the images' cover is measured only when it decides")

    assert needs_ocr("force", "A page of real text, long enough to count.", never)
    assert not needs_ocr("auto", "A page of real text, long enough to count.", never)


def test_lines_are_put_back_top_to_bottom_and_left_to_right_within_a_band():
    lines = [
        (box(600, 105, 900, 140), "right column"),  # found first, on the first band
        (box(100, 300, 500, 335), "third line"),
        (box(100, 100, 500, 138), "left column"),
        (box(100, 200, 500, 236), "second line"),
        (box(100, 400, 500, 430), "   "),  # nothing read: left out
    ]
    assert reading_order(lines) == "left column right column\nsecond line\nthird line"


def test_chinese_lines_keep_their_order_too():
    lines = [
        (box(100, 200, 800, 240), "理赔申请须在三十日内提交。"),
        (box(100, 100, 800, 140), "本保险单一年有效。"),
    ]
    assert reading_order(lines) == "本保险单一年有效。\n理赔申请须在三十日内提交。"


@pytest.mark.parametrize("mode", ["auto", "off", "force"])
def test_kb_ocr_takes_three_values(monkeypatch, mode):
    monkeypatch.setenv("KB_OCR", mode)
    assert resolve_settings().limits.ocr == mode


def test_another_kb_ocr_is_a_usage_error(monkeypatch):
    monkeypatch.setenv("KB_OCR", "always")
    with pytest.raises(UsageError, match="KB_OCR must be auto, off or force"):
        resolve_settings()
