"""How few bytes finish a recursive grammar's reply, and which tokens keep that in budget.

xgrammar's matcher decides which tokens a grammar allows; it cannot say how
far the reply is from a complete sentence, so a recursive GBNF/Lark reply
used to run into ``max_tokens`` half-finished.  This module measures that
distance on poot's own model of the grammar and restricts the last masks to
tokens after which the reply still fits (docs/budget.md, issue 17).

The model: one byte DFA per rule, with **call edges** (``q --R--> q'``: read
one ``R``, then continue at ``q'``).  A parse is a *configuration*: the state
``g`` of the rule being read and a stack of return states (frames).  Reading
a byte either follows a byte edge of ``g``, or calls a rule (pushing the
return state) and reads the byte there, or -- when ``g`` accepts -- returns to
the frame below and reads it there.  Ambiguous grammars have several
configurations at once; the matcher keeps the set.

``dist[g]`` is the fewest bytes that finish ``g``'s rule (a call costs the
callee's shortest sentence), so a configuration finishes in
``dist[g] + sum(dist[frame])`` bytes, and a set in the least of those.  With a
vocabulary that has a one-byte token for every byte (byte-level BPE, and
SentencePiece with ``<0xNN>`` fallback tokens), that many tokens always
suffice, so allowing only tokens after which it stays within the tokens left
makes every reply finish in time; on other vocabularies it is best effort.

Cost.  Far from the end no token can matter: one byte raises the distance by
at most ``inc1`` (a static bound), so while ``tokens left >= max distance +
inc1 * longest token`` the mask is xgrammar's alone.  Closer, a numba kernel
walks the token trie with the configurations (:func:`_walk`), bounded by a
work cap; past it only one-byte tokens are checked (still always completes).

Not every grammar gets a model: left recursion (``expr ::= expr "+" term``),
automata past :data:`MAX_STATES`, or repeats expanded past
:data:`MAX_NFA_STATES` leave the grammar without budgets, as before.  That is
never a refusal: the grammar runs on xgrammar either way.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from poot_vllm.core.automata.utf8 import DONE, codepoint_automaton
from poot_vllm.core.grammar.gbnf import (Alternation, CharClass, Grammar, Literal, Node, Repeat, RuleRef, Sequence,
                                         reachable_rules)
from poot_vllm.core.jit import jit_kernel as _jit

#: Largest total of per-rule DFA states modelled (a byte table of 1 KiB each).
MAX_STATES = 8192
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
    def python_tables(self) -> tuple[list, Any, list, list, list]:
        """The tables as Python lists, for the per-byte steps of :class:`Configurations`
        (built once per grammar; list lookups are several times faster than numpy's)."""
        calls = [[(int(self.call_start[c]), int(self.call_ret[c]))
                  for c in range(self.call_off[g], self.call_off[g + 1])]
                 for g in range(self.n_states)]
        return (calls, self.byte_next.tolist(), self.dist.tolist(), self.accepting.tolist(),
                (self.dist == 0).tolist())


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


def rule_automata(grammar: Grammar) -> "RuleAutomata | None":
    """The model of ``grammar``, or None where it has none (see the module docstring)."""
    try:
        return _build(grammar)
    except _TooLarge:
        return None


def _build(grammar: Grammar) -> "RuleAutomata | None":
    by_name = {r.name: r for r in grammar.rules}
    names = reachable_rules(grammar)
    nfa = _NFA()
    entries = {name: nfa.frag(by_name[name].body) for name in names}
    # Per-rule subset construction; calls are symbols like bytes.
    offsets: dict[str, int] = {}
    states: list[frozenset[int]] = []
    byte_rows: list[dict[int, int]] = []
    call_rows: list[list[tuple[str, int]]] = []
    accepting: list[bool] = []
    for name in names:
        entry, exit_ = entries[name]
        offsets[name] = len(states)
        index: dict[frozenset[int], int] = {}
        first = nfa.closure([entry])
        index[first] = len(states)
        states.append(first)
        byte_rows.append({})
        call_rows.append([])
        accepting.append(exit_ in first)
        k = offsets[name]
        while k < len(states):
            current = states[k]
            by_byte: dict[int, set[int]] = {}
            by_call: dict[str, set[int]] = {}
            for n in current:
                for lo, hi, t in nfa.edges[n]:
                    for b in range(lo, hi + 1):
                        by_byte.setdefault(b, set()).add(t)
                for callee, t in nfa.calls[n]:
                    by_call.setdefault(callee, set()).add(t)
            for symbol_map, is_byte in ((by_byte, True), (by_call, False)):
                for symbol, targets in symbol_map.items():
                    target = nfa.closure(targets)
                    j = index.get(target)
                    if j is None:
                        if len(states) >= MAX_STATES:
                            raise _TooLarge
                        j = index[target] = len(states)
                        states.append(target)
                        byte_rows.append({})
                        call_rows.append([])
                        accepting.append(exit_ in target)
                    if is_byte:
                        byte_rows[k][symbol] = j
                    else:
                        call_rows[k].append((symbol, j))
            k += 1
    n = len(states)
    byte_next = np.full((n, 256), -1, dtype=np.int32)
    for g, row in enumerate(byte_rows):
        if row:
            byte_next[g, list(row)] = list(row.values())
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
    # Cycle search over start states (iterative DFS with colours).
    colour: dict[int, int] = {}
    for root in start_states:
        if root in colour:
            continue
        stack = [(root, iter(left[root]))]
        colour[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[node] = 2
                stack.pop()
                continue
            c = colour.get(nxt, 0)
            if c == 1:
                return True
            if c == 0:
                colour[nxt] = 1
                stack.append((nxt, iter(left.get(nxt, ()))))
    return False


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
        tables = model.python_tables  # shared by every reply of the grammar
        self._calls, self._byte_next, self._dist, self._accepting, self._nullable_start = tables

    def initial(self) -> tuple[tuple[int, int], ...]:
        return ((self.m.start, -1),)

    def frame(self, ret: int, parent: int) -> int:
        key = (ret, parent)
        f = self._intern.get(key)
        if f is None:
            f = self._intern[key] = len(self._ret)
            self._ret.append(ret)
            self._parent.append(parent)
            self._cum.append(self._dist[ret] + (self._cum[parent] if parent >= 0 else 0))
        return f

    def cost(self, config: tuple[int, int]) -> int:
        g, f = config
        return self._dist[g] + (self._cum[f] if f >= 0 else 0)

    def step(self, configs: "tuple[tuple[int, int], ...]", byte: int) -> tuple[tuple[int, int], ...]:
        """The configurations after reading ``byte`` (empty: the model rejects it)."""
        first = self.m.first
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
                    if first[s, byte] or self._nullable_start[s]:
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

    def arena(self, spare: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The frames as arrays with ``spare`` free slots for a walk's own pushes."""
        n = len(self._ret)
        ret = np.empty(n + spare, dtype=np.int32)
        parent = np.empty(n + spare, dtype=np.int32)
        cum = np.empty(n + spare, dtype=np.int32)
        ret[:n] = self._ret
        parent[:n] = self._parent
        cum[:n] = self._cum
        return ret, parent, cum


# ------------------------------------------------------------------- masks


#: Configurations one byte may explore at most inside the kernel.
_EXPLORE_CAP = 256


@_jit
def _walk(byte_next, call_off, call_start, call_ret, accepting, first, dist,
          node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop, max_depth,
          init_g, init_f, fr_ret, fr_parent, fr_cum, n_frames, limit, row, work_cap,
          ws_node, ws_g, ws_f):
    """Set in ``row`` (uint32 words, zeroed here) every non-stop token that,
    read from one of the configurations ``(init_g[k], init_f[k])``, ends in a
    configuration whose distance is at most ``limit``.  Returns the trie
    visits made, or -1 past ``work_cap`` (or a full scratch area): the caller
    then falls back to a cheaper, still-completing mask."""
    row[:] = 0
    cap_frames = fr_ret.shape[0]
    cap_ws = ws_node.shape[0]
    ex_g = np.empty(_EXPLORE_CAP, dtype=np.int32)
    ex_f = np.empty(_EXPLORE_CAP, dtype=np.int32)
    seen_g = np.empty(_EXPLORE_CAP, dtype=np.int32)
    seen_f = np.empty(_EXPLORE_CAP, dtype=np.int32)
    res_g = np.empty(_EXPLORE_CAP, dtype=np.int32)
    res_f = np.empty(_EXPLORE_CAP, dtype=np.int32)
    sp = 0
    for k in range(init_g.shape[0]):
        ws_node[sp] = 0
        ws_g[sp] = init_g[k]
        ws_f[sp] = init_f[k]
        sp += 1
    work = 0
    while sp > 0:
        sp -= 1
        i = ws_node[sp]
        g = ws_g[sp]
        f = ws_f[sp]
        work += 1
        if work > work_cap:
            return -1
        cost = dist[g]
        if f >= 0:
            cost += fr_cum[f]
        if i > 0 and cost <= limit:
            for k in range(tok_offsets[i], tok_offsets[i + 1]):
                t = tok_ids[k]
                if not is_stop[t]:
                    row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
        # A byte lowers the distance by at most one: nothing below can get in.
        if cost - (max_depth - node_depth[i]) > limit:
            continue
        j = i + 1
        end = node_end[i]
        while j < end:
            b = node_byte[j]
            # Every configuration (g, f) reaches by reading b.
            ne = 1
            ex_g[0] = g
            ex_f[0] = f
            n_seen = 0
            n_res = 0
            while ne > 0:
                ne -= 1
                cg = ex_g[ne]
                cf = ex_f[ne]
                dup = False
                for k in range(n_seen):
                    if seen_g[k] == cg and seen_f[k] == cf:
                        dup = True
                        break
                if dup:
                    continue
                if n_seen >= _EXPLORE_CAP:
                    return -1
                seen_g[n_seen] = cg
                seen_f[n_seen] = cf
                n_seen += 1
                nx = byte_next[cg, b]
                if nx >= 0:
                    dup = False
                    for k in range(n_res):
                        if res_g[k] == nx and res_f[k] == cf:
                            dup = True
                            break
                    if not dup:
                        res_g[n_res] = nx
                        res_f[n_res] = cf
                        n_res += 1
                for c in range(call_off[cg], call_off[cg + 1]):
                    s = call_start[c]
                    if not first[s, b] and dist[s] != 0:
                        continue
                    if n_frames >= cap_frames or ne >= _EXPLORE_CAP:
                        return -1
                    r = call_ret[c]
                    fr_ret[n_frames] = r
                    fr_parent[n_frames] = cf
                    fr_cum[n_frames] = dist[r] + (fr_cum[cf] if cf >= 0 else 0)
                    ex_g[ne] = s
                    ex_f[ne] = n_frames
                    n_frames += 1
                    ne += 1
                if accepting[cg] and cf >= 0:
                    if ne >= _EXPLORE_CAP:
                        return -1
                    ex_g[ne] = fr_ret[cf]
                    ex_f[ne] = fr_parent[cf]
                    ne += 1
            if sp + n_res > cap_ws:
                return -1
            for k in range(n_res):
                ws_node[sp] = j
                ws_g[sp] = res_g[k]
                ws_f[sp] = res_f[k]
                sp += 1
            j = node_end[j]
    return work


class CompletionMasks:
    """The trie walk for one (grammar model, vocabulary): shared, read-only."""

    def __init__(self, model: RuleAutomata, vocab: Any, trie: Any = None) -> None:
        from poot_vllm.core.token_trie import TokenTrie

        self.model = model
        self.trie = trie if trie is not None else TokenTrie.build(vocab)
        # Stop tokens are the matcher's business (each request has its own):
        # the walk sets text tokens by their bytes, and the matcher clears its stop ids.
        self.no_stop = np.zeros(vocab.size, dtype=bool)
        self.token_bytes = vocab.token_bytes
        self.max_token_bytes = int(self.trie.max_depth)
        #: how far from the end (in tokens) a mask can need restricting
        self.reach = int(model.inc1) * max(1, self.max_token_bytes)
        self.work_cap = 8 * self.trie.n_nodes + 65_536
        # One-byte tokens, for the fallback when the walk passes its cap.
        singles: dict[int, list[int]] = {}
        for t, data in enumerate(vocab.token_bytes):
            if data is not None and len(data) == 1:
                singles.setdefault(data[0], []).append(t)
        self.singles = singles

    def allowed(self, configs_state: Configurations, configs: tuple[tuple[int, int], ...], limit: int,
                out: np.ndarray) -> None:
        """Write into ``out`` (int32 words) the text tokens after which some
        configuration finishes within ``limit`` bytes."""
        m = self.model
        trie = self.trie
        spare = min(self.work_cap, 4 * trie.n_nodes + 4096)
        fr_ret, fr_parent, fr_cum = configs_state.arena(spare)
        n_frames = fr_ret.shape[0] - spare
        init_g = np.array([g for g, _ in configs], dtype=np.int32)
        init_f = np.array([f for _, f in configs], dtype=np.int32)
        cap_ws = 2 * trie.n_nodes + 1024
        ws = [np.empty(cap_ws, dtype=np.int32) for _ in range(3)]
        words = out.view(np.uint32)
        done = _walk(m.byte_next, m.call_off, m.call_start, m.call_ret, m.accepting, m.first, m.dist,
                     trie.node_byte, trie.node_depth, trie.node_end, trie.tok_offsets, trie.tok_ids,
                     self.no_stop, np.int32(trie.max_depth), init_g, init_f, fr_ret, fr_parent, fr_cum,
                     np.int32(n_frames), np.int32(limit), words, np.int64(self.work_cap), *ws)
        if done >= 0:
            return
        # Too much to walk: one-byte tokens only, each checked on its own.
        words[:] = 0
        for byte, ids in self.singles.items():
            after = configs_state.step(configs, byte)
            if after and min(configs_state.cost(c) for c in after) <= limit:
                for t in ids:
                    words[t >> 5] |= np.uint32(1 << (t & 31))


def warm_up() -> None:
    """Compile (or load from numba's cache) the trie-walk kernel on a toy grammar,
    so the first budgeted grammar reply does not pay for it."""
    from poot_vllm.core.grammar.gbnf import parse_gbnf
    from poot_vllm.core.masks import _ToyVocab
    from poot_vllm.core.token_trie import _build_trie

    model = rule_automata(parse_gbnf('root ::= "(" root ")" | "x"'))
    vocab = _ToyVocab((b"(", b"x", b"))", None), frozenset({3}), 4)
    masks = CompletionMasks(model, vocab, _build_trie(vocab.token_bytes, vocab.size))  # keep the cache for real tries
    configs = Configurations(model)
    row = np.zeros(1, dtype=np.int32)
    masks.allowed(configs, configs.advance(configs.initial(), b"(("), 3, row)
