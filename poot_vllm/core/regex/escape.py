"""Code points and sets written back as regex text (poot's dialect, which is ``re``'s).

Generated regexes (JSON Schema -> regex) are assembled as text and parsed
again by :func:`poot_vllm.core.regex.parser.parse`; these helpers give each
literal and set the spelling that parses back to exactly it.
"""

from __future__ import annotations

from poot_vllm.core.regex import charsets as cs

_META = frozenset("\\.^$*+?{}[]()|")
_CLASS_META = frozenset("\\]-[^")


def escape_char(cp: int, in_class: bool = False) -> str:
    """Regex text for one literal code point (inside a class when ``in_class``)."""
    c = chr(cp)
    if cp < 0x20 or 0x7F <= cp < 0xA0:
        return f"\\x{cp:02x}"
    if cs.SURROGATES[0] <= cp <= cs.SURROGATES[1]:
        return f"\\u{cp:04x}"
    if c in (_CLASS_META if in_class else _META):
        return "\\" + c
    return c


def escape_text(text: str) -> str:
    """Regex text matching exactly ``text``."""
    return "".join(escape_char(ord(c)) for c in text)


def class_regex(ranges: cs.CodepointSet) -> str:
    """Regex text for one character from ``ranges`` (normalized, non-empty)."""
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
