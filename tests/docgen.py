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


def image_pdf(
    pages: list[tuple[int, int, str, bytes]], size: tuple[float, float] = (612, 792)
) -> bytes:
    """A PDF of pages that only show an image each, stretched over the page: (pixel
    width, height, PDF filter name, stream bytes), 8-bit grey; no text layer. The
    image dictionary may declare any size and hold any bytes (a hostile scan)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    for width, height, filter_name, data in pages:
        page_id = len(objects) + 1
        kids.append(f"{page_id} 0 R")
        draw = b"q %g 0 0 %g 0 0 cm /Im0 Do Q" % size
        objects += [
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %g %g] " % size
            + b"/Resources << /XObject << /Im0 %d 0 R >> >> /Contents %d 0 R >>"
            % (page_id + 1, page_id + 2),
            b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray "
            % (width, height)
            + b"/BitsPerComponent 8 /Filter /%s /Length %d >>\nstream\n"
            % (filter_name.encode(), len(data))
            + data
            + b"\nendstream",
            b"<< /Length %d >>\nstream\n" % len(draw) + draw + b"\nendstream",
        ]
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>".encode()
    return raw_pdf(objects)


def blank_scan(width: int = 200, height: int = 260) -> tuple[int, int, str, bytes]:
    """A white grey-scale image for image_pdf: a scan of an empty page."""
    import zlib

    return width, height, "FlateDecode", zlib.compress(b"\xff" * (width * height))


def scanned_pdf(pages: list[list[str]], font: Path, points: int = 11) -> bytes:
    """A PDF of scans: each page's lines drawn in `font` into a 150-dpi Letter-size
    grey image (Pillow, which the `ocr` extra brings), and no text layer."""
    from PIL import Image, ImageDraw, ImageFont

    pixels = round(points * 150 / 72)
    face = ImageFont.truetype(str(font), pixels)
    images = []
    for lines in pages:
        image = Image.new("L", (1275, 1650), 255)
        draw = ImageDraw.Draw(image)
        for number, line in enumerate(lines):
            draw.text((150, 150 + number * pixels * 2), line, font=face, fill=0)
        images.append(image)
    out = io.BytesIO()
    images[0].save(out, "PDF", resolution=150, save_all=True, append_images=images[1:])
    return out.getvalue()


def joined_pdfs(*documents: bytes) -> bytes:
    """The pages of these PDFs, in order, as one PDF (pypdf)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for document in documents:
        for page in PdfReader(io.BytesIO(document)).pages:
            writer.add_page(page)
    out = io.BytesIO()
    writer.write(out)
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


ROADMAP_SLIDES = [
    {
        "title": "Product roadmap 2027",
        "lines": ["Knowledge base team", "Planning review, January 2027"],
    },
    {
        "title": "Q1: Offline search",
        "lines": [
            "Search works on a laptop without a network connection",
            "The offline index is built nightly from published documents",
        ],
        "notes": [
            "Say that the offline index ships in March, after the security review.",
            "Field engineers asked for it most often.",
        ],
    },
    {
        "title": "Q2: Mobile uploads",
        "lines": ["Photos of paper forms become searchable documents"],
        "table": [
            ["Milestone", "Owner", "Date"],
            ["Camera capture", "Mobile team", "April"],
            ["Text recognition", "Platform team", "June"],
        ],
    },
    {
        "title": "Risks",
        "lines": ["Text recognition accuracy on handwriting", "Storage cost of photos"],
        "notes": ["Ask finance for the storage estimate before the board meeting."],
    },
]

_REGIONS = ["Nordics", "Benelux", "Iberia", "Alps", "Balkans", "Baltics", "Ireland", "Poland"]
_TEAMS = ["Marketing", "Support", "Engineering", "Sales", "Training"]


