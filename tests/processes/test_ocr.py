"""Scanned pages through real `kb` processes: with the `ocr` extra, an English contract
and a Chinese policy, scanned (drawn into an image by the test), are found by `kb search`
on their page, and a PDF of text and scanned pages keeps both; hostile scans end with
their error codes; without the extra, an image-only PDF says what to install. OCR is
slow (seconds a page on one core): two scanned pages in all."""

from __future__ import annotations

import importlib.util
import json
import sys
import zlib
from pathlib import Path

import pytest

from tests.docgen import blank_scan, image_pdf, joined_pdfs, make_pdf, scanned_pdf
from tests.helpers import kb_env, run_kb

DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
CJK = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")  # Debian's fonts-wqy-microhei

needs_ocr = pytest.mark.skipif(
    importlib.util.find_spec("rapidocr") is None,
    reason="the `ocr` extra is not installed (uv sync --extra ocr)",
)
CONTRACT = [
    "This agreement is signed by Northwind Traders and Contoso.",
    "The supplier delivers the turbines before the first of March.",
]
POLICY = ["本保险单自签发之日起生效，有效期为一年。", "理赔申请须在事故发生后三十日内提交。"]


def ingest(tmp_path: Path, documents: dict[str, bytes], **env: str) -> tuple[list[dict], str]:
    """Upload and submit the documents, run one worker to the end; (their final task
    records in upload order, the worker's log on stderr)."""
    environment = kb_env(KB_EMBEDDINGS="none", **env)
    paths = []
    for name, data in documents.items():
        paths.append(tmp_path / name)
        paths[-1].write_bytes(data)
    submitted = run_kb("upload", *map(str, paths), "--submit", "--json", env=environment)
    assert submitted.code == 0, submitted.stderr
    order = [json.loads(line)["task_id"] for line in submitted.stdout.splitlines()]
    worker = run_kb(
        "work", "--drain", "--json", "--max-attempts", "1", env=environment, timeout=300
    )
    assert worker.code == 0, worker.stderr
    done = {}
    for line in worker.stdout.splitlines():
        task = json.loads(line)["task"]
        if task is not None:  # the drained worker's last line claims none
            done[task["task_id"]] = task
    return [done[task_id] for task_id in order], worker.stderr


def search(query: str) -> list[dict]:
    found = run_kb("search", query, "--json", env=kb_env(KB_EMBEDDINGS="none"))
    assert found.code == 0, found.stderr
    return [json.loads(line) for line in found.stdout.splitlines()]


@needs_ocr
@pytest.mark.skipif(not CJK.exists(), reason="no CJK font: apt-get install fonts-wqy-microhei")
def test_scanned_english_and_chinese_pages_are_found_on_their_page(tmp_path):
    # a full text page first, so that the scanned page starts a chunk of its own
    letter = ["Cover letter: the turbine contract follows on the next page."]
    letter += [f"Paragraph {n} of the letter says nothing of interest at all." for n in range(15)]
    mixed = joined_pdfs(make_pdf(["\n".join(letter)]), scanned_pdf([CONTRACT], DEJAVU))
    tasks, log = ingest(tmp_path, {"contract.pdf": mixed, "policy.pdf": scanned_pdf([POLICY], CJK)})
    assert [task["status"] for task in tasks] == ["succeeded", "succeeded"], tasks
    for task in tasks:
        assert run_kb("publish", task["document_id"], "--json").code == 0
    # one line naming the engine, once for the two documents; progress page by page
    assert log.count("ocr engine=") == 1 and "rapidocr 3.10" in log, log
    assert f"ocr task={tasks[0]['task_id']} pages=1" in log
    assert f"ocr task={tasks[1]['task_id']} pages=1" in log
    # (a pipe shows a step at most every PLAIN_PROGRESS_INTERVAL: 1/2 may be skipped)
    assert "stage=parse 2/2" in log, log
    # and the document's history says how many pages OCR read, with what engine
    trail = run_kb("history", tasks[0]["document_id"], "--json").records
    [ocr] = [event for event in trail if event["action"] == "read_by_ocr"]
    assert ocr["entity_id"] == tasks[0]["task_id"]
    assert "; 1 page of revision 1 read by OCR (rapidocr 3.10" in ocr["detail"], ocr
    # and `kb status` counts them: the scanned page, not the one with a text layer
    pages = [run_kb("status", task["document_id"], "--json").record["ocr_pages"] for task in tasks]
    assert pages == [1, 1], pages

    [hit, *_] = search("turbines delivered before March")
    assert (hit["filename"], hit["page"]) == ("contract.pdf", 2), hit
    assert "The supplier delivers the turbines before the first of March." in hit["text"]
    assert CONTRACT[0] in hit["text"]  # the lines in reading order, top first
    assert hit["text"].index(CONTRACT[0]) < hit["text"].index(CONTRACT[1])
    [cover, *_] = search("cover letter")
    assert (cover["filename"], cover["page"]) == ("contract.pdf", 1)  # the text layer kept

    [hit, *_] = search("理赔申请")
    assert (hit["filename"], hit["page"]) == ("policy.pdf", 1), hit
    assert "理赔申请须在事故发生后三十日内提交" in hit["text"]


