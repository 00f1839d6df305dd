"""Parse efficiency: `kb work` on one big PDF against the bare work (pypdf alone; pypdf
and the model's own library with the built-in model), wall time and peak memory."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from benchmarks.harness import PY, Context, Row, backends, env_for, kb, peak_rss_of
from tests.docgen import make_pdf, paged_text

TITLE = "parse efficiency"


# The floor of `kb work` with the built-in model: the same PDF's text by pypdf, cut into
# pieces of the chunker's size, embedded by WordLlama's own inference, in one process.
EMBEDDING_FLOOR = """
import sys
from pypdf import PdfReader
from safetensors.numpy import load_file
from tokenizers import Tokenizer
from wordllama.inference import WordLlamaInference
from kb_cli.embeddings.local import TOKENIZER_FILE, WEIGHTS_FILE, package_dir
text = "\\n".join(page.extract_text() for page in PdfReader(sys.argv[1]).pages)
pieces = [text[i : i + 1000] for i in range(0, len(text), 850)]
package = package_dir()
model = WordLlamaInference(
    load_file(package / WEIGHTS_FILE)["embedding.weight"],
    Tokenizer.from_file(str(package / TOKENIZER_FILE)),
)
for i in range(0, len(pieces), 64):
    model.embed(pieces[i : i + 64], norm=True)
"""


def run(ctx: Context) -> list[Row]:
    """`kb work` on one big PDF against the bare work: without embeddings, against
    pypdf's text extraction alone; with the built-in model, against pypdf plus the
    model's own library embedding pieces of the same size (EMBEDDING_FLOOR)."""
    work, sizes = ctx.work, ctx.sizes
    pdf_path = work / "big.pdf"
    pdf_path.write_bytes(make_pdf(paged_text(sizes.big_pdf_pages, words_per_page=250)))
    bare = [
        PY,
        "-c",
        "import sys; from pypdf import PdfReader; "
        "[p.extract_text() for p in PdfReader(sys.argv[1]).pages]",
        str(pdf_path),
    ]
    floor = [PY, "-c", EMBEDDING_FLOOR, str(pdf_path)]
    plain_env = env_for(work / "unused")
    # Interleaved, so that the machine's ups and downs fall on kb and reference alike.
    runs: dict[str, list[tuple[float, float]]] = {"bare": [], "floor": [], "local": []}
    runs |= {f"none-{backend}": [] for backend in backends()}
    for _ in range(sizes.runs):
        runs["bare"].append(peak_rss_of(bare, plain_env)[:2])
        runs["floor"].append(peak_rss_of(floor, plain_env)[:2])
        for name in [key for key in runs if key not in ("bare", "floor")]:
            home = Path(tempfile.mkdtemp(dir=work)) / "home"
            provider = "local" if name == "local" else "none"
            backend = "pypdf" if name == "local" else name.removeprefix("none-")
            extra = {"KB_EMBEDDINGS": provider, "KB_PDF_BACKEND": backend}
            kb(home, "upload", str(pdf_path), "--submit", **extra)
            command = [PY, "-m", "kb_cli", "work"]
            runs[name].append(peak_rss_of(command, env_for(home, **extra))[:2])
    wall = {name: statistics.median(r[0] for r in result) for name, result in runs.items()}
    rss = {name: statistics.median(r[1] for r in result) for name, result in runs.items()}
    pages = sizes.big_pdf_pages
    rows = []
    for backend in backends():
        name = f"none-{backend}"
        target = "<= 1.2x" if backend == "pypdf" else "<= 0.33x (3x faster)"
        rows.append(
            Row(
                f"kb work, {pages}-page PDF ({backend}), KB_EMBEDDINGS=none, wall",
                wall[name],
                wall["bare"],
                "s",
                target,
                "reference: bare pypdf script; both include interpreter start-up",
            )
        )
    rows += [
        Row(
            "kb work (pypdf), KB_EMBEDDINGS=none, peak memory",
            rss["none-pypdf"],
            rss["bare"],
            "MiB",
            "<= 1.5x",
        ),
        Row(
            f"kb work, {pages}-page PDF, built-in model, wall",
            wall["local"],
            wall["floor"],
            "s",
            "<= 1.2x",
            "reference: pypdf + WordLlama's own inference on pieces of the same size",
        ),
        Row(
            "kb work, built-in model, peak memory",
            rss["local"],
            rss["floor"],
            "MiB",
            "report",
        ),
    ]
    return rows
