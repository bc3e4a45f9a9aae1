"""JSON string content: how each decoded character is spelled in raw JSON text.

:func:`json_char_regex` turns a set of *decoded* characters (a
:mod:`~poot_vllm.core.regex.charsets` set) into a regex over the *raw JSON
text* of one string character: characters that JSON forbids raw (``"``,
``\\``, U+0000-U+001F) become their escape sequences.
"""

from __future__ import annotations

import json

from poot_vllm.core.regex import charsets as cs
from poot_vllm.core.regex.escape import class_regex, escape_text

_HEX = "[0-9a-fA-F]"
#: One character of JSON string content: raw, a short escape, or a \uXXXX
#: escape of a BMP character that is not a surrogate (characters beyond the
#: BMP are written raw, never as a surrogate pair, so every \u escape decodes
#: to exactly one character and strict parsers accept it).
JSON_CHAR = (
    '(?:[^"\\\\\\x00-\\x1f]|\\\\(?:["\\\\/bfnrt]'
    f"|u(?:[0-9a-cA-Ce-fE-F]{_HEX}{{3}}|[dD][0-7]{_HEX}{{2}})))"
)

#: Characters a JSON string may not hold raw: each is spelled as an escape of
#: two or more characters (surrogates are never in a set).
NOT_RAW: cs.CodepointSet = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))


def json_char_regex(ranges: cs.CodepointSet) -> str | None:
    """Regex over raw JSON text for one string character whose decoded value is in ``ranges``.

    Characters JSON may hold raw are emitted raw; ``"``, ``\\`` and control
    characters as their escapes (the short form where JSON has one, else
    ``\\u00XX``).  Other ``\\u`` spellings of raw-able characters are not
    emitted (a narrowing: the decoded string is the same).  ``None`` when the
    set is empty.
    """
    alts: list[str] = []
    raw = cs.subtract(ranges, NOT_RAW)
    if raw:
        alts.append(class_regex(raw))
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