@needs_ocr
def test_on_a_terminal_ocr_is_told_in_the_parse_row_and_below_the_bars(tmp_path):
    """Not above the download bar, where a line printed while bars are drawn lands."""
    from tests.terminal import ANSI, run_in_terminal

    path = tmp_path / "contract.pdf"
    path.write_bytes(scanned_pdf([CONTRACT], DEJAVU))
    environment = kb_env(KB_EMBEDDINGS="none")
    assert run_kb("upload", str(path), "--submit", "--json", env=environment).code == 0
    code, screen = run_in_terminal("work", KB_EMBEDDINGS="none", COLUMNS="80", timeout=120)
    assert code == 0
    drawn = [part for line in ANSI.sub("", screen).split("\n") for part in line.split("\r")]
    parse_rows = [line for line in drawn if line.startswith("✓ parse")]
    assert parse_rows[-1].rstrip().endswith("OCR 1 page"), parse_rows
    [engine] = [i for i, line in enumerate(drawn) if line.startswith("OCR read 1 scanned page")]
    finalizing = max(i for i, line in enumerate(drawn) if line.startswith("✓ finalizing"))
    [succeeded] = [i for i, line in enumerate(drawn) if line.startswith("succeeded task")]
    assert finalizing < engine < succeeded, drawn
    assert all(len(line) <= 80 for line in drawn)


@needs_ocr
def test_hostile_scans_end_with_their_error_codes(tmp_path):
    empty = zlib.compress(b"")
    documents = {
        # declares 100,000 x 100,000 pixels: refused before it is decoded
        "huge.pdf": image_pdf([(100_000, 100_000, "FlateDecode", empty)]),
        "corrupt.pdf": image_pdf([(800, 1000, "DCTDecode", b"\xff\xd8\xff\xe0 not a JPEG" * 50)]),
        "long.pdf": image_pdf([blank_scan(20, 26)] * 1000),
    }
    tasks, _ = ingest(tmp_path, documents)
    assert [(task["status"], task["error_code"]) for task in tasks] == [
        ("failed", "document_too_large"),
        ("failed", "parse_error"),
        ("failed", "document_too_large"),
    ], tasks
    huge, corrupt, long = tasks
    assert "100000 x 100000 pixels" in huge["error_detail"]
    assert "cannot be decoded" in corrupt["error_detail"]
    assert "KB_OCR_MAX_PAGES" in long["error_detail"]


@pytest.mark.parametrize("backend", ["pypdf", "pdfium"])
def test_without_the_extra_an_image_only_pdf_says_what_to_install(tmp_path, backend):
    """The extra hidden from a real `kb work` (an import of None is a missing package)."""
    environment = kb_env(KB_EMBEDDINGS="none", KB_PDF_BACKEND=backend)
    path = tmp_path / "scan.pdf"
    path.write_bytes(image_pdf([blank_scan(), blank_scan()]))
    assert run_kb("upload", str(path), "--submit", "--json", env=environment).code == 0
    hide = "import sys; sys.modules['rapidocr'] = None; from kb_cli.cli import main; main()"
    worker = subprocess_kb(hide, ["work", "--json", "--max-attempts", "1"], environment)
    [line] = [json.loads(text) for text in worker.splitlines()]
    assert line["task"]["error_code"] == "empty_document", line
    assert "extra `ocr`" in line["task"]["error_detail"]
    assert "uv sync --extra ocr" in line["task"]["error_detail"]
    assert "pip install 'kb-cli[ocr]'" in line["task"]["error_detail"]


def subprocess_kb(code: str, args: list[str], env: dict[str, str]) -> str:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