def budget_sheets() -> dict[str, list[list]]:
    """A budget of 40 rows (several chunks of rows) and a small headcount sheet."""
    rows: list[list] = [["Region", "Team", "Quarter", "Budget", "Approved on", "Share"]]
    for index in range(40):
        region, team = _REGIONS[index % len(_REGIONS)], _TEAMS[index // len(_REGIONS)]
        amount = 12_000 + (index * 7_919) % 61_000 + 0.5 * (index % 2)
        approved = 46_023 + index * 3  # 2026-01-01 onwards, as Excel counts days
        rows.append(
            [
                region,
                team,
                f"Q{index % 4 + 1}",
                (amount, "currency"),
                (approved, "date"),
                (round(amount / 2_000_000, 4), "percent"),
            ]
        )
    rows.append(
        [
            "Nordics",
            "Field operations",
            "Q3",
            (48_250, "currency"),
            (46_217, "date"),
            (0.0241, "percent"),
        ]
    )
    headcount = [
        ["Team", "People", "Open roles"],
        ["Marketing", 14, 2],
        ["Support", 31, 5],
        ["Engineering", (1_204, "thousands"), 40],
    ]
    return {"Budget": rows, "Headcount": headcount}


SUPPORT_HOURS_CSV = """team,region,weekday hours,weekend hours,escalation contact
Customer support,EMEA,08:00-20:00 CET,10:00-16:00 CET,duty-manager-emea@example.com
Customer support,Americas,07:00-19:00 EST,none,duty-manager-amer@example.com
Platform on-call,global,24 hours,24 hours,pager rotation "platform-primary"
Billing desk,EMEA,09:00-17:00 CET,none,billing-lead@example.com
Security response,global,24 hours,24 hours,security-incident@example.com
"""

STATUS_PAGE_HTML = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Incident report: slow search on 3 November | Status</title>
<style>body { font-family: sans-serif; }</style>
<script>window.analytics = { page: "status" };</script>
</head>
<body>
<header><a href="/">Status home</a>
<nav><a href="/history">History</a> <a href="/subscribe">Subscribe</a></nav></header>
<main>
<article>
<h1>Incident report: slow search on 3 November</h1>
<p>Between 09:12 and 10:47 UTC, search answers took up to 40 seconds instead of under one.</p>
<h2>Cause</h2>
<p>A reindexing job ran during business hours and held the index lock while it merged
segments. Queries waited for the lock instead of reading the previous segments.</p>
<h2>What we changed</h2>
<ul>
<li>Reindexing now runs only between 01:00 and 05:00 UTC.</li>
<li>Queries read the last committed segments and never wait for a merge.</li>
</ul>
<h2>Timeline</h2>
<table>
<tr><th>Time (UTC)</th><th>Event</th></tr>
<tr><td>09:12</td><td>Latency alert fired</td></tr>
<tr><td>10:30</td><td>Reindexing job paused</td></tr>
<tr><td>10:47</td><td>Latency back to normal</td></tr>
</table>
</article>
</main>
<aside>Related: How we run maintenance windows</aside>
<footer>&copy; 2026 Example Corp. All rights reserved.</footer>
</body>
</html>
"""

FIELD_GUIDE = [
    (
        "Chapter 1: Before the site visit",
        "<h1>Chapter 1: Before the site visit</h1><p>Download the offline index the evening "
        "before; the site may have no network.</p><h2>Packing list</h2><p>Laptop, charger, "
        "a printed copy of the safety checklist and the customer's access badge.</p>",
    ),
    (
        "Chapter 2: Measuring the room",
        "<h1>Chapter 2: Measuring the room</h1><p>Measure every server room twice: once "
        "empty and once with the racks in place. Record the cooling capacity in kilowatts.</p>",
    ),
    (
        "Chapter 3: Reporting",
        "<h1>Chapter 3: Reporting</h1><p>Send the visit report within two working days, with "
        "photos of every rack label attached.</p>",
    ),
]


def vendor_renewal_mail() -> bytes:
    terms = make_pdf(
        [
            "Translation services: renewal terms\nThe contract renews on 1 March 2027 for "
            "two years.\nNotice of cancellation is due by 15 January 2027.",
            "Prices\nStandard translation costs 0.11 EUR per word; urgent work 0.16 EUR.",
        ]
    )
    return make_eml(
        "Renewal of the translation vendor contract",
        "Maria Keller <maria.keller@example.com>",
        "Tue, 17 Nov 2026 09:30:00 +0100",
        "Hello all,\n\nLingua Partners sent their renewal offer for the translation "
        "contract. If we want to switch vendors we must cancel by 15 January 2027.\n\n"
        "The terms are attached; please send comments to procurement by Friday.\n\nMaria\n",
        [("renewal-terms.pdf", "application/pdf", terms)],
    )


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
    (directory / "product-roadmap.pptx").write_bytes(make_pptx(ROADMAP_SLIDES))
    (directory / "regional-budget.xlsx").write_bytes(make_xlsx(budget_sheets()))
    write_format_samples(directory / "formats")


def write_format_samples(directory: Path) -> None:
    """One sample of each further format: a page, a table, a mail, a book. `kb demo`
    ingests only the top level of sample_docs/, so these keep it fast."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "support-hours.csv").write_text(SUPPORT_HOURS_CSV, encoding="utf-8")
    (directory / "status-page.html").write_text(STATUS_PAGE_HTML, encoding="utf-8")
    (directory / "vendor-renewal.eml").write_bytes(vendor_renewal_mail())
    (directory / "field-guide.epub").write_bytes(make_epub("Field guide", FIELD_GUIDE))


# --- packages: PPTX, XLSX, EPUB, written part by part -------------------------------

_CONTENT_TYPES_NS = "http://schemas.openxmlformats.org/package/2006/content-types"
_RELS_NS = "http://schemas.openxmlformats.org/package/2006/relationships"
_DOC_RELS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PML = "http://schemas.openxmlformats.org/presentationml/2006/main"
_DML = "http://schemas.openxmlformats.org/drawingml/2006/main"
_SML = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_OOXML = "application/vnd.openxmlformats-officedocument"


def _xml_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def zip_package(parts: dict[str, str | bytes], stored: tuple[str, ...] = ()) -> bytes:
    """A zip of these members in order; `stored` members are not compressed."""
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
        for name, data in parts.items():
            # A fixed date, so that the committed samples do not change when regenerated.
            member = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            member.compress_type = zipfile.ZIP_STORED if name in stored else zipfile.ZIP_DEFLATED
            package.writestr(member, data)
    return out.getvalue()


def _relationships(targets: list[tuple[str, str]]) -> str:
    """A .rels part: (relationship type's last segment, target) as rId1, rId2, ..."""
    rels = "".join(
        f'<Relationship Id="rId{i}" Type="{_DOC_RELS}/{kind}" Target="{target}"/>'
        for i, (kind, target) in enumerate(targets, start=1)
    )
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{_RELS_NS}">'
        f"{rels}</Relationships>"
    )


