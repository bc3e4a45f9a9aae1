"""Code-point sets and their regex text, for JSON string content.

A set is a sorted list of disjoint inclusive ``(lo, hi)`` code-point ranges.
:func:`json_char_regex` turns a set of *decoded* characters into a regex over
the *raw JSON text* of one string character: characters that JSON forbids raw
(``"``, ``\\``, U+0000-U+001F) become their escape sequences.
"""

from __future__ import annotations

import functools
import json

Ranges = list[tuple[int, int]]

MAX_CP = 0x10FFFF
_HEX = "[0-9a-fA-F]"
#: One character of JSON string content: raw, a short escape, or a \uXXXX
#: escape of a BMP character that is not a surrogate (characters beyond the
#: BMP are written raw, never as a surrogate pair, so every \u escape decodes
#: to exactly one character and strict parsers accept it).
JSON_CHAR = (
    '(?:[^"\\\\\\x00-\\x1f]|\\\\(?:["\\\\/bfnrt]'
    f"|u(?:[0-9a-cA-Ce-fE-F]{_HEX}{{3}}|[dD][0-7]{_HEX}{{2}})))"
)

_META = set("\\.^$*+?{}[]()|")
_CLASS_META = set("\\]-[^")
#: Characters a JSON string may not hold raw (plus surrogates, which UTF-8 cannot hold).
_NOT_RAW: Ranges = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0xD800, 0xDFFF)]


def normalize(ranges: Ranges) -> Ranges:
    """Sort and merge overlapping or adjacent ranges."""
    out: Ranges = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def complement(ranges: Ranges) -> Ranges:
    out: Ranges = []
    nxt = 0
    for lo, hi in normalize(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CP:
        out.append((nxt, MAX_CP))
    return out


def subtract(a: Ranges, b: Ranges) -> Ranges:
    """Code points in ``a`` but not in ``b``."""
    cb = complement(b)
    out: Ranges = []
    for lo, hi in normalize(a):
        for clo, chi in cb:
            l, h = max(lo, clo), min(hi, chi)
            if l <= h:
                out.append((l, h))
    return out


def _from_predicate(pred) -> Ranges:
    out: Ranges = []
    start = None
    for cp in range(MAX_CP + 2):
        inside = cp <= MAX_CP and pred(chr(cp))
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            out.append((start, cp - 1))
            start = None
    return out


# Python's ``re`` on str patterns: \d = str.isdecimal, \w = isalnum or "_",
# \s = isspace.  Computed once, on first use (about 0.2 s each).
@functools.cache
def unicode_digits() -> Ranges:
    return _from_predicate(str.isdecimal)


@functools.cache
def unicode_word() -> Ranges:
    return _from_predicate(lambda c: c.isalnum() or c == "_")


@functools.cache
def unicode_space() -> Ranges:
    return _from_predicate(str.isspace)


def escape_char(cp: int, in_class: bool = False) -> str:
    """Regex text for one literal code point (poot syntax, Python ``re`` compatible)."""
    c = chr(cp)
    if cp < 0x20 or 0x7F <= cp < 0xA0:
        return f"\\x{cp:02x}"
    if 0xD800 <= cp <= 0xDFFF:
        return f"\\u{cp:04x}"
    if c in (_CLASS_META if in_class else _META):
        return "\\" + c
    return c


def escape_text(text: str) -> str:
    """Regex text matching exactly ``text``."""
    return "".join(escape_char(ord(c)) for c in text)


def class_regex(ranges: Ranges) -> str:
    """Regex text for one character from ``ranges`` (must be non-empty)."""
    ranges = normalize(ranges)
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return escape_char(ranges[0][0])
    parts = []
    for lo, hi in ranges:
        if lo == hi:
            parts.append(escape_char(lo, True))
        elif hi == lo + 1:
            parts.append(escape_char(lo, True) + escape_char(hi, True))
        else:
            parts.append(escape_char(lo, True) + "-" + escape_char(hi, True))
    return "[" + "".join(parts) + "]"


def json_char_regex(ranges: Ranges) -> str | None:
    """Regex over raw JSON text for one string character whose decoded value is in ``ranges``.

    Characters JSON may hold raw are emitted raw; ``"``, ``\\`` and control
    characters as their escapes (the short form where JSON has one, else
    ``\\u00XX``).  Other ``\\u`` spellings of raw-able characters are not
    emitted (a narrowing: the decoded string is the same).  ``None`` when the
    set is empty.
    """
    ranges = normalize(ranges)
    alts: list[str] = []
    raw = subtract(ranges, _NOT_RAW)
    if raw:
        alts.append(class_regex(raw))
    specials = [cp for lo, hi in ranges if lo <= 0x5C for cp in range(lo, min(hi, 0x5C) + 1) if cp < 0x20 or cp in (0x22, 0x5C)]
    controls = [cp for cp in specials if cp < 0x20]
    if len(controls) == 32:
        alts.append("\\\\(?:u00[01][0-9a-fA-F]|[bfnrt])")
    else:
        for cp in controls:
            alts.append(escape_text(json.dumps(chr(cp))[1:-1]))
    if 0x22 in specials:
        alts.append('\\\\"')
    if 0x5C in specials:
        alts.append("\\\\\\\\")
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
