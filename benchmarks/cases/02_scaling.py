"""Scaling: the speed-up of two workers over one on a batch of PDFs, per PDF backend, with
what two bare pypdf processes gain on the same machine as context."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.harness import PY, Context, Row, Sizes, backends, env_for, kb, median_of
from tests.docgen import make_pdf, paged_text

TITLE = "scaling"


def run(ctx: Context) -> list[Row]:
    work, sizes = ctx.work, ctx.sizes
    pdf = make_pdf(paged_text(sizes.batch_pages))
    rows = []
    for backend in backends():

        def drain(workers: int, backend: str = backend) -> float:
            home = Path(tempfile.mkdtemp(dir=work)) / "home"
            folder = home.parent / "pdfs"
            folder.mkdir(parents=True)
            paths = []
            for i in range(sizes.batch_pdfs):
                (folder / f"p{i}.pdf").write_bytes(pdf)
                paths.append(str(folder / f"p{i}.pdf"))
            kb(home, "upload", *paths, "--submit")
            start = time.perf_counter()
            procs = [
                subprocess.Popen(
                    [PY, "-m", "kb_cli", "work", "--drain"],
                    env=env_for(home, KB_PDF_BACKEND=backend),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for _ in range(workers)
            ]
            for proc in procs:
                proc.wait()
            return time.perf_counter() - start

        one = median_of(sizes.runs, lambda: drain(1))
        two = median_of(sizes.runs, lambda: drain(2))
        rows.append(
            Row(
                f"{sizes.batch_pdfs} PDFs x {sizes.batch_pages} pages "
                f"({backend}), speed-up of 2 workers",
                one / two,
                1.0,
                "x",
                ">= 1.8x",
                f"1 worker {one:.2f} s, 2 workers {two:.2f} s",
            )
        )
    rows.append(machine_parallelism(work, pdf, sizes))
    return rows


def machine_parallelism(work: Path, pdf: bytes, sizes: Sizes) -> Row:
    """What two processes gain on this machine at all: bare pypdf on the same batch.
    Context for the scaling target, not a target of kb's."""
    path = work / "scaling.pdf"
    path.write_bytes(pdf)
    script = (
        "import sys; from pypdf import PdfReader\n"
        "for _ in range(int(sys.argv[2])):\n"
        "    [page.extract_text() for page in PdfReader(sys.argv[1]).pages]"
    )

    def batch(processes: int) -> float:
        share = str(sizes.batch_pdfs // processes)
        start = time.perf_counter()
        procs = [subprocess.Popen([PY, "-c", script, str(path), share]) for _ in range(processes)]
        for proc in procs:
            proc.wait()
        return time.perf_counter() - start

    one = median_of(sizes.runs, lambda: batch(1))
    two = median_of(sizes.runs, lambda: batch(2))
    return Row(
        f"the machine itself: bare pypdf on the same {sizes.batch_pdfs} PDFs, 2 processes",
        one / two,
        1.0,
        "x",
        "context",
        f"1 process {one:.2f} s, 2 processes {two:.2f} s",
    )