def _content_types(overrides: dict[str, str]) -> str:
    items = "".join(
        f'<Override PartName="/{name}" ContentType="{kind}"/>' for name, kind in overrides.items()
    )
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><Types xmlns="{_CONTENT_TYPES_NS}">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
        'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
        f"{items}</Types>"
    )


def _shape(text_lines: list[str], placeholder: str | None, shape_id: int) -> str:
    ph = f'<p:nvPr><p:ph type="{placeholder}"/></p:nvPr>' if placeholder else "<p:nvPr/>"
    paragraphs = "".join(
        f"<a:p><a:r><a:t>{_xml_text(line)}</a:t></a:r></a:p>" for line in text_lines
    )
    return (
        f'<p:sp><p:nvSpPr><p:cNvPr id="{shape_id}" name="Shape {shape_id}"/><p:cNvSpPr/>{ph}'
        f"</p:nvSpPr><p:spPr/><p:txBody><a:bodyPr/>{paragraphs}</p:txBody></p:sp>"
    )


def _table_frame(rows: list[list[str]]) -> str:
    cells = "".join(
        "<a:tr>"
        + "".join(
            f"<a:tc><a:txBody><a:bodyPr/><a:p><a:r><a:t>{_xml_text(c)}</a:t></a:r></a:p></a:txBody></a:tc>"
            for c in row
        )
        + "</a:tr>"
        for row in rows
    )
    return (
        '<p:graphicFrame><p:nvGraphicFramePr><p:cNvPr id="9" name="Table"/><p:cNvGraphicFramePr/>'
        "<p:nvPr/></p:nvGraphicFramePr><p:xfrm/><a:graphic><a:graphicData "
        f'uri="{_DML}/table"><a:tbl>{cells}</a:tbl></a:graphicData></a:graphic></p:graphicFrame>'
    )


