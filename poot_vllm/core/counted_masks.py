"""Token masks of a DFA with a counter (:mod:`poot_vllm.core.automata.counters`).

The mask build (:class:`poot_vllm.core.masks.DFAMaskIndex`) treats a counted
DFA's table as a plain DFA first: each state's row then holds every token
allowed at *some* counter value.  This module adds what the counter takes
away, from one more trie walk per state whose counter is live (or from which
a token can enter a small region and pass its bound):

* a token read from state ``s`` with counter ``c`` makes ``k`` increments
  before it leaves ``s``'s region or starts another (the symbolic part: it
  is allowed iff ``c + k <= hi``), then checks any region it enters with a
  concrete counter (allowed or never);
* tokens never allowed (``k >= hi``, or a concrete check that fails) are
  removed from the state's row once, at build time;
* the others (``k >= 1``) are listed per state by ``k``, descending, and
  ``free_upto[s] = hi - max k``: every counter up to it uses the plain row
  unchanged (a row copy, as for any DFA).  Above it the row is the plain
  row minus a prefix of the list (:func:`_clear_tokens`), kept in a small
  byte-bounded memo; a reply's counter grows one item at a time, so the row
  for ``c`` is usually the memoised row for ``c - 1`` minus the few tokens
  that just stopped fitting.

Lists equal between states are stored once.  Memory: 8 bytes per listed
token (for a 128k-token vocabulary, about 0.5 MB per state inside a string).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from poot_vllm.core.automata.counters import ACT_INC, ACT_SET1
from poot_vllm.core.jit import jit_kernel as _jit
from poot_vllm.core.table_graph import NO_ACTIONS, read_only, table_predecessors

#: ``k`` of a token that is never allowed (a concrete check failed).
NEVER = np.int32(1 << 30)
#: ``free_upto`` of a state without listed tokens.
NO_LIMIT = np.int32(2**31 - 1)
#: Counter rows memoised per index (above ``free_upto``), at most this many bytes.
ROW_MEMO_BYTES = 4 * 1024 * 1024
#: Lists at least this long get their floor row (no listed token) at build time.
FLOOR_MIN_TOKENS = 4096
#: How far back (in counter values) a new row looks for a memoised one to start from.
MEMO_LOOKBACK = 32
#: ``_guard_walk``'s row when only the list is wanted (writable, like the rows
#: it fills otherwise: one kernel specialisation; empty, so never written).
_NO_ROW = np.zeros(0, dtype=np.uint32)


@_jit
def _guard_step(a, hi, m, k, v):
    """One byte of a guard walk: the action ``a`` read where the live region's
    bound is ``hi``, from mode ``m`` (0: the start state's own counter, ``k``
    increments so far; 1: a counter set inside the token, value ``v``; 2:
    failed).  Returns the new (mode, k, v)."""
    if m != 2:
        if a == ACT_INC:
            if m == 0:
                k += 1
            elif v >= hi:
                m = 2
            else:
                v += 1
        elif a == ACT_SET1:
            m = 1
            v = 1
    return m, k, v


@_jit
def _guard_walk(trans, acts, limit, s, m0, k0, v0, first, end, node_byte, node_depth, node_end, tok_offsets,
                tok_ids, is_stop, out_tok, out_k, n0, st, mode, kk, vv, work, row):
    """Tokens (non-stop, alive in the plain table) whose validity from state
    ``s`` depends on the counter: ``(out_tok[i], out_k[i])`` with ``k`` the
    increments made on ``s``'s counter, or ``NEVER``, written from ``n0`` on.
    Returns the new count.

    Per trie depth: the state, the mode (0: ``s``'s own counter, unknown;
    1: a counter set inside the token, value ``vv``; 2: failed), ``kk``.
    The walk covers the trie nodes ``first:end`` (a subtree, or ``1:n_nodes``
    for all), entered from ``s`` with mode ``m0``, ``k0`` increments so far
    and counter ``v0`` (the full build starts at the root; the lazy masks
    also start below a loop's exits, see ``lazy_masks``).  A non-empty ``row``
    (uint32 words) also gets every live non-stop token, the plain row of the
    same walk (the lazy masks: one walk per state, not two).
    """
    n = n0
    write_row = row.shape[0] > 0
    if write_row and first == 1:  # tokens with empty bytes live on the root
        for q in range(tok_offsets[0], tok_offsets[1]):
            t = tok_ids[q]
            if not is_stop[t]:
                row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
    if first >= end:
        return n
    d0 = node_depth[first]
    st[d0 - 1] = s
    mode[d0 - 1] = m0
    kk[d0 - 1] = k0
    vv[d0 - 1] = v0
    i = first
    visited = 0
    while i < end:
        visited += 1
        d = node_depth[i]
        p = st[d - 1]
        b = node_byte[i]
        nxt = trans[p, b]
        if nxt < 0:
            i = node_end[i]
            continue
        m, k, v = _guard_step(acts[p, b], limit[p], mode[d - 1], kk[d - 1], vv[d - 1])
        st[d] = nxt
        mode[d] = m
        kk[d] = k
        vv[d] = v
        a0 = tok_offsets[i]
        b0 = tok_offsets[i + 1]
        if write_row:
            for q in range(a0, b0):
                t = tok_ids[q]
                if not is_stop[t]:
                    row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
        if a0 < b0 and (m == 2 or k > 0):
            kval = NEVER if m == 2 else k
            for q in range(a0, b0):
                t = tok_ids[q]
                if not is_stop[t]:
                    out_tok[n] = t
                    out_k[n] = kval
                    n += 1
        i += 1
    work[0] += visited
    return n


@_jit
def _clear_tokens(src, tok, a, b, out):
    """``src`` minus the tokens ``tok[a:b]``, into ``out`` (uint32 words)."""
    out[:] = src
    for i in range(a, b):
        t = tok[i]
        out[t >> 5] &= ~(np.uint32(1) << np.uint32(t & 31))


@_jit
def _set_tokens(src, tok, a, b, out):
    """``src`` plus the tokens ``tok[a:b]``, into ``out`` (uint32 words)."""
    out[:] = src
    for i in range(a, b):
        t = tok[i]
        out[t >> 5] |= np.uint32(1) << np.uint32(t & 31)


class CounterRows:
    """The rows of (state, counter) pairs above a state's ``free_upto``: the
    plain row minus a prefix of the state's list (``tok``, ``neg_k`` =
    ``-k`` ascending, ``tok[lo:hi]``), memoised up to ``ROW_MEMO_BYTES``.
    Shared by the full index (:class:`CounterMasks`) and the lazy masks
    (``lazy_masks.PendingMasks``), which pass each state's list in."""

    def __init__(self) -> None:
        #: Per state with a long list: its row without any listed token (built once).
        self.floors: dict[int, np.ndarray] = {}
        self._memo: "OrderedDict[tuple[int, int], np.ndarray]" = OrderedDict()
        self._lock = threading.Lock()

    def _floor(self, base: np.ndarray, state: int, tok: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """The state's row without any of its listed tokens (made at build time for
        long lists, see :func:`build_counter_masks`; memoised for the others)."""
        floor = self.floors.get(state)
        if floor is not None:
            return floor
        with self._lock:
            floor = self._memo.get((state, -1))
        if floor is None:
            floor = np.empty_like(base)
            _clear_tokens(base, tok, lo, hi, floor)
            floor.flags.writeable = False
            with self._lock:
                self._memo[(state, -1)] = floor
        return floor

    def above(self, base: np.ndarray, state: int, counter: int, limit: int, tok: np.ndarray,
              neg_k: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """The uint32 row of (state, counter), ``counter`` above the state's ``free_upto``."""
        key = (state, counter)
        with self._lock:
            hit = self._memo.get(key)
            if hit is not None:
                self._memo.move_to_end(key)
                return hit
        room = limit - int(counter)
        cut = lo + _fitting(neg_k, lo, hi, room)
        src, start = base, lo
        with self._lock:  # a row a few items earlier: clear only what stopped fitting since
            for back in range(1, MEMO_LOOKBACK + 1):
                prev = self._memo.get((state, counter - back))
                if prev is not None:
                    src, start = prev, lo + _fitting(neg_k, lo, hi, room + back)
                    break
        out = np.empty_like(base)
        if hi - cut < cut - start:
            # Fewer tokens still fit than stop fitting: the row without any listed
            # token (memoised under counter -1), plus those that fit.
            _set_tokens(self._floor(base, state, tok, lo, hi), tok, cut, hi, out)
        else:
            _clear_tokens(src, tok, start, cut, out)
        out.flags.writeable = False
        with self._lock:
            self._memo[key] = out
            while len(self._memo) * out.nbytes > ROW_MEMO_BYTES and len(self._memo) > 1:
                self._memo.popitem(last=False)
        return out


def _fitting(neg_k: np.ndarray, lo: int, hi: int, room: int) -> int:
    """How many of ``tok[lo:hi]`` add more than ``room`` items (a prefix: ``k`` descending)."""
    return int(np.searchsorted(neg_k[lo:hi], np.int32(-room), side="left"))  # int32: no cast of the list


@dataclass(eq=False)
class CounterMasks:
    """What a counted DFA's masks need beyond the plain rows (see the module docstring)."""

    limit: np.ndarray      # int32 (n_states,): the live region's hi, 0 if none
    free_upto: np.ndarray  # int32 (n_states,): counters up to this use the plain row
    spans: np.ndarray      # int64 (n_states, 2): each state's list, tok[lo:hi] (lists are shared)
    tok: np.ndarray        # int32: listed tokens, per state by k descending
    k: np.ndarray          # int32
    neg_k: np.ndarray      # int32: -k, ascending per list (for searchsorted)
    work: int              # trie nodes the walks visited
    #: Bytes of one mask row (what a memoised row costs).
    row_bytes: int = 0
    rows_above: CounterRows = field(default_factory=CounterRows)

    @property
    def floors(self) -> dict[int, np.ndarray]:
        return self.rows_above.floors

    @property
    def nbytes(self) -> int:
        arrays = [self.limit, self.free_upto, self.spans, self.tok, self.k, self.neg_k]
        floors = sum(f.nbytes for f in {id(f): f for f in self.floors.values()}.values())
        return sum(a.nbytes for a in arrays) + floors + self.memo_bound

    @property
    def memo_bound(self) -> int:
        """The most the row memo can hold: ``ROW_MEMO_BYTES``, or less when the
        (state, counter) pairs above ``free_upto`` are fewer (counted in
        ``nbytes``, so the compiled-artefact cache's byte bound covers it)."""
        listed = self.spans[:, 1] > self.spans[:, 0]
        pairs = int((self.limit[listed].astype(np.int64) - self.free_upto[listed] + 1).clip(0).sum())
        return min(ROW_MEMO_BYTES, pairs * int(self.row_bytes))

    def row(self, rows_u32: np.ndarray, row_of_state: np.ndarray, state: int, counter: int) -> np.ndarray:
        """The uint32 mask row of (state, counter) (read-only; memoised above ``free_upto``)."""
        base = rows_u32[row_of_state[state]]
        if counter <= self.free_upto[state]:
            return base
        return self.rows_above.above(base, state, counter, int(self.limit[state]), self.tok, self.neg_k,
                                     int(self.spans[state, 0]), int(self.spans[state, 1]))


@dataclass(frozen=True)
class StateGuards:
    """One state's counter-dependent tokens, as the masks keep them."""

    never: np.ndarray   # int32: tokens no counter value allows (removed from the row)
    tok: np.ndarray     # int32: the others, by ``k`` descending
    k: np.ndarray       # int32
    neg_k: np.ndarray   # int32: -k, ascending (for searchsorted)
    free_upto: int      # counters up to this use the plain row (``NO_LIMIT``: no list)

    @property
    def nbytes(self) -> int:
        return int(self.never.nbytes + self.tok.nbytes + self.k.nbytes + self.neg_k.nbytes)


def state_guards(toks: np.ndarray, ks: np.ndarray, hi: int) -> StateGuards:
    """A state's guard walk (tokens, increments or ``NEVER``) as the masks keep it:
    in a region (``hi`` its bound; counter >= 1) ``k >= hi`` never fits, outside
    one (``hi`` 0) only ``NEVER`` is listed."""
    never = ks >= max(hi, 1)
    bad = toks[never]
    toks, ks = toks[~never], ks[~never]
    free_upto = int(NO_LIMIT)
    if toks.size:
        order = by_k_descending(ks)  # k is at most a token's length
        toks, ks = toks[order], ks[order]
        free_upto = hi - int(ks[0])
    out = (bad, toks, ks, -ks)
    for a in out:
        a.flags.writeable = False  # read-only like the full index's lists: the same kernel specialisations
    return StateGuards(*out, free_upto)


def by_k_descending(ks: np.ndarray) -> np.ndarray:
    """The stable order of ``ks`` descending: as int16 the stable sort is a radix
    sort (a string-body state lists most of a 128k vocabulary: ~0.3 ms, not ~2)."""
    neg = -ks
    return np.argsort(neg.astype(np.int16) if ks.size and ks.max() < 2**15 else neg, kind="stable")


def clear_bits(row: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``row`` (uint32 words) without ``tokens`` (a copy)."""
    row = row.copy()
    np.bitwise_and.at(row, tokens >> 5, ~np.left_shift(np.uint32(1), (tokens & 31).astype(np.uint32)))
    return row


def reach_within(trans: np.ndarray, left: np.ndarray) -> np.ndarray:
    """Bytes to spare per state: ``left[s]`` seeds (``-1``: none), and a state
    gets ``left[t] - 1`` from each successor ``t`` (max over paths), so
    ``result >= 0`` marks the states within ``left`` bytes of a seed.
    One numba pass by levels, highest first (each state settled once; the
    vectorised rounds it replaces, one ``np.maximum.at`` per byte of the
    longest token, cost ~2 ms per compile of a counted schema)."""
    trans = read_only(trans, np.int32)
    out = np.maximum(np.asarray(left, dtype=np.int64), -1)
    if not out.size or out.max() < 0:
        return out
    _reach_within(trans, NO_ACTIONS, out)
    return out


@_jit
def _reach_within(trans, no_acts, best):
    n = trans.shape[0]
    pred_offsets, preds = table_predecessors(trans, no_acts, False)
    top = 0
    for s in range(n):
        if best[s] > top:
            top = best[s]
    # Buckets by level (linked lists; an entry per improvement, at most n + edges).
    cap = n + preds.shape[0] + 1
    head = np.full(top + 1, -1, dtype=np.int64)
    nxt = np.empty(cap, dtype=np.int64)
    node = np.empty(cap, dtype=np.int32)
    used = 0
    for s in range(n):
        if best[s] >= 0:
            node[used] = s
            nxt[used] = head[best[s]]
            head[best[s]] = used
            used += 1
    done = np.zeros(n, dtype=np.bool_)
    for level in range(top, -1, -1):
        e = head[level]
        while e >= 0:
            s = node[e]
            e = nxt[e]
            if done[s] or best[s] != level:
                continue
            done[s] = True
            if level == 0:
                continue
            for k in range(pred_offsets[s], pred_offsets[s + 1]):
                p = preds[k]
                if not done[p] and best[p] < level - 1:
                    best[p] = level - 1
                    node[used] = p
                    nxt[used] = head[level - 1]
                    head[level - 1] = used
                    used += 1


def states_near_increments(trans: np.ndarray, acts: np.ndarray, max_depth: int) -> np.ndarray:
    """Whether a token (at most ``max_depth`` bytes) from each state can take an
    increment: elsewhere the table without increments walks like the full one."""
    seed = np.where((acts == ACT_INC).any(axis=1), max_depth - 1, -1)
    return reach_within(trans, seed) >= 0


def _states_to_walk(trans: np.ndarray, acts: np.ndarray, limit: np.ndarray, max_depth: int) -> np.ndarray:
    """States whose tokens can depend on the counter: those in a region, and
    those from which a token can start a region and pass its bound (a path of
    at most ``max_depth`` bytes with ``hi + 1`` of them inside the region)."""
    n = trans.shape[0]
    seed = np.full(n, -1, dtype=np.int64)
    _set1_room(trans, acts, limit, max_depth, seed)
    need = (limit > 0) | (reach_within(trans, seed) >= 0)
    return np.nonzero(need)[0].astype(np.int64)


@_jit
def _set1_room(trans, acts, limit, max_depth, seed):
    """Per state, the most bytes a token may still read after entering a region
    (``ACT_SET1``) and passing its bound: ``max_depth - (hi + 1)``, max over its entries."""
    for s in range(trans.shape[0]):
        for b in range(256):
            if acts[s, b] == ACT_SET1:
                room = max_depth - (np.int64(limit[trans[s, b]]) + 1)
                if room > seed[s]:
                    seed[s] = room


def counter_tables(dfa) -> tuple[np.ndarray, np.ndarray]:
    """A counted DFA's actions (int8) and counter bounds (int32) as read-only
    C-contiguous views: every guard walk gets one argument type (one numba
    specialisation, compiled by the warm-ups)."""
    acts = np.ascontiguousarray(dfa.actions, dtype=np.int8).view()
    acts.flags.writeable = False
    limit = np.ascontiguousarray(dfa.counter_limit, dtype=np.int32).view()
    limit.flags.writeable = False
    return acts, limit


def build_counter_masks(dfa, trans: np.ndarray, trie, is_stop: np.ndarray, rows: np.ndarray,
                        row_of_state: np.ndarray, work: np.ndarray,
                        max_work: int | None) -> tuple[CounterMasks, np.ndarray, np.ndarray]:
    """Walk the counted states; returns the counter tables and the rows
    (and row map) with the never-allowed tokens removed."""
    from poot_vllm.core.errors import LimitExceeded

    acts, limit = counter_tables(dfa)
    n = trans.shape[0]
    depth = trie.max_depth + 1
    st = np.empty(depth, dtype=np.int32)
    mode = np.empty(depth, dtype=np.int32)
    kk = np.empty(depth, dtype=np.int32)
    vv = np.empty(depth, dtype=np.int32)
    out_tok = np.empty(max(trie.size, 1), dtype=np.int32)
    out_k = np.empty(max(trie.size, 1), dtype=np.int32)
    start_work = int(work[0])

    unique_rows: list[np.ndarray] = [r for r in rows.view(np.uint32)]
    row_index: dict[bytes, int] = {}
    row_of = row_of_state.copy()
    lists: dict[bytes, tuple[int, int]] = {}
    tok_parts: list[np.ndarray] = []
    k_parts: list[np.ndarray] = []
    spans = np.zeros((n, 2), dtype=np.int64)
    free_upto = np.full(n, NO_LIMIT, dtype=np.int32)
    stored = 0
    for s in _states_to_walk(trans, acts, limit, trie.max_depth).tolist():
        m = _guard_walk(trans, acts, limit, s, 0 if limit[s] > 0 else 1, 0, 0, 1, trie.n_nodes,
                        trie.node_byte, trie.node_depth, trie.node_end, trie.tok_offsets, trie.tok_ids, is_stop,
                        out_tok, out_k, 0, st, mode, kk, vv, work, _NO_ROW)
        if max_work is not None and work[0] > max_work:
            raise LimitExceeded(
                "computing the token masks of this constraint", "max_mask_work", max_work, "trie-node visits",
                "passed while computing the counted regions' masks")
        if m == 0:
            continue
        g = state_guards(out_tok[:m], out_k[:m], int(limit[s]))
        if g.never.size:
            row = clear_bits(unique_rows[row_of[s]], g.never)
            key = row.tobytes()
            u = row_index.get(key)
            if u is None:
                u = len(unique_rows)
                unique_rows.append(row)
                row_index[key] = u
            row_of[s] = u
        if g.tok.size == 0:
            continue
        free_upto[s] = g.free_upto
        key = g.tok.tobytes() + g.k.tobytes()
        span = lists.get(key)
        if span is None:
            span = (stored, stored + g.tok.size)
            lists[key] = span
            tok_parts.append(g.tok.copy())
            k_parts.append(g.k.copy())
            stored += g.tok.size
        spans[s] = span
    tok = np.concatenate(tok_parts).astype(np.int32) if tok_parts else np.zeros(0, np.int32)
    ks_all = np.concatenate(k_parts).astype(np.int32) if k_parts else np.zeros(0, np.int32)
    for a in (tok, ks_all):
        a.flags.writeable = False
    neg_k = -ks_all
    neg_k.flags.writeable = False
    masks = CounterMasks(limit, free_upto, spans, tok, ks_all, neg_k, int(work[0]) - start_work,
                         row_bytes=int(rows.shape[1]) * 4)
    new_rows = np.stack(unique_rows).view(np.int32) if len(unique_rows) != rows.shape[0] else rows
    rows_u32 = new_rows.view(np.uint32).view()
    rows_u32.flags.writeable = False  # as the index's rows are (one kernel specialisation)
    shared: dict[tuple[int, int, int], np.ndarray] = {}
    for s in np.nonzero(spans[:, 1] - spans[:, 0] >= FLOOR_MIN_TOKENS)[0].tolist():
        key = (int(row_of[s]), int(spans[s, 0]), int(spans[s, 1]))
        floor = shared.get(key)
        if floor is None:
            floor = np.empty_like(rows_u32[row_of[s]])
            _clear_tokens(rows_u32[row_of[s]], tok, key[1], key[2], floor)
            floor.flags.writeable = False
            shared[key] = floor
        masks.floors[s] = floor
    for a in (free_upto, spans, tok, ks_all):
        a.flags.writeable = False
    return masks, new_rows, row_of.astype(np.int32)
