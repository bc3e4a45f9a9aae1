"""Sets of Unicode code points as sorted, disjoint, inclusive ranges: poot's one range library.

Every front end (``guided_regex``, JSON Schema ``pattern``, GBNF classes),
the JSON string spelling and the UTF-8 automata use these sets, so a class
means the same code points wherever it is written.

A :data:`CodepointSet` never contains surrogates (U+D800..U+DFFF): poot's
automata read UTF-8, and no valid UTF-8 text contains a surrogate, so a class
that only matches surrogates matches nothing here.

The ``\\d``, ``\\w`` and ``\\s`` classes (the one Unicode class table) are taken
from Python's own ``re`` (run once over every code point, then cached), so
they agree with ``re`` on str patterns by construction, whatever Unicode
version this Python ships.
"""

from __future__ import annotations

import re
import sys
from array import array
from bisect import bisect_left, bisect_right
from functools import lru_cache

CodepointSet = tuple[tuple[int, int], ...]

MAX_CODEPOINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)
#: Every code point that can appear in UTF-8 text.
ANY_CHAR: CodepointSet = ((0, SURROGATES[0] - 1), (SURROGATES[1] + 1, MAX_CODEPOINT))
EMPTY: CodepointSet = ()
#: ASCII members of ``\\d``, ``\\w``, ``\\s`` (what Python's ``re.ASCII`` gives).
ASCII_CATEGORIES: dict[str, CodepointSet] = {
    "d": ((0x30, 0x39),),
    "w": ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)),
    "s": ((0x09, 0x0D), (0x20, 0x20)),
}


def normalize(ranges: "list[tuple[int, int]] | tuple[tuple[int, int], ...]") -> CodepointSet:
    """Sort and merge ranges, and drop surrogates."""
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            if hi > merged[-1][1]:
                merged[-1][1] = hi
        else:
            merged.append([lo, hi])
    out: list[tuple[int, int]] = []
    s_lo, s_hi = SURROGATES
    for lo, hi in merged:
        if hi < s_lo or lo > s_hi:
            out.append((lo, hi))
            continue
        if lo < s_lo:
            out.append((lo, s_lo - 1))
        if hi > s_hi:
            out.append((s_hi + 1, hi))
    return tuple(out)


def union(*sets: CodepointSet) -> CodepointSet:
    return normalize([r for s in sets for r in s])


def complement(cps: CodepointSet) -> CodepointSet:
    """Every UTF-8-encodable code point not in ``cps`` (``cps`` normalized)."""
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in cps:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODEPOINT:
        out.append((nxt, MAX_CODEPOINT))
    return normalize(out)


def subtract(a: CodepointSet, b: CodepointSet) -> CodepointSet:
    """Code points in ``a`` but not in ``b``."""
    return intersect(a, complement(b))


def intersect(a: CodepointSet, b: CodepointSet) -> CodepointSet:
    """Code points in both (both normalized); a linear merge of the two range lists."""
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def partition(sets: "list[CodepointSet]", max_atoms: int | None = None) -> list[CodepointSet]:
    """The atoms of ``sets``: the non-empty intersections of each set or its complement.

    Every set is a union of atoms, and two characters in one atom are in
    exactly the same sets, so an automaton over atoms decides what one over
    the sets would.  Raises ``ValueError`` once there are more than ``max_atoms``.
    """
    atoms = [ANY_CHAR]
    for c in dict.fromkeys(sets):
        nxt = []
        for atom in atoms:
            for piece in (intersect(atom, c), subtract(atom, c)):
                if piece:
                    nxt.append(piece)
        atoms = nxt
        if max_atoms is not None and len(atoms) > max_atoms:
            raise ValueError(f"more than {max_atoms} distinct character classes")
    return atoms


@lru_cache(maxsize=4096)
def single(cp: int) -> CodepointSet:
    return normalize([(cp, cp)])


class Clipper:
    """Intersections of one set with many intervals, by binary search.

    The UTF-8 automaton asks for the part of a class under each of ~250 lead
    bytes; a linear :func:`intersect` per lead byte would be quadratic on
    ``\\w`` (~700 ranges).
    """

    def __init__(self, cps: CodepointSet) -> None:
        self.ranges = cps
        self.los = [lo for lo, _ in cps]
        self.his = [hi for _, hi in cps]

    def clip(self, a: int, b: int) -> CodepointSet:
        """Ranges of the set inside ``[a, b]``, shifted so ``a`` is 0."""
        i = bisect_left(self.his, a)
        j = bisect_right(self.los, b)
        return tuple((max(lo, a) - a, min(hi, b) - a) for lo, hi in self.ranges[i:j])


@lru_cache(maxsize=None)
def _all_codepoints_text() -> str:
    """Every code point once, in order (surrogates included: ``re`` accepts them)."""
    codes = array("I", range(MAX_CODEPOINT + 1))
    if codes.itemsize != 4:  # pragma: no cover - exotic platforms
        codes = array("L", range(MAX_CODEPOINT + 1))
    encoding = "utf-32-le" if sys.byteorder == "little" else "utf-32-be"
    # Decoding a UTF-32 buffer takes milliseconds; a chr() loop takes ~0.2 s.
    return codes.tobytes().decode(encoding, "surrogatepass")


@lru_cache(maxsize=None)
def category(letter: str) -> CodepointSet:
    """The set Python's ``re`` matches with ``\\d``, ``\\w`` or ``\\s`` (str patterns)."""
    if letter not in ("d", "w", "s"):
        raise ValueError(letter)
    text = _all_codepoints_text()
    spans = [(m.start(), m.end() - 1) for m in re.finditer("\\" + letter + "+", text)]
    return normalize(spans)


def category_escape(escape: str) -> CodepointSet | None:
    """The set of ``\\d \\w \\s \\D \\W \\S`` exactly as ``re`` on str patterns; None for other escapes."""
    letter = escape[1:]
    if letter in ("d", "w", "s"):
        return category(letter)
    if letter in ("D", "W", "S"):
        return complement(category(letter.lower()))
    return None


#: ``.`` without DOTALL: anything but a newline.
DOT: CodepointSet = complement(single(ord("\n")))