def make_pptx(slides: list[dict]) -> bytes:
    """A deck: each slide a dict with "title", "lines", optional "table" and "notes"."""
    parts: dict[str, str | bytes] = {}
    overrides = {"ppt/presentation.xml": f"{_OOXML}.presentationml.presentation.main+xml"}
    for number, slide in enumerate(slides, start=1):
        shapes = _shape([slide["title"]], "title", 2) if slide.get("title") else ""
        shapes += _shape(slide.get("lines", []), "body", 3)
        if slide.get("table"):
            shapes += _table_frame(slide["table"])
        parts[f"ppt/slides/slide{number}.xml"] = (
            f'<?xml version="1.0" encoding="UTF-8"?><p:sld xmlns:p="{_PML}" xmlns:a="{_DML}" '
            f'xmlns:r="{_DOC_RELS}"><p:cSld><p:spTree>{shapes}</p:spTree></p:cSld></p:sld>'
        )
        overrides[f"ppt/slides/slide{number}.xml"] = f"{_OOXML}.presentationml.slide+xml"
        if slide.get("notes"):
            parts[f"ppt/notesSlides/notesSlide{number}.xml"] = (
                f'<?xml version="1.0" encoding="UTF-8"?><p:notes xmlns:p="{_PML}" '
                f'xmlns:a="{_DML}"><p:cSld><p:spTree>{_shape([], "sldImg", 2)}'
                f"{_shape(slide['notes'], 'body', 3)}{_shape([str(number)], 'sldNum', 4)}"
                "</p:spTree></p:cSld></p:notes>"
            )
            parts[f"ppt/slides/_rels/slide{number}.xml.rels"] = _relationships(
                [("notesSlide", f"../notesSlides/notesSlide{number}.xml")]
            )
    ids = "".join(f'<p:sldId id="{255 + n}" r:id="rId{n}"/>' for n in range(1, len(slides) + 1))
    parts["ppt/presentation.xml"] = (
        f'<?xml version="1.0" encoding="UTF-8"?><p:presentation xmlns:p="{_PML}" '
        f'xmlns:r="{_DOC_RELS}"><p:sldIdLst>{ids}</p:sldIdLst></p:presentation>'
    )
    parts["ppt/_rels/presentation.xml.rels"] = _relationships(
        [("slide", f"slides/slide{n}.xml") for n in range(1, len(slides) + 1)]
    )
    return zip_package(
        {
            "[Content_Types].xml": _content_types(overrides),
            "_rels/.rels": _relationships([("officeDocument", "ppt/presentation.xml")]),
            **parts,
        }
    )


def _column(index: int) -> str:
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(65 + rest) + letters
    return letters


# Number formats of make_xlsx's cells: a value given as (number, style) uses one.
XLSX_STYLES = {"currency": 1, "date": 2, "percent": 3, "thousands": 4}


