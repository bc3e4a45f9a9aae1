"""poot's own model of a grammar: one byte DFA per rule, with call edges.

A GBNF/Lark grammar (poot's AST, :mod:`.gbnf`) becomes, rule by rule, a DFA
whose edges read a byte or **call** a rule (``q --R--> q'``: read one ``R``,
then continue at ``q'``); states are numbered across the grammar.  A parse is
a *configuration* ``(g, f)``: the state ``g`` being read and a stack of return
states (frames).  Reading a byte follows a byte edge of ``g``, or calls a rule
(pushing the return state) and reads it there, or -- when ``g`` accepts --
returns to the frame below and reads it there.  Ambiguous grammars have
several configurations at once (:class:`Configurations` keeps the set).

``dist[g]`` is the fewest bytes that finish ``g``'s rule (a call costs the
callee's shortest sentence), so a configuration finishes in
``dist[g] + sum(dist[frame])`` bytes, and a set in the least of those: what
budget masks need (a recursive grammar's reply finishes inside
``max_tokens``) and xgrammar cannot say.  :mod:`.rule_masks` turns the model
into token masks; docs/gbnf.md and docs/budget.md say what users get.

Not every grammar gets a model: left recursion (``expr ::= expr "+" term``:
the stack would grow without reading), more than :data:`MAX_STATES` rule-DFA
states, or counted repeats expanded past :data:`MAX_NFA_STATES`.  Those run on
xgrammar's matcher without budgets, as before; never a refusal.
"""

from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import dataclass

import numpy as np

from poot_vllm.core.automata.build import first_of_equal, hopcroft, row_ids
from poot_vllm.core.automata.utf8 import DONE, codepoint_automaton
from poot_vllm.core.grammar.gbnf import (Alternation, ByteAutomaton, CharClass, Grammar, Literal, Node, Repeat, RuleRef,
                                         Sequence, cycle_node, reachable_rules)

#: Largest total of per-rule DFA states modelled, after merging equivalent
#: states (a byte table of 1 KiB each).
MAX_STATES = 8192
#: Largest total built before merging (subset construction keeps one state per
#: set of NFA positions; schemas merge to a third or half of that).
MAX_BUILT_STATES = 2 * MAX_STATES
#: Largest Thompson NFA (counted repeats are expanded into copies).
MAX_NFA_STATES = 200_000
#: Most configurations a reply keeps at once (ambiguous grammars); the
#: cheapest are kept.
MAX_CONFIGS = 64
_INF = np.int32(2**30)


class _TooLarge(Exception):
    pass


# --------------------------------------------------------------- the model


@dataclass(frozen=True, eq=False)
class RuleAutomata:
    """Every reachable rule's DFA, states numbered globally, with call edges."""

    byte_next: np.ndarray   # int32 (G, 256): next state in the same rule, -1 none
    call_off: np.ndarray    # int32 (G + 1,): calls of g are call_off[g]:call_off[g + 1]
    call_start: np.ndarray  # int32: the callee's start state
    call_ret: np.ndarray    # int32: where the caller continues
    accepting: np.ndarray   # bool (G,): the rule may end here (return)
    first: np.ndarray       # bool (G, 256): byte b can be read from g without returning
    dist: np.ndarray        # int32 (G,): fewest bytes that finish g's rule
    start: int              # the root rule's start state
    inc1: int               # most one byte can raise a configuration's distance
    n_states: int

    @property
    def shortest(self) -> int:
        """Bytes of the grammar's shortest sentence."""
        return int(self.dist[self.start])

    @property
    def nbytes(self) -> int:
        return 2 * sum(a.nbytes for a in (self.byte_next, self.call_off, self.call_start, self.call_ret,
                                          self.accepting, self.first, self.dist))  # twice: python_tables

    @functools.cached_property
    def python_tables(self) -> tuple[list, list, list, list, list, list]:
        """The tables as Python lists, for the per-byte steps of :class:`Configurations`
        (built once per grammar; list lookups are several times faster than numpy's)."""
        calls = [[(int(self.call_start[c]), int(self.call_ret[c]))
                  for c in range(self.call_off[g], self.call_off[g + 1])]
                 for g in range(self.n_states)]
        return (calls, self.byte_next.tolist(), self.dist.tolist(), self.accepting.tolist(),
                (self.dist == 0).tolist(), [row.tobytes() for row in self.first])


