"""Hostile files hit a limit (document_too_large, naming it) with bounded memory and
time, measured on a real worker process; a stop or a cancel ends a long parse at once.
(The page limit and the linear chunker, called directly: tests/unit/test_hostile_input.py.)"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path

import pytest

from kb_cli.config import WORKER_VARIABLES
from tests.docgen import make_epub, make_pptx, make_xlsx, raw_pdf, zip_bomb
from tests.helpers import db_rows, kb_env, run_in_process, run_kb, start_kb, wait_until

BACKENDS = ["pypdf", "pdfium"]


def flate_bomb_pdf(inflated_bytes: int) -> bytes:
    """One page whose content stream is small compressed and `inflated_bytes` inflated."""
    data = repeated_deflate(b" " * (1 << 20), inflated_bytes >> 20)
    return raw_pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream",
        ]
    )


def repeated_deflate(block: bytes, times: int) -> bytes:
    """The zlib stream of `block` repeated `times` times, as a decoder reads it, without
    compressing it `times` times (that took 5-10 s for 768 MiB): after a full flush the
    compressor starts afresh, so every flushed block compresses to the same bytes."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate: header and sum are ours
    unit = squeeze.compress(block) + squeeze.flush(zlib.Z_FULL_FLUSH)
    checksum = 1
    for _ in range(times):
        checksum = zlib.adler32(block, checksum)
    return b"\x78\xda" + unit * times + squeeze.flush() + checksum.to_bytes(4, "big")


def many_paragraph_docx(paragraphs: int) -> bytes:
    """A valid DOCX whose body is `paragraphs` one-letter paragraphs: tiny zipped."""
    ns = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    body = "<w:p><w:r><w:t>x</w:t></w:r></w:p>" * paragraphs
    parts = {
        "[Content_Types].xml": (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" '
            'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/word/document.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
        ),
        "_rels/.rels": (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/'
            '2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>'
        ),
        "word/document.xml": (
            f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{ns}"><w:body>'
            f"{body}</w:body></w:document>"
        ),
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
        for name, text in parts.items():
            package.writestr(name, text)
    return out.getvalue()


# Runs a command and prints, after its output, the peak RSS (MiB) of it and its children.
MEASURE = (
    "import resource, subprocess, sys;"
    "done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE);"
    "sys.stdout.write(done.stdout.decode());"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)"
)


def work_measured(tmp_path: Path, document: Path, **env: str) -> tuple[dict, int]:
    """Upload and submit `document`, run one worker on it; (the final task record, the
    peak RSS in MiB of the worker and its parse children). A worker's limits in `env`
    are the worker's: the upload, which may not carry them, is run without."""
    environment = kb_env(KB_EMBEDDINGS="none", **env)
    queuing = {k: v for k, v in environment.items() if k not in WORKER_VARIABLES.values()}
    submitted = run_in_process("upload", str(document), "--submit", "--json", env=queuing)
    assert submitted.code == 0, submitted.stderr
    command = [sys.executable, "-m", "kb_cli", "work", "--json", "--max-attempts", "1"]
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, *command],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    *records, peak = done.stdout.splitlines()
    return json.loads(records[0])["task"], int(peak)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_flate_bomb_pdf_is_too_large_with_bounded_memory(tmp_path, backend):
    bomb = tmp_path / "bomb.pdf"
    bomb.write_bytes(flate_bomb_pdf(768 << 20))  # 768 MiB inflated, under 1 MiB on disk
    assert bomb.stat().st_size < 1 << 20
    task, peak = work_measured(tmp_path, bomb, KB_PDF_BACKEND=backend, KB_PARSE_MAX_MEMORY_MB="256")
    assert task["status"] == "failed" and task["error_code"] == "document_too_large", task
    assert "limit" in task["error_detail"] and task["stage"] == "parse"
    print(f"flate bomb, {backend}: peak RSS {peak} MiB")
    assert peak < 256 + 300  # the limit, plus the worker itself


