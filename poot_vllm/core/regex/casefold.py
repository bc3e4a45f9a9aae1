"""IGNORECASE exactly as Python's ``re`` applies it, as code-point sets.

``re`` does not fold a pattern by one rule: a literal compiles to
``LITERAL_UNI_IGNORE`` (compare ``tolower(ch)``) or, for the characters with
extra equivalences (``s``/``ſ``, ``k``/``K`` (Kelvin), ``µ``/``μ``, ...), to a
small set; a class folds each literal and BMP range member, keeps non-BMP
ranges as ``RANGE_UNI_IGNORE`` (``lower(ch)`` or ``upper(lower(ch))`` in
range), tests ``\\w``-style members on ``lower(ch)``, and does not fold at all
when no member is cased (so ``(?i)[\\w]`` is plain ``\\w``).  Re-deriving
that would copy CPython's compiler and go stale with its Unicode tables.

So the folded set is taken from ``re`` itself, on a small, provably
sufficient set of candidates.  Let ``CASED`` be every code point ``_sre``
calls cased (``tolower(c) != c`` or ``toupper(c) != c``), the lower-case
images of those (and their upper-case images), and the members of the extra equivalences.  For a code
point ``c`` outside ``CASED``, ``tolower(c) == c == toupper(c)`` and ``c`` is
nobody's lower-case image, so every opcode above tests ``c`` exactly as the
case-sensitive construct would: ``c`` matches the folded construct iff it is
in the plain set.  For ``c`` in ``CASED`` (~2,900 code points) ``re`` is
asked directly, with one ``finditer`` over those characters.  The construct
is re-spelled from its parsed members (escapes only, so ``re`` parses it into
the same members and never warns), with the ASCII flag when it is in force
(ASCII folding touches only ``A-Z a-z``, which ``CASED`` contains).
``tests/unit/test_regex_constructs.py`` checks the result against ``re`` over
every code point.
"""

from __future__ import annotations

import re
from functools import lru_cache

import _sre

from poot_vllm.core.regex import charsets as cs


def _extra_cases() -> "dict[int, tuple[int, ...]]":
    try:  # Python 3.11+
        from re._casefix import _EXTRA_CASES  # type: ignore[import-not-found]

        return dict(_EXTRA_CASES)
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_compile

        return dict(getattr(sre_compile, "_ignorecase_fixes", {}))


@lru_cache(maxsize=None)
def _cased() -> tuple[cs.CodepointSet, str]:
    """``CASED`` as a set and as the text of its characters (computed once, ~50 ms)."""
    codes = set()
    iscased, tolower = _sre.unicode_iscased, _sre.unicode_tolower
    for cp, cased in enumerate(map(iscased, range(cs.MAX_CODEPOINT + 1))):
        if cased:
            lower = tolower(cp)
            codes.add(cp)
            codes.add(lower)
            # upper(lower(c)) is what RANGE_UNI_IGNORE also tests; _sre does
            # not expose its simple upper-case mapping, so take every
            # character of the full mappings (a superset).
            codes.update(map(ord, chr(cp).upper() + chr(lower).upper()))
    for key, values in _extra_cases().items():
        codes.add(key)
        codes.update(values)
    ranges = cs.normalize([(c, c) for c in codes])
    text = "".join(chr(lo) if lo == hi else "".join(map(chr, range(lo, hi + 1))) for lo, hi in ranges)
    return ranges, text


def cased_set() -> cs.CodepointSet:
    """``CASED``: outside it, IGNORECASE changes nothing."""
    return _cased()[0]


def spell_code(cp: int) -> str:
    """One code point as an escape ``re`` reads as that code point, in or out of a class."""
    return f"\\U{cp:08x}"


@lru_cache(maxsize=4096)
def folded(spelling: str, plain: cs.CodepointSet, ascii: bool) -> cs.CodepointSet:
    """The code points ``spelling`` (one literal or class) matches under IGNORECASE.

    ``plain`` is what the construct matches without IGNORECASE as poot reads
    it (for JSON Schema patterns possibly narrower than ``re``'s set: the
    result then stays within ``re``'s folded set, never wider).
    """
    cased, text = _cased()
    pattern = re.compile(spelling, re.IGNORECASE | (re.ASCII if ascii else 0))
    hits = [(ord(m.group()),) * 2 for m in pattern.finditer(text)]
    return cs.union(cs.subtract(plain, cased), tuple(hits))


def fold_literal(cp: int, ascii: bool) -> cs.CodepointSet:
    return folded(spell_code(cp), cs.single(cp), ascii)


def class_spelling(members: "list[tuple]") -> str:
    """A class ``re`` parses into exactly these members (see :func:`poot_vllm.core.regex.classes.parse_class`)."""
    parts = []
    for member in members:
        if member[0] == "negate":
            parts.append("^")
        elif member[0] == "lit":
            parts.append(spell_code(member[1]))
        elif member[0] == "range":
            parts.append(spell_code(member[1]) + "-" + spell_code(member[2]))
        else:  # a \d-style escape
            parts.append(member[1])
    return "[" + "".join(parts) + "]"