class _NFA:
    """Thompson NFA of one grammar: byte-range edges, epsilons and call edges."""

    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[int, int, int]]] = []
        self.calls: list[list[tuple[str, int]]] = []

    def new(self) -> int:
        if len(self.eps) >= MAX_NFA_STATES:
            raise _TooLarge
        self.eps.append([])
        self.edges.append([])
        self.calls.append([])
        return len(self.eps) - 1

    def frag(self, node: Node) -> tuple[int, int]:
        """(entry, exit) of a fragment matching ``node``."""
        if isinstance(node, Literal):
            s = e = self.new()
            for byte in node.text.encode("utf-8"):
                n = self.new()
                self.edges[e].append((byte, byte, n))
                e = n
            return s, e
        if isinstance(node, CharClass):
            auto = codepoint_automaton(node.ranges)
            ids = [self.new() for _ in auto.states]
            e = self.new()
            for q, edges in enumerate(auto.states):
                for lo, hi, target in edges:
                    self.edges[ids[q]].append((lo, hi, e if target == DONE else ids[target]))
            return ids[0], e
        if isinstance(node, ByteAutomaton):
            ids = [self.new() for _ in node.edges]
            e = self.new()
            for q, edges in enumerate(node.edges):
                self.edges[ids[q]].extend((lo, hi, ids[t]) for lo, hi, t in edges)
                if node.accepting[q]:
                    self.eps[ids[q]].append(e)
            return ids[0], e
        if isinstance(node, RuleRef):
            s, e = self.new(), self.new()
            self.calls[s].append((node.name, e))
            return s, e
        if isinstance(node, Sequence):
            s = e = self.new()
            for item in node.items:
                a, b = self.frag(item)
                self.eps[e].append(a)
                e = b
            return s, e
        if isinstance(node, Alternation):
            s, e = self.new(), self.new()
            for option in node.options:
                a, b = self.frag(option)
                self.eps[s].append(a)
                self.eps[b].append(e)
            return s, e
        assert isinstance(node, Repeat)
        s = e = self.new()
        for _ in range(node.min):
            a, b = self.frag(node.item)
            self.eps[e].append(a)
            e = b
        if node.max is None:
            a, b = self.frag(node.item)
            self.eps[e].append(a)
            self.eps[b].append(e)
            return s, e
        end = self.new()
        self.eps[e].append(end)
        for _ in range(node.max - node.min):
            a, b = self.frag(node.item)
            self.eps[e].append(a)
            self.eps[b].append(end)
            e = b
        return s, end

    def closure(self, states: "set[int] | list[int]") -> frozenset[int]:
        seen = set(states)
        todo = list(seen)
        while todo:
            for n in self.eps[todo.pop()]:
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return frozenset(seen)


_models: "weakref.WeakKeyDictionary[Grammar, RuleAutomata | None]" = weakref.WeakKeyDictionary()
_models_lock = threading.Lock()


def rule_automata(grammar: Grammar) -> "RuleAutomata | None":
    """The model of ``grammar``, or None where it has none (see the module docstring).

    Kept while the grammar lives: a recursive schema's grammar is modelled when
    it is compiled (to choose grammar or unrolled DFA) and again for its masks."""
    with _models_lock:
        if grammar in _models:
            return _models[grammar]
    try:
        model = _build(grammar)
    except _TooLarge:
        model = None
    with _models_lock:
        _models[grammar] = model
    return model


