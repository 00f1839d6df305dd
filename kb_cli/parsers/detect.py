"""What a file is, from its content first and its name second.

1. Magic bytes decide for binary formats, whatever the name says: `%PDF-` is a PDF;
   a zip package is a DOCX, PPTX, XLSX or EPUB by its members (word/document.xml,
   ppt/presentation.xml, xl/workbook.xml, an EPUB's `mimetype` or container); an OLE2
   compound file (D0 CF 11 E0) is a legacy .doc/.xls/.ppt/.msg, which kb does not
   read (legacy_office says what to convert it to).
2. Otherwise the extension decides (.txt, .md, .csv, .tsv, .html, .eml, ...), and a
   damaged file that still bears a supported name is accepted: its parse fails with
   a parse_error that says what is wrong.
3. A file with no known extension is sniffed: an HTML document (a doctype, <html>, or
   XHTML), or a MIME mail (its first lines are headers such as From, Subject, Date).
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from kb_cli.parsers.common import KINDS, PACKAGED, FileKind, kind_for_filename

HEAD_BYTES = 8192
OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
ZIP_MAGIC = b"PK\x03\x04"
_ZIP_MEMBERS = (
    ("word/document.xml", ".docx"),
    ("ppt/presentation.xml", ".pptx"),
    ("xl/workbook.xml", ".xlsx"),
    ("META-INF/container.xml", ".epub"),
)
_HTML = re.compile(
    rb"^\s*(<\?xml[^>]*>\s*)?(<!--.*?-->\s*)*(<!doctype\s+html|<html[\s>])", re.I | re.S
)
_HEADER_LINE = re.compile(rb"^[!-9;-~]+:[ \t]?")
_MAIL_HEADERS = {
    b"from", b"to", b"subject", b"date", b"message-id", b"mime-version", b"received",
    b"return-path", b"delivered-to", b"content-type", b"reply-to", b"cc",
}  # fmt: skip
_LEGACY = {".doc": ".docx", ".xls": ".xlsx", ".ppt": ".pptx", ".msg": ".eml"}


def detect(path: Path, name: str) -> FileKind | None:
    """The kind of the file at `path` (named `name`), or None if kb does not read it."""
    with open(path, "rb") as source:
        return detect_file(source, name)


def detect_file(source: BinaryIO, name: str) -> FileKind | None:
    """The same for a file already open (seekable, read from its start): what a sync
    read from the descriptor it checked."""
    source.seek(0)
    head = source.read(HEAD_BYTES)

    def open_zip() -> zipfile.ZipFile:
        source.seek(0)
        return zipfile.ZipFile(source)

    return _detect(head, open_zip, name)


def detect_bytes(data: bytes, name: str) -> FileKind | None:
    """The same for a file in memory (a mail's attachment)."""
    return _detect(data[:HEAD_BYTES], lambda: zipfile.ZipFile(io.BytesIO(data)), name)


def legacy_office(path: Path, name: str) -> str | None:
    """What to do with a legacy Office file (OLE2), or None if it is not one."""
    with open(path, "rb") as source:
        return legacy_office_file(source, name)


def legacy_office_file(source: BinaryIO, name: str) -> str | None:
    """The same for a file already open (seekable)."""
    source.seek(0)
    if source.read(len(OLE2_MAGIC)) != OLE2_MAGIC:
        return None
    modern = _LEGACY.get(Path(name).suffix.lower())
    if modern is None:
        return "a legacy Microsoft Office file (.doc, .xls, .ppt): save it as .docx, .xlsx or .pptx"
    if modern == ".eml":
        return "an Outlook .msg file: save the mail as .eml (or forward it) and upload that"
    return f"a legacy {Path(name).suffix.lower()} file: save it as {modern} and upload that"


def _detect(head: bytes, open_zip: Callable[[], zipfile.ZipFile], name: str) -> FileKind | None:
    named = kind_for_filename(name)
    if b"%PDF-" in head[:1024]:
        return KINDS[".pdf"]
    if head.startswith(OLE2_MAGIC):
        return None
    if head.startswith(ZIP_MAGIC):
        return _package_kind(open_zip) or (named if named and named.extension in PACKAGED else None)
    if named is not None:
        return named
    if _HTML.match(head):
        return KINDS[".html"]
    if _looks_like_mail(head):
        return KINDS[".eml"]
    return None


def _package_kind(open_zip: Callable[[], zipfile.ZipFile]) -> FileKind | None:
    try:
        with open_zip() as package:
            members = set(package.namelist())
            if (
                "mimetype" in members
                and package.getinfo("mimetype").file_size < 64
                and package.read("mimetype").strip() == b"application/epub+zip"
            ):
                return KINDS[".epub"]
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, zlib.error):
        return None
    for member, extension in _ZIP_MEMBERS:
        if member in members:
            return KINDS[extension]
    return None


def _looks_like_mail(head: bytes) -> bool:
    """The lines before the first empty one are all headers, two of them a mail's."""
    names = set()
    for line in head.replace(b"\r\n", b"\n").split(b"\n\n", 1)[0].split(b"\n"):
        if line[:1] in (b" ", b"\t"):
            continue  # a folded header's continuation
        if not _HEADER_LINE.match(line):
            return False
        names.add(line.split(b":", 1)[0].lower())
    return len(names & _MAIL_HEADERS) >= 2
