"""Scanned pages: OCR through `kb work` against the OCR library run bare, one process."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.harness import PY, Context, Row, env_for, kb, peak_rss_of
from tests.docgen import scanned_pdf

TITLE = "OCR"
FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
LINES = [
    "This agreement is made between Northwind Traders and Contoso Limited.",
    "The supplier shall deliver forty turbines before the first of March.",
    "Payment is due thirty days after delivery, by bank transfer.",
    "Either party may end this agreement with ninety days written notice.",
]

# The same pages, rendered as kb renders them (kb_cli/parsers/ocr.py), then read by
# rapidocr with kb's settings in one process: seconds for the model's load and for all
# pages (the renders are made before the clock starts), and the page texts.
BARE = """
import json, sys, time
import pypdfium2
from kb_cli.parsers import ocr
document = pypdfium2.PdfDocument(sys.argv[1])
images = []
for page in document:
    width, height = page.get_size()
    scale = min(ocr.RENDER_DPI / 72, ocr.MAX_RENDER_SIDE / max(width, height))
    images.append(page.render(scale=scale).to_numpy()[:, :, :3])
started = time.perf_counter()
from rapidocr import RapidOCR
engine = RapidOCR(params=ocr.ENGINE_PARAMS)
loaded = time.perf_counter()
texts = [" ".join(engine(image).txts or ()) for image in images]
done = time.perf_counter()
print(json.dumps({"load": loaded - started, "pages": done - loaded, "texts": texts}))
"""


def run(ctx: Context) -> list[Row]:
    """Pages per second of `kb work --drain` on a PDF of scanned pages (upload not
    timed), against rapidocr bare on the same pages with its model load; the words
    both read right; the worker's peak memory (it or its parse child)."""
    import importlib.util

    if importlib.util.find_spec("rapidocr") is None:
        return []  # the `ocr` extra is not installed
    pages = 2 if ctx.sizes.runs == 1 else 6
    path = ctx.work / "scanned.pdf"
    path.write_bytes(scanned_pdf([LINES] * pages, FONT))
    env = env_for(ctx.work / "unused-home")
    started = time.perf_counter()
    bare = subprocess.run([PY, "-c", BARE, str(path)], env=env, capture_output=True, text=True)
    bare_wall = time.perf_counter() - started
    if bare.returncode != 0:
        raise RuntimeError(bare.stderr[-500:])
    reference = json.loads(bare.stdout)
    bare_seconds = reference["load"] + reference["pages"]

    home = Path(tempfile.mkdtemp(dir=ctx.work)) / "home"
    kb(home, "upload", str(path), "--submit", KB_EMBEDDINGS="none")
    command = [PY, "-m", "kb_cli", "work", "--drain", "--json"]
    seconds, peak, out, _ = peak_rss_of(command, env_for(home, KB_EMBEDDINGS="none"))
    task = json.loads(out.splitlines()[0])["task"]
    if task["status"] != "succeeded":
        raise RuntimeError(f"the scanned PDF ended {task['status']}: {task['error_detail']}")
    words = " ".join(LINES).split()
    read = sum(word in text.split() for text in reference["texts"] for word in words)
    return [
        Row(
            f"scanned pages/s through kb work ({pages} Letter pages, 100 dpi, one thread)",
            pages / seconds,
            pages / bare_seconds,
            "pages/s",
            ">= 0.8x",
            f"kb work {seconds:.1f} s whole (start-up, parse child, model load, index); "
            f"bare {reference['load']:.1f} s load + {reference['pages']:.1f} s OCR "
            f"({bare_wall:.1f} s with its imports); words read right "
            f"{read}/{len(words) * pages}; peak RSS of the worker or its child {peak:.0f} MiB",
            {"peak_rss_mib": peak, "bare_load_s": reference["load"]},
        )
    ]