def _build(grammar: Grammar) -> "RuleAutomata | None":
    by_name = {r.name: r for r in grammar.rules}
    names = reachable_rules(grammar)
    nfa = _NFA()
    entries = {name: nfa.frag(by_name[name].body) for name in names}
    # Per-rule subset construction; calls are symbols like bytes.
    offsets: dict[str, int] = {}
    states: list[frozenset[int]] = []
    byte_rows: list[list[tuple[int, int, int]]] = []  # per state: (first byte, last byte, next state)
    closed: dict[frozenset[int], frozenset[int]] = {}  # NFA target set -> its closure
    call_rows: list[list[tuple[str, int]]] = []
    accepting: list[bool] = []
    for name in names:
        entry, exit_ = entries[name]
        offsets[name] = len(states)
        index: dict[frozenset[int], int] = {}
        first = nfa.closure([entry])
        index[first] = len(states)
        states.append(first)
        byte_rows.append([])
        call_rows.append([])
        accepting.append(exit_ in first)
        k = offsets[name]
        while k < len(states):
            current = states[k]
            edges: list[tuple[int, int, int]] = []
            by_call: dict[str, set[int]] = {}
            for n in current:
                edges.extend(nfa.edges[n])
                for callee, t in nfa.calls[n]:
                    by_call.setdefault(callee, set()).add(t)
            # Bytes by interval, not one by one: the edges' ends cut 0..255 into intervals
            # whose bytes all reach the same NFA states (a JSON string character's class
            # spans ~220 bytes), and each distinct target set is closed once per build.
            moves: list[tuple[int, int, frozenset[int]]] = []
            if edges:
                cuts = sorted({lo for lo, _, _ in edges} | {hi + 1 for _, hi, _ in edges})
                for a, b in zip(cuts, cuts[1:]):
                    hit = frozenset(t for lo, hi, t in edges if lo <= a and b - 1 <= hi)
                    if hit:
                        moves.append((a, b - 1, hit))
            for lo_or_callee, hi, targets in [*moves, *((c, None, frozenset(t)) for c, t in by_call.items())]:
                target = closed.get(targets)
                if target is None:
                    target = closed[targets] = nfa.closure(targets)
                j = index.get(target)
                if j is None:
                    if len(states) >= MAX_BUILT_STATES:
                        raise _TooLarge
                    j = index[target] = len(states)
                    states.append(target)
                    byte_rows.append([])
                    call_rows.append([])
                    accepting.append(exit_ in target)
                if hi is not None:
                    byte_rows[k].append((lo_or_callee, hi, j))
                else:
                    call_rows[k].append((lo_or_callee, j))
            k += 1
    n = len(states)
    byte_next = np.full((n, 256), -1, dtype=np.int32)
    for g, row in enumerate(byte_rows):
        for lo, hi, j in row:
            byte_next[g, lo:hi + 1] = j
    byte_next, call_rows, accepting, offsets = _minimized(byte_next, call_rows, accepting, offsets)
    n = len(accepting)
    if n > MAX_STATES:
        return None
    call_off = np.zeros(n + 1, dtype=np.int32)
    call_start: list[int] = []
    call_ret: list[int] = []
    for g, calls in enumerate(call_rows):
        for callee, ret in calls:
            call_start.append(offsets[callee])
            call_ret.append(ret)
        call_off[g + 1] = len(call_start)
    starts = np.asarray(call_start, dtype=np.int32)
    rets = np.asarray(call_ret, dtype=np.int32)
    acc = np.asarray(accepting, dtype=bool)
    dist = _distances(byte_next, call_off, starts, rets, acc)
    if dist[offsets[grammar.root]] >= _INF:
        return None
    nullable = dist[starts] == 0 if len(starts) else np.zeros(0, dtype=bool)
    if _left_recursive(call_off, starts, rets, nullable):
        return None
    first = _first_bytes(byte_next, call_off, starts, rets, nullable)
    inc1 = _one_byte_increase(byte_next, call_off, starts, rets, nullable, dist)
    if inc1 is None:
        return None
    return RuleAutomata(byte_next, call_off, starts, rets, acc, first, dist,
                        offsets[grammar.root], inc1, n)


