"""Token masks from poot's model of a grammar (:mod:`.rule_automata`).

Two uses, one trie-walking kernel (:func:`_walk_items`), which carries parse
configurations through the token trie (calls push frames, accepting states
return) and sets the tokens after which some configuration survives, and
whose distance is at most a limit:

* **Grammar masks** (:meth:`RuleMasks.fill`), in place of xgrammar's matcher.
  What a token does from a configuration ``(g, f)`` depends on the stack
  below ``g``'s frame only if the token *returns* from that frame.  So, per
  state ``g`` and once per grammar and vocabulary (:meth:`RuleMasks._precompute`),
  the tokens read from ``g`` without returning are one stored row, and the
  trie nodes where a return from ``g``'s frame happens are grouped by the
  byte then read from the frame below (with the tokens that end right after
  it).  A mask is then the current states' rows, plus -- for the groups whose
  byte some frame below can read at all -- those tokens and a walk of the
  subtrees below them: what xgrammar calls context-dependent tokens, usually
  few.  A single configuration that cannot return is its row alone.
* **Budget masks** (:meth:`RuleMasks.within`): near ``max_tokens``, the tokens
  after which the shortest completion still fits, by a walk from the root
  with a limit (docs/budget.md), intersected by the caller with the grammar
  mask, so a subtree that provably fits is not walked.

Rows are deduplicated (states that allow the same tokens share one); the
precomputation is bounded (``Limits.max_mask_work`` and
:data:`PRECOMPUTE_VISITS_PER_NODE`) and a grammar past it keeps xgrammar's
masks with poot's budget walk.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from poot_vllm.core.grammar.rule_automata import Configurations, RuleAutomata, rule_automata
from poot_vllm.core.jit import jit_kernel as _jit

#: Configurations one byte may explore at most inside the kernels.
_EXPLORE_CAP = 256
_NO_LIMIT = np.int32(2**30 + 2**29)
_NONE = np.zeros(0, dtype=np.int32)
_NONE.flags.writeable = False
_NO_COSTS = np.zeros((2, 0), dtype=np.int32)
_NO_LIST = np.zeros(0, dtype=np.int32)
#: Tokens that return, listed per remembered grammar mask with their distance
#: (for budget masks without a walk): at most this many, else none listed.
RETURN_LIST = 1024
#: The per-state precomputation may visit at most this many trie nodes per
#: node of the vocabulary's trie (all states together); past it the grammar
#: keeps xgrammar's masks.
PRECOMPUTE_VISITS_PER_NODE = 64
#: Stored rows may take at most this many bytes per grammar and vocabulary.
MAX_ROW_BYTES = 64 * 1024 * 1024
#: Budget-table rows (tokens of a state's row within a distance) may take at
#: most this many bytes per grammar and vocabulary; past it budgets walk.
MAX_TABLE_BYTES = 32 * 1024 * 1024
#: ... and only grammars of at most this many states get tables (their build
#: is a pass over each state's tokens, ~0.15 ms a state at 128k; a schema
#: grammar's budget walk without them costs ~7 ms a restricted step).
MAX_TABLE_STATES = 4096
#: Masks remembered per grammar and vocabulary for configurations that read
#: the stack below (oldest dropped first); charged in ``nbytes`` at this bound.
MEMO_BYTES = 8 * 1024 * 1024
#: ... and at most this many masks.
MEMO_MAX_ROWS = 4096
#: The memo is set-associative: a key's hash picks a set of this many slots
#: (4 let a few keys a reply keeps returning to evict each other: random
#: bracket replies re-missed 2 of 3 keys they had stored; a probe reads only
#: the set's tags, so wide sets cost little).
_MEMO_WAYS = 16
#: Frames a memo key may name (deeper reads are filled, not remembered).
_MEMO_KEY = 62


@_jit
def _read_frame(fr_height, trk, cf):
    """Record that a walk read stack frame ``cf`` (its return state and parent;
    ``-1``: the stack's end) unless ``trk[0]`` (the frames of the stack) is -1
    (not tracked): ``trk[2]`` is the deepest read, counted from the top frame
    (0) whose height is ``trk[1]``; the stack's end is at depth ``trk[1]``.
    Frames a walk pushes itself (``cf >= trk[0]``) are not the stack's.  A
    mask that read no deeper than ``d`` is the mask of every stack with the
    same ``d + 1`` top frames (:func:`_memo_lookup`)."""
    if trk[0] < 0:
        return
    if cf < 0:
        d = trk[1]
    elif cf < trk[0]:
        d = trk[1] - fr_height[cf]
    else:
        return
    if d > trk[2]:
        trk[2] = d


@_jit
def _explore(byte_next, call_off, call_start, call_ret, accepting, first, dist,
             g, f, b, fr_ret, fr_parent, fr_cum, fr_height, nf, scr, res, flags, trk):
    """The configurations ``(g, f)`` reaches by reading byte ``b`` into
    ``res[0, :n]``/``res[1, :n]``; returns ``n``, or -1 when a scratch area is
    full.  Calls push frames at ``fr_*[nf[0]]`` (``nf[0]`` is advanced).
    ``flags[0]`` is set to 1 when a state of the base level (``f == -1``)
    accepts on the way: a return below the walk's frames, which the caller
    reads as "the reply may end here" or "the frame below reads ``b``".
    Frames of the stack read on the way are recorded (:func:`_read_frame`)."""
    flags[0] = 0
    cap = scr.shape[1]
    cap_frames = fr_ret.shape[0]
    ne = 1
    scr[0, 0] = g
    scr[1, 0] = f
    n_seen = 0
    n_res = 0
    while ne > 0:
        ne -= 1
        cg = scr[0, ne]
        cf = scr[1, ne]
        dup = False
        for k in range(n_seen):
            if scr[2, k] == cg and scr[3, k] == cf:
                dup = True
                break
        if dup:
            continue
        if n_seen >= cap:
            return -1
        scr[2, n_seen] = cg
        scr[3, n_seen] = cf
        n_seen += 1
        nx = byte_next[cg, b]
        if nx >= 0:
            dup = False
            for k in range(n_res):
                if res[0, k] == nx and res[1, k] == cf:
                    dup = True
                    break
            if not dup:
                if n_res >= cap:
                    return -1
                res[0, n_res] = nx
                res[1, n_res] = cf
                n_res += 1
        for c in range(call_off[cg], call_off[cg + 1]):
            s = call_start[c]
            if not first[s, b] and dist[s] != 0:
                continue
            if nf[0] >= cap_frames:
                return -2
            if ne >= cap:
                return -1
            r = call_ret[c]
            k = nf[0]
            fr_ret[k] = r
            fr_parent[k] = cf
            fr_cum[k] = dist[r] + (fr_cum[cf] if cf >= 0 else 0)
            nf[0] = k + 1
            scr[0, ne] = s
            scr[1, ne] = k
            ne += 1
        if accepting[cg]:
            if cf >= 0:
                if ne >= cap:
                    return -1
                _read_frame(fr_height, trk, cf)
                scr[0, ne] = fr_ret[cf]
                scr[1, ne] = fr_parent[cf]
                ne += 1
            else:
                _read_frame(fr_height, trk, cf)
                flags[0] = 1
    return n_res


#: Frames a walk reads down a chain of finished frames for the bytes a
#: configuration can read next; past it every byte counts as readable.
_VIABLE_CHAIN = 64


@_jit
def _viable(first_bits, dist, fr_ret, fr_parent, fr_height, trk, g, f, below_any):
    """The bytes configuration ``(g, f)`` can read next (4 x 64 bits): ``g``'s
    own, and while the state may end (distance 0) those of the frame below.
    At the base level (``f < 0``) a finished state reads nothing more unless
    ``below_any`` (the precomputation: an unknown frame below may read any byte)."""
    v0 = np.uint64(0)
    v1 = np.uint64(0)
    v2 = np.uint64(0)
    v3 = np.uint64(0)
    all_ones = ~np.uint64(0)
    cg = g
    cf = f
    for _ in range(_VIABLE_CHAIN):
        v0 |= first_bits[cg, 0]
        v1 |= first_bits[cg, 1]
        v2 |= first_bits[cg, 2]
        v3 |= first_bits[cg, 3]
        if dist[cg] != 0:
            return v0, v1, v2, v3
        _read_frame(fr_height, trk, cf)
        if cf < 0:
            if below_any:
                return all_ones, all_ones, all_ones, all_ones
            return v0, v1, v2, v3
        cg = fr_ret[cf]
        cf = fr_parent[cf]
    return all_ones, all_ones, all_ones, all_ones


@_jit
def _note_cost(tok_cost, tok_list, stamp, t, c):
    """Keep token ``t``'s least distance ``c`` in ``tok_cost`` (valid where
    ``tok_cost[1, t] == stamp``), listing it in ``tok_list`` (its count in
    ``tok_list[0]``; the whole length once it overflows) when first seen."""
    if tok_cost[1, t] != stamp:
        tok_cost[1, t] = stamp
        tok_cost[0, t] = c
        n = tok_list.shape[0]
        if n > 0 and tok_list[0] < n:
            k = tok_list[0] + 1
            if k < n:
                tok_list[k] = t
            tok_list[0] = k
    elif c < tok_cost[0, t]:
        tok_cost[0, t] = c


@_jit
def _walk_items(byte_next, call_off, call_start, call_ret, accepting, first, dist,
                node_byte, node_depth, node_end, tok_offsets, tok_ids, max_depth, first_bits,
                items, n_items, fr_ret, fr_parent, fr_cum, fr_height, nf, limit, row, work_cap,
                ws, scr, res, flags, bnd_out, bnd_stamp, stamp, counts, inc1, sub_max, trk, tok_cost, tok_list,
                cost_stamp):
    """Walk the trie from the work items ``items[:, :n_items]`` (trie node,
    state, frame: the configuration after reading the node's bytes) and OR
    into ``row`` (uint32 words) every token at a visited node other than the
    root whose configuration's distance is at most ``limit``.

    With a non-empty ``sub_max`` (the deepest token below each trie node) the
    walk is for a budget, whose result the caller intersects with the grammar
    mask: a subtree where even ``inc1`` more per byte stays within ``limit``
    is not walked, its tokens are all set (grammatical or not) -- only where
    the item is the one configuration that read the prefix (``ws[3]``): with
    several, a token grammatical through another one must still be checked.

    With a non-empty ``bnd_out``, also record each child node whose byte is
    read by returning below the base level (``_explore``'s flag) once
    (``bnd_stamp``/``stamp``), count in ``counts[1]``.  ``counts[0]`` gets the
    trie visits.  With a non-empty ``tok_cost`` (2 x vocabulary), also the
    least distance each token set ends in, and the tokens in ``tok_list``
    (:func:`_note_cost`, stamped ``cost_stamp``); ``counts[2]``/``counts[3]``
    get the largest and least of all (callers reset them).  Returns 0, -1 past ``work_cap``
    (or the exploration cap), -2 when a scratch area is full (grow it and
    retry)."""
    record = bnd_out.shape[0] > 0
    cap_ws = ws.shape[1]
    sp = 0
    for k in range(n_items):
        ws[0, sp] = items[0, k]
        ws[1, sp] = items[1, k]
        ws[2, sp] = items[2, k]
        ws[3, sp] = 1 if n_items == 1 else 0
        sp += 1
    work = 0
    n_bnd = 0
    while sp > 0:
        sp -= 1
        i = ws[0, sp]
        g = ws[1, sp]
        f = ws[2, sp]
        alone = ws[3, sp] == 1
        work += 1
        if work > work_cap:
            counts[0] = work
            return -1
        cost = dist[g]
        if f >= 0:
            cost += fr_cum[f]
        if i > 0 and cost <= limit:
            if tok_offsets[i] < tok_offsets[i + 1]:
                if cost > counts[2]:
                    counts[2] = cost  # the costliest configuration a token ends in (callers reset it)
                if cost < counts[3]:
                    counts[3] = cost  # ... and the cheapest
            for k in range(tok_offsets[i], tok_offsets[i + 1]):
                t = tok_ids[k]
                row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
                if tok_cost.shape[1] > 0:
                    _note_cost(tok_cost, tok_list, cost_stamp, t, cost)
        if alone and sub_max.shape[0] > 0 and cost + inc1 * (sub_max[i] - node_depth[i]) <= limit:
            # No token below can raise the distance past the limit from here, and this is the
            # only configuration that read the prefix (so every grammatical token below is one of
            # its own: setting them all is exact once intersected with the grammar mask).
            for k in range(tok_offsets[i + 1], tok_offsets[node_end[i]]):
                t = tok_ids[k]
                row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
            continue
        # A byte lowers the distance by at most one: nothing below can get in.
        if cost - (max_depth - node_depth[i]) > limit:
            continue
        j = i + 1
        end = node_end[i]
        if j == end:
            continue  # a leaf: nothing below to read (nor frames to read for it)
        # Only the children whose byte the configuration can read at all are explored.
        v0, v1, v2, v3 = _viable(first_bits, dist, fr_ret, fr_parent, fr_height, trk, g, f, record)
        while j < end:
            b = node_byte[j]
            vw = v0 if b < 64 else (v1 if b < 128 else (v2 if b < 192 else v3))
            if (vw >> np.uint64(b & 63)) & np.uint64(1) == 0:
                j = node_end[j]
                continue
            n_res = _explore(byte_next, call_off, call_start, call_ret, accepting, first, dist,
                             g, f, b, fr_ret, fr_parent, fr_cum, fr_height, nf, scr, res, flags, trk)
            if n_res < 0:
                counts[0] = work
                return n_res
            if record and flags[0] == 1 and bnd_stamp[j] != stamp:
                bnd_stamp[j] = stamp
                if n_bnd >= bnd_out.shape[0]:
                    counts[0] = work
                    return -2
                bnd_out[n_bnd] = j
                n_bnd += 1
            if sp + n_res > cap_ws:
                counts[0] = work
                return -2
            for k in range(n_res):
                ws[0, sp] = j
                ws[1, sp] = res[0, k]
                ws[2, sp] = res[1, k]
                ws[3, sp] = 1 if alone and n_res == 1 else 0
                sp += 1
            j = node_end[j]
    counts[0] = work
    counts[1] = n_bnd
    return 0


@_jit
def _fill(byte_next, call_off, call_start, call_ret, accepting, first, dist,
          node_byte, node_depth, node_end, tok_offsets, tok_ids, max_depth, first_bits,
          cfg_g, cfg_f, fr_ret, fr_parent, fr_cum, fr_height, nf, state_row, rows, grp_off, grp_byte, grp_tok_start,
          grp_tok, grp_start, bnd_node, row_fits, cost_off, cost_thr, cost_row, cost_rows, limit,
          row, work_cap, items, ws, scr, res, flags, counts, trk, tok_cost, tok_list, cost_stamp):
    """The grammar mask of the configurations ``(cfg_g[k], cfg_f[k])`` into
    ``row`` (uint32 words, zeroed here), restricted to the tokens after which
    some configuration's distance is at most ``limit``: each state's stored
    row (all of it when ``limit`` covers the best end of every token in it,
    ``row_fits``, else the stored row of its tokens of distance at most the largest
    threshold ``cost_thr[cost_off[g]:cost_off[g + 1]]`` that fits), plus the
    tokens that return from its frame, walked from the frame below.  Returns
    0, -1 past ``work_cap``, -2 when a scratch area is full.

    ``first_bits[g]`` (4 x 64 bits) is ``first[g]`` packed: the bytes the
    frames below can read at all are collected once per configuration (down
    the chain of frames that may end without reading), so only those bytes
    are explored -- a deep stack of finished frames (``-(-(-(1``) is walked
    once, not once per byte.

    With a non-empty ``tok_cost``, the tokens that return are listed in
    ``tok_list`` with their least distance (:func:`_note_cost`): a budget
    mask is then the state's table row plus those of them that fit."""
    n_items = 0
    counts[2] = 0
    counts[3] = 2**40
    viable = np.zeros(4, dtype=np.uint64)
    for k in range(cfg_g.shape[0]):
        g = cfg_g[k]
        f = cfg_f[k]
        room = limit - (fr_cum[f] if f >= 0 else 0)  # for the distance above the stack
        stored = rows[state_row[g]]
        have = True
        if room < row_fits[g]:
            have = False
            for e in range(cost_off[g], cost_off[g + 1]):
                if cost_thr[e] > room:
                    break
                stored = cost_rows[cost_row[e]]
                have = True
        if k == 0:
            if have:
                row[:] = stored
            else:
                row[:] = 0
        elif have:
            for w in range(row.shape[0]):
                row[w] |= stored[w]
        if f < 0:
            continue  # a return from the root's level ends the reply: no bytes follow
        below_g = fr_ret[f]
        below_f = fr_parent[f]
        viable[:] = 0
        cg = below_g
        cf = below_f
        _read_frame(fr_height, trk, f)
        while True:
            for w in range(4):
                viable[w] |= first_bits[cg, w]
            if dist[cg] != 0:
                break
            _read_frame(fr_height, trk, cf)
            if cf < 0:
                break
            cg = fr_ret[cf]
            cf = fr_parent[cf]
        # g's return nodes, grouped by the byte read after the return
        # (contiguous: a group the frames below cannot read costs one test).
        for q in range(grp_off[g], grp_off[g + 1]):
            b = grp_byte[q]
            if (viable[b >> 6] >> np.uint64(b & 63)) & np.uint64(1) == 0:
                continue  # no frame below can read b
            n_res = _explore(byte_next, call_off, call_start, call_ret, accepting, first, dist,
                             below_g, below_f, b, fr_ret, fr_parent, fr_cum, fr_height, nf, scr, res, flags, trk)
            if n_res < 0:
                return n_res
            if n_res == 0:
                continue
            # Tokens that end right after the byte: stored with the group (no trie reads).
            if grp_tok_start[q] < grp_tok_start[q + 1]:
                least = 2**40
                for r in range(n_res):
                    c = dist[res[0, r]] + (fr_cum[res[1, r]] if res[1, r] >= 0 else 0)
                    if c > counts[2]:
                        counts[2] = c
                    if c < least:
                        least = c
                if least <= limit:
                    for p in range(grp_tok_start[q], grp_tok_start[q + 1]):
                        t = grp_tok[p]
                        row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
                        if tok_cost.shape[1] > 0:
                            _note_cost(tok_cost, tok_list, cost_stamp, t, least)
            # Nodes with longer tokens below: walked from the configurations after b.
            lo = grp_start[q]
            hi = grp_start[q + 1]
            if n_items + n_res * (hi - lo) > items.shape[1]:
                return -2
            for p in range(lo, hi):
                j = bnd_node[p]
                for r in range(n_res):
                    items[0, n_items] = j
                    items[1, n_items] = res[0, r]
                    items[2, n_items] = res[1, r]
                    n_items += 1
    no_bnd = np.zeros(0, dtype=np.int32)
    return _walk_items(byte_next, call_off, call_start, call_ret, accepting, first, dist,
                       node_byte, node_depth, node_end, tok_offsets, tok_ids, max_depth, first_bits,
                       items, n_items, fr_ret, fr_parent, fr_cum, fr_height, nf, limit, row,
                       work_cap, ws, scr, res, flags, no_bnd, no_bnd, 0, counts, 0, no_bnd, trk,
                       tok_cost, tok_list, cost_stamp)


#: "No budget limit in this key" (plain grammar masks; see :func:`_memo_lookup`).
_NO_LIMIT_KEY = -(2**31)
_FNV_START = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)


@_jit
def _fnv(h, x):
    """One FNV-1a step over a key entry."""
    return (h ^ np.uint64(x & 0xFFFFFFFF)) * _FNV_PRIME


@_jit
def _mix(h, length):
    """A key's hash after a finalising mix (FNV alone leaves keys that differ
    in one small state number in one set), its length mixed in."""
    h = _fnv(h, length)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    return h


@_jit
def _memo_set(h, slots):
    """The first slot of the set a mixed hash (:func:`_mix`) picks."""
    return int(h % np.uint64(slots // _MEMO_WAYS)) * _MEMO_WAYS


@_jit
def _tag(h):
    """A slot's tag for a mixed hash: never 0 (an empty slot's)."""
    return np.int64(h >> np.uint64(1)) | np.int64(1)


@_jit
def _stack_key(g, top, fr_ret, fr_parent, passes, key, key_depth, key_frame):
    """The longest memo key of configuration ``(g, top)`` into ``key``: ``g``,
    then the return state of each frame (its depth from the top in
    ``key_depth``, its index in ``key_frame``) but those that can only return
    again (``passes``: accepting, reading no byte -- however many of them a
    stack holds, a walk passes through them), then -1 where the stack ends
    within the key; one slot is left for a budget limit.  Returns the length
    (also in ``key[0]``)."""
    key[1] = g
    n = 2
    cf = top
    depth = 0
    while n < key.shape[0] - 1 and cf >= 0:
        r = fr_ret[cf]
        if not passes[r]:
            key[n] = r
            key_depth[n] = depth
            key_frame[n] = cf
            n += 1
        cf = fr_parent[cf]
        depth += 1
    if cf < 0 and n < key.shape[0] - 1:
        key[n] = -1
        key_depth[n] = depth
        key_frame[n] = -1
        n += 1
    key[0] = n
    return n


@_jit
def _below(key, key_frame, n, top, fr_cum, fr_ret, dist):
    """The distance of the frames below a key prefix ``key[1:n]`` (what a budget
    walk adds to every cost it sees there): the whole stack's for ``n == 2``,
    0 where the prefix ends the stack, else the cumulative distance of the
    frame under the prefix's last one."""
    if n == 2:
        return fr_cum[top] if top >= 0 else 0
    if key[n - 1] == -1:
        return 0
    f = key_frame[n - 1]
    return fr_cum[f] - dist[fr_ret[f]]


@_jit
def _find(key, n, limit, h, memo_keys, memo_tags, slots):
    """The slot holding key ``key[1:n]`` (then ``limit`` unless it is
    :data:`_NO_LIMIT_KEY`), ``h`` the FNV hash of ``key[1:n]``; or -1.
    Only slots whose tag matches (``memo_tags``: one small array, where the
    keys' rows are scattered) have their key compared."""
    length = n
    if limit != _NO_LIMIT_KEY:
        h = _fnv(h, limit)
        length = n + 1
    h = _mix(h, length)
    base = _memo_set(h, slots)
    tag = _tag(h)
    for s in range(base, base + _MEMO_WAYS):
        if memo_tags[s] != tag or memo_keys[s, 0] != length:
            continue
        same = limit == _NO_LIMIT_KEY or memo_keys[s, n] == limit
        for k in range(1, n):
            if not same:
                break
            same = memo_keys[s, k] == key[k]
        if same:
            return s
    return -1


# A memo is three arrays (:meth:`RuleMasks._memo_tables`), so that a lookup --
# on the step's path, with cold caches between steps -- pays numba's dispatch
# for six array arguments, not fourteen (~0.15 us each, several times that
# cold):
#
# * ``keys`` int32 (slots + 3, _MEMO_KEY + 2): each slot's key (its length in
#   column 0), then the lookup's own key, the depth of each of its entries
#   and the frame of each (:func:`_stack_key`);
# * ``rows`` uint32 (slots, words): the masks;
# * ``meta`` int64 (4, slots + 1): last-use stamps (then the clock), cost
#   bounds, tags (0: empty), and in ``meta[3, 0]`` the lookup's found bound.
#
# The reply's frames are its arena (``Configurations.arrays``: return states,
# parents, cumulative distances, heights) and the grammar's per-state tables
# ``stt`` (distances, then 1 where a state only returns).

@_jit
def _memo_lookup(g, top, fr, stt, limit, keys, rows, meta, row):
    """The remembered mask of the configuration ``(g, top)`` into ``row``: its
    slot, or -1.

    A mask whose walk read the stack only down to depth ``d``
    (:func:`_read_frame`) is remembered under ``g`` and the return states of
    the ``d + 1`` top frames (:func:`_stack_key`): every stack that starts the
    same way has the same mask, across replies.  So a lookup tries each prefix
    of the stack, shortest first, up to :data:`_MEMO_KEY` frames; the longest
    key it could match is left in the memo for :func:`_memo_store`.
    A budget mask (``limit`` given, else :data:`_NO_LIMIT_KEY`) sees each
    cost as its part above the prefix plus the distance of the frames below
    (:func:`_below`), so its key ends with ``limit`` minus that distance.
    The memo is set-associative (:data:`_MEMO_WAYS` slots per set, each
    with a tag); a slot's last-use stamp is refreshed rarely, as replies
    remember (slot, stamp) pairs.  On a hit, ``meta[3, 0]`` is the remembered
    cost bound (:func:`_memo_store`) plus the distance below the prefix."""
    slots = keys.shape[0] - 3
    key, key_depth, key_frame = keys[slots], keys[slots + 1], keys[slots + 2]
    fr_ret, fr_parent, fr_cum = fr[0], fr[1], fr[2]
    dist, passes = stt[0], stt[1]
    used, memo_cost, tags = meta[0], meta[1], meta[2]
    n = _stack_key(g, top, fr_ret, fr_parent, passes, key, key_depth, key_frame)
    used[slots] += 1
    clock = used[slots]
    h = _FNV_START
    for length in range(2, n + 1):
        h = _fnv(h, key[length - 1])
        extra = _NO_LIMIT_KEY
        if limit != _NO_LIMIT_KEY:
            extra = limit - _below(key, key_frame, length, top, fr_cum, fr_ret, dist)
        s = _find(key, length, extra, h, keys, tags, slots)
        if s >= 0:
            row[:] = rows[s]
            meta[3, 0] = memo_cost[s] + _below(key, key_frame, length, top, fr_cum, fr_ret, dist)
            if used[s] < clock - slots:
                used[s] = clock
            return s
    return -1


@_jit
def _memo_store(top, fr, stt, limit, keys, rows, meta, cost, row, depth):
    """Remember ``row``, the mask of the configuration whose stack
    :func:`_memo_lookup` last keyed (with the same ``limit``), read down to
    ``depth`` (-1: not at all) by its walk, and ``cost`` (a bound on the
    costs the walk saw, less the distance below the key: the same for every
    stack the key stands for); replaces the set's least recently used slot.
    Returns the slot, or -1 when the key would be longer than a key holds."""
    slots = keys.shape[0] - 3
    key, key_depth, key_frame = keys[slots], keys[slots + 1], keys[slots + 2]
    used, memo_cost, tags = meta[0], meta[1], meta[2]
    n = 2
    while n < key[0] and key_depth[n] <= depth:
        n += 1
    if n == key[0] and key[n - 1] != -1 and depth > key_depth[n - 1]:
        return -1  # read deeper than the key reaches (it is full)
    h = _FNV_START
    for k in range(1, n):
        h = _fnv(h, key[k])
    length = n
    extra = _NO_LIMIT_KEY
    below = _below(key, key_frame, n, top, fr[2], fr[0], stt[0])
    if limit != _NO_LIMIT_KEY:
        extra = limit - below
        h = _fnv(h, extra)
        length = n + 1
    h = _mix(h, length)
    base = _memo_set(h, slots)
    oldest = base
    for s in range(base, base + _MEMO_WAYS):
        if used[s] < used[oldest]:
            oldest = s
    keys[oldest, 0] = length
    tags[oldest] = _tag(h)
    keys[oldest, 1:n] = key[1:n]
    if length > n:
        keys[oldest, n] = extra
    rows[oldest] = row
    memo_cost[oldest] = cost - below
    used[slots] += 1
    used[oldest] = used[slots]
    return oldest


@_jit
def _memo_store_listed(top, fr, stt, keys, rows, meta, cost, row, depth, ret, ret_n, tok_list, tok_cost):
    """:func:`_memo_store` of a grammar mask (no limit), and with its slot the
    tokens its walk saw return (``tok_list``, their distances in ``tok_cost[0]``,
    :func:`_note_cost`) less the distance below the key: the same for every
    stack the key stands for (:meth:`RuleMasks._listed`; ``ret[0]`` tokens,
    ``ret[1]`` distances).  Marked unlisted (``ret_n`` -1) when there are
    more than a slot holds or none were recorded (an empty ``tok_list``)."""
    slot = _memo_store(top, fr, stt, _NO_LIMIT_KEY, keys, rows, meta, cost, row, depth)
    if slot < 0:
        return slot
    if tok_list.shape[0] == 0 or tok_list[0] > ret.shape[2] or slot >= ret.shape[1]:
        ret_n[slot] = -1
        return slot
    below_key = cost - meta[1, slot]
    n = tok_list[0]
    for k in range(n):
        t = tok_list[k + 1]
        ret[0, slot, k] = t
        ret[1, slot, k] = tok_cost[0, t] - below_key
    ret_n[slot] = n
    return slot


@_jit
def _fill_packed(mode, limit, g0, f0, cfg, n_cfg, n_frames, fr,
                 stt, mdl, mdl_off, byte_next, accepting, first, first_bits, node_byte, node_depth, node_end,
                 tok_offsets, tok_ids, max_depth, rows, cost_rows, work_cap,
                 keys, memo_rows, meta, ret, ret_n, row, items, ws, scr, res, small, wide, tok_cost, tok_list):
    """:func:`_fill` of the configurations ``cfg[:, :n_cfg]`` (states, frames;
    of a single one ``(g0, f0)``, written here), then, for a single
    configuration whose lookup missed, the store into its memo (``mode`` 1:
    a grammar mask, :func:`_memo_store_listed`; 2: a budget mask under
    ``limit``, :func:`_memo_store`; 0: none) -- one call on a step's path,
    its arguments packed (the second line: :attr:`RuleMasks._fill_tables`,
    the grammar's int32 tables one array ``mdl``, ``mdl_off`` where each
    starts, in :meth:`RuleMasks._pack`'s order), and the per-walk set-up
    done here, not in Python: the first free frame (``n_frames``: the
    reply's frames in use), the stack reads (:func:`_read_frame`) and the
    returning tokens' stamp (:func:`_note_cost`, with a non-empty
    ``tok_cost``).  ``small`` holds the flags and the stack reads (``trk``),
    ``wide`` the counts, the next free frame, the stored slot and the stamp.
    Returns :func:`_fill`'s code."""
    o = mdl_off
    call_off, call_start, call_ret = mdl[o[0]:o[1]], mdl[o[1]:o[2]], mdl[o[2]:o[3]]
    state_row, grp_off, grp_byte = mdl[o[3]:o[4]], mdl[o[4]:o[5]], mdl[o[5]:o[6]]
    grp_tok_start, grp_tok, grp_start = mdl[o[6]:o[7]], mdl[o[7]:o[8]], mdl[o[8]:o[9]]
    bnd_node, row_fits, cost_off = mdl[o[9]:o[10]], mdl[o[10]:o[11]], mdl[o[11]:o[12]]
    cost_thr, cost_row = mdl[o[12]:o[13]], mdl[o[13]:o[14]]
    flags, trk = small[0:1], small[1:4]
    counts, nf = wide[0:4], wide[4:5]
    wide[5] = -1
    if n_cfg == 1:
        cfg[0, 0] = g0
        cfg[1, 0] = f0
        trk[0] = n_frames
        trk[1] = fr[3, f0] if f0 >= 0 else 0
    else:
        trk[0] = -1
        trk[1] = 0
    trk[2] = -1
    nf[0] = n_frames
    stamp = np.int32(0)
    if tok_cost.shape[1] > 0:
        wide[6] += 1
        if wide[6] >= 2**31 - 1:
            tok_cost[1, :] = 0
            wide[6] = 1
        tok_list[0] = 0
        stamp = np.int32(wide[6])
    rc = _fill(byte_next, call_off, call_start, call_ret, accepting, first, stt[0],
               node_byte, node_depth, node_end, tok_offsets, tok_ids, max_depth, first_bits,
               cfg[0, :n_cfg], cfg[1, :n_cfg], fr[0], fr[1], fr[2], fr[3], nf, state_row, rows, grp_off, grp_byte,
               grp_tok_start, grp_tok, grp_start, bnd_node, row_fits, cost_off, cost_thr, cost_row, cost_rows,
               limit, row, work_cap, items, ws, scr, res, flags, counts, trk, tok_cost, tok_list, stamp)
    if rc != 0:
        return rc
    if mode == 1:
        wide[5] = _memo_store_listed(cfg[1, 0], fr, stt, keys, memo_rows, meta, counts[2], row, trk[2], ret, ret_n,
                                     tok_list, tok_cost)
    elif mode == 2:
        wide[5] = _memo_store(cfg[1, 0], fr, stt, limit, keys, memo_rows, meta, 0, row, trk[2])
    return rc


@_jit
def _set_tokens(words, toks):
    """Set the bits of ``toks``."""
    for t in toks:
        words[t >> 5] |= np.uint32(1) << np.uint32(t & 31)


@_jit
def _add_fitting(words, toks, costs, n, room):
    """Set the listed tokens ``toks[:n]`` whose distance ``costs[k]`` is at most ``room``."""
    for k in range(n):
        if costs[k] <= room:
            t = toks[k]
            words[t >> 5] |= np.uint32(1) << np.uint32(t & 31)


@_jit
def _deepest_below(node_depth, node_end):
    """Per trie node, the depth of the deepest node in its subtree (preorder arrays)."""
    n = node_depth.shape[0]
    out = node_depth.copy()
    for i in range(n - 1, -1, -1):
        j = i + 1
        while j < node_end[i]:
            if out[j] > out[i]:
                out[i] = out[j]
            j = node_end[j]
    return out


@_jit
def _readable_depth(node_byte, node_depth, readable):
    """The most bytes of one token any configuration can read: the longest
    token prefix made only of bytes some state of the grammar reads
    (``readable[b]``; preorder trie arrays)."""
    ok = np.zeros(node_depth.max() + 2, dtype=np.bool_)
    ok[0] = True
    best = 0
    for j in range(1, node_byte.shape[0]):
        d = node_depth[j]
        good = ok[d - 1] and readable[node_byte[j]]
        ok[d] = good
        if good and d > best:
            best = d
    return best


class _Scratch(threading.local):
    """Per-thread work areas (vLLM fills masks from a thread pool)."""

    def walk(self, n_nodes: int, size: int, cap: int) -> tuple:
        """What :func:`_fill_packed` works in, one tuple per thread: ``items,
        ws, scr, res, small, wide, cfg`` (:meth:`get`), then token distances
        (2 x ``size``, stamped in ``wide[6]``: :func:`_note_cost`) and a token
        list of ``cap``.  Rebuilt after :meth:`get` grows."""
        have = getattr(self, "walk_areas", None)
        if have is None:
            ws, items, scr, res, _, _, _, cfg, _, small, wide = self.get(n_nodes)
            wide[6] = 0
            have = self.walk_areas = (items, ws, scr, res, small, wide, cfg, np.zeros((2, size), dtype=np.int32),
                                      np.zeros(cap + 1, dtype=np.int32))
        return have

    def get(self, n_nodes: int, grow: int = 1) -> tuple[np.ndarray, ...]:
        have = getattr(self, "areas", None)
        cap = (2 * n_nodes + 1024) * grow
        if have is None or have[0].shape[1] < cap:
            self.walk_areas = None  # (views of the old areas)
            small = np.full(4, -1, dtype=np.int32)  # flags, then the stack reads (_read_frame)
            wide = np.zeros(8, dtype=np.int64)      # counts, the next free frame, a stored slot, a stamp
            self.areas = (np.empty((4, cap), dtype=np.int32),            # ws
                          np.empty((3, cap), dtype=np.int32),            # items
                          np.empty((4, _EXPLORE_CAP), dtype=np.int32),   # scr
                          np.empty((2, _EXPLORE_CAP), dtype=np.int32),   # res
                          small[0:1],                                    # flags
                          wide[0:4],                                     # counts
                          wide[4:5],                                     # nf
                          np.empty((2, 16), dtype=np.int32),             # configurations
                          small[1:4],                                    # stack reads
                          small, wide)                                   # (packed: _fill_packed)
        return self.areas


class RuleMasks:
    """Masks of one grammar model over one vocabulary: shared by every reply, read-only.

    ``rows is None`` when the per-state precomputation passed its bounds:
    then only :meth:`within` (budgets) is available and xgrammar's matcher
    gives the grammar mask.
    """

    def __init__(self, model: RuleAutomata, vocab: Any, trie: Any = None, precompute: bool = True,
                 max_work: "int | None" = None) -> None:
        from poot_vllm.core.token_trie import TokenTrie

        self.model = model
        self.trie = trie if trie is not None else TokenTrie.build(vocab)
        self.token_bytes = vocab.token_bytes
        self.size = int(vocab.size)
        self.words = (self.size + 31) // 32
        #: how far from the end (in tokens) a budget can change a mask: one byte
        #: raises a distance by at most ``inc1``, and a token reads at most the
        #: longest run of bytes the grammar reads at all (``(((((`` for
        #: brackets, not the vocabulary's 128-byte tokens)
        read = _readable_depth(self.trie.node_byte, self.trie.node_depth, model.first.any(axis=0))
        self.reach = int(model.inc1) * max(1, int(read))
        self.work_cap = 8 * self.trie.n_nodes + 65_536
        self._scratch = _Scratch()
        self._first_bits = np.packbits(model.first, axis=1, bitorder="little").view(np.uint64).copy()
        self._kernel_args = self._args()
        self.sub_max = _deepest_below(self.trie.node_depth, self.trie.node_end)
        #: free frame slots a walk may push into (grown when a walk runs out)
        self.frame_spare = 4096
        # One-byte tokens, for the budget fallback when its walk passes the cap.
        singles: dict[int, list[int]] = {}
        for t, data in enumerate(vocab.token_bytes):
            if data is not None and len(data) == 1:
                singles.setdefault(data[0], []).append(t)
        self.singles = singles
        self.state_row = self.rows = self.grp_off = self.grp_byte = self.grp_start = self.bnd_node = None
        #: budget tables (:meth:`_cost_table`); None past :data:`MAX_TABLE_BYTES`
        self.cost_off = self.cost_thr = self.cost_row = self.row_cost = self.row_fits = None
        self.returns: "list[bool] | None" = None
        self.grp_tok_start = self.grp_tok = None
        # Masks of configurations that read the stack below, by what they can
        # read of it (see _fill_memo): shared by every reply of the grammar.
        self._memo: "tuple | None" = None
        #: states that can only return (accepting, no byte to read): left out of memo keys
        self._passes = model.accepting & ~model.first.any(axis=1)
        #: per state, its distance and whether it only returns (the memo kernels' ``stt``)
        self._stt = np.stack([model.dist, self._passes]).astype(np.int32)
        self._stt.flags.writeable = False
        sets = max(1, min(MEMO_MAX_ROWS, MEMO_BYTES // (4 * self.words)) // _MEMO_WAYS)
        self._memo_rows = _MEMO_WAYS * (1 << (sets.bit_length() - 1))  # a power of two of sets
        self._memo_lock = threading.Lock()
        #: returning tokens listed per grammar memo slot (see :func:`_memo_store_listed`)
        self._ret_cap = max(64, min(RETURN_LIST, 2 * self.words))
        self._ret: "tuple | None" = None
        if precompute:
            self._precompute(max_work)
            # The memos now, on the compile's thread: allocating them (a reused heap
            # block is zeroed: ~1 ms at 128k tokens) was the first miss's step.
            self._memo_tables()

    @property
    def nbytes(self) -> int:
        # (state_row, the groups and the budget tables' indices are views of _mdl)
        extra = 0 if self.rows is None else self.rows.nbytes + self._mdl.nbytes + self._cost_args[4].nbytes
        memo = 2 * self._memo_rows * 4 * self.words  # both memos, charged at their bound
        memo += self._memo_rows * (8 * self._ret_cap + 4)  # the returning tokens listed
        return self.model.nbytes + extra + memo + 64 * 256

    @property
    def has_masks(self) -> bool:
        return self.rows is not None

    def _args(self) -> tuple:
        m, t = self.model, self.trie
        return (m.byte_next, m.call_off, m.call_start, m.call_ret, m.accepting, m.first, m.dist,
                t.node_byte, t.node_depth, t.node_end, t.tok_offsets, t.tok_ids, np.int32(t.max_depth),
                self._first_bits)

    def _precompute(self, max_work: "int | None") -> None:
        """Per state: the tokens it reads without returning (a row, deduplicated),
        and the trie nodes whose byte is read after a return (sorted by byte).
        At most ``max_work`` trie visits (``Limits.max_mask_work``, as a DFA's
        masks) and :data:`PRECOMPUTE_VISITS_PER_NODE` per trie node."""
        trie = self.trie
        n_states = self.model.n_states
        budget = PRECOMPUTE_VISITS_PER_NODE * trie.n_nodes
        if max_work is not None:
            budget = min(budget, int(max_work))
        ws, items, scr, res, flags, counts, nf, _, trk, _, _ = self._scratch.get(trie.n_nodes)
        cap = 4 * trie.n_nodes + 4096
        fr = [np.empty(cap, dtype=np.int32) for _ in range(4)]
        trk[0] = -1  # (the stack is not tracked)
        bnd_out = np.empty(trie.n_nodes, dtype=np.int32)
        bnd_stamp = np.zeros(trie.n_nodes, dtype=np.int32)
        row = np.zeros(self.words, dtype=np.uint32)
        unique: dict[bytes, int] = {}
        rows: list[np.ndarray] = []
        state_row = np.empty(n_states, dtype=np.int32)
        row_cost: list[int] = []
        bnd_lists: list[np.ndarray] = []
        # Budget tables: per state, the distinct distances its row's tokens end
        # in (each token's least), and for each but the largest the stored row
        # of the tokens within it.
        tables = n_states <= MAX_TABLE_STATES
        tok_cost = np.zeros((2, self.size if tables else 0), dtype=np.int32)
        tok_list = np.zeros(self.size + 1 if tables else 0, dtype=np.int32)  # the row's tokens (_note_cost)
        cost_off = [0]
        row_fits: list[int] = []
        cost_thr: list[int] = []
        cost_row: list[int] = []
        table_rows: list[np.ndarray] = []
        table_unique: dict[bytes, int] = {}
        args = self._kernel_args
        for g in range(n_states):
            row[:] = 0
            items[0, 0], items[1, 0], items[2, 0] = 0, g, -1
            nf[0] = 0
            counts[2] = 0
            counts[3] = 2**40
            if tables:
                tok_list[0] = 0
            rc = _walk_items(*args, items, 1, fr[0], fr[1], fr[2], fr[3], nf, _NO_LIMIT, row, np.int64(budget),
                             ws, scr, res, flags, bnd_out, bnd_stamp, np.int32(g + 1), counts, np.int32(0), _NONE,
                             trk, tok_cost if tables else _NO_COSTS, tok_list if tables else _NO_LIST,
                             np.int32(g + 1))
            budget -= int(counts[0])
            if rc < 0 or budget < 0:
                return  # too much to store: xgrammar keeps the grammar mask
            k = self._intern(row, unique, rows, MAX_ROW_BYTES)
            if k < 0:
                return
            state_row[g] = k
            row_cost.append(int(counts[2]))
            fits = int(counts[2])
            if tables and counts[3] < counts[2]:
                toks = tok_list[1:int(tok_list[0]) + 1]
                fits = self._cost_table(toks, tok_cost[0, toks], table_unique, table_rows, cost_thr, cost_row)
                tables = fits >= 0
            row_fits.append(fits)
            cost_off.append(len(cost_thr))
            nodes = bnd_out[:counts[1]].copy()
            bnd_lists.append(nodes[np.argsort(trie.node_byte[nodes], kind="stable")])
        # Groups: per state, one entry per distinct byte read after a return:
        # the tokens that end right after it (grp_tok[grp_tok_start[q]:...]),
        # and the nodes with longer tokens below (bnd_node[grp_start[q]:...]).
        grp_off = [0]
        grp_byte: list[int] = []
        grp_tok_start = [0]
        grp_tok: list[int] = []
        grp_start = [0]
        deep: list[int] = []
        for nodes in bnd_lists:
            by_byte: dict[int, list[int]] = {}
            for j in nodes.tolist():
                by_byte.setdefault(int(trie.node_byte[j]), []).append(j)
            for b, js in sorted(by_byte.items()):
                grp_byte.append(b)
                for j in js:
                    grp_tok.extend(trie.tok_ids[trie.tok_offsets[j]:trie.tok_offsets[j + 1]].tolist())
                    if trie.node_end[j] > j + 1:
                        deep.append(j)
                grp_tok_start.append(len(grp_tok))
                grp_start.append(len(deep))
            grp_off.append(len(grp_byte))
        self.grp_off = np.asarray(grp_off, dtype=np.int32)
        self.grp_byte = np.asarray(grp_byte, dtype=np.int32)
        self.grp_tok_start = np.asarray(grp_tok_start, dtype=np.int32)
        self.grp_tok = np.asarray(grp_tok, dtype=np.int32)
        self.grp_start = np.asarray(grp_start, dtype=np.int32)
        self.bnd_node = np.asarray(deep, dtype=np.int32)
        self.rows = np.stack(rows)
        self.state_row = state_row
        self.row_cost = np.asarray(row_cost, dtype=np.int32)
        if tables:
            self.cost_off = np.asarray(cost_off, dtype=np.int32)
            self.cost_thr = np.asarray(cost_thr, dtype=np.int32)
            self.cost_row = np.asarray(cost_row, dtype=np.int32)
            self.table_rows = np.stack(table_rows) if table_rows else np.zeros((1, self.words), dtype=np.uint32)
        else:
            self.table_rows = np.zeros((1, self.words), dtype=np.uint32)  # (dropped: past a bound)
        self.row_fits = np.asarray(row_fits, dtype=np.int32)
        self._cost_args = (self.row_fits, np.zeros(n_states + 1, dtype=np.int32) if not tables else self.cost_off,
                           _NONE if not tables else self.cost_thr, _NONE if not tables else self.cost_row,
                           self.table_rows)
        #: states whose frame a token can return from (the others' mask is their row alone)
        self.returns = (self.grp_off[1:] > self.grp_off[:-1]).tolist()
        self._state_rows = [self.rows[k] for k in state_row.tolist()]
        #: per state, the costliest configuration a token of its row ends in
        #: (frames pushed by the token included, the stack below not)
        self._row_cost = row_cost
        self._pack()
        for a in (self.grp_off, self.grp_byte, self.grp_tok_start, self.grp_tok, self.grp_start, self.bnd_node,
                  self.rows, self.state_row, *self._cost_args, self._mdl):
            a.flags.writeable = False

    def _pack(self) -> None:
        """The grammar's int32 tables as one array (``_mdl``, each table's start
        in ``_mdl_off``), the tables themselves then views of it: numba's
        dispatch of :func:`_fill_packed` reads one array, not fourteen."""
        m = self.model
        row_fits, cost_off, cost_thr, cost_row, _ = self._cost_args
        tables = (m.call_off, m.call_start, m.call_ret, self.state_row, self.grp_off, self.grp_byte,
                  self.grp_tok_start, self.grp_tok, self.grp_start, self.bnd_node, row_fits, cost_off, cost_thr,
                  cost_row)
        off = np.zeros(len(tables) + 1, dtype=np.int64)
        off[1:] = np.cumsum([a.shape[0] for a in tables])
        mdl = np.concatenate([a.astype(np.int32, copy=False) for a in tables])
        views = [mdl[off[k]:off[k + 1]] for k in range(len(tables))]
        (_, _, _, self.state_row, self.grp_off, self.grp_byte, self.grp_tok_start, self.grp_tok, self.grp_start,
         self.bnd_node) = views[:10]
        if self.cost_off is not None:
            self.row_fits, self.cost_off, self.cost_thr, self.cost_row = views[10:]
        else:
            self.row_fits = views[10]
        self._cost_args = (*views[10:], self._cost_args[4])
        self._mdl, self._mdl_off = mdl, off
        t = self.trie
        #: :func:`_fill_packed`'s arguments that are the same for every walk
        self._fill_tables = (self._stt, mdl, off, m.byte_next, m.accepting, m.first, self._first_bits, t.node_byte,
                             t.node_depth, t.node_end, t.tok_offsets, t.tok_ids, np.int32(t.max_depth), self.rows,
                             self._cost_args[4], np.int64(self.work_cap))

    def _intern(self, row: np.ndarray, unique: dict, rows: list, max_bytes: int) -> int:
        """The index of ``row`` among ``rows`` (a copy appended if new), or -1
        once the rows pass ``max_bytes``."""
        key = row.tobytes()
        k = unique.get(key)
        if k is None:
            k = unique[key] = len(rows)
            rows.append(row.copy())
            if len(rows) * self.words * 4 > max_bytes:
                return -1
        return k

    def _cost_table(self, tokens: np.ndarray, costs: np.ndarray, unique: dict, rows: list, cost_thr: list,
                    cost_row: list) -> int:
        """Append a state's budget table from its row's ``tokens`` and their
        ``costs`` (each token's least distance): for each distinct distance but
        the largest, the row of the tokens within it (deduplicated).  Returns
        the largest (from there on the whole row fits), or -1 when the rows
        would pass :data:`MAX_TABLE_BYTES` (then budgets walk)."""
        low = int(costs.min())
        present = np.flatnonzero(np.bincount(costs - low)) + low  # the distinct distances, ascending
        sub = np.zeros(self.words, dtype=np.uint32)
        for thr in present[:-1].tolist():
            sub[:] = 0
            _set_tokens(sub, tokens[costs <= thr])
            k = self._intern(sub, unique, rows, MAX_TABLE_BYTES)
            if k < 0:
                return -1
            cost_thr.append(thr)
            cost_row.append(k)
        return int(present[-1])

    def fill(self, configs_state: Configurations, configs: tuple[tuple[int, int], ...], out: np.ndarray) -> "int | None":
        """The grammar mask of ``configs`` into ``out`` (int32 words, stop ids not
        set).  Returns a bound on the distance (bytes to finish) of every
        configuration an allowed token leaves: when it fits the tokens left, no
        budget check is needed.  None when the walk passed its cap (then
        ``out`` is undefined)."""
        words = out.view(np.uint32)
        if len(configs) == 1:
            g0, f0 = configs[0]
            below = configs_state._cum[f0] if f0 >= 0 else 0
            if f0 < 0 or not self.returns[g0]:
                words[...] = self._state_rows[g0]  # no token returns: the row is the mask
                return self._row_cost[g0] + below
        else:
            g0 = f0 = -1
            below = 0
        memo = self._memo if self._memo is not None else self._memo_tables()
        # The same configurations again in this reply (frames are interned per
        # reply): the memo slot its mask went to, unless that slot was reused.
        seen = configs_state.memo_slots.get(configs)
        if self._remembered(memo, seen, words):
            return seen[2]
        single = len(configs) == 1
        keys, rows, meta = memo[0]
        used, memo_cost = meta[0], meta[1]
        # The tables are shared by every reply of the grammar and vLLM may fill
        # from a thread pool: the lock is held across the (GIL-free) kernels.
        with self._memo_lock:
            if single:
                slot = _memo_lookup(g0, f0, configs_state.arrays, self._stt, _NO_LIMIT_KEY, keys, rows, meta, words)
                if slot >= 0:
                    found = int(meta[3, 0])
                    bound = max(found, self._row_cost[g0] + below)
                    configs_state.memo_slots[configs] = (slot, int(used[slot]), bound, found - int(memo_cost[slot]))
                    return bound
            # A miss: the walk, and the store (with the returning tokens listed, where budgets use tables).
            rc, wide = self._run_fill(configs_state, configs, _NO_LIMIT, words, 1 if single else 0,
                                      single and self.cost_off is not None)
            if rc != 0:
                return None
            returning = int(wide[2])  # the costliest configuration a returning token ends in
            rows_cost = max(self._row_cost[cg] + (configs_state._cum[cf] if cf >= 0 else 0) for cg, cf in configs)
            slot = int(wide[5])
            if slot >= 0:
                below_key = returning - int(memo_cost[slot])  # the distance below the key's frames
                configs_state.memo_slots[configs] = (slot, int(used[slot]), max(returning, rows_cost), below_key)
        return max(returning, rows_cost)

    def _start_walk(self, configs_state: Configurations, configs: tuple[tuple[int, int], ...], nf: np.ndarray,
                    trk: np.ndarray) -> np.ndarray:
        """The reply's frame arena for a walk (``nf[0]``: its first free slot),
        tracking how deep a single configuration's walk reads the stack (memo
        keys, :func:`_read_frame`)."""
        fr, n = configs_state.reserve(self.frame_spare)
        nf[0] = n
        single = len(configs) == 1
        trk[0] = n if single else -1
        trk[1] = fr[3, configs[0][1]] if single and configs[0][1] >= 0 else 0
        trk[2] = -1
        return fr

    def _run_fill(self, configs_state: Configurations, configs: tuple[tuple[int, int], ...], limit: int,
                  words: np.ndarray, mode: int, listed: bool = False) -> tuple[int, np.ndarray]:
        """Run :func:`_fill_packed` (the memo lock held; ``mode`` 1 or 2 stores
        a single configuration's mask in the grammar or the budget memo, whose
        lookup just missed) with scratch areas grown as needed: its return
        code and ``wide`` (counts, next free frame, the stored slot or -1).
        ``listed``: the returning tokens are listed with the stored mask.
        (Kept short: it is a miss's step; the set-up is in the kernel.)"""
        n_nodes = self.trie.n_nodes
        memo = self._memo[1 if mode == 2 else 0]
        ret, ret_n = self._ret
        n_cfg = len(configs)
        g0, f0 = configs[0]
        for grow in (1, 4, 16):
            items, ws, scr, res, small, wide, cfg, tok_cost, tok_list = self._scratch.walk(
                n_nodes, self.size, self._ret_cap)
            if not listed:
                tok_cost, tok_list = _NO_COSTS, _NO_LIST
            if n_cfg > 1:
                if n_cfg > cfg.shape[1]:
                    cfg = np.empty((2, n_cfg), dtype=np.int32)
                for k, (cg, cf) in enumerate(configs):
                    cfg[0, k] = cg
                    cfg[1, k] = cf
            fr, n_frames = configs_state.reserve(self.frame_spare)
            rc = _fill_packed(mode, int(limit), g0, f0, cfg, n_cfg, n_frames, fr, *self._fill_tables,
                              memo[0], memo[1], memo[2], ret, ret_n, words, items, ws, scr, res, small, wide,
                              tok_cost, tok_list)
            if rc != -2:
                break
            self.frame_spare *= 4
            self._scratch.get(n_nodes, 4 * grow)
        return rc, wide

    def _listed(self, configs_state: Configurations, configs: tuple[tuple[int, int], ...], limit: int,
                words: np.ndarray, memo: tuple) -> bool:
        """The budget mask of a single configuration whose grammar mask this
        reply has remembered with its returning tokens listed: the state's
        table row plus the listed tokens that fit.  False where not listed."""
        seen = configs_state.memo_slots.get(configs)
        if seen is None:
            return False
        g0, f0 = configs[0]
        stored = self._table_row(g0, limit - configs_state._cum[f0])
        ret, ret_n = self._ret
        ret_tok, ret_cost = ret[0], ret[1]
        with self._memo_lock:
            slot = seen[0]
            n = int(ret_n[slot])
            if n < 0 or memo[0][2][0, slot] != seen[1]:
                return False  # not listed, or the slot was reused
            if stored is None:
                words[:] = 0
            else:
                words[...] = stored
            _add_fitting(words, ret_tok[slot], ret_cost[slot], n, limit - seen[3])
        return True

    def _table_row(self, g: int, room: int) -> "np.ndarray | None":
        """The stored row of state ``g``'s tokens that end within ``room`` of
        finishing above its frame (its budget table), or None for none."""
        if room >= self.row_fits[g]:
            return self.rows[self.state_row[g]]
        k = -1
        for e in range(self.cost_off[g], self.cost_off[g + 1]):
            if self.cost_thr[e] > room:
                break
            k = int(self.cost_row[e])
        return None if k < 0 else self.table_rows[k]

    def _remembered(self, memo: tuple, seen: "tuple[int, ...] | None", words: np.ndarray, table: int = 0) -> bool:
        """Copy a reply's remembered slot of ``memo[table]`` into ``words`` if
        it still holds the mask (its stamp unchanged)."""
        if seen is None:
            return False
        rows, meta = memo[table][1], memo[table][2]
        with self._memo_lock:
            if meta[0, seen[0]] == seen[1]:
                words[...] = rows[seen[0]]
                return True
        return False

    def _memo_tables(self) -> tuple:
        """The memos (allocated on first use): one for grammar masks that read
        the stack, one for budget masks, each ``(keys, rows, meta)`` (see the
        comment above :func:`_memo_lookup`).  A slot's stamp changes whenever
        its row does, so a reply's remembered ``(slot, stamp)`` is valid while
        equal.  With them ``_ret``: per grammar memo slot, its returning tokens
        and their distances, and how many (:func:`_memo_store_listed`)."""
        with self._memo_lock:
            if self._memo is None:
                slots = self._memo_rows
                self._memo = tuple((np.full((slots + 3, _MEMO_KEY + 2), -3, dtype=np.int32),
                                    np.zeros((slots, self.words), dtype=np.uint32),
                                    np.zeros((4, slots + 1), dtype=np.int64)) for _ in range(2))
                self._ret = (np.zeros((2, slots, self._ret_cap), dtype=np.int32), np.full(slots, -1, dtype=np.int32))
            return self._memo

    def within(self, configs_state: Configurations, configs: tuple[tuple[int, int], ...], limit: int,
               out: np.ndarray) -> None:
        """Write into ``out`` (int32 words) the text tokens after which some
        configuration finishes within ``limit`` bytes (stop ids not cleared).
        With budget tables (``cost_off``) only grammatical ones: the budget
        mask itself (:class:`~poot_vllm.core.matchers.rules.RuleMatcher` takes
        it as is); without, the caller intersects it with the grammar mask.

        A single configuration's result is remembered like a grammar mask
        (:func:`_memo_lookup`), its key ending with ``limit`` less the distance
        of the frames the walk did not read."""
        words = out.view(np.uint32)
        single = len(configs) == 1
        tables = self.cost_off is not None
        if tables and single:
            g0, f0 = configs[0]
            if f0 < 0 or not self.returns[g0]:
                # No token returns: the state's table alone.
                room = limit - (configs_state._cum[f0] if f0 >= 0 else 0)
                stored = self._table_row(g0, room)
                if stored is None:
                    words[:] = 0
                else:
                    words[...] = stored
                return
        memo = self._memo if self._memo is not None else self._memo_tables()
        if tables and single and self._listed(configs_state, configs, limit, words, memo):
            return
        if self._remembered(memo, configs_state.budget_slots.get((configs, limit)), words, 1):
            return
        keys, rows, meta = memo[1]
        used = meta[0]
        no_bnd = np.zeros(0, dtype=np.int32)
        with self._memo_lock:
            if single:
                g0, f0 = configs[0]
                slot = _memo_lookup(g0, f0, configs_state.arrays, self._stt, limit, keys, rows, meta, words)
                if slot >= 0:
                    configs_state.budget_slots[(configs, limit)] = (slot, int(used[slot]))
                    return
            if tables:
                # The grammar mask's own walk, its rows and walks cut at the limit (stored when single).
                rc, wide = self._run_fill(configs_state, configs, limit, words, 2 if single else 0)
                if rc == 0:
                    if wide[5] >= 0:
                        slot = int(wide[5])
                        configs_state.budget_slots[(configs, limit)] = (slot, int(used[slot]))
                    return
            # (With tables the result must be grammatical on its own -- RuleMatcher takes it as the
            # mask -- so past the work cap it is the one-byte check below, never the root walk,
            # whose shortcut sets tokens the grammar mask would have to clear.)
            for grow in ((1, 4, 16) if not tables else ()):
                ws, items, scr, res, flags, counts, nf, _, trk, _, _ = self._scratch.get(self.trie.n_nodes, grow)
                fr = self._start_walk(configs_state, configs, nf, trk)
                for k, (g, f) in enumerate(configs):
                    items[0, k], items[1, k], items[2, k] = 0, g, f
                words[:] = 0
                rc = _walk_items(*self._kernel_args, items, len(configs), fr[0], fr[1], fr[2], fr[3], nf,
                                 np.int32(limit), words, np.int64(self.work_cap), ws, scr, res, flags, no_bnd, no_bnd,
                                 np.int32(0), counts, np.int32(self.model.inc1), self.sub_max, trk, _NO_COSTS,
                                 _NO_LIST, np.int32(0))
                if rc == 0:
                    if single:
                        slot = _memo_store(f0, fr, self._stt, limit, keys, rows, meta, 0, words, trk[2])
                        if slot >= 0:
                            configs_state.budget_slots[(configs, limit)] = (slot, int(used[slot]))
                    return
                if rc == -1:
                    break
                self.frame_spare *= 4
        # Too much to walk: one-byte tokens only, each checked on its own.
        words[:] = 0
        for byte, ids in self.singles.items():
            after = configs_state.step(configs, byte)
            if after and min(configs_state.cost(c) for c in after) <= limit:
                for t in ids:
                    words[t >> 5] |= np.uint32(1 << (t & 31))


def rule_masks(grammar: Any, vocab: Any, precompute: bool = True, max_work: "int | None" = None) -> "RuleMasks | None":
    """The masks of ``grammar`` over ``vocab``, or None where it has no model."""
    model = rule_automata(grammar)
    return None if model is None else RuleMasks(model, vocab, precompute=precompute, max_work=max_work)


def warm_up() -> None:
    """Compile (or load from numba's cache) the kernels on a toy grammar, so the
    first grammar reply does not pay for it."""
    from poot_vllm.core.grammar.gbnf import parse_gbnf
    from poot_vllm.core.masks import _ToyVocab
    from poot_vllm.core.token_trie import _build_trie

    model = rule_automata(parse_gbnf('root ::= "(" root ")" | "x"'))
    vocab = _ToyVocab((b"(", b"x", b"))", None), frozenset({3}), 4)
    masks = RuleMasks(model, vocab, _build_trie(vocab.token_bytes, vocab.size))  # keep the cache for real tries
    configs = Configurations(model)
    row = np.zeros(1, dtype=np.int32)
    # "((x" leaves a token ("))") that returns through two frames: the memo's lookup,
    # walk and store kernels run too (else the first grammar reply's second step
    # loads them: ~27 ms from numba's cache, seconds where it compiles them)
    for text in (b"((", b"((x", b"((x"):
        after = configs.advance(configs.initial(), text)
        masks.fill(configs, after, row)
        masks.within(configs, after, 3, row)
    # A budget mask whose grammar mask the reply did not remember (its own memo's store).
    fresh = Configurations(model)
    masks.within(fresh, fresh.advance(fresh.initial(), b"((x"), 3, row)
    # The store of a budget walk without tables (a grammar past MAX_TABLE_STATES), with its argument types.
    _memo_store(-1, fresh.arrays, masks._stt, 3, *masks._memo[1], 0, row.view(np.uint32), np.int32(-1))
