"""Zip packages (DOCX, PPTX, XLSX, EPUB) and their XML parts, opened safely.

A package's members are counted before anything inflates them: their declared sizes
(which zipfile enforces on reading) against the decompressed-bytes limit, so a 1 MB
member that inflates to 1 GiB is refused before a byte of it is read. XML parts are
parsed without entity expansion, network access or libxml2's huge-tree mode; what
goes wrong is a ParseError naming the part."""

from __future__ import annotations

import posixpath
import zipfile
import zlib
from pathlib import Path

from kb_cli.errors import DocumentTooLarge, ParseError


def check_inflated_size(path: Path, limit: int) -> None:
    """DocumentTooLarge when the package's members declare more than `limit` bytes."""
    try:
        with zipfile.ZipFile(path) as package:
            inflated = sum(info.file_size for info in package.infolist())
    except zipfile.BadZipFile:
        return  # the parser says what is wrong with it
    if inflated > limit:
        raise DocumentTooLarge(
            f"its parts inflate to more than {limit} bytes (KB_MAX_DECOMPRESSED_BYTES)"
        )


def open_package(path: Path, limit: int, format_name: str) -> zipfile.ZipFile:
    """The package, once its declared inflated size is within `limit`."""
    check_inflated_size(path, limit)
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile as error:
        raise ParseError(f"not a valid {format_name} file (not a zip package)") from error


def read_part(package: zipfile.ZipFile, name: str, what: str) -> bytes:
    try:
        return package.read(name)
    except KeyError as error:
        raise ParseError(f"{what}: the part {name} is missing") from error
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as error:
        raise ParseError(f"{what}: the part {name} is damaged ({error})") from error


def xml_parser():
    from lxml import etree

    return etree.XMLParser(
        resolve_entities=False, no_network=True, huge_tree=False, remove_comments=True
    )


def parse_xml(data: bytes, what: str):
    """The root element of an XML part; ParseError naming `what` if it is not XML."""
    from lxml import etree

    try:
        root = etree.fromstring(data, xml_parser())
    except etree.XMLSyntaxError as error:
        raise ParseError(f"{what}: not well-formed XML ({error})") from error
    if root is None:
        raise ParseError(f"{what}: an empty XML part")
    return root


def relationships(package: zipfile.ZipFile, part: str, what: str) -> dict[str, tuple[str, str]]:
    """A part's relationships: id -> (type's last path segment, target part name)."""
    folder, name = posixpath.split(part)
    rels_name = posixpath.join(folder, "_rels", f"{name}.rels")
    if rels_name not in package.NameToInfo:
        return {}
    root = parse_xml(read_part(package, rels_name, what), what)
    found = {}
    for rel in root:
        target = rel.get("Target", "")
        if rel.get("TargetMode") == "External":
            continue
        resolved = target.lstrip("/") if target.startswith("/") else _join(folder, target)
        found[rel.get("Id", "")] = (rel.get("Type", "").rsplit("/", 1)[-1], resolved)
    return found


def _join(folder: str, target: str) -> str:
    return posixpath.normpath(posixpath.join(folder, target)).lstrip("/")


def resolve(base_part: str, href: str) -> str:
    """A member name from a link in `base_part` (relative to its folder)."""
    return _join(posixpath.dirname(base_part), href.split("#", 1)[0])


def local_name(element) -> str:
    tag = element.tag
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""
