"""Scanned PDF pages read by optical character recognition: the optional `ocr` extra.

rapidocr runs the PP-OCRv6 detection and recognition models (Chinese and English) that
ship inside its wheel, on onnxruntime, one thread: the parse child shares the machine
with the worker and other workers. pdfium renders the page. The wheel's direction
classifier is not used: on an upright English line of our samples it turned the line
over and read "Eithtt tn t t t st" for "Either party may end this agreement".

Which page is read (KB_OCR=auto): one whose text layer has fewer than
SCANNED_MAX_CHARS characters while images cover at least SCANNED_MIN_IMAGE_COVER of
its area. KB_OCR=force reads every page (its text layer is ignored); off reads none.
Measured (docs/formats.md, "Scanned pages"): 100 dpi reads 10-point English and
Chinese text without an error, and needs 40% less memory and time than 150 dpi.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from kb_cli.errors import DocumentTooLarge, UnreadableScan

MODES = ("auto", "off", "force")
RENDER_DPI = 100
# A page of any size (up to 14,400 points a side in PDF) is rendered at most this many
# pixels a side: OCR of a 1,700 x 1,700 render grew the child's address space by
# 1,200 MiB, of an A4 page at 100 dpi by 516 MiB (docs/limits.md).
MAX_RENDER_SIDE = 1700
# An image inside a scanned page is decoded in full by the render, whatever its shown
# size: one of more pixels is refused before it is decoded (100 Mpx: 400 MB as RGBA).
MAX_IMAGE_PIXELS = 50_000_000
SCANNED_MAX_CHARS = 20
SCANNED_MIN_IMAGE_COVER = 0.5
INSTALL_HINT = "uv sync --extra ocr, or pip install 'kb-cli[ocr]'"

ENGINE_PARAMS = {
    "Global.log_level": "critical",
    "Global.use_cls": False,
    "EngineConfig.onnxruntime.intra_op_num_threads": 1,
    "EngineConfig.onnxruntime.inter_op_num_threads": 1,
}

_engine: Any = None


def available() -> bool:
    """Whether the `ocr` extra is installed."""
    return all(importlib.util.find_spec(name) is not None for name in ("rapidocr", "pypdfium2"))


def engine_version() -> str:
    """`rapidocr X (onnxruntime Y)`, read from the installed packages' metadata."""
    from importlib.metadata import version

    return f"rapidocr {version('rapidocr')} (onnxruntime {version('onnxruntime')})"


def needs_ocr(mode: str, text: str, image_cover: Callable[[], float]) -> bool:
    """The rule of the module's docstring, for one page; the images' cover is only
    measured for a page with little text."""
    if mode == "force":
        return True
    if mode != "auto":
        return False
    return len("".join(text.split())) < SCANNED_MAX_CHARS and (
        image_cover() >= SCANNED_MIN_IMAGE_COVER
    )


def read_page(pypdfium2: Any, page: Any, number: int) -> str:
    """The text of one rendered page, its lines in reading order."""
    engine = _loaded_engine()  # first: it raises the memory limit that decoding needs
    _check_images(pypdfium2, page, number)
    width, height = page.get_size()
    scale = min(RENDER_DPI / 72, MAX_RENDER_SIDE / max(width, height, 1))
    try:
        bitmap = page.render(scale=scale)
    except pypdfium2.PdfiumError as error:
        raise UnreadableScan(f"page {number} cannot be rendered: {error}") from error
    image = bitmap.to_numpy()[:, :, :3]  # BGRA or BGRx -> BGR, as OpenCV orders colours
    result = engine(image)
    bitmap.close()
    if result.boxes is None or result.txts is None:
        return ""
    return reading_order(list(zip(result.boxes, result.txts, strict=True)))


def _check_images(pypdfium2: Any, page: Any, number: int) -> None:
    """Refuse an image too large to decode, and one that cannot be decoded (pdfium
    would render it as nothing, and the page would read as blank)."""
    import pypdfium2.raw as raw

    for image in page.get_objects(filter=[raw.FPDF_PAGEOBJ_IMAGE], max_depth=2):
        width, height = image.get_px_size()
        if width * height > MAX_IMAGE_PIXELS:
            raise DocumentTooLarge(
                f"page {number} has an image of {width} x {height} pixels, more than "
                f"OCR decodes ({MAX_IMAGE_PIXELS // 1_000_000} million)"
            )
        try:
            image.get_bitmap()  # pdfium's own bitmap, freed with the page
        except pypdfium2.PdfiumError as error:
            raise UnreadableScan(f"page {number} has an image that cannot be decoded") from error


def image_cover(pypdfium2: Any, page: Any) -> float:
    """The share of the page's area its images cover (overlaps counted twice, capped)."""
    import pypdfium2.raw as raw

    width, height = page.get_size()
    area = max(width * height, 1.0)
    covered = 0.0
    for image in page.get_objects(filter=[raw.FPDF_PAGEOBJ_IMAGE], max_depth=2):
        left, bottom, right, top = image.get_bounds()
        covered += max(right - left, 0) * max(top - bottom, 0)
    return float(min(covered / area, 1.0))


def reading_order(lines: list[tuple[Any, str]]) -> str:
    """Lines (a box of four corner points, text) top to bottom; those whose vertical
    middle falls within one band of height are one line, left to right."""
    placed = []
    for box, text in lines:
        ys = [point[1] for point in box]
        xs = [point[0] for point in box]
        placed.append((min(ys), max(ys), min(xs), text.strip()))
    placed.sort()
    bands: list[list[tuple[float, float, float, str]]] = []
    for top, bottom, left, text in placed:
        if not text:
            continue
        band = bands[-1] if bands else None
        if band is not None and (top + bottom) / 2 <= max(line[1] for line in band):
            band.append((top, bottom, left, text))
        else:
            bands.append([(top, bottom, left, text)])
    return "\n".join(
        " ".join(line[3] for line in sorted(band, key=lambda line: line[2])) for band in bands
    )


def _loaded_engine() -> Any:
    """The OCR engine, loaded once per parse child on its first scanned page."""
    global _engine
    if _engine is None:
        _raise_memory_limit()
        from rapidocr import RapidOCR

        _engine = RapidOCR(params=ENGINE_PARAMS)
    return _engine


def engine_loaded() -> bool:
    return _engine is not None


def _raise_memory_limit() -> None:
    """The parse child runs with its soft address-space limit at KB_PARSE_MAX_MEMORY_MB
    and its hard limit at KB_OCR_MAX_MEMORY_MB (isolated.py): the model and a page's
    tensors need the larger one, the text of other pages and documents only the smaller."""
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