@pytest.mark.slow
def test_a_1_gib_flate_bomb_stops_well_under_512_mib_with_the_default_limits(tmp_path):
    """pdfium inflates a content stream whole, so only the memory limit stops it: at the
    old default (2 GiB) this file peaked at about 1,060 MiB (docs/limits.md)."""
    bomb = tmp_path / "bomb.pdf"
    bomb.write_bytes(flate_bomb_pdf(1 << 30))  # 1 GiB inflated, about 1 MB on disk
    task, peak = work_measured(tmp_path, bomb, KB_PDF_BACKEND="pdfium")
    assert (task["status"], task["error_code"]) == ("failed", "document_too_large"), task
    assert "KB_PARSE_MAX_MEMORY_MB" in task["error_detail"]
    print(f"1 GiB flate bomb, pdfium, default limits: peak RSS {peak} MiB")
    assert peak < 400


def test_a_many_paragraph_docx_is_stopped_by_its_inflated_size(tmp_path):
    path = tmp_path / "paragraphs.docx"
    path.write_bytes(many_paragraph_docx(300_000))
    task, _ = work_measured(tmp_path, path, KB_MAX_DECOMPRESSED_BYTES=str(1 << 20))
    assert task["error_code"] == "document_too_large"
    assert "KB_MAX_DECOMPRESSED_BYTES" in task["error_detail"]


def test_a_many_paragraph_docx_is_stopped_by_the_memory_limit(tmp_path):
    path = tmp_path / "paragraphs.docx"
    path.write_bytes(many_paragraph_docx(1_000_000))
    task, peak = work_measured(tmp_path, path, KB_PARSE_MAX_MEMORY_MB="100")
    assert task["error_code"] == "document_too_large", task
    assert "KB_PARSE_MAX_MEMORY_MB" in task["error_detail"]
    print(f"many-paragraph DOCX: peak RSS {peak} MiB")
    assert peak < 100 + 300


def test_a_many_paragraph_docx_is_stopped_by_the_time_limit(tmp_path):
    path = tmp_path / "paragraphs.docx"
    path.write_bytes(many_paragraph_docx(1_000_000))
    started = time.monotonic()
    # The default memory limit would stop it first; here the deadline is what is tested.
    task, _ = work_measured(tmp_path, path, KB_PARSE_TIMEOUT="1", KB_PARSE_MAX_MEMORY_MB="2048")
    assert task["error_code"] == "document_too_large"
    assert "KB_PARSE_TIMEOUT" in task["error_detail"]
    assert time.monotonic() - started < 20


@pytest.mark.parametrize(
    ("variable", "value", "content"),
    [
        ("KB_MAX_CHARS", "1000", "word " * 1000),
        ("KB_MAX_CHUNKS", "3", "\n\n".join("paragraph " * 150 for _ in range(10))),
    ],
)
def test_text_over_a_limit_is_too_large_and_names_it(tmp_path, variable, value, content):
    path = tmp_path / "long.txt"
    path.write_text(content)
    task, _ = work_measured(tmp_path, path, **{variable: value})
    assert task["error_code"] == "document_too_large" and variable in task["error_detail"]
    assert task["status"] == "failed"  # permanent: no retry


# --- slides, spreadsheets, books, pages and mail ----------------------------------------

PACKAGE_BOMBS = {
    "bomb.pptx": (lambda: make_pptx([{"title": "T", "lines": ["x"]}]), "ppt/slides/slide1.xml"),
    "bomb.xlsx": (lambda: make_xlsx({"S": [["a"]]}), "xl/worksheets/sheet1.xml"),
    "bomb.epub": (lambda: make_epub("B", [("C", "<p>x</p>")]), "OEBPS/text/chapter1.xhtml"),
}