def _minimized(byte_next: np.ndarray, call_rows: list, accepting: list, offsets: dict[str, int]) -> tuple:
    """The same model with equivalent states merged (the coarsest partition with
    the same acceptance, the same class after every byte and the same return
    class after every callee: Hopcroft's splitting, the callees' returns as more
    columns).  Subset construction keeps one state per set of NFA positions, and
    a schema's alternatives (keys, value kinds) reach the same future through
    many sets: merging them halves to thirds the states the masks are computed
    for.  The classes are numbered in order of first appearance, so a model's
    shape does not depend on numpy's sort."""
    n = byte_next.shape[0]
    callees = sorted({callee for calls in call_rows for callee, _ in calls})
    col = {callee: k for k, callee in enumerate(callees)}
    call_ret = np.full((n, len(callees)), -1, dtype=np.int64)
    for g, calls in enumerate(call_rows):
        for callee, ret in calls:
            call_ret[g, col[callee]] = ret
    # bytes every state treats alike need one column (JSON grammars: a few dozen of 256)
    columns = byte_next[:, first_of_equal(byte_next.T)]
    targets = np.hstack([call_ret, columns])
    # Hopcroft's splitting (the DFA builder's numba kernel) with the callees' return states as
    # more columns: Moore's rounds were one np.unique of the whole signature each, ~200 of them
    # for a schema with a 190-character string (most of a grammar's model build).
    blocks = np.asarray(hopcroft(targets.astype(np.int32), np.asarray(accepting, dtype=bool)), dtype=np.int64)
    cls = row_ids(blocks[:, None])
    count = int(cls.max()) + 1 if n else 0
    if count == n:
        return byte_next, call_rows, accepting, offsets
    # renumber by first appearance; a representative per class
    order = np.full(count, -1, dtype=np.int64)
    reps: list[int] = []
    for g, c in enumerate(cls.tolist()):
        if order[c] < 0:
            order[c] = len(reps)
            reps.append(g)
    new = order[cls]
    merged = np.where(byte_next[reps] >= 0, new[np.maximum(byte_next[reps], 0)], -1).astype(np.int32)
    calls = [[(callee, int(new[ret])) for callee, ret in call_rows[g]] for g in reps]
    return merged, calls, [accepting[g] for g in reps], {name: int(new[g]) for name, g in offsets.items()}


def _distances(byte_next: np.ndarray, call_off: np.ndarray, starts: np.ndarray, rets: np.ndarray,
               accepting: np.ndarray) -> np.ndarray:
    """Fewest bytes from each state to its rule's end (a call costs the callee's
    shortest sentence): a worklist relaxation over byte and call edges."""
    n = byte_next.shape[0]
    dist = np.where(accepting, 0, _INF).astype(np.int64)
    # Predecessors: who must be re-examined when dist[x] drops.
    preds: list[list[int]] = [[] for _ in range(n)]
    src, _ = np.nonzero(byte_next >= 0)
    for g, x in zip(src.tolist(), byte_next[byte_next >= 0].tolist()):
        preds[x].append(g)
    for g in range(n):
        for c in range(call_off[g], call_off[g + 1]):
            preds[int(rets[c])].append(g)
            preds[int(starts[c])].append(g)
    rows = [np.nonzero(byte_next[g] >= 0)[0] for g in range(n)]
    targets = [byte_next[g, rows[g]] for g in range(n)]
    todo = list(range(n))
    queued = [True] * n
    while todo:
        g = todo.pop()
        queued[g] = False
        best = dist[g]
        if len(targets[g]):
            best = min(best, int(dist[targets[g]].min()) + 1)
        for c in range(call_off[g], call_off[g + 1]):
            best = min(best, int(dist[starts[c]]) + int(dist[rets[c]]))
        if best < dist[g]:
            dist[g] = best
            for p in preds[g]:
                if not queued[p]:
                    queued[p] = True
                    todo.append(p)
    return np.minimum(dist, _INF).astype(np.int32)