def make_xlsx(sheets: dict[str, list[list]], dimension: dict[str, str] | None = None) -> bytes:
    """A workbook: sheet name -> rows; a cell is text, a number, or (number, style name)
    with a style of XLSX_STYLES. `dimension` overrides a sheet's declared dimension."""
    strings: list[str] = []
    parts: dict[str, str | bytes] = {}
    overrides = {
        "xl/workbook.xml": f"{_OOXML}.spreadsheetml.sheet.main+xml",
        "xl/styles.xml": f"{_OOXML}.spreadsheetml.styles+xml",
        "xl/sharedStrings.xml": f"{_OOXML}.spreadsheetml.sharedStrings+xml",
    }
    for number, (name, rows) in enumerate(sheets.items(), start=1):
        xml_rows = []
        for r, row in enumerate(rows, start=1):
            cells = []
            for c, value in enumerate(row):
                ref = f"{_column(c)}{r}"
                if isinstance(value, str):
                    strings.append(value)
                    cells.append(f'<c r="{ref}" t="s"><v>{len(strings) - 1}</v></c>')
                elif isinstance(value, tuple):
                    cells.append(f'<c r="{ref}" s="{XLSX_STYLES[value[1]]}"><v>{value[0]}</v></c>')
                else:
                    cells.append(f'<c r="{ref}"><v>{value}</v></c>')
            xml_rows.append(f'<row r="{r}">{"".join(cells)}</row>')
        width = max((len(row) for row in rows), default=1)
        ref = (dimension or {}).get(name, f"A1:{_column(width - 1)}{max(len(rows), 1)}")
        parts[f"xl/worksheets/sheet{number}.xml"] = (
            f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{_SML}">'
            f'<dimension ref="{ref}"/><sheetData>{"".join(xml_rows)}</sheetData></worksheet>'
        )
        overrides[f"xl/worksheets/sheet{number}.xml"] = f"{_OOXML}.spreadsheetml.worksheet+xml"
    sheet_list = "".join(
        f'<sheet name="{_xml_text(name)}" sheetId="{n}" r:id="rId{n}"/>'
        for n, name in enumerate(sheets, start=1)
    )
    parts["xl/workbook.xml"] = (
        f'<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="{_SML}" xmlns:r="{_DOC_RELS}">'
        f"<sheets>{sheet_list}</sheets></workbook>"
    )
    targets = [("worksheet", f"worksheets/sheet{n}.xml") for n in range(1, len(sheets) + 1)]
    parts["xl/_rels/workbook.xml.rels"] = _relationships(
        [*targets, ("styles", "styles.xml"), ("sharedStrings", "sharedStrings.xml")]
    )
    shared = "".join(f"<si><t>{_xml_text(text)}</t></si>" for text in strings)
    parts["xl/sharedStrings.xml"] = (
        f'<?xml version="1.0" encoding="UTF-8"?><sst xmlns="{_SML}" count="{len(strings)}">'
        f"{shared}</sst>"
    )
    parts["xl/styles.xml"] = (
        f'<?xml version="1.0" encoding="UTF-8"?><styleSheet xmlns="{_SML}">'
        '<numFmts count="2"><numFmt numFmtId="164" formatCode="&quot;$&quot;#,##0.00"/>'
        '<numFmt numFmtId="165" formatCode="yyyy-mm-dd"/></numFmts>'
        '<fonts count="1"><font><sz val="11"/><name val="Calibri"/></font></fonts>'
        '<fills count="1"><fill><patternFill patternType="none"/></fill></fills>'
        '<borders count="1"><border/></borders>'
        '<cellStyleXfs count="1"><xf numFmtId="0" fontId="0" fillId="0" borderId="0"/>'
        "</cellStyleXfs>"
        '<cellXfs count="5"><xf numFmtId="0"/><xf numFmtId="164" applyNumberFormat="1"/>'
        '<xf numFmtId="165" applyNumberFormat="1"/><xf numFmtId="10" applyNumberFormat="1"/>'
        '<xf numFmtId="3" applyNumberFormat="1"/></cellXfs></styleSheet>'
    )
    return zip_package(
        {
            "[Content_Types].xml": _content_types(overrides),
            "_rels/.rels": _relationships([("officeDocument", "xl/workbook.xml")]),
            **parts,
        }
    )


