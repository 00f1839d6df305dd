"""XLSX with zipfile and lxml, streamed: each sheet's rows in blocks of rows.

Cells read as the spreadsheet shows them: shared and inline strings, booleans, and
numbers and dates through their number formats (numformat.py). A sheet's declared
dimension is checked before its rows are read: a few-KB file whose only cells are A1
and XFD1048576 declares 17 billion cells, and a reader that iterates them (openpyxl)
or allocates them (calamine) never finishes or aborts the process. Rows are then
read one at a time (iterparse), so memory follows one row, not the sheet."""

from __future__ import annotations

import re
from pathlib import Path

from kb_cli.errors import DocumentTooLarge, ParseError
from kb_cli.parsers.common import Block, Budget, ProgressCallback, part_errors
from kb_cli.parsers.numformat import BUILTIN, general, render
from kb_cli.parsers.package import (
    local_name,
    open_package,
    parse_xml,
    read_part,
    relationships,
)
from kb_cli.parsers.rows import row_blocks, row_text

WORKBOOK = "xl/workbook.xml"
MAX_SHEET_CELLS = 10_000_000  # of a sheet's declared dimension
MAX_COLUMNS = 16_384  # XFD, the last column a spreadsheet has
_R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
_REFERENCE = re.compile(r"^\$?([A-Za-z]{1,3})\$?(\d+)$")


def preload() -> None:
    """Import the library before a child process is forked to parse."""
    import lxml.etree  # noqa: F401


def parse(path: Path, on_progress: ProgressCallback, budget: Budget) -> list[Block]:
    with open_package(path, budget.limits.max_decompressed_bytes, "XLSX") as package:
        what = "the workbook"
        workbook = parse_xml(read_part(package, WORKBOOK, what), what)
        sheets, date1904 = _sheets(package, workbook)
        strings = _shared_strings(package)
        formats = _cell_formats(package)
        blocks: list[Block] = []
        for done, (name, part) in enumerate(sheets, start=1):
            reader = _SheetReader(name, strings, formats, date1904)
            with part_errors(f"sheet {name}"), _member(package, part) as stream:
                blocks += row_blocks(reader.rows(stream), name, budget)
            on_progress(done, len(sheets))
        if not sheets:
            on_progress(1, 1)
        return blocks


def _sheets(package, workbook) -> tuple[list[tuple[str, str]], bool]:
    """[(sheet name, part name)] in the workbook's order, and its date system."""
    targets = relationships(package, WORKBOOK, "the workbook")
    sheets: list[tuple[str, str]] = []
    date1904 = False
    for element in workbook.iter():
        kind = local_name(element)
        if kind == "workbookPr":
            date1904 = element.get("date1904", "0").lower() in ("1", "true")
        elif kind == "sheet":
            name = element.get("name", f"sheet {len(sheets) + 1}")
            rel = targets.get(element.get(_R, ""))
            if rel is None:
                raise ParseError(f"sheet {name}: its part is not in the package")
            if rel[0] == "worksheet":  # chartsheets and dialog sheets hold no cells
                sheets.append((name, rel[1]))
    return sheets, date1904


def _shared_strings(package) -> list[str]:
    name = next((n for n in ("xl/sharedStrings.xml",) if n in package.NameToInfo), None)
    if name is None:
        return []
    root = parse_xml(read_part(package, name, "the shared strings"), "the shared strings")
    return [_text(item) for item in root if local_name(item) == "si"]


def _cell_formats(package) -> list[str]:
    """Each cell style's number format code, by style index."""
    if "xl/styles.xml" not in package.NameToInfo:
        return []
    root = parse_xml(read_part(package, "xl/styles.xml", "the styles"), "the styles")
    custom: dict[int, str] = {}
    codes: list[str] = []
    for element in root.iter():
        kind = local_name(element)
        if kind == "numFmt":
            custom[_int(element.get("numFmtId"))] = element.get("formatCode", "General")
        elif kind == "cellXfs":
            for xf in element:
                number = _int(xf.get("numFmtId"))
                codes.append(custom.get(number) or BUILTIN.get(number, "General"))
    return codes