def _nullable_moves(g: int, call_off: np.ndarray, rets: np.ndarray, nullable: np.ndarray) -> list[int]:
    """States reachable from ``g`` in its own rule by calling rules that may read nothing."""
    seen = {g}
    todo = [g]
    while todo:
        x = todo.pop()
        for c in range(call_off[x], call_off[x + 1]):
            if nullable[c] and int(rets[c]) not in seen:
                seen.add(int(rets[c]))
                todo.append(int(rets[c]))
    return list(seen)


def _left_recursive(call_off: np.ndarray, starts: np.ndarray, rets: np.ndarray, nullable: np.ndarray) -> bool:
    """Whether a rule can call itself before reading a byte (a cycle of calls
    made from states reachable without reading: the stack would grow forever)."""
    start_states = sorted(set(starts.tolist()))
    left: dict[int, set[int]] = {}
    for s in start_states:
        callees: set[int] = set()
        for x in _nullable_moves(s, call_off, rets, nullable):
            callees.update(int(starts[c]) for c in range(call_off[x], call_off[x + 1]))
        left[s] = callees
    return cycle_node(start_states, lambda s: sorted(left.get(s, ()))) is not None


def _first_bytes(byte_next: np.ndarray, call_off: np.ndarray, starts: np.ndarray, rets: np.ndarray,
                 nullable: np.ndarray) -> np.ndarray:
    """``first[g, b]``: byte ``b`` can be read from ``g`` without returning
    (directly, inside a call, or after calls that read nothing)."""
    first = byte_next >= 0
    changed = True
    while changed:
        changed = False
        for g in range(byte_next.shape[0]):
            row = first[g].copy()
            for c in range(call_off[g], call_off[g + 1]):
                row |= first[starts[c]]
                if nullable[c]:
                    row |= first[rets[c]]
            if (row != first[g]).any():
                first[g] = row
                changed = True
    return first


def _one_byte_increase(byte_next: np.ndarray, call_off: np.ndarray, starts: np.ndarray, rets: np.ndarray,
                       nullable: np.ndarray, dist: np.ndarray) -> "int | None":
    """A bound on how much reading one byte raises a configuration's distance.

    ``after[g]``: the largest distance of the part a byte read at ``g`` leaves on
    top (the state it lands in plus the frames pushed on the way).  Returning
    first never raises the distance (the top finished at 0), and a return is
    the same as reading from the frame's state, so ``max(after[g] - dist[g])``
    bounds every byte."""
    n = byte_next.shape[0]
    valid = byte_next >= 0
    direct = np.where(valid, dist[np.maximum(byte_next, 0)], -1).max(axis=1).astype(np.int64)
    after = direct.copy()
    for _ in range(n + 2):
        changed = False
        for g in range(n):
            best = after[g]
            for c in range(call_off[g], call_off[g + 1]):
                s, r = int(starts[c]), int(rets[c])
                if after[s] >= 0:
                    best = max(best, after[s] + int(dist[r]))
                if nullable[c]:
                    best = max(best, after[r])
            if best != after[g]:
                after[g] = best
                changed = True
        if not changed:
            live = after >= 0
            return int(max(0, (after[live] - dist[live]).max())) if live.any() else 0
    return None  # did not settle (cannot happen without left recursion)


# ---------------------------------------------------------- configurations


#: Frame slots a reply's arena starts with (its frames plus a walk's pushes;
#: grammar.rule_masks.RuleMasks.frame_spare is 4096).
ARENA_START = 1024 + 4096