def make_epub(title: str, chapters: list[tuple[str, str]]) -> bytes:
    """An EPUB 3 book: (chapter title, chapter body HTML) in reading order."""
    manifest = "".join(
        f'<item id="c{n}" href="text/chapter{n}.xhtml" media-type="application/xhtml+xml"/>'
        for n in range(1, len(chapters) + 1)
    )
    spine = "".join(f'<itemref idref="c{n}"/>' for n in range(1, len(chapters) + 1))
    toc = "".join(
        f'<li><a href="text/chapter{n}.xhtml">{_xml_text(name)}</a></li>'
        for n, (name, _) in enumerate(chapters, start=1)
    )
    parts: dict[str, str | bytes] = {
        "mimetype": "application/epub+zip",
        "META-INF/container.xml": (
            '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:'
            'opendocument:xmlns:container"><rootfiles><rootfile full-path="OEBPS/content.opf" '
            'media-type="application/oebps-package+xml"/></rootfiles></container>'
        ),
        "OEBPS/content.opf": (
            '<?xml version="1.0" encoding="UTF-8"?><package xmlns="http://www.idpf.org/2007/opf" '
            'version="3.0" unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/'
            '1.1/"><dc:identifier id="id">urn:kb:sample</dc:identifier>'
            f"<dc:title>{_xml_text(title)}"
            "</dc:title><dc:language>en</dc:language></metadata><manifest>"
            '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
            f"{manifest}</manifest><spine>{spine}</spine></package>"
        ),
        "OEBPS/nav.xhtml": (
            '<?xml version="1.0" encoding="UTF-8"?><html xmlns="http://www.w3.org/1999/xhtml" '
            'xmlns:epub="http://www.idpf.org/2007/ops"><head><title>Contents</title></head><body>'
            f'<nav epub:type="toc"><ol>{toc}</ol></nav></body></html>'
        ),
    }
    for n, (name, body) in enumerate(chapters, start=1):
        parts[f"OEBPS/text/chapter{n}.xhtml"] = (
            '<?xml version="1.0" encoding="UTF-8"?><html xmlns="http://www.w3.org/1999/xhtml">'
            f"<head><title>{_xml_text(name)}</title></head><body>{body}</body></html>"
        )
    return zip_package(parts, stored=("mimetype",))


def make_eml(
    subject: str,
    sender: str,
    date: str,
    body: str,
    attachments: list[tuple[str, str, bytes]] = (),  # type: ignore[assignment]
    html: str | None = None,
) -> bytes:
    """A MIME mail: a plain-text body (and an HTML alternative), then attachments given
    as (file name, MIME type, content)."""
    from email.message import EmailMessage
    from email.policy import SMTP

    message = EmailMessage()
    message["Subject"] = subject
    message["From"] = sender
    message["To"] = "knowledge-base@example.com"
    message["Date"] = date
    message["Message-ID"] = f"<{'-'.join(subject.lower().split()[:4])}@example.com>"
    message.set_content(body)
    if html is not None:
        message.add_alternative(html, subtype="html")
    for filename, mime, data in attachments:
        maintype, subtype = mime.split("/")
        message.add_attachment(data, maintype=maintype, subtype=subtype, filename=filename)
    for number, part in enumerate(message.walk()):  # fixed, so the sample is reproducible
        if part.is_multipart():
            part.set_boundary(f"kb-sample-part-{number}")
    return message.as_bytes(policy=SMTP)


# --- hostile variants (generated by the tests, never committed) ---------------------


def many_part_mail(count: int) -> bytes:
    """The mail make_eml writes with `count` one-byte attachments note-0.txt, note-1.txt ...,
    byte for byte: its one-attachment mail with that part repeated (the email package
    takes seconds of CPU for 10,000 parts)."""
    mail = make_eml(
        "Many parts",
        "a@example.com",
        "Tue, 1 Dec 2026 10:00:00 +0000",
        "body",
        [("note-0.txt", "text/plain", b"x")],
    )
    start = mail.index(b'filename="note-0.txt"')
    start = mail.rindex(b"--kb-sample-part-0\r\n", 0, start)
    end = mail.rindex(b"--kb-sample-part-0--")
    part = mail[start:end]
    parts = (part.replace(b"note-0.txt", b"note-%d.txt" % number) for number in range(count))
    return mail[:start] + b"".join(parts) + mail[end:]


def zip_bomb(package: bytes, member: str, inflated_bytes: int = 1 << 30) -> bytes:
    """`package` with `member` replaced by `inflated_bytes` of whitespace (about 1 MB
    zipped per GiB)."""
    import zipfile

    out = io.BytesIO()
    block = b" " * (1 << 20)
    with (
        zipfile.ZipFile(io.BytesIO(package)) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as target,
    ):
        for info in source.infolist():
            if info.filename != member:
                target.writestr(info.filename, source.read(info))
                continue
            with target.open(member, "w", force_zip64=True) as inflating:
                for _ in range(inflated_bytes >> 20):
                    inflating.write(block)
    return out.getvalue()


if __name__ == "__main__":
    write_samples(Path(sys.argv[1] if len(sys.argv) > 1 else "sample_docs"))
