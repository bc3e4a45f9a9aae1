"""JSON string content: how each decoded character is spelled in raw JSON text.

:func:`json_char_regex` turns a set of *decoded* characters (a
:mod:`~poot_vllm.core.regex.charsets` set) into a regex over the *raw JSON
text* of one string character: characters that JSON forbids raw (``"``,
``\\``, U+0000-U+001F) become their escape sequences.
"""

from __future__ import annotations

import json

from poot_vllm.core.regex import charsets as cs
from poot_vllm.core.regex.escape import class_regex, escape_char, escape_text

_HEX = "[0-9a-fA-F]"
#: One character of JSON string content: raw, a short escape, or a \uXXXX
#: escape of a BMP character that is not a surrogate (characters beyond the
#: BMP are written raw, never as a surrogate pair, so every \u escape decodes
#: to exactly one character and strict parsers accept it).
JSON_CHAR = (
    '(?:[^"\\\\\\x00-\\x1f]|\\\\(?:["\\\\/bfnrt]'
    f"|u(?:[0-9a-cA-Ce-fE-F]{_HEX}{{3}}|[dD][0-7]{_HEX}{{2}})))"
)
#: Characters that JSON text holds outside strings: never in ``escaped``.
_OUTSIDE_STRINGS = frozenset('{}[],:"\\ \t\n\r+-.0123456789eEtrufalsn')


def check_escaped(escaped: str) -> str:
    """``escaped`` if it is a valid option value: printable ASCII that JSON text holds only inside strings."""
    bad = [c for c in escaped if not 0x20 < ord(c) < 0x7F or c in _OUTSIDE_STRINGS]
    if bad:
        raise ValueError(f"cannot spell {bad[0]!r} as an escape: only printable ASCII characters that "
                         "JSON text holds inside strings alone can be")
    return "".join(sorted(set(escaped)))


def json_char(escaped: str = "") -> str:
    """:data:`JSON_CHAR`, except that the ASCII characters in ``escaped`` are never raw (only ``\\u`` escapes)."""
    if not escaped:
        return JSON_CHAR
    raw = '[^"\\\\\\x00-\\x1f]'
    assert raw in JSON_CHAR
    extra = "".join(escape_char(ord(c), in_class=True) for c in check_escaped(escaped))
    return JSON_CHAR.replace(raw, raw[:-1] + extra + "]", 1)


def escape_spelling(cp: int) -> str:
    """The ``\\u00XX`` spelling poot writes for an escaped character (lower-case hex, like ``json.dumps``)."""
    return f"\\u{cp:04x}"


def spell_escaped(json_text: str, escaped: str) -> str:
    """JSON text with every character of ``escaped`` spelled as its ``\\u`` escape.

    Exact for JSON text: the characters of ``escaped`` (:func:`check_escaped`)
    can only stand inside strings, where the escape decodes to the same
    character.
    """
    for c in check_escaped(escaped):
        json_text = json_text.replace(c, escape_spelling(ord(c)))
    return json_text


#: Characters a JSON string may not hold raw: each is spelled as an escape of
#: two or more characters (surrogates are never in a set).
NOT_RAW: cs.CodepointSet = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))


def json_char_regex(ranges: cs.CodepointSet, escaped: str = "") -> str | None:
    """Regex over raw JSON text for one string character whose decoded value is in ``ranges``.

    Characters JSON may hold raw are emitted raw; ``"``, ``\\`` and control
    characters as their escapes (the short form where JSON has one, else
    ``\\u00XX``).  Other ``\\u`` spellings of raw-able characters are not
    emitted (a narrowing: the decoded string is the same).  ``None`` when the
    set is empty.  Characters in ``escaped`` are written as ``\\u00XX`` only.
    """
    alts: list[str] = []
    avoid = escaped_set(escaped)
    raw = cs.subtract(cs.subtract(ranges, NOT_RAW), avoid)
    if raw:
        alts.append(class_regex(raw))
    for lo, hi in cs.intersect(ranges, avoid):
        alts.extend(escape_text(escape_spelling(cp)) for cp in range(lo, hi + 1))
    specials = cs.intersect(ranges, NOT_RAW)
    controls = [cp for lo, hi in specials for cp in range(lo, hi + 1) if cp < 0x20]
    if len(controls) == 32:
        alts.append("\\\\(?:u00[01][0-9a-fA-F]|[bfnrt])")
    else:
        for cp in controls:
            alts.append(escape_text(json.dumps(chr(cp))[1:-1]))
    if cs.intersect(specials, cs.single(0x22)):
        alts.append('\\\\"')
    if cs.intersect(specials, cs.single(0x5C)):
        alts.append("\\\\\\\\")
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def escaped_set(escaped: str) -> cs.CodepointSet:
    """The code point set of ``escaped`` (for set arithmetic with character classes)."""
    out: cs.CodepointSet = ()
    for c in check_escaped(escaped):
        out = cs.union(out, cs.single(ord(c)))
    return out