class Configurations:
    """The parse configurations of one reply, byte by byte (one per matcher).

    A configuration is ``(g, f)``: the state being read and a frame index into
    this object's frame arena (``-1``: the root's own level).  Frames are
    interned on (return state, parent), so equal stacks are one index and a
    set of configurations dedupes exactly.
    """

    def __init__(self, model: RuleAutomata) -> None:
        self.m = model
        self._ret: list[int] = []
        self._parent: list[int] = []
        self._cum: list[int] = []
        self._intern: dict[tuple[int, int], int] = {}
        #: configurations -> (slot, stamp) of their mask in the grammar's memo
        #: (grammar.rule_masks.RuleMasks.fill; valid while the stamp is unchanged)
        self.memo_slots: dict[tuple[tuple[int, int], ...], tuple[int, int]] = {}
        tables = model.python_tables  # shared by every reply of the grammar
        self._calls, self._byte_next, self._dist, self._accepting, self._nullable_start, self._first = tables
        # The frames again as arrays for the mask kernels, with room after them
        # for the frames a walk pushes (scratch; see reserve()): sized for a
        # walk's usual spare from the start, so the first mask does not copy.
        self._arrays = np.empty((4, ARENA_START), dtype=np.int32)
        #: views of the frames' return states, parents and cumulative distances (kept with the arena)
        self.frames = (self._arrays[0], self._arrays[1], self._arrays[2])
        #: (configurations, limit) -> (slot, stamp) of their budget mask (RuleMasks.within)
        self.budget_slots: dict[tuple, tuple[int, int]] = {}

    @property
    def arrays(self) -> np.ndarray:
        """The frame arena as one (4, slots) int32 array (rows: return states,
        parents, cumulative distances, heights -- frames from the root, 1 for
        a frame of the root's level; see :meth:`reserve`): one kernel argument
        instead of four."""
        return self._arrays

    def initial(self) -> tuple[tuple[int, int], ...]:
        return ((self.m.start, -1),)

    def frame(self, ret: int, parent: int) -> int:
        key = (ret, parent)
        f = self._intern.get(key)
        if f is None:
            f = self._intern[key] = len(self._ret)
            cum = self._dist[ret] + (self._cum[parent] if parent >= 0 else 0)
            self._ret.append(ret)
            self._parent.append(parent)
            self._cum.append(cum)
            if f >= self._arrays.shape[1]:
                self._arrays = np.concatenate([self._arrays, np.empty_like(self._arrays)], axis=1)
                self.frames = (self._arrays[0], self._arrays[1], self._arrays[2])
            arrays = self._arrays
            arrays[0, f] = ret
            arrays[1, f] = parent
            arrays[2, f] = cum
            arrays[3, f] = 1 + (int(arrays[3, parent]) if parent >= 0 else 0)  # frames from the root
        return f

    def cost(self, config: tuple[int, int]) -> int:
        g, f = config
        return self._dist[g] + (self._cum[f] if f >= 0 else 0)

    def step(self, configs: "tuple[tuple[int, int], ...]", byte: int) -> tuple[tuple[int, int], ...]:
        """The configurations after reading ``byte`` (empty: the model rejects it)."""
        first = self._first
        out: dict[tuple[int, int], None] = {}
        for g0, f0 in configs:
            todo = [(g0, f0)]
            seen = set()
            while todo:
                g, f = todo.pop()
                if (g, f) in seen:
                    continue
                seen.add((g, f))
                nx = int(self._byte_next[g][byte])
                if nx >= 0:
                    out[(nx, f)] = None
                for s, r in self._calls[g]:
                    if first[s][byte] or self._nullable_start[s]:
                        todo.append((s, self.frame(r, f)))
                if self._accepting[g] and f >= 0:
                    todo.append((self._ret[f], self._parent[f]))
        result = tuple(out)
        if len(result) > MAX_CONFIGS:
            result = tuple(sorted(result, key=self.cost)[:MAX_CONFIGS])
        return result

    def advance(self, configs: tuple[tuple[int, int], ...], data: bytes) -> tuple[tuple[int, int], ...]:
        for byte in data:
            if not configs:
                break
            configs = self.step(configs, byte)
        return configs

    def reserve(self, spare: int) -> tuple[np.ndarray, int]:
        """The frame arena (:attr:`arrays`) with at least ``spare`` free slots
        after the ``n`` in use (a kernel's own pushes land there and are
        forgotten), and ``n``."""
        n = len(self._ret)
        if self._arrays.shape[1] < n + spare:
            grown = np.empty((4, max(n + spare, 2 * self._arrays.shape[1])), dtype=np.int32)
            grown[:, :n] = self._arrays[:, :n]
            self._arrays = grown
            self.frames = (grown[0], grown[1], grown[2])
        return self._arrays, n
