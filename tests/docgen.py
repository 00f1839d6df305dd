"""Generate test documents from nothing: PDFs (plain, multi-page, encrypted), DOCX, text.

Used by the tests, the benchmarks and `python -m tests.docgen DIR` (which writes
`sample_docs/`). The PDF writer is deliberately tiny: one Helvetica font, one text
line per content-stream line, correct cross-reference offsets.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(pages: list[str]) -> bytes:
    """A valid PDF with one page per string; lines of each string become text lines."""
    objects: list[bytes] = []
    page_ids = []
    font_id = 3 + 2 * len(pages)
    for index, text in enumerate(pages):
        page_id, content_id = 3 + 2 * index, 4 + 2 * index
        page_ids.append(page_id)
        lines = [
            "BT /F1 11 Tf 14 TL 50 780 Td",
            *(f"({_escape(line)}) '" for line in text.splitlines() or [""]),
            "ET",
        ]
        stream = "\n".join(lines).encode("latin-1", "replace")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 842] "
            f"/Resources << /Font << /F1 {font_id} 0 R >> >> /Contents {content_id} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    kids = " ".join(f"{pid} 0 R" for pid in page_ids)
    header = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode(),
    ]
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    return raw_pdf(header + objects + [font])


def raw_pdf(objects: list[bytes]) -> bytes:
    """A PDF of these object bodies (object 1 is the catalog), with a correct xref."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.writelines(b"%010d 00000 n \n" % offset for offset in offsets)
    out.write(
        b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    )
    return out.getvalue()


def make_encrypted_pdf(text: str, password: str = "secret") -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf([text]))))
    writer.encrypt(user_password=password, owner_password=password)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_docx(heading: str, paragraphs: list[str], table: list[list[str]] | None = None) -> bytes:
    import docx

    document = docx.Document()
    document.add_heading(heading, level=1)
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


VOCABULARY = [
    "retention",
    "policy",
    "archive",
    "ledger",
    "invoice",
    "contract",
    "review",
    "audit",
    "quarterly",
    "storage",
    "backup",
    "customer",
    "region",
    "latency",
    "budget",
]


def paged_text(pages: int, words_per_page: int = 120, seed: str = "ingest") -> list[str]:
    """Deterministic English-looking pages with a findable marker on each."""
    out = []
    for page in range(pages):
        words = [VOCABULARY[(page * 7 + i * 3) % len(VOCABULARY)] for i in range(words_per_page)]
        lines = [" ".join(words[i : i + 12]) for i in range(0, len(words), 12)]
        out.append("\n".join([f"{seed} page marker p{page + 1}", *lines]))
    return out


CHINESE_MARKDOWN = """# 知识库入库流程

文档上传后成为草稿。提交后，后台工作进程会认领任务，解析文件，切分文本块，并建立索引。

## 审核与发布

只有审核人员发布之后，搜索才会返回该文档的内容。入库失败时，任务会记录稳定的错误码，例如解析错误。

## 检索

系统支持中文检索，例如搜索“入库”或“错误码”，也支持英文检索。
"""


def write_samples(directory: Path) -> None:
    """The files of `sample_docs/`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "handbook.pdf").write_bytes(
        make_pdf(
            [
                "Employee handbook\nThe retention policy keeps invoices for seven years.\n"
                "Backups run every night in the primary region.",
                "Security\nAccess reviews happen every quarter.\n"
                "Lost laptops are reported within one hour.",
            ]
        )
    )
    (directory / "release-notes.docx").write_bytes(
        make_docx(
            "Release notes",
            [
                "Version 2 adds quarterly audit reports.",
                "The ingestion worker now reports progress stage by stage.",
            ],
            [["component", "change"], ["worker", "leases and heartbeats"]],
        )
    )
    (directory / "ingestion-guide-zh.md").write_text(CHINESE_MARKDOWN, encoding="utf-8")
    (directory / "faq.txt").write_text(
        "Frequently asked questions\n\nHow long does ingestion take?\n"
        "A few seconds for a small file; large PDFs are parsed page by page.\n",
        encoding="utf-8",
    )
    (directory / "damaged.pdf").write_bytes(
        b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages" + b"\x00" * 64
    )
    (directory / "empty.txt").write_bytes(b"")


if __name__ == "__main__":
    write_samples(Path(sys.argv[1] if len(sys.argv) > 1 else "sample_docs"))
