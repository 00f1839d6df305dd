"""A spreadsheet number as its cell shows it: Excel's number format codes, the part
of them documents use (digits, thousands, decimals, percent, currency and literal
text, dates and times). Anything else falls back to the plain number."""

from __future__ import annotations

import datetime as dt
import functools
import re

BUILTIN = {
    0: "General", 1: "0", 2: "0.00", 3: "#,##0", 4: "#,##0.00", 9: "0%", 10: "0.00%",
    11: "0.00E+00", 12: "# ?/?", 13: "# ??/??", 14: "m/d/yyyy", 15: "d-mmm-yy", 16: "d-mmm",
    17: "mmm-yy", 18: "h:mm AM/PM", 19: "h:mm:ss AM/PM", 20: "h:mm", 21: "h:mm:ss",
    22: "m/d/yyyy h:mm", 37: "#,##0 ;(#,##0)", 38: "#,##0 ;(#,##0)", 39: "#,##0.00;(#,##0.00)",
    40: "#,##0.00;(#,##0.00)", 45: "mm:ss", 46: "[h]:mm:ss", 47: "mm:ss.0", 48: "##0.0E+0",
    49: "@",
}  # fmt: skip
_BRACKETS = re.compile(r"\[([^\]]*)\]")
_QUOTED = re.compile(r'"([^"]*)"|\\(.)|_.|\*.')
_DATE_CODES = re.compile(r"(?i)yyyy|yy|mmmmm|mmmm|mmm|mm|m|dddd|ddd|dd|d|hh|h|ss|s|am/pm|a/p")
_NUMBER = re.compile(r"[0#?][0#?,]*(?:\.[0#?]*)?(?:[eE][+-][0#]+)?%?|\.[0#?]+%?")
_EPOCH_1900 = dt.datetime(1899, 12, 30)
_EPOCH_1904 = dt.datetime(1904, 1, 1)


def render(value: float, code: str, date1904: bool = False) -> str:
    sections = _split(code)
    section = sections[0]
    if value < 0 and len(sections) > 1:
        section, value = sections[1], -value
    elif value == 0 and len(sections) > 2:
        section = sections[2]
    kind = _kind(section)
    if kind == "general":
        return general(value)
    if kind == "date":
        return _date(value, section, date1904)
    return _number(value, section)


@functools.lru_cache(maxsize=512)
def _kind(section: str) -> str:
    """general, date or number: a workbook has few formats and many cells."""
    if section.strip() in ("", "General", "@"):
        return "general"
    literal_free = _QUOTED.sub("", _BRACKETS.sub(lambda m: _bracket(m.group(1)), section))
    return "date" if _is_date(literal_free) else "number"


def general(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.10g}"


@functools.lru_cache(maxsize=512)
def _split(code: str) -> tuple[str, ...]:
    """Sections at the semicolons outside quotes."""
    sections: list[str] = []
    current: list[str] = []
    quoted = False
    for char in code:
        if char == '"':
            quoted = not quoted
        if char == ";" and not quoted:
            sections.append("".join(current))
            current = []
        else:
            current.append(char)
    sections.append("".join(current))
    return tuple(sections)


def _bracket(inside: str) -> str:
    """[$€-407] is a currency symbol; [Red] and [>100] are not shown; [h] elapsed hours."""
    if inside.startswith("$"):
        return inside[1:].split("-", 1)[0]
    return inside if inside.lower() in ("h", "hh", "m", "mm", "s", "ss") else ""


def _is_date(code: str) -> bool:
    stripped = re.sub(r"(?i)e[+-]", "", code)
    return any(char in stripped.lower() for char in "ymdhs")


@functools.lru_cache(maxsize=512)
def _literals(section: str) -> str:
    """The section with quoted text and escapes made plain and brackets resolved."""

    def plain(match: re.Match[str]) -> str:
        quoted, escaped = match.group(1, 2)
        if quoted is not None:
            return quoted
        if escaped is not None:
            return escaped
        return " " if match.group(0).startswith("_") else ""

    return _QUOTED.sub(plain, _BRACKETS.sub(lambda m: _bracket(m.group(1)), section))


def _number(value: float, section: str) -> str:
    text = _literals(section)
    match = _NUMBER.search(text)
    if match is None:
        return text or general(value)
    pattern = match.group(0)
    if pattern.endswith("%"):
        value *= 100
    mantissa = pattern.rstrip("%")
    if "e" in mantissa.lower():
        decimals = len(mantissa.lower().split("e")[0].partition(".")[2])
        shown = f"{value:.{decimals}E}"
    else:
        decimals = len(mantissa.partition(".")[2])
        grouping = "," if "," in mantissa.partition(".")[0].strip(",") else ""
        shown = f"{value:{grouping}.{decimals}f}"
        if mantissa.startswith("#") and shown.startswith("0") and decimals:
            shown = shown[1:]  # "#.00" shows .50, not 0.50
    return (
        text[: match.start()] + shown + ("%" if pattern.endswith("%") else "") + text[match.end() :]
    )


def _date(value: float, section: str, date1904: bool) -> str:
    try:
        epoch = _EPOCH_1904 if date1904 else _EPOCH_1900
        moment = epoch + dt.timedelta(seconds=round(value * 86400))
    except (OverflowError, ValueError):
        return general(value)
    text = _literals(section)
    twelve_hour = re.search(r"(?i)am/pm|a/p", text) is not None
    tokens = list(_DATE_CODES.finditer(text))
    out, last = [], 0
    for index, token in enumerate(tokens):
        out.append(text[last : token.start()])
        out.append(_date_part(token.group(0), moment, tokens, index, twelve_hour))
        last = token.end()
    out.append(text[last:])
    return "".join(out)


def _date_part(
    code: str, moment: dt.datetime, tokens: list[re.Match[str]], index: int, twelve: bool
) -> str:
    lower = code.lower()
    if lower in ("am/pm", "a/p"):
        return (
            ("AM" if moment.hour < 12 else "PM")
            if lower == "am/pm"
            else ("a" if moment.hour < 12 else "p")
        )
    if lower.startswith("y"):
        return str(moment.year) if len(lower) == 4 else f"{moment.year % 100:02d}"
    if lower.startswith("d"):
        return {1: str(moment.day), 2: f"{moment.day:02d}", 3: moment.strftime("%a")}.get(
            len(lower), moment.strftime("%A")
        )
    if lower.startswith("h"):
        hour = moment.hour % 12 or 12 if twelve else moment.hour
        return f"{hour:02d}" if len(lower) == 2 else str(hour)
    if lower.startswith("s"):
        return f"{moment.second:02d}" if len(lower) == 2 else str(moment.second)
    if lower.startswith("m") and len(lower) <= 2 and _is_minutes(tokens, index):
        return f"{moment.minute:02d}" if len(lower) == 2 else str(moment.minute)
    if len(lower) <= 2:
        return f"{moment.month:02d}" if len(lower) == 2 else str(moment.month)
    names = {3: "%b", 4: "%B"}
    return moment.strftime(names[len(lower)]) if len(lower) in names else moment.strftime("%B")[0]


def _is_minutes(tokens: list[re.Match[str]], index: int) -> bool:
    """m/mm means minutes right after an hour or right before a second."""
    before = tokens[index - 1].group(0).lower() if index else ""
    after = tokens[index + 1].group(0).lower() if index + 1 < len(tokens) else ""
    return before.startswith("h") or after.startswith("s")
