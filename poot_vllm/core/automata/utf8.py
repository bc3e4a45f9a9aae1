"""Code point sets as byte automata over their UTF-8 encodings.

A character class of the regex (``[^"\\\\]``, ``\\w``, ``.``) is one *position*
of poot's NFA.  Reading it takes one to four bytes, so each class carries a
small deterministic automaton, :class:`CodepointAutomaton`, that reads exactly
the UTF-8 encodings of its code points.  Sharing one automaton per class
keeps a Unicode class as cheap as one ASCII byte in the NFA, instead of the
hundreds of alternative byte sequences the textbook expansion gives ``\\w``.

The automaton is minimal by construction: after the lead byte and some
continuation bytes, what is left to read depends only on how many
continuation bytes remain and on which low-bit values are still in the class,
so states are interned on exactly that pair.  It never accepts overlong
encodings, surrogates or code points past U+10FFFF.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from poot_vllm.core.regex.charsets import MAX_CODEPOINT, Clipper, CodepointSet

#: Edge target meaning "a whole code point has been read".
DONE = -1

Edge = tuple[int, int, int]  # (first byte, last byte, target state or DONE)

# (encoded length, first code point, last code point, first lead byte, last lead byte)
_LENGTHS = (
    (1, 0x0000, 0x007F, 0x00, 0x7F),
    (2, 0x0080, 0x07FF, 0xC2, 0xDF),
    (3, 0x0800, 0xFFFF, 0xE0, 0xEF),
    (4, 0x10000, MAX_CODEPOINT, 0xF0, 0xF4),
)
_LEAD_PAYLOAD_MASK = {1: 0x7F, 2: 0x1F, 3: 0x0F, 4: 0x07}


@dataclass(frozen=True)
class CodepointAutomaton:
    """``states[q]`` lists the edges of state ``q`` (state 0 reads the lead byte)."""

    states: tuple[tuple[Edge, ...], ...]

    @property
    def n_edges(self) -> int:
        return sum(len(edges) for edges in self.states)

    def matches(self, data: bytes) -> bool:
        """Whether ``data`` is the UTF-8 encoding of exactly one code point of the set."""
        q = 0
        for i, b in enumerate(data):
            for lo, hi, target in self.states[q]:
                if lo <= b <= hi:
                    break
            else:
                return False
            if target == DONE:
                return i == len(data) - 1
            q = target
        return False


@lru_cache(maxsize=512)
def codepoint_automaton(cps: CodepointSet) -> CodepointAutomaton:
    """The minimal byte automaton for the UTF-8 encodings of ``cps`` (cached)."""
    states: list[tuple[Edge, ...] | None] = [None]
    interned: dict[tuple[int, tuple[tuple[int, int], ...]], int] = {}

    def state_for(remaining: int, offsets: tuple[tuple[int, int], ...]) -> int:
        # ``offsets``: the low ``6 * remaining`` bits still allowed.
        key = (remaining, offsets)
        sid = interned.get(key)
        if sid is not None:
            return sid
        sid = len(states)
        states.append(None)
        interned[key] = sid
        block = 1 << (6 * (remaining - 1))
        pieces: dict[int, list[tuple[int, int]]] = {}  # continuation payload j -> offsets inside it
        for lo, hi in offsets:
            for j in range(lo // block, hi // block + 1):
                base = j * block
                pieces.setdefault(j, []).append((max(lo, base) - base, min(hi, base + block - 1) - base))
        targets: list[tuple[int, int]] = []  # (continuation byte, target)
        for j in sorted(pieces):
            target = DONE if remaining == 1 else state_for(remaining - 1, tuple(pieces[j]))
            targets.append((0x80 + j, target))
        states[sid] = _merge(targets)
        return sid

    clipper = Clipper(cps)
    targets: list[tuple[int, int]] = []
    for length, first_cp, last_cp, first_lead, last_lead in _LENGTHS:
        if length == 1:
            for lo, hi in clipper.clip(0, 0x7F):
                targets.extend((b, DONE) for b in range(lo, hi + 1))
            continue
        payload_bits = 6 * (length - 1)
        for lead in range(first_lead, last_lead + 1):
            base = (lead & _LEAD_PAYLOAD_MASK[length]) << payload_bits
            a = max(base, first_cp)
            b = min(base + (1 << payload_bits) - 1, last_cp)
            if a > b:
                continue
            offsets = tuple((lo + a - base, hi + a - base) for lo, hi in clipper.clip(a, b))
            if offsets:
                targets.append((lead, state_for(length - 1, offsets)))
    states[0] = _merge(targets)
    assert all(s is not None for s in states)
    return CodepointAutomaton(tuple(states))  # type: ignore[arg-type]


def _merge(targets: list[tuple[int, int]]) -> tuple[Edge, ...]:
    """Byte -> target pairs (sorted by byte) as maximal ranges."""
    edges: list[list[int]] = []
    for byte, target in targets:
        if edges and edges[-1][1] == byte - 1 and edges[-1][2] == target:
            edges[-1][1] = byte
        else:
            edges.append([byte, byte, target])
    return tuple((lo, hi, t) for lo, hi, t in edges)