@pytest.mark.slow  # writing 1 GiB through deflate takes a few seconds per file
@pytest.mark.parametrize("name", sorted(PACKAGE_BOMBS))
def test_a_package_with_a_gigabyte_member_is_too_large_before_it_inflates(tmp_path, name):
    make, member = PACKAGE_BOMBS[name]
    bomb = tmp_path / name
    bomb.write_bytes(zip_bomb(make(), member, 1 << 30))  # 1 GiB of whitespace, ~1 MB zipped
    assert bomb.stat().st_size < 2 << 20
    task, peak = work_measured(tmp_path, bomb)
    assert task["error_code"] == "document_too_large", task
    assert "KB_MAX_DECOMPRESSED_BYTES" in task["error_detail"]
    print(f"{name}: peak RSS {peak} MiB")
    assert peak < 400  # the worker itself: nothing was inflated


def test_a_sparse_spreadsheet_is_too_large_before_its_rows_are_read(tmp_path):
    """A1 and XFD1048576: the reader the guide measured iterated for 90 s at 2.4 GB."""
    path = tmp_path / "sparse.xlsx"
    path.write_bytes(
        make_xlsx(
            {"Sparse": [["first"]]},
            dimension={"Sparse": "A1:XFD1048576"},
        )
    )
    started = time.monotonic()
    task, peak = work_measured(tmp_path, path)
    assert task["error_code"] == "document_too_large", task
    assert "sheet Sparse declares A1:XFD1048576" in task["error_detail"]
    assert time.monotonic() - started < 30 and peak < 400


def test_a_mail_of_ten_thousand_parts_is_too_large_with_bounded_memory(
    tmp_path, ten_thousand_part_mail
):
    task, peak = work_measured(tmp_path, ten_thousand_part_mail, KB_PARSE_MAX_MEMORY_MB="256")
    assert task["error_code"] == "document_too_large", task
    assert "MIME parts" in task["error_detail"]
    print(f"10,000-part mail: peak RSS {peak} MiB")
    assert peak < 256 + 300


def test_a_hundred_thousand_nested_divs_are_read_whole_with_bounded_memory(tmp_path):
    """Not a failure: the page's text is all there (lxml would return nothing, silently)."""
    depth = 100_000
    path = tmp_path / "nested.html"
    path.write_text(
        "<html><body>" + "<div>" * depth + "<p>the deepest sentence</p>" + "</div>" * depth
    )
    task, peak = work_measured(tmp_path, path, KB_PARSE_MAX_MEMORY_MB="256")
    assert task["status"] == "succeeded", task
    assert [row["text"] for row in db_rows("SELECT text FROM chunks")] == ["the deepest sentence"]
    print(f"nested divs: peak RSS {peak} MiB")
    assert peak < 256 + 300


def wait_for_parse(task_id: str) -> None:

    def at_the_parse() -> bool:
        [row] = db_rows("SELECT status, stage FROM ingestion_tasks WHERE id = :id", id=task_id)
        return row["status"] == "running" and row["stage"] == "parse"

    wait_until(at_the_parse, timeout=30, message="the worker never reached the parse")
    time.sleep(0.5)  # inside the parse by now


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigint", "cancel"])
def test_a_stop_or_cancel_ends_a_long_parse_within_two_seconds(tmp_path, how):
    path = tmp_path / "slow.docx"
    path.write_bytes(many_paragraph_docx(1_000_000))
    # Under the default memory limit this parse would end by itself before the stop.
    env = kb_env(KB_EMBEDDINGS="none", KB_PARSE_MAX_MEMORY_MB="2048")  # the worker's
    task = run_kb(
        "upload", str(path), "--submit", "--json", env=kb_env(KB_EMBEDDINGS="none")
    ).record
    worker = start_kb("work", "--json", env=env)
    wait_for_parse(task["task_id"])
    started = time.monotonic()
    if how == "sigint":
        worker.send_signal(signal.SIGINT)
    else:
        assert run_kb("cancel", task["task_id"], "--json", env=env).code == 0
    worker.communicate(timeout=30)
    elapsed = time.monotonic() - started
    [row] = db_rows("SELECT status FROM ingestion_tasks WHERE id = :id", id=task["task_id"])
    assert row["status"] == ("queued" if how == "sigint" else "cancelled")
    assert elapsed < 2 + (1.5 if how == "cancel" else 0), elapsed  # cancel: one more kb run
