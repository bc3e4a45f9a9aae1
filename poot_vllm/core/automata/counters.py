"""Counted repetitions: one copy of the item and a counter, not ``n`` copies.

A bounded JSON string ``"(?:CHAR){0,4000}"`` expanded into copies costs about
14 DFA states per character (the states inside multi-byte UTF-8 characters
and escapes), so the seed refused every text field past ~240 characters.
Here a large repetition ``X{lo,hi}`` is built *once*, as ``X`` looped, and
the automaton carries one integer counter: the matcher's state is a pair
(DFA state, counter).  Each transition has an *action*:

* ``ACT_SET1``: the first item of a counted region starts (counter := 1);
* ``ACT_INC``: another item starts (allowed while counter < the region's
  ``hi``, then counter += 1);
* ``ACT_NONE``: anything else (inside an item, or leaving the region).

``DFA.counter_limit[s]`` is the ``hi`` of the region whose counter is live
in state ``s`` (0: none; the counter is then reset to 0, so equal
configurations have one spelling).  Leaving a region needs no check because
regions are only made with ``lo <= 1``: ``X{lo,hi}`` with ``2 <= lo <=
COUNTED_PREFIX_MAX`` becomes ``X{lo-1} X{1,hi-lo+1}`` (the short prefix
expanded as before), a larger ``lo`` keeps the expansion.

The construction stays deterministic only when every transition has one
action: a region is *ambiguous* when a byte could both continue the item
and start the next one, or both start an item and leave the region
(``[a-z]{0,300}[a-z0-9]``, ``(?:a|ab){0,99}b``).  The subset construction
detects it and the regex is built again with every repetition expanded
(``build.regex_tree_to_dfa``), charged as before, so nothing that compiled
before is lost.  Regexes with an assertion decided by one character class
(``\\b``, ``(?=\\d)``), with an assertion inside a counted item, or with a
lookahead that needs a second item of a region (``build._ends_without_increments``)
are built expanded; other lookarounds run beside the counter (``build._LookStates``).

Consumers: ``masks`` (a mask row per base state, minus the tokens whose
counted items would pass ``hi`` at the current counter), ``matchers.dfa``
(``CountedDFAMatcher``), ``budget`` (distances on :func:`without_increments`,
which are valid for every counter value), ``tool_calls.forcing`` (loops and
envelopes keep the actions).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from poot_vllm.core.regex import ast
from poot_vllm.core.regex import charsets as cs

ACT_NONE = 0
ACT_INC = 1
ACT_SET1 = 2

#: A repetition gets a counter when its upper bound is at least this (below
#: it the expanded chain is small, and exact masks per copy cost nothing).
COUNTED_MIN = 16
#: ``X{lo,hi}`` with ``lo`` above this keeps the expansion (its first ``lo``
#: copies are mandatory; a counter with a lower bound would make leaving the
#: region depend on the counter, which masks and budgets here do not model).
COUNTED_PREFIX_MAX = 32


@dataclass(frozen=True)
class Counted:
    """``item{min,max}`` built once with a counter (``min`` is 0 or 1)."""

    item: ast.Node
    min: int
    max: int


def nullable(node: ast.Node) -> bool:
    if isinstance(node, ast.Chars):
        return False
    if isinstance(node, ast.Concat):
        return all(nullable(i) for i in node.items)
    if isinstance(node, ast.Alt):
        return any(nullable(i) for i in node.items)
    if isinstance(node, (ast.Repeat, Counted)):
        return node.min == 0 or nullable(node.item)
    return True  # zero-width assertions


def plan(node: ast.Node) -> tuple[ast.Node, bool]:
    """``node`` with its large repetitions made :class:`Counted` (innermost
    first: a repetition whose item holds a counted region stays expanded, so
    at most one counter is live at a time); and whether any was.

    A repetition whose item can start with a character that may also follow
    it (an LDH label's ``[a-z0-9-]{0,19}[a-z0-9]``) would be an ambiguous
    region: it stays expanded here, on its own (what follows is
    over-approximated from the tree), instead of the subset construction
    finding the ambiguity and building the whole regex expanded."""
    memo: dict[tuple[int, tuple], tuple[ast.Node, ast.Node, bool]] = {}

    def walk(n: ast.Node, follow: tuple) -> tuple[ast.Node, bool]:
        key = (id(n), follow)
        hit = memo.get(key)
        if hit is not None:
            return hit[1], hit[2]
        if isinstance(n, ast.Concat):
            follows = []
            after = follow
            for item in reversed(n.items):
                follows.append(after)
                first, empty = _first(item)
                after = _union(first, after if empty else ())
            parts = [walk(i, f) for i, f in zip(n.items, reversed(follows))]
            out: ast.Node = ast.Concat(tuple(p for p, _ in parts))
            has = any(h for _, h in parts)
        elif isinstance(n, ast.Alt):
            parts = [walk(i, follow) for i in n.items]
            out, has = ast.Alt(tuple(p for p, _ in parts)), any(h for _, h in parts)
        elif isinstance(n, ast.Repeat):
            first, _ = _first(n.item)
            loops = n.max is None or n.max > 1  # the item may follow itself
            item, inner = walk(n.item, _union(first, follow) if loops else follow)
            out, has = ast.Repeat(item, n.min, n.max), inner
            if not inner and n.max is not None and not nullable(item) and not _overlap(first, follow):
                lo, hi = n.min, n.max
                if lo <= 1 and hi >= COUNTED_MIN:
                    out, has = Counted(item, lo, hi), True
                elif 2 <= lo <= COUNTED_PREFIX_MAX and hi - lo + 1 >= COUNTED_MIN:
                    out, has = ast.Concat((ast.Repeat(item, lo - 1, lo - 1), Counted(item, 1, hi - lo + 1))), True
        else:
            out, has = n, False
        memo[key] = (n, out, has)
        return out, has

    return walk(node, ())


def _union(a: "tuple | list", b: "tuple | list") -> tuple:
    return tuple(cs.normalize(list(a) + list(b))) if b else tuple(cs.normalize(list(a)))


def _overlap(a: "tuple | list", b: "tuple | list") -> bool:
    return bool(a and b and cs.intersect(cs.normalize(list(a)), cs.normalize(list(b))))


def _first(node: ast.Node) -> "tuple[list[tuple[int, int]], bool]":
    """An over-approximation of the code points ``node`` can start with, and
    whether it can match the empty string (assertions are transparent)."""
    if isinstance(node, ast.Chars):
        return list(node.ranges), False
    if isinstance(node, (ast.Concat,)):
        out: list[tuple[int, int]] = []
        for item in node.items:
            first, empty = _first(item)
            out += first
            if not empty:
                return out, False
        return out, True
    if isinstance(node, ast.Alt):
        out, empty = [], False
        for item in node.items:
            first, e = _first(item)
            out += first
            empty = empty or e
        return out, empty
    if isinstance(node, (ast.Repeat, Counted)):
        first, empty = _first(node.item)
        return first, empty or node.min == 0
    return [], True  # an assertion or an anchor: zero-width


def count_positions(node: ast.Node) -> int:
    """NFA positions of a planned tree (a counted region's item counts once)."""
    if isinstance(node, (ast.Chars, ast.Look)):
        return 1
    if isinstance(node, (ast.Concat, ast.Alt)):
        return sum(count_positions(i) for i in node.items)
    if isinstance(node, Counted):
        return count_positions(node.item)
    copies = node.max if node.max is not None else max(node.min, 1)
    return copies * count_positions(node.item)


def tag(position: int, action: int) -> int:
    """The item "position ``position`` is read next, with ``action``" (a negative id)."""
    return -(2 * position + (action - 1)) - 1


def untag(item: int) -> tuple[int, int]:
    """(position, action) of a tagged item (see :func:`tag`)."""
    v = -item - 1
    return v >> 1, (v & 1) + 1


def without_increments(transitions: np.ndarray, actions: np.ndarray | None) -> np.ndarray:
    """The table with every ``ACT_INC`` transition removed.

    A token that takes no increment from a state is allowed there at every
    counter value (a region's first item, ``ACT_SET1``, always fits), so
    shortest-reply distances over this table hold for every counter and are
    witnessed by real replies: the budgets use them (``masks``, ``budget``).
    They are exact except where a shortest reply would need a second item of
    a counted region in one of its tokens (never with ``lo <= 1``, unless the
    vocabulary lacks the shorter tokens).
    """
    if actions is None:
        return transitions
    out = np.where(actions == ACT_INC, -1, transitions).astype(np.int32)
    return out
