"""MIME mail (.eml) with the standard library: headers, body and attachments.

The first block holds the subject, sender, recipients and date, the body (plain text
preferred, else the HTML part read as a page) follows under the subject, and each
attachment of a kind kb reads (PDF, DOCX, a spreadsheet, a slide deck, HTML, ...)
is parsed by its own parser, in this same parse child and against the same budget,
as a part of the same document: its blocks sit under "attachment N: name". A part
that cannot be read is a ParseError naming it ("attachment 2 (report.pdf): ...");
an attachment of a kind kb does not read is left out."""

from __future__ import annotations

import importlib
import re
import tempfile
from email import policy
from email.message import EmailMessage, MIMEPart
from email.parser import BytesParser
from pathlib import Path

from kb_cli.errors import DocumentTooLarge, ParseError, ScannedWithoutOcr
from kb_cli.parsers.common import Block, Budget, ProgressCallback, part_errors

MAX_PARTS = 1_000
MAX_NESTING = 3  # a mail attached to a mail attached to a mail
_SHOWN_HEADERS = ("Subject", "From", "To", "Cc", "Date")
_BOUNDARY = re.compile(rb'boundary\s*=\s*(?:"([^"\r\n]+)"|([^\s;"]+))', re.IGNORECASE)


def preload() -> None:
    """Import what a mail's attachments may need before the parse child is forked."""
    import email.parser  # noqa: F401


def parse(path: Path, on_progress: ProgressCallback, budget: Budget) -> list[Block]:
    blocks = mail_blocks(path.read_bytes(), budget, nesting=0)
    on_progress(1, 1)
    return blocks


def mail_blocks(data: bytes, budget: Budget, nesting: int) -> list[Block]:
    _refuse_many_parts(_counted_parts(data))  # before the parse: it costs ~1 ms a part
    with part_errors("the mail's headers"):
        message = BytesParser(policy=policy.default).parsebytes(data)
    if not isinstance(message, EmailMessage):
        raise ParseError("not a MIME message")
    _refuse_many_parts(sum(1 for _ in message.walk()))
    subject = _header(message, "Subject") or "(no subject)"
    lines = [f"{name}: {value}" for name in _SHOWN_HEADERS if (value := _header(message, name))]
    blocks = [Block(budget.add("\n\n".join(lines)), heading=subject)]
    with part_errors("the body"):
        body = message.get_body(preferencelist=("plain", "html"))
        if body is not None:
            blocks += [_under(subject, None, block) for block in _body_blocks(body, budget)]
    attachments = [part for part in message.walk() if _is_attachment(part, body)]
    for number, part in enumerate(attachments, start=1):
        name = part.get_filename() or part.get_content_type()
        label = f"attachment {number}: {name}"
        with part_errors(f"attachment {number} ({name})"):
            inner = _attachment_blocks(part, name, budget, nesting)
        blocks += [_under(subject, label, block) for block in inner]
    return blocks


def _header(message: EmailMessage, name: str) -> str:
    try:
        value = message.get(name)
    except (ValueError, IndexError, TypeError, AttributeError):  # unparseable: left out
        return ""
    return " ".join(str(value or "").split())


def _body_blocks(body: MIMEPart, budget: Budget) -> list[Block]:
    text = body.get_content()
    if body.get_content_subtype() == "html":
        from kb_cli.parsers.html_page import html_blocks

        return html_blocks(text, budget)
    return [
        Block(budget.add(paragraph.strip()))
        for paragraph in text.split("\n\n")
        if paragraph.strip()
    ]


def _counted_parts(data: bytes) -> int:
    """The parts a parse would find, counted on the raw bytes: the mail itself and one
    part per delimiter line of a declared boundary (a nested multipart is one of its
    parent's parts). RFC 2046 forbids a delimiter line inside a part's content, so a
    well-formed mail is counted exactly."""
    boundaries = {b"--" + (found[1] or found[2]) for found in _BOUNDARY.finditer(data)}
    if not boundaries:
        return 1
    return 1 + sum(1 for line in data.split(b"\n") if line.rstrip() in boundaries)


def _refuse_many_parts(parts: int) -> None:
    if parts > MAX_PARTS:
        raise DocumentTooLarge(f"more than {MAX_PARTS} MIME parts ({parts})")


def _is_attachment(part: MIMEPart, body: MIMEPart | None) -> bool:
    if part is body or part.is_multipart():
        return False
    return part.is_attachment() or (
        part.get_filename() is not None and part.get_content_maintype() != "text"
    )


def _attachment_blocks(part: MIMEPart, name: str, budget: Budget, nesting: int) -> list[Block]:
    from kb_cli.parsers.detect import detect_bytes

    data = part.get_payload(decode=True)
    if not isinstance(data, bytes) or not data:
        return []
    kind = detect_bytes(data, name)
    if kind is None:
        return []
    if kind.module == "mail":
        return mail_blocks(data, budget, nesting + 1) if nesting < MAX_NESTING else []
    module = importlib.import_module(f"kb_cli.parsers.{kind.module}")
    with tempfile.NamedTemporaryFile(suffix=kind.extension) as copy:
        copy.write(data)
        copy.flush()
        if kind.module == "text":
            markdown = kind.extension == ".md"
            blocks: list[Block] = module.parse(Path(copy.name), _ignore, budget, markdown=markdown)
        else:
            try:
                blocks = module.parse(Path(copy.name), _ignore, budget)
            except ScannedWithoutOcr:  # a scan without OCR adds nothing, as it always did
                return []
        return blocks


def _ignore(done: int, total: int) -> None:
    """An attachment's own progress: the mail reports as one unit."""


def _under(subject: str, label: str | None, block: Block) -> Block:
    """A block of the body or of an attachment, placed under the mail's subject."""
    above = (subject, label) if label else (subject,)
    if block.heading is None:
        return Block(block.text, block.page, label or subject, above[:-1])
    return Block(block.text, block.page, block.heading, (*above, *block.parents))
