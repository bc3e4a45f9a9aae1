"""Regex tree -> minimal, trimmed byte DFA, within a working-memory budget.

The pipeline, and why each step is shaped the way it is:

0. **Factor alternatives** (:mod:`poot_vllm.core.regex.factor`): shared
   prefixes/suffixes of branches are built once.
1. **Count before building.**  The number of NFA positions after counted
   repetitions are multiplied out is computed from the tree
   (:func:`~poot_vllm.core.regex.ast.position_count`) and charged first, so
   ``(?:(?:a{100}){100}){100}`` is refused without expanding anything.
2. **Glushkov (position) NFA.**  Each :class:`~poot_vllm.core.regex.ast.Chars`
   leaf is one position, however many bytes its characters take: it carries
   the small byte automaton of its class (:mod:`poot_vllm.core.automata.utf8`),
   shared by all positions with the same class.  ``first``/``last`` sets
   are unions built lazily (so ``a{0,1000}`` is linear, not quadratic).
3. **Subset construction over byte classes.**  Bytes that no edge tells
   apart form one class, so a DFA row is computed once per class, not per
   byte.  A DFA state is a set of *items*: a position about to be read, a
   position part-way through a multi-byte character, or the "accept"
   marker.  Every state is charged as it is created, so an exponential
   blow-up stops at the budget within milliseconds.
4. **Trim, minimize (Hopcroft), renumber** in breadth-first order by byte
   from the start state (so equal languages give identical tables), and
   expand the class columns to the full ``(n, 256)`` table.

Working memory, charged to :class:`Budget` (documented in
:mod:`poot_vllm.core.limits` and ``docs/regex.md``):

* 16 bytes per NFA position;
* per distinct character class, 16 bytes per state and 8 per byte-range
  edge of its UTF-8 automaton;
* 4 bytes per entry of the NFA's materialized first/follow sets;
* per DFA state, 16 bytes + 4 per item in its subset + 8 per distinct
  transition range (maximal run of bytes with one live target) of its row.

**Zero-width assertions** (:class:`~poot_vllm.core.regex.ast.Look`: anchors,
``\\b``/``\\B`` and lookarounds) cost nothing on regexes without them.

* An assertion whose body is one character class (``\\b \\B \\A \\Z``,
  MULTILINE ``^ $``, ``(?=\\d)``) is *static*: every class of the regex is
  split by the assertion bodies (the parts are ordinary positions and
  classes, charged as above), so the class of the neighbouring position
  decides it, and follow sets are closed through it once per position
  (4 bytes per entry of the closed sets).  The plain subset construction
  then runs unchanged.
* Any other lookaround runs its own DFA -- ``.*B`` from the start of the
  text for a lookbehind (a *tracker*, part of every state), ``B.*`` from the
  assertion for a lookahead (an *obligation* carried by the items after
  it) -- built by :func:`regex_tree_to_dfa` on the same budget, with all the
  charges above.  Per state of that construction: 16 bytes + 4 per item +
  4 per pending obligation + 4 per tracker, and 8 per transition range.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache
from typing import Callable, Iterator, Union

import numpy as np

from poot_vllm.core.automata import counters
from poot_vllm.core.automata.counters import ACT_INC, ACT_NONE, ACT_SET1, Counted
from poot_vllm.core.automata.dfa import DFA
from poot_vllm.core.automata.residues import residue_dfa, residue_step
from poot_vllm.core.automata.utf8 import DONE, CodepointAutomaton, codepoint_automaton
from poot_vllm.core.errors import EmptyLanguage, LimitExceeded, PootError
from poot_vllm.core.jit import jit_kernel
from poot_vllm.core.regex import ast
from poot_vllm.core.regex import charsets as cs
from poot_vllm.core.regex.factor import factor

POSITION_BYTES = 16
CLASS_STATE_BYTES = 16
CLASS_EDGE_BYTES = 8
SET_ENTRY_BYTES = 4
STATE_BYTES = 16
SUBSET_ITEM_BYTES = 4
RANGE_BYTES = 8


class Budget:
    """Working memory of one automaton build, charged as it is used."""

    def __init__(self, limit: int, limit_name: str = "max_automaton_bytes") -> None:
        self.limit = limit
        self.limit_name = limit_name
        self.used = 0

    def charge(self, n_bytes: int, stage: str) -> None:
        self.used += n_bytes
        if self.used > self.limit:
            raise LimitExceeded(
                "the automaton's working memory", self.limit_name, self.limit, "bytes", f"passed while {stage}"
            )


# --- Glushkov construction -------------------------------------------------------

class _Union:
    """A lazy, disjoint union of position sets (a rope), flattened on demand."""

    __slots__ = ("left", "right", "size", "flat")

    def __init__(self, left: "PosSet", right: "PosSet") -> None:
        self.left = left
        self.right = right
        self.size = len(left) + len(right)
        self.flat: frozenset[int] | None = None

    def __len__(self) -> int:
        return self.size


PosSet = Union[frozenset, _Union]
_NO_POSITIONS: frozenset[int] = frozenset()


def _union(a: PosSet, b: PosSet) -> PosSet:
    if not len(a):
        return b
    if not len(b):
        return a
    return _Union(a, b)


def _iter_positions(s: PosSet) -> Iterator[int]:
    stack = [s]
    while stack:
        top = stack.pop()
        if isinstance(top, frozenset):
            yield from top
        elif top.flat is not None:
            yield from top.flat
        else:
            stack.append(top.right)
            stack.append(top.left)


_Frag = tuple[bool, PosSet, PosSet]  # (nullable, first, last)


class _Glushkov:
    """Positions, each position's class, and each position's follow contributions."""

    def __init__(self, budget: Budget, class_index: dict[ast.Chars, int], look_index: "dict[ast.Look, int] | None" = None) -> None:
        self.budget = budget
        self.class_index = class_index
        self.look_index = look_index or {}
        self.pos_class: list[int] = []
        self.follow: list[list[frozenset[int]]] = []
        #: the counted region of each position (-1: none) and each region's ``hi``
        self.pos_region: list[int] = []
        self.region_limit: list[int] = []

    def flat(self, s: PosSet) -> frozenset[int]:
        if isinstance(s, frozenset):
            return s
        if s.flat is None:
            self.budget.charge(SET_ENTRY_BYTES * s.size, "building the NFA's first sets")
            s.flat = frozenset(_iter_positions(s))
        return s.flat

    def link(self, last: PosSet, first: PosSet) -> None:
        """Every position in ``last`` may be followed by every position in ``first``."""
        if not len(first) or not len(last):
            return
        target = self.flat(first)
        self.budget.charge(SET_ENTRY_BYTES * len(last), "building the NFA's follow sets")
        follow = self.follow
        for p in _iter_positions(last):
            follow[p].append(target)

    def concat2(self, a: _Frag, b: _Frag) -> _Frag:
        a_null, a_first, a_last = a
        b_null, b_first, b_last = b
        self.link(a_last, b_first)
        first = _union(a_first, b_first) if a_null else a_first
        last = _union(a_last, b_last) if b_null else b_last
        return (a_null and b_null, first, last)

    def build(self, node: ast.Node) -> _Frag:
        if isinstance(node, ast.Chars):
            p = len(self.pos_class)
            self.pos_class.append(self.class_index[node])
            self.follow.append([])
            self.pos_region.append(-1)
            s = frozenset((p,))
            return (False, s, s)
        if isinstance(node, Counted):
            return self._counted(node)
        if isinstance(node, ast.Concat):
            frag: _Frag = (True, _NO_POSITIONS, _NO_POSITIONS)
            for item in node.items:
                frag = self.concat2(frag, self.build(item))
            return frag
        if isinstance(node, ast.Alt):
            nullable, first, last = False, _NO_POSITIONS, _NO_POSITIONS
            for item in node.items:
                n, f, l = self.build(item)
                nullable, first, last = nullable or n, _union(first, f), _union(last, l)
            return (nullable, first, last)
        if isinstance(node, ast.Look):
            # A zero-width position: its class is -1 - (the assertion's index).
            p = len(self.pos_class)
            self.pos_class.append(-1 - self.look_index[node])
            self.follow.append([])
            self.pos_region.append(-1)
            s = frozenset((p,))
            return (False, s, s)
        return self._repeat(node)

    def _counted(self, node: Counted) -> _Frag:
        """One copy of the item; the loop back to its first positions increments
        the counter, the way in sets it (see :mod:`~poot_vllm.core.automata.counters`)."""
        region = len(self.region_limit)
        self.region_limit.append(node.max)
        p0 = len(self.pos_class)
        _, first, last = self.build(node.item)
        for p in range(p0, len(self.pos_class)):
            self.pos_region[p] = region
        first_flat = self.flat(first)
        self.link(last, self._tagged(first_flat, ACT_INC))
        return (node.min == 0, self._tagged(first_flat, ACT_SET1), last)

    def _tagged(self, positions: frozenset[int], action: int) -> frozenset[int]:
        self.budget.charge(SET_ENTRY_BYTES * len(positions), "building the NFA's counted regions")
        return frozenset(counters.tag(p, action) for p in positions)

    def _repeat(self, node: ast.Repeat) -> _Frag:
        frag: _Frag = (True, _NO_POSITIONS, _NO_POSITIONS)
        for _ in range(node.min - 1 if node.max is None and node.min > 0 else node.min):
            frag = self.concat2(frag, self.build(node.item))
        if node.max is None:
            # x* (or the looping last copy of x{m,}): last loops back to first.
            loop_null, loop_first, loop_last = self.build(node.item)
            self.link(loop_last, loop_first)
            return self.concat2(frag, (loop_null or node.min == 0, loop_first, loop_last))
        # The optional copies nest, (x(x(x)?)?)?, so each copy only links to the next.
        tail: _Frag | None = None
        for _ in range(node.max - node.min):
            copy = self.build(node.item)
            n, f, l = copy if tail is None else self.concat2(copy, tail)
            tail = (True, f, l)
        return frag if tail is None else self.concat2(frag, tail)


def _distinct_classes(node: ast.Node, out: dict[ast.Chars, int], looks: "dict[ast.Look, int] | None" = None) -> None:
    """Each distinct class (and, given ``looks``, each distinct assertion) in first-seen order."""
    if isinstance(node, ast.Chars):
        out.setdefault(node, len(out))
    elif isinstance(node, (ast.Concat, ast.Alt)):
        for item in node.items:
            _distinct_classes(item, out, looks)
    elif isinstance(node, ast.Look):
        if looks is not None:
            looks.setdefault(node, len(looks))
    else:
        _distinct_classes(node.item, out, looks)


def _is_static(look: ast.Look) -> bool:
    """One character class as the body: decided by the neighbouring position
    alone (unless it is a residue marker, :mod:`.residues`)."""
    return isinstance(look.body, ast.Chars) and _residue(look) is None


def _residue(look: ast.Look) -> "int | None":
    """The step of a ``multipleOf`` residue lookahead (:mod:`.residues`; negated:
    ``not multipleOf``, the lookahead construction inverts it), else None."""
    if look.behind or not isinstance(look.body, ast.Chars):
        return None
    return residue_step(look.body.ranges)


def _refine(node: ast.Node, atoms: "list[cs.CodepointSet]") -> ast.Node:
    """Split every class into its parts in ``atoms`` (lookaround bodies untouched)."""
    return ast.map_classes(node, lambda c: ast.alt([ast.Chars(p) for p in (cs.intersect(c.ranges, a) for a in atoms) if p]))


# --- byte classes -----------------------------------------------------------------

def byte_classes(boundaries: "set[int]") -> tuple[np.ndarray, list[int]]:
    """Split 0..255 at ``boundaries`` (a set of first bytes of ranges).

    Returns ``(byte_to_class, class_starts)``; classes are consecutive byte
    intervals, numbered in byte order.
    """
    starts = sorted(boundaries | {0})
    starts = [b for b in starts if 0 <= b < 256]
    byte_to_class = np.zeros(256, dtype=np.int32)
    for i, b in enumerate(starts):
        byte_to_class[b:] = i
    return byte_to_class, starts


# --- subset construction ------------------------------------------------------------

class _Ambiguous(Exception):
    """A transition would need two counter actions at once: build the regex expanded."""


def regex_tree_to_dfa(node: ast.Node, budget: Budget, counted: bool = True) -> DFA:
    """Compile a parsed regex to a minimal trimmed DFA, charging ``budget``.

    With ``counted`` (the default), large repetitions become counted regions
    (:mod:`~poot_vllm.core.automata.counters`) and the DFA may carry counter
    actions; if a region is ambiguous the regex is built again expanded,
    charged afresh (the first attempt stopped within the same limit).
    Callers that read the table as a plain DFA pass ``counted=False``.
    """
    used = budget.used
    nfa = _ByteNFA(node, budget, counted=counted)
    if nfa.counted:
        try:
            if nfa.dynamic:  # lookaheads beside counted regions (never inside one)
                table, accepting, actions, limits = _LookStates(nfa).subset_construction(budget)
            else:
                table, accepting, actions, limits = _subset_construction(nfa, budget)
            dfa = finalize(table, accepting, 0, nfa.byte_to_class, actions=actions, limits=limits)
            if nfa.dynamic and not _ends_without_increments(dfa):
                raise _Ambiguous()
            return dfa
        except _Ambiguous:
            budget.used = used
            nfa = _ByteNFA(node, budget)
    if nfa.dynamic:
        table, accepting, _, _ = _LookStates(nfa).subset_construction(budget)
    else:
        table, accepting, _, _ = _subset_construction(nfa, budget)
    return finalize(table, accepting, 0, nfa.byte_to_class)


def _ends_without_increments(dfa: DFA) -> bool:
    """Whether every state that can finish can finish without a counter
    increment (``counters.without_increments``: what masks and budgets measure
    distances on, valid for every counter value).  True by construction with
    ``lo <= 1``; a lookahead can demand a second item of a region
    (``(?=ba|bb)[ab]{1,30}``), and such a regex is built expanded instead."""
    # finalize trims the dead states: every state can finish with increments
    noinc = counters.without_increments(np.asarray(dfa.transitions), dfa.actions)
    return bool(live_states(noinc, np.asarray(dfa.accepting, dtype=bool)).all())


def regex_tree_matches(node: ast.Node, texts: "list[bytes]", budget: Budget) -> list[bool]:
    """Whether each byte string is matched (whole) by the parsed regex.

    Runs the subset construction lazily along each text only: linear in the
    text (times the NFA's width), and never builds the DFA's other states, so
    a regex whose full DFA passes the budget can still be matched against a
    few strings.  This is how poot checks user values (e.g. a JSON Schema
    ``enum`` against the schema's other keywords) without a backtracking
    engine.
    """
    nfa = _ByteNFA(node, budget)
    b2c = nfa.byte_to_class.tolist()
    results = []
    if nfa.dynamic:
        states = _LookStates(nfa)
        for text in texts:
            state: "_Composite | None" = states.start
            for byte in text:
                state = states.step(state, b2c[byte])
                if state is None:
                    break
            results.append(state is not None and states.accepting(state))
        return results
    for text in texts:
        items = nfa.start_items
        for byte in text:
            items = nfa.step(items, b2c[byte])
            if not items:
                break
        results.append(nfa.final in items)
    return results


class _ByteNFA:
    """The Glushkov NFA of a regex over byte classes, with its item moves.

    An *item* is a position about to be read (``< final``), the accept marker
    (``final``), or a position part-way through a multi-byte character
    (``> final``).  Moves are computed once per item and charged to the budget
    (follow sets) as they are first needed.
    """

    def __init__(self, node: ast.Node, budget: Budget, counted: bool = False) -> None:
        if node == ast.NOTHING:
            raise PootError(
                "the regex matches no string: every alternative needs a character no UTF-8 text contains "
                "(an empty class such as [^\\s\\S], or a lone surrogate)"
            )
        node = factor(node)
        class_index: dict[ast.Chars, int] = {}
        look_index: dict[ast.Look, int] = {}
        _distinct_classes(node, class_index, look_index)
        #: Whether large repetitions are counted regions: never with an assertion
        #: decided from one class (static: its follow-set closure does not carry
        #: counter tags), nor with one inside a counted item (checked below);
        #: lookaheads beside counted regions run in :class:`_LookStates`, which
        #: carries the tags (a Pydantic model with an EmailStr, or a pattern
        #: with max_length, and a long text field).
        self.counted = False
        if counted and not any(_is_static(look) for look in look_index):
            node, self.counted = counters.plan(node)
        static_sets = [look.body.ranges for look in look_index if _is_static(look)]  # type: ignore[union-attr]
        static_sets += [c for look in look_index for c in _context_sets(look)]
        if static_sets:
            node = _refine(node, cs.partition(static_sets))
            class_index = {}
            _distinct_classes(node, class_index)
        n_positions = counters.count_positions(node) if self.counted else ast.position_count(node)
        budget.charge(POSITION_BYTES * n_positions, f"expanding counted repetitions to {n_positions} NFA positions")

        #: Assertions whose body is one character class are decided from the
        #: neighbouring positions alone (classes are refined so each lies
        #: inside or outside every such body); the others run their own automata.
        self.static: list[bool] = [_is_static(look) for look in look_index]
        self.looks = [None if static else _LookAutomaton(look, budget) for look, static in zip(look_index, self.static)]
        self.look_nodes = list(look_index)
        #: With only static assertions, follow sets are closed through them and
        #: the plain subset construction runs; else :class:`_LookStates`.
        self.dynamic = not all(self.static)
        automata: list[CodepointAutomaton] = []
        boundaries: set[int] = set()
        for chars in class_index:
            automaton = codepoint_automaton(chars.ranges)
            budget.charge(
                CLASS_STATE_BYTES * len(automaton.states) + CLASS_EDGE_BYTES * automaton.n_edges,
                "building the UTF-8 automata of the character classes",
            )
            automata.append(automaton)
            for edges in automaton.states:
                for lo, hi, _ in edges:
                    boundaries.add(lo)
                    boundaries.add(hi + 1)
        for look in self.looks:
            if look is not None:
                boundaries.update(look.boundaries())
        self.byte_to_class, class_starts = byte_classes(boundaries)
        self.class_sets = [chars.ranges for chars in class_index]
        for look in self.looks:
            if look is not None:
                look.to_classes(class_starts)
        #: ``inside[class][assertion]``: the class lies inside that static assertion's body.
        self.inside: list[list[bool]] = [
            [static and bool(cs.intersect(chars.ranges, look.body.ranges)) for look, static in zip(look_index, self.static)]
            for chars in class_index
        ]

        nfa = _Glushkov(budget, class_index, look_index)
        nullable, first, last = nfa.build(node)
        n = len(nfa.pos_class)
        assert n == n_positions, (n, n_positions)
        self.final = final = n  # the item that marks a state accepting
        final_set = frozenset((final,))
        nfa.link(last, final_set)
        self.start_items: frozenset[int] = nfa.flat(first) | final_set if nullable else nfa.flat(first)

        b2c = self.byte_to_class.tolist()
        # Edges of every (class, automaton state) in class indices, computed once.
        self._class_edges: list[list[list[tuple[tuple[int, int], int]]]] = [
            [[((b2c[lo], b2c[hi] + 1), target) for lo, hi, target in edges] for edges in automaton.states]
            for automaton in automata
        ]
        self._pos_class = nfa.pos_class
        self.pos_region = nfa.pos_region
        #: an assertion inside a counted item: its obligations would have to be per item copy
        self.look_in_region = any(c < 0 and r >= 0 for c, r in zip(nfa.pos_class, nfa.pos_region))
        self.region_limit = nfa.region_limit
        self._follow = nfa.follow
        self._budget = budget
        self._follow_sets: dict[int, frozenset[int]] = {}
        self._mid_items: dict[tuple[int, int], int] = {}  # (position, automaton state > 0) -> item id
        self._mid_info: list[tuple[int, int]] = []
        # item -> [((first class, end class), target item set)]
        self._moves: dict[int, list[tuple[tuple[int, int], frozenset[int]]]] = {}
        self._closed: dict[int, frozenset[int]] = {}
        if look_index and not self.dynamic:
            self.start_items = self.close_static(self.start_items, None)

    def close_static(self, raw: "frozenset[int]", prev: "int | None") -> frozenset[int]:
        """Positions reached from ``raw`` through static assertions, after position ``prev`` (None: the start).

        A lookbehind is decided by ``prev``'s class, a lookahead by the class
        of the position the path reaches (the end of the text at ``final``).
        """
        final, pos_class, inside, nodes = self.final, self._pos_class, self.inside, self.look_nodes
        out: set[int] = set()
        stack: list[tuple[int, frozenset[int]]] = [(p, _NO_POSITIONS) for p in raw]
        seen: set[tuple[int, frozenset[int]]] = set()
        while stack:
            entry = stack.pop()
            p, pending = entry
            if p >= final or pos_class[p] >= 0:
                if all((p < final and inside[pos_class[p]][j]) != nodes[j].negated for j in pending):
                    out.add(p)
                continue
            if entry in seen:
                continue
            seen.add(entry)
            j = -1 - pos_class[p]
            look = nodes[j]
            if look.behind:
                if (prev is not None and inside[pos_class[prev]][j]) == look.negated:
                    continue
            else:
                pending = pending | {j}
            for q in self._follow_set(p):
                stack.append((q, pending))
        self._budget.charge(SET_ENTRY_BYTES * len(out), "building the NFA's follow sets")
        return frozenset(out)

    def _follow_set(self, p: int) -> frozenset[int]:
        fs = self._follow_sets.get(p)
        if fs is None:
            contributions = self._follow[p]
            if len(contributions) == 1:
                fs = contributions[0]
            else:
                fs = frozenset().union(*contributions)
                self._budget.charge(SET_ENTRY_BYTES * len(fs), "building the NFA's follow sets")
            self._follow_sets[p] = fs
        return fs

    def moves(self, item: int) -> list[tuple[tuple[int, int], frozenset[int]]]:
        """``[((first class, end class), target items)]`` of a (non-final) item."""
        out = self._moves.get(item)
        if out is not None:
            return out
        if item < 0:  # a tagged position (counted regions): its moves, the action is the tag's
            out = self._moves[item] = self.moves(counters.untag(item)[0])
            return out
        if item < self.final:
            p, q = item, 0
        else:
            p, q = self._mid_info[item - self.final - 1]
        out = []
        for span, target in self._class_edges[self._pos_class[p]][q]:
            if target == DONE:
                if self.look_nodes and not self.dynamic:
                    closed = self._closed.get(p)
                    if closed is None:
                        closed = self._closed[p] = self.close_static(self._follow_set(p), p)
                    out.append((span, closed))
                else:
                    out.append((span, self._follow_set(p)))
            else:
                key = (p, target)
                mid = self._mid_items.get(key)
                if mid is None:
                    mid = self.final + 1 + len(self._mid_info)
                    self._mid_info.append(key)
                    self._mid_items[key] = mid
                out.append((span, frozenset((mid,))))
        self._moves[item] = out
        return out

    def step(self, items: frozenset[int], byte_class: int) -> frozenset[int]:
        """The items after reading one byte of class ``byte_class``."""
        targets = [
            target
            for item in items
            if item != self.final
            for (lo, end), target in self.moves(item)
            if lo <= byte_class < end
        ]
        return frozenset().union(*targets)


# --- zero-width assertions -------------------------------------------------------------

_ANY_RUN = ast.Repeat(ast.Chars(cs.ANY_CHAR), 0, None)


@lru_cache(maxsize=1)
def _any_run_dfa() -> tuple[np.ndarray, np.ndarray]:
    """The DFA of ``(?s:.*)``: every valid UTF-8 text (9 states, built once)."""
    dfa = regex_tree_to_dfa(_ANY_RUN, Budget(1 << 20), counted=False)
    return dfa.transitions, dfa.accepting


def _universal_states(t: np.ndarray, acc: np.ndarray) -> list[bool]:
    """Per state of a byte table: does it accept every continuation (every valid UTF-8 text)?

    ``B.*`` is not always closed under extension (``B`` may end with an end
    anchor: ``$`` is ``(?=\\n?\\Z)``), so a lookahead is only decided early in
    these states.  A state is universal iff it is equivalent to the start of
    ``(?s:.*)``: the product walk with that DFA never disagrees.
    """
    u, u_acc = _any_run_dfa()
    result: list[bool] = []
    memo: dict[tuple[int, int], bool] = {}
    for s in range(t.shape[0]):
        seen = {(s, 0)}
        stack = [(s, 0)]
        ok = True
        while stack and ok:
            a, b = stack.pop()
            if memo.get((a, b)):
                continue
            if acc[a] != u_acc[b] or not np.array_equal(t[a] >= 0, u[b] >= 0):
                ok = False
                break
            for byte in np.nonzero(u[b] >= 0)[0].tolist():
                pair = (int(t[a, byte]), int(u[b, byte]))
                if pair not in seen:
                    seen.add(pair)
                    stack.append(pair)
        if ok:
            for pair in seen:
                memo[pair] = True
        result.append(ok)
    return result


def _context_sets(look: ast.Look) -> list[cs.CodepointSet]:
    """The one-class lookbehind bodies directly in a lookahead's body (``(?=\\bx)``, ``(?=.*^a)``).

    Those read the character before the lookahead; the parser allows no other
    lookbehind-type assertion inside a lookahead.
    """
    if look.behind:
        return []
    out: list[cs.CodepointSet] = []
    stack = [look.body]
    while stack:
        top = stack.pop()
        if isinstance(top, ast.Look):
            if top.behind and isinstance(top.body, ast.Chars):
                out.append(top.body.ranges)
        elif isinstance(top, (ast.Concat, ast.Alt)):
            stack.extend(top.items)
        elif isinstance(top, ast.Repeat):
            stack.append(top.item)
    return out


def _body_dfa(tree: ast.Node, budget: Budget) -> "DFA | None":
    try:
        return regex_tree_to_dfa(tree, budget, counted=False)
    except LimitExceeded:
        raise
    except PootError:
        return None  # the body matches no string


class _LookAutomaton:
    """The DFA one assertion runs: ``.*B`` from the text's start for a lookbehind
    (it holds where that DFA accepts), ``B.*`` from the assertion's point for a
    lookahead (decided once that DFA accepts everything or dies, else by the
    end of the text).

    Built by :func:`regex_tree_to_dfa` on the same budget, so a body may hold
    assertions of its own (the parser keeps lookahead-type ones out of
    lookbehinds, and lookbehind-type ones out of lookaheads unless they test
    one character class).  A lookahead whose body tests the character before
    it (``(?=.*\\bfoo)``) gets two automata in one table: ``B.*`` for the
    start of the text and ``.B.*`` entered after one character of the
    preceding position's class (classes are refined so that one stands for
    all).  A start state of -1 means the body matches nothing.
    """

    def __init__(self, look: ast.Look, budget: Budget) -> None:
        self.behind = look.behind
        self.negated = look.negated
        step = _residue(look)
        if step is not None:
            # "the number here is a multiple of step": built directly (residues.py)
            parts = [residue_dfa(step)]
            budget.charge(STATE_BYTES * parts[0].transitions.shape[0], "building the multipleOf residue automaton")
            self.contextual = False
        else:
            tree = ast.concat([_ANY_RUN, look.body] if look.behind else [look.body, _ANY_RUN])
            parts = [_body_dfa(tree, budget)]
            self.contextual = bool(_context_sets(look))
        if self.contextual:
            parts.append(_body_dfa(ast.concat([ast.Chars(cs.ANY_CHAR), tree]), budget))
        tables, accepting, self.starts = [], [], []
        offset = 0
        for dfa in parts:
            if dfa is None:
                self.starts.append(-1)
                continue
            t = dfa.transitions
            tables.append(np.where(t >= 0, t + offset, -1))
            accepting.append(dfa.accepting)
            self.starts.append(offset)
            offset += t.shape[0]
        self.transitions = np.concatenate(tables) if tables else np.full((0, 256), -1, dtype=np.int32)
        self.accepts: list[bool] = np.concatenate(accepting).tolist() if accepting else []
        #: States whose language is every text: a lookahead is decided there.
        self.universal: list[bool] = _universal_states(self.transitions, np.asarray(self.accepts, dtype=bool))
        self.table: list[list[int]] = []
        self._after: dict[int, int] = {}

    @property
    def start(self) -> int:
        """The start state with nothing before (-1: the body matches nothing)."""
        return self.starts[0]

    def start_after(self, prev_class: "cs.CodepointSet | None", key: int) -> int:
        """The start state after a character of ``prev_class`` (None: at the start of the text)."""
        if prev_class is None or not self.contextual:
            return self.starts[0]
        state = self._after.get(key)
        if state is None:
            state = self.starts[1]
            for byte in chr(prev_class[0][0]).encode():
                if state < 0:
                    break
                state = int(self.transitions[state, byte])
            self._after[key] = state
        return state

    def boundaries(self) -> set[int]:
        """Bytes where some column of the DFA changes (so byte classes refine it)."""
        t = self.transitions
        if not t.shape[0]:
            return set()
        return {0} | set((np.nonzero((t[:, 1:] != t[:, :-1]).any(axis=0))[0] + 1).tolist())

    def to_classes(self, class_starts: list[int]) -> None:
        self.table = self.transitions[:, class_starts].tolist()


# A state of the assertion construction: the items, each a (Glushkov item,
# pending lookahead obligations), and the state of every lookbehind tracker.
_Obligations = frozenset  # of (assertion index, state of its DFA)
_Composite = tuple  # (frozenset[(int, _Obligations)], tuple[int, ...])
_NO_OBLIGATIONS: frozenset = frozenset()


class _LookStates:
    """Subset construction for a regex with zero-width assertions.

    The Glushkov NFA has one zero-width position per assertion occurrence.
    Moving into it is decided on the spot: a lookbehind by its tracker (the
    DFA of ``.*B``, run over the whole text as a part of every state), a
    lookahead by attaching an *obligation* -- its DFA's state -- to the
    items that follow.  Obligations read the following bytes with their item:
    a positive one is discharged when its DFA reaches a state that accepts
    every continuation and kills the item when it dies, a negative one the
    reverse.  An item at the end of the pattern accepts when every pending
    obligation is decided right by the end of the text (its DFA accepts the
    empty rest, or for a negative one does not).  Everything stays finite
    (states of finitely many DFAs), and the result is minimized like any
    other DFA, so ``\\bcat\\b`` costs a few states more than ``cat``.
    """

    def __init__(self, nfa: "_ByteNFA") -> None:
        if nfa.counted and nfa.look_in_region:
            raise _Ambiguous()
        self.nfa = nfa
        self.final = nfa.final
        #: counted regions (items may be tagged, ``counters.tag``): each transition's action
        self.counted = nfa.counted
        self.action = ACT_NONE  # the action of the last :meth:`step` (counted NFAs)
        self.looks = nfa.looks
        self.slots = [i for i, look in enumerate(nfa.looks) if look is not None and look.behind]
        trackers = tuple(nfa.looks[i].start for i in self.slots)  # type: ignore[union-attr]
        self.slot_of = {look: k for k, look in enumerate(self.slots)}
        items: set = set()
        self._close(nfa.start_items, _NO_OBLIGATIONS, trackers, None, items)
        self.start: _Composite = (frozenset(items), trackers)

    def _close(self, raw: "frozenset[int]", obligations: frozenset, trackers: tuple, prev: "int | None", out: set) -> None:
        """Add the items reached from positions ``raw`` through zero-width positions.

        ``prev`` is the position whose character was just read (None at the
        start): static lookbehinds are decided by its class, static
        lookaheads by the class of the position the path reaches.
        """
        nfa, looks, final = self.nfa, self.looks, self.final
        pos_class, inside, nodes = nfa._pos_class, nfa.inside, nfa.look_nodes
        stack = [(p, obligations, _NO_POSITIONS) for p in raw]
        seen: set = set()
        while stack:
            entry = stack.pop()
            p, ob, pending = entry
            if p < 0:  # a tagged position (counted regions): a character position, kept tagged
                out.add((p, ob))
                continue
            if p >= final or pos_class[p] >= 0:
                if all((p < final and inside[pos_class[p]][j]) != nodes[j].negated for j in pending):
                    out.add((p, ob))
                continue
            if entry in seen:
                continue
            seen.add(entry)
            index = -1 - pos_class[p]
            look = looks[index]
            if look is None:  # static
                if nodes[index].behind:
                    if (prev is not None and inside[pos_class[prev]][index]) == nodes[index].negated:
                        continue
                else:
                    pending = pending | {index}
            elif look.behind:
                t = trackers[self.slot_of[index]]
                if (t >= 0 and look.accepts[t]) == look.negated:
                    continue
            else:
                s0 = look.start_after(None if prev is None else nfa.class_sets[pos_class[prev]],
                                      -1 if prev is None else pos_class[prev])
                if s0 < 0 or look.universal[s0]:
                    # the body matches nothing, or every text: decided here
                    if (s0 >= 0) == look.negated:
                        continue
                else:
                    ob = ob | {(index, s0)}
            for q in nfa._follow_set(p):
                stack.append((q, ob, pending))

    def step(self, state: _Composite, byte_class: int) -> "_Composite | None":
        """The state after one byte of class ``byte_class`` (None: dead)."""
        items, trackers = state
        looks, final = self.looks, self.final
        if trackers:
            trackers = tuple(
                looks[i].table[t][byte_class] if t >= 0 else -1 for i, t in zip(self.slots, trackers)  # type: ignore[union-attr]
            )
        out: set = set()
        mid_info = self.nfa._mid_info
        actions: set[int] = set()
        for base, ob in items:
            if base == final:
                continue
            targets = [target for (lo, end), target in self.nfa.moves(base) if lo <= byte_class < end]
            if not targets:
                continue
            if base < 0:  # tagged: the move carries the tag's action
                position, action = counters.untag(base)
                actions.add(action)
                prev = position
            else:
                actions.add(ACT_NONE)
                prev = base if base < final else mid_info[base - final - 1][0]
            if ob:
                kept = []
                for index, s in ob:
                    look = looks[index]
                    s = look.table[s][byte_class]  # type: ignore[union-attr]
                    hit = s >= 0 and look.universal[s]  # type: ignore[union-attr]
                    if look.negated:  # type: ignore[union-attr]
                        if hit:
                            break
                        if s >= 0:
                            kept.append((index, s))
                    else:
                        if s < 0:
                            break
                        if not hit:
                            kept.append((index, s))
                else:
                    self._advance(targets, frozenset(kept), trackers, prev, out)
                continue
            self._advance(targets, ob, trackers, prev, out)
        if self.counted:
            if len(actions) > 1:
                raise _Ambiguous()  # one byte would both continue an item and start the next, or similar
            self.action = actions.pop() if actions else ACT_NONE
        return (frozenset(out), trackers) if out else None

    def _advance(self, targets: list, ob: frozenset, trackers: tuple, prev: int, out: set) -> None:
        final = self.final
        for target in targets:
            if len(target) == 1:
                (t,) = target
                if t > final:  # part-way through a character
                    out.add((t, ob))
                    continue
            self._close(target, ob, trackers, prev, out)

    def accepting(self, state: _Composite) -> bool:
        final, looks = self.final, self.looks
        # A pending lookahead is decided by the end of the text: it holds iff its DFA accepts the empty rest.
        return any(
            base == final and all(looks[i].accepts[s] != looks[i].negated for i, s in ob)  # type: ignore[union-attr]
            for base, ob in state[0]
        )

    def subset_construction(self, budget: Budget) -> tuple[np.ndarray, np.ndarray, "np.ndarray | None", "np.ndarray | None"]:
        """Class-level table (n, n_classes), -1 for dead, accepting flags, and for
        a counted NFA the class-level actions and per-state limits (else None, None)."""
        nfa = self.nfa
        live_limit = _live_limit(nfa) if self.counted else None
        action_rows: list[list[int]] = []
        limits: list[int] = []
        n_classes = int(nfa.byte_to_class[-1]) + 1
        stage = "building the DFA (with assertions)"

        def cost(state: _Composite) -> int:
            items, trackers = state
            return STATE_BYTES + SUBSET_ITEM_BYTES * (len(items) + sum(len(ob) for _, ob in items) + len(trackers))

        ids: dict[_Composite, int] = {self.start: 0}
        states = [self.start]
        budget.charge(cost(self.start), stage)
        rows: list[list[int]] = []
        accepting: list[bool] = []
        sid = 0
        while sid < len(states):
            state = states[sid]
            accepting.append(self.accepting(state))
            if live_limit is not None:
                limits.append(live_limit(frozenset(base for base, _ in state[0])))
                action_row = [ACT_NONE] * n_classes
                action_rows.append(action_row)
            live: set[int] = set()
            for base, _ in state[0]:
                if base != self.final:
                    for (lo, end), _ in nfa.moves(base):
                        live.update(range(lo, end))
            row = [-1] * n_classes
            prev = -2
            ranges = 0
            for c in sorted(live):
                nxt = self.step(state, c)
                if nxt is None:
                    continue
                t = ids.get(nxt)
                if t is None:
                    t = len(states)
                    ids[nxt] = t
                    states.append(nxt)
                    budget.charge(cost(nxt), stage)
                row[c] = t
                if live_limit is not None:
                    action_row[c] = self.action
                if t != prev or (c > 0 and row[c - 1] != t):
                    ranges += 1
                prev = t
            budget.charge(RANGE_BYTES * ranges, stage)
            rows.append(row)
            sid += 1
        table = np.asarray(rows, dtype=np.int32).reshape(len(rows), n_classes)
        if live_limit is None:
            return table, np.asarray(accepting, dtype=bool), None, None
        return (table, np.asarray(accepting, dtype=bool), np.asarray(action_rows, dtype=np.int8).reshape(table.shape),
                np.asarray(limits, dtype=np.int32))



def _live_limit(nfa: _ByteNFA) -> "Callable[[frozenset[int]], int]":
    """For a counted NFA: a state's ``limit`` (the ``hi`` of the one region whose
    counter its items read later; 0 if none), or :class:`_Ambiguous`."""
    final, pos_region, region_limit, mid_info = nfa.final, nfa.pos_region, nfa.region_limit, nfa._mid_info
    untag = counters.untag

    def live_limit(items: frozenset[int]) -> int:
        region = -1
        for item in items:
            if item == final:
                continue
            if item < 0:
                p, action = untag(item)
                if action != ACT_INC:
                    continue  # starts a region afresh: reads no counter
            else:
                p = item if item < final else mid_info[item - final - 1][0]
            r = pos_region[p]
            if r >= 0:
                if region >= 0 and r != region:
                    raise _Ambiguous()
                region = r
        return region_limit[region] if region >= 0 else 0

    return live_limit


def _subset_construction(nfa: _ByteNFA, budget: Budget) -> tuple[np.ndarray, np.ndarray, "np.ndarray | None", "np.ndarray | None"]:
    """Class-level table (n, n_classes) with -1 for dead, accepting flags, and for
    an NFA with counted regions the class-level actions and per-state limits
    (else None, None).

    A state's row is computed from its items' edges as class intervals
    (see :func:`_segments`), so a state pays for its edges, not for the
    number of byte classes (large with Unicode classes such as ``\\w``).
    With counted regions, items may be tagged (``counters.tag``: a region's
    first positions, read with ``ACT_SET1`` or ``ACT_INC``); every transition
    takes the one action of the items it moves and every state reads at most
    one region's counter, else :class:`_Ambiguous`.
    """
    final = nfa.final
    counted = nfa.counted
    live_limit = _live_limit(nfa) if counted else None
    untag = counters.untag
    start_items = nfa.start_items
    state_ids: dict[frozenset[int], int] = {start_items: 0}
    subsets = [start_items]
    stage = "building the DFA"
    budget.charge(STATE_BYTES + SUBSET_ITEM_BYTES * len(start_items), stage)
    seg_state: list[int] = []
    seg_lo: list[int] = []
    seg_end: list[int] = []
    seg_target: list[int] = []
    seg_action: list[int] = []
    accepting: list[bool] = []
    limits: list[int] = []

    sid = 0
    while sid < len(subsets):
        items = subsets[sid]
        accepting.append(final in items)
        if live_limit is not None:
            limits.append(live_limit(items))
        buckets: dict[tuple[int, int], list] = {}
        for item in items:
            if item == final:
                continue
            action = (ACT_NONE if item >= 0 else untag(item)[1]) if counted else -1
            for span, target in nfa.moves(item):
                entry = target if action < 0 else (target, action)
                bucket = buckets.get(span)
                if bucket is None:
                    buckets[span] = [entry]
                else:
                    bucket.append(entry)
        prev_end, prev_t, ranges = -1, -1, 0
        for c_lo, c_end, targets in _segments(buckets):
            if counted:
                action = targets[0][1]
                if any(a != action for _, a in targets):
                    raise _Ambiguous()
                seg_action.append(action)
                targets = [t for t, _ in targets]
            nxt = targets[0] if len(targets) == 1 else frozenset().union(*targets)
            t = state_ids.get(nxt)
            if t is None:
                t = len(subsets)
                state_ids[nxt] = t
                subsets.append(nxt)
                budget.charge(STATE_BYTES + SUBSET_ITEM_BYTES * len(nxt), stage)
            seg_state.append(sid)
            seg_lo.append(c_lo)
            seg_end.append(c_end)
            seg_target.append(t)
            if c_lo != prev_end or t != prev_t:
                ranges += 1
            prev_end, prev_t = c_end, t
        budget.charge(RANGE_BYTES * ranges, stage)
        sid += 1

    n_classes = int(nfa.byte_to_class[-1]) + 1
    table = np.full((len(subsets), n_classes), -1, dtype=np.int32)
    actions = np.zeros((len(subsets), n_classes), dtype=np.int8) if counted else None
    if seg_state:
        lo = np.asarray(seg_lo, dtype=np.int64)
        lengths = np.asarray(seg_end, dtype=np.int64) - lo
        starts = np.cumsum(lengths) - lengths
        cols = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(starts - lo, lengths)
        rows = np.repeat(np.asarray(seg_state, dtype=np.int64), lengths)
        table[rows, cols] = np.repeat(np.asarray(seg_target, dtype=np.int32), lengths)
        if actions is not None:
            actions[rows, cols] = np.repeat(np.asarray(seg_action, dtype=np.int8), lengths)
    return (table, np.asarray(accepting, dtype=bool), actions,
            np.asarray(limits, dtype=np.int32) if counted else None)


def _segments(
    buckets: dict[tuple[int, int], list[frozenset[int]]]
) -> list[tuple[int, int, list[frozenset[int]]]]:
    """Disjoint class intervals ``[lo, end)`` with the target sets live on each.

    ``buckets`` maps edge intervals to their targets.  Intervals are usually
    equal or disjoint already; overlaps are resolved by a sweep.
    """
    spans = sorted(buckets)
    if all(spans[i][0] >= spans[i - 1][1] for i in range(1, len(spans))):
        return [(lo, end, buckets[(lo, end)]) for lo, end in spans]
    if sum(end - lo for lo, end in spans) <= 8 * len(spans):
        # Narrow overlapping spans: per class is cheaper than a sweep.
        per_class: dict[int, list[frozenset[int]]] = {}
        for span in spans:
            targets = buckets[span]
            for c in range(span[0], span[1]):
                lst = per_class.get(c)
                if lst is None:
                    per_class[c] = list(targets)
                else:
                    lst.extend(targets)
        return [(c, c + 1, per_class[c]) for c in sorted(per_class)]
    ending: dict[int, list[tuple[int, int]]] = {}
    for span in spans:
        ending.setdefault(span[1], []).append(span)
    points = sorted({c for span in spans for c in span})
    active: set[tuple[int, int]] = set()
    out = []
    i = 0
    for lo, end in zip(points, points[1:]):
        for span in ending.get(lo, ()):
            active.discard(span)
        while i < len(spans) and spans[i][0] == lo:
            active.add(spans[i])
            i += 1
        if active:
            out.append((lo, end, [t for span in active for t in buckets[span]]))
    return out


# --- trim, minimize, renumber --------------------------------------------------------

def live_states(table: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """Boolean mask of the states from which an accepting state is reachable."""
    n = table.shape[0]
    src, col = np.nonzero(table >= 0)
    dst = table[src, col]
    pairs = np.unique(dst.astype(np.int64) * n + src)
    dst_u, src_u = (pairs // n), (pairs % n)
    offsets = np.searchsorted(dst_u, np.arange(n + 1)).tolist()
    preds = src_u.tolist()
    live = accepting.copy()
    queue = deque(np.nonzero(accepting)[0].tolist())
    live_list = live.tolist()
    while queue:
        t = queue.popleft()
        for s in preds[offsets[t]:offsets[t + 1]]:
            if not live_list[s]:
                live_list[s] = True
                queue.append(s)
    return np.asarray(live_list, dtype=bool)


def row_ids(matrix: np.ndarray) -> np.ndarray:
    """Per row of a 2-D array, an id that equal rows share (0, 1, ... in order of first appearance).

    Why not ``np.unique(matrix, axis=0)``: it sorts the rows as structured
    records, field by field -- ~40 ms for the 2,600 x 145 signature of a large
    schema's minimisation, most of the whole compile; hashing each row's
    bytes is ~2 ms."""
    rows = np.ascontiguousarray(matrix)
    ids: dict[bytes, int] = {}
    return np.fromiter((ids.setdefault(row.tobytes(), len(ids)) for row in rows), dtype=np.int64,
                       count=rows.shape[0])


def first_of_equal(matrix: np.ndarray) -> np.ndarray:
    """The index of the first of each group of equal rows, in order (``row_ids``' representatives)."""
    ids = row_ids(matrix)
    first = np.full(int(ids.max()) + 1 if ids.size else 0, -1, dtype=np.int64)
    first[ids[::-1]] = np.arange(ids.size - 1, -1, -1)  # the last write per id is its first row
    return first


def hopcroft(table: np.ndarray, accepting: np.ndarray, labels: np.ndarray | None = None) -> list[int]:
    """Block id per state of the coarsest equivalence (Hopcroft's algorithm).

    ``table`` is a partial (n, k) table, -1 for missing transitions, whose
    states can all reach acceptance.  Missing transitions go to an implicit
    sink; rather than splitting by the sink (whose predecessors are nearly
    every state on nearly every class), the initial partition already
    separates states by acceptance and by which classes are defined, and the
    sink's singleton block is the one initial block left out of the waiting
    set, as Hopcroft's algorithm allows.  ``labels`` (n, m), if given, also
    split the initial partition (counter actions per class, the counter's limit).
    The splitting runs in a numba kernel (:func:`_split_blocks`): in Python it was
    ~10 ms for a 2,600-state table, a fifth of a large schema's compile.
    """
    n = table.shape[0]
    cols = table[:, first_of_equal(table.T)] if table.shape[1] > 1 else table
    # Predecessors per target: (class, source) over real edges only, grouped by target.
    src, cls = np.nonzero(cols >= 0)
    dst = cols[src, cls]
    order = np.argsort(dst, kind="stable")
    offsets = np.searchsorted(dst[order], np.arange(n + 1)).astype(np.int64)
    parts = [accepting[:, None], cols >= 0] + ([labels] if labels is not None else [])
    signature = np.concatenate([p.astype(np.int64) for p in parts], axis=1)
    initial = row_ids(signature)
    return _split_blocks(offsets, cls[order].astype(np.int64), src[order].astype(np.int64), initial,
                   int(initial.max()) + 1 if n else 0, max(cols.shape[1], 1)).tolist()


@jit_kernel
def _split_blocks(offsets, pred_cls, pred_src, initial, n_blocks, k):  # pragma: no cover - numba
    """Hopcroft's splitting from the ``initial`` blocks (every one waiting).

    Blocks are ranges of ``elems``; splitting by a class's predecessors of the
    splitter moves each hit state to the front of its block (``marked``), then
    a block hit in part is cut there, the smaller part getting the new id and
    waiting (both wait if the block already did, as in Hopcroft's rule)."""
    n = initial.shape[0]
    block_of = initial.copy()
    first = np.zeros(n + 1, dtype=np.int64)
    end = np.zeros(n + 1, dtype=np.int64)
    marked = np.zeros(n + 1, dtype=np.int64)
    count = np.zeros(n_blocks + 1, dtype=np.int64)
    for s in range(n):
        count[block_of[s] + 1] += 1
    for b in range(n_blocks):
        count[b + 1] += count[b]
    elems = np.empty(n, dtype=np.int64)
    loc = np.empty(n, dtype=np.int64)
    for b in range(n_blocks):
        first[b] = count[b]
        end[b] = count[b]
    for s in range(n):
        b = block_of[s]
        elems[end[b]] = s
        loc[s] = end[b]
        end[b] += 1
    waiting = np.empty(n + 1, dtype=np.int64)
    in_wait = np.zeros(n + 1, dtype=np.bool_)
    top = 0
    for b in range(n_blocks):
        waiting[top] = b
        top += 1
        in_wait[b] = True
    splitter = np.empty(n, dtype=np.int64)
    m_all = pred_src.shape[0]
    by_cls = np.empty(max(m_all, 1), dtype=np.int64)
    cls_start = np.zeros(k + 1, dtype=np.int64)
    cls_fill = np.zeros(k, dtype=np.int64)
    touched = np.empty(n, dtype=np.int64)
    while top > 0:
        top -= 1
        b = waiting[top]
        in_wait[b] = False
        size = end[b] - first[b]
        for i in range(size):
            splitter[i] = elems[first[b] + i]
        # the splitter's predecessors, bucketed by class
        cls_start[:] = 0
        for i in range(size):
            q = splitter[i]
            for j in range(offsets[q], offsets[q + 1]):
                cls_start[pred_cls[j] + 1] += 1
        for c in range(k):
            cls_start[c + 1] += cls_start[c]
            cls_fill[c] = cls_start[c]
        for i in range(size):
            q = splitter[i]
            for j in range(offsets[q], offsets[q + 1]):
                c = pred_cls[j]
                by_cls[cls_fill[c]] = pred_src[j]
                cls_fill[c] += 1
        for c in range(k):
            n_touched = 0
            for j in range(cls_start[c], cls_start[c + 1]):
                s = by_cls[j]
                bs = block_of[s]
                if marked[bs] == 0:
                    touched[n_touched] = bs
                    n_touched += 1
                pos = loc[s]
                mpos = first[bs] + marked[bs]
                other = elems[mpos]
                elems[mpos] = s
                loc[s] = mpos
                elems[pos] = other
                loc[other] = pos
                marked[bs] += 1
            for t in range(n_touched):
                bs = touched[t]
                hit = marked[bs]
                marked[bs] = 0
                whole = end[bs] - first[bs]
                if hit == whole:
                    continue
                nb = n_blocks
                n_blocks += 1
                if hit <= whole - hit:  # the hit part is the smaller: it becomes the new block
                    first[nb] = first[bs]
                    end[nb] = first[bs] + hit
                    first[bs] = end[nb]
                else:
                    first[nb] = first[bs] + hit
                    end[nb] = end[bs]
                    end[bs] = first[nb]
                for p in range(first[nb], end[nb]):
                    block_of[elems[p]] = nb
                waiting[top] = nb  # the smaller part (and, if bs was waiting, bs still is)
                top += 1
                in_wait[nb] = True
    return block_of


def finalize(
    table: np.ndarray, accepting: np.ndarray, start: int, byte_to_class: np.ndarray, *, minimal: bool = False,
    actions: np.ndarray | None = None, limits: np.ndarray | None = None,
) -> DFA:
    """Trim, minimize and renumber a class-level DFA, then expand it to 256 columns.

    ``minimal=True`` skips minimization for tables already minimal and
    trimmed (the choice trie).  ``actions`` (class-level, like ``table``) and
    ``limits`` (per state) are counter actions and limits
    (:mod:`~poot_vllm.core.automata.counters`): states merge only with equal
    ones.  Raises :class:`PootError` if the language is empty.
    """
    live = live_states(table, accepting)
    if not live[start]:
        raise EmptyLanguage("the constraint matches no string")
    if not live.all():
        table = np.where(table >= 0, np.where(live[np.maximum(table, 0)], table, -1), -1)
    labels = None
    if actions is not None:
        actions = np.where(table >= 0, actions, 0).astype(np.int8)
        if not actions.any():
            actions = None
        else:
            assert limits is not None
            labels = np.concatenate([actions.astype(np.int64), np.asarray(limits, dtype=np.int64)[:, None]], axis=1)
    block_of = list(range(table.shape[0])) if minimal else hopcroft(table, accepting & live, labels)
    # Map each block to one representative state; dead states vanish.
    n = table.shape[0]
    block_arr = np.asarray(block_of, dtype=np.int64)
    order: list[int] = []  # blocks in BFS order from start
    new_id: dict[int, int] = {}
    rep: dict[int, int] = {}
    for s in np.nonzero(live)[0].tolist():
        rep.setdefault(block_of[s], s)
    queue = deque([block_of[start]])
    new_id[block_of[start]] = 0
    rows = table.tolist()
    while queue:
        b = queue.popleft()
        order.append(b)
        for t in rows[rep[b]]:
            if t >= 0 and live[t]:
                tb = block_of[t]
                if tb not in new_id:
                    new_id[tb] = len(new_id)
                    queue.append(tb)
    remap = np.full(n + 1, -1, dtype=np.int32)  # index n: the dead target -1
    for s in range(n):
        if live[s]:
            remap[s] = new_id.get(int(block_arr[s]), -1)
    reps = np.asarray([rep[b] for b in order], dtype=np.int64)
    small = remap[np.where(table[reps] >= 0, table[reps], n)]
    transitions = small[:, byte_to_class]
    if actions is None:
        return DFA(transitions=transitions, accepting=accepting[reps].copy(), start=0)
    return DFA(transitions=transitions, accepting=accepting[reps].copy(), start=0,
               actions=actions[reps][:, byte_to_class], counter_limit=np.asarray(limits)[reps])