def _member(package, part: str):
    try:
        return package.open(part)
    except KeyError as error:
        raise ParseError(f"the part {part} is missing") from error


class _SheetReader:
    def __init__(self, name: str, strings: list[str], formats: list[str], date1904: bool):
        self.name = name
        self.strings = strings
        self.formats = formats
        self.date1904 = date1904

    def rows(self, stream):
        """(row number, row text) of each row, streamed; ParseError names the sheet."""
        import zipfile
        import zlib

        from lxml import etree

        what = f"sheet {self.name}"
        events = etree.iterparse(
            stream,
            events=("end",),
            tag=("{*}dimension", "{*}row"),  # cells are read with their row
            resolve_entities=False,
            huge_tree=False,
            no_network=True,
        )
        number = 0
        try:
            for _, element in events:
                kind = local_name(element)
                if kind == "dimension":
                    self._check_dimension(element.get("ref", ""))
                elif kind == "row":
                    number = _int(element.get("r")) or number + 1
                    yield number, row_text(self._cells(element))
                    element.clear()
                    while element.getprevious() is not None:
                        del element.getparent()[0]
        except etree.XMLSyntaxError as error:
            raise ParseError(f"{what}: not well-formed XML ({error})") from error
        except (zipfile.BadZipFile, zlib.error, EOFError) as error:
            raise ParseError(f"{what}: the part is damaged ({error})") from error
        except ValueError as error:
            raise ParseError(
                f"{what}, row {number}: {error}" if number else f"{what}: {error}"
            ) from error

    def _check_dimension(self, ref: str) -> None:
        corners = [_position(corner) for corner in ref.split(":") if corner]
        if len(corners) != 2:
            return
        (top, left), (bottom, right) = corners
        cells = (abs(bottom - top) + 1) * (abs(right - left) + 1)
        if cells > MAX_SHEET_CELLS:
            raise DocumentTooLarge(
                f"sheet {self.name} declares {ref}: {cells} cells, more than {MAX_SHEET_CELLS}"
            )

    def _cells(self, row) -> list[str]:
        cells: list[str] = []
        for cell in row:
            if not _named(cell, "c"):
                continue
            reference = cell.get("r")
            column = _position(reference)[1] if reference else len(cells) + 1
            if column > MAX_COLUMNS:
                raise ValueError(f"column {column} is past the last column")
            cells.extend([""] * (column - 1 - len(cells)))
            cells.append(self._value(cell))
        return cells

    def _value(self, cell) -> str:
        kind = cell.get("t", "n")
        raw = next((child for child in cell if _named(child, "v") or _named(child, "is")), None)
        if raw is None:
            return ""
        if kind == "inlineStr" or _named(raw, "is"):
            return _text(raw)
        text = raw.text or ""
        if kind == "s":
            index = _int(text)
            if not 0 <= index < len(self.strings):
                raise ValueError(f"shared string {index} does not exist")
            return self.strings[index]
        if kind == "b":
            return "TRUE" if text.strip() == "1" else "FALSE"
        if kind in ("str", "e", "d"):
            return text
        try:
            value = float(text)
        except ValueError:
            return text
        style = _int(cell.get("s"))
        code = self.formats[style] if 0 <= style < len(self.formats) else "General"
        return render(value, code, self.date1904) if code != "General" else general(value)


def _named(element, name: str) -> bool:
    """Whether the element is <name> in any namespace: local_name without a split, for
    the per-cell path."""
    tag = element.tag
    return isinstance(tag, str) and (tag == name or tag.endswith("}" + name))


def _text(item) -> str:
    """A rich or plain string's text (<t> runs), without its phonetic guides (<rPh>)."""
    return "".join(
        t.text or ""
        for t in item.iter()
        if local_name(t) == "t" and local_name(t.getparent()) != "rPh"
    )


def _position(reference: str) -> tuple[int, int]:
    """(row, column) of "B12"; ValueError if it is no cell reference."""
    match = _REFERENCE.match(reference)
    if match is None:
        raise ValueError(f"{reference!r} is not a cell reference")
    column = 0
    for letter in match.group(1).upper():
        column = column * 26 + ord(letter) - 64
    return int(match.group(2)), column


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0
