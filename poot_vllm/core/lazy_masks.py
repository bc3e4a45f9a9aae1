"""A DFA's token masks served before its full index is built.

Why.  :meth:`DFAMaskIndex.build <poot_vllm.core.masks.DFAMaskIndex.build>`
walks the token trie once per DFA state before the first mask: a
JSONSchemaBench schema at 128k tokens costs a median ~20 ms and up to ~200 ms,
and the request waits for all of it although its first tokens touch a handful
of states (guidance computes masks lazily and serves its first in ~2 ms).
Here compiling walks only the *expensive* states (:data:`LAZY_MAX_NODES`,
:meth:`PendingMasks.prefetch`; most of them inside loops such as a JSON
string body, whose walk is shared per process, see the loop comment below);
every other state is one short walk at its first visit, so a decoding step
never pays a long one.  The full index is built by a background thread (one
per process, numba kernels run without the GIL) and every matcher switches
to it at its next step.

Exactly the same masks, which is why this is only used where it is provable
(:func:`lazy_eligible`, and :attr:`PendingMasks.dead_end` once its byte
distances are known):

* every byte the DFA can read is a one-byte text token of the vocabulary
  (byte-level BPE, SentencePiece with byte fallback), and every state can
  finish over the moves every counter value allows.  Then no state is
  token-dead, so a state's row is the build's first-pass row (one walk,
  :meth:`PendingMasks.row`), and every state's token distance is at most its
  byte distance plus the stop token: ``bound`` (the largest of those) bounds
  every distance;
* the vocabulary-free work estimate is within a quarter of ``max_mask_work``
  (:data:`LAZY_WORK_SHARE`; the background build is bounded by the limit), or
  the vocabulary's own bound of the full build's work (:func:`work_bound`) is
  within ``max_mask_work``: either way a constraint whose full build would
  pass the limit still fails at compile time.

Budgets.  With ``remaining > bound`` tokens left, every allowed token can
still finish, so the plain row *is* the budget mask (the eager index says the
same: its ``plain_row_budget`` is at most ``bound + 1``).  Tighter budgets
need exact token distances: the matcher waits for the full index, at compile
time when ``max_tokens`` is already tight (vLLM's compile thread), in the
scheduler only when a reasoning phase spent the budget within the build's
first milliseconds.  If the full build fails (its real work passed
``max_mask_work`` although the estimate did not), rows stay one walk per
state and tight budgets use byte distances (:meth:`PendingMasks.fill_restricted`:
sound -- every reply still finishes when the budget covers the byte distance --
but not the exact token distances).

Counters.  A counted DFA (bounded strings and arrays, ``automata.counters``)
has a row per (state, counter): the full build's row of the state (tokens
allowed at some counter value) minus the tokens its counter list
(``counted_masks``: per token, the items it adds, or never) says no longer
fit.  Here both come from the state's first visit: one trie walk gives the
row and the list together (``counted_masks._guard_walk`` with a row), or,
for a state inside a loop (a bounded string's body), the loop's cached walk
and its cached guard walk (per loop shape, actions and, where a counter is
set inside the loop, bounds) plus the walks below its exits; equal rows and
lists follow from the same walks over the same tokens.  Distances are over
the moves every counter value allows (``counters.without_increments``), as
in the full build, so ``bound`` holds for every counter.  The lists kept
before the full index are bounded (:data:`GUARD_BYTES`): past it, at
compile time the index is built first, later the matcher waits for it.

``POOT_LAZY_MASKS=off`` builds every index before the first mask, as before.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import weakref
from typing import Any, Callable

import numpy as np

from poot_vllm.core.automata.counters import ACT_SET1
from poot_vllm.core.counted_masks import (_NO_ROW, NEVER, NO_LIMIT, ROW_MEMO_BYTES, CounterRows, StateGuards,
                                          _guard_step, _guard_walk, _states_to_walk, by_k_descending, clear_bits,
                                          counter_tables, state_guards)
from poot_vllm.core.jit import jit_kernel as _jit
from poot_vllm.core.masks import (UNREACHABLE, DFAMaskIndex, _set_bits, dfa_byte_sums, estimate_mask_work,
                                  kernel_stops, kernel_tables)
from poot_vllm.core.table_graph import NO_ACTIONS, backward_bfs, table_predecessors
from poot_vllm.core.table_graph import read_only as _read_only
from poot_vllm.core.token_trie import TokenTrie


# ------------------------------------------------- loops walked once per process
#
# A state inside a JSON string (or any loop: ``[a-z]*``, a free-form value) has
# a row that costs a walk of about the whole trie (1-3 ms at 128k tokens), paid
# by every compile that has one (prefetch).  But most of that walk never
# leaves the state's loop -- the states on short cycles through it -- and
# what happens inside depends only on the loop's shape, not on where it sits
# in the DFA.  So the loop, seen from the state, is written as a small
# canonical table (local states in BFS order; per byte: a local state, dead,
# or *exit*), and the trie walk over that table is done once per process and
# table: the tokens that stay inside, and the trie nodes where a walk first
# leaves it.  A state's row is then that row plus short walks of the real DFA
# below those exit nodes (tokens like ``abc",`` that close the string).

#: A state whose walk may visit more trie nodes than this (a bound over the
#: trie's first two levels, :func:`_expensive_states`) is *expensive*: its row
#: is computed when the constraint is compiled, through its loop, never at a
#: first visit in the scheduler; the others cost at most this many node
#: visits (~50-100 us) when first visited.
LAZY_MAX_NODES = 16384
#: A loop has at most this many states (a string body with UTF-8 and escapes has
#: ~10).  A chain's 8-byte ball is larger where a part may end at every position:
#: an e-mail's domain label (each position may read ``.`` and go on into the next
#: label or the top-level name) has 65-128, and at 64 its ~60 positions were each
#: walked in full (~0.7 ms at 128k tokens: an ``EmailStr`` field compiled in 72
#: ms, 36 ms with 128).  The table is 512 bytes a state, built per expensive state.
MAX_LOOP_STATES = 128
#: The loop of a state: the states on a cycle through it of at most this many
#: bytes (``\uXXXX`` is 6, a 4-byte UTF-8 character 4).  Bounded, so that a
#: string inside an array of objects is the string body, not the whole object
#: (which differs from one property to the next and would share nothing).
LOOP_CYCLE_BYTES = 8


@_jit
def _reverse_edges(trans):
    """The DFA's edges by target (CSR): ``sources[offsets[t]:offsets[t + 1]]`` lead to ``t``."""
    n = trans.shape[0]
    offsets = np.zeros(n + 1, dtype=np.int64)
    for q in range(n):
        for b in range(256):
            t = trans[q, b]
            if t >= 0:
                offsets[t + 1] += 1
    for t in range(n):
        offsets[t + 1] += offsets[t]
    cursor = offsets[:-1].copy()
    sources = np.empty(offsets[n], dtype=np.int32)
    for q in range(n):
        for b in range(256):
            t = trans[q, b]
            if t >= 0:
                sources[cursor[t]] = q
                cursor[t] += 1
    return offsets, sources


@_jit
def _bounded_bfs(trans, rev_offsets, rev_sources, s, depth, forward, dist, queue):
    """Distances from ``s`` (``forward``) or to ``s`` up to ``depth`` into
    ``dist`` (others stay -1); returns how many states ``queue[:k]`` it set."""
    dist[s] = 0
    queue[0] = s
    k = 1
    head = 0
    while head < k:
        q = queue[head]
        head += 1
        if dist[q] == depth:
            continue
        if forward:
            for b in range(256):
                t = trans[q, b]
                if t >= 0 and dist[t] < 0:
                    dist[t] = dist[q] + 1
                    queue[k] = t
                    k += 1
        else:
            for j in range(rev_offsets[q], rev_offsets[q + 1]):
                t = rev_sources[j]
                if dist[t] < 0:
                    dist[t] = dist[q] + 1
                    queue[k] = t
                    k += 1
    return k


@_jit
def _loop_table(trans, rev_offsets, rev_sources, s, cycle, ball, max_states, fwd, bwd, queue_f, queue_b,
                local_of, members, table):
    """``s``'s loop -- the states on a cycle through ``s`` of at most ``cycle``
    bytes -- as a canonical table (``table[:k]``, int16: a local state, -1
    dead, -2 exit, i.e. a live state outside the loop; local states numbered
    in BFS order by byte) and ``members[:k]`` (local -> DFA state).  Returns
    ``k``, or -1 past ``max_states``.  With ``ball``, the states within
    ``cycle`` bytes of ``s`` instead (no way back needed: a chain's positions
    far from its end look alike).  The scratch arrays (n, all -1) are
    restored before returning."""
    kf = _bounded_bfs(trans, rev_offsets, rev_sources, s, cycle, True, fwd, queue_f)
    kb = 0
    if ball:
        for j in range(kf):
            bwd[queue_f[j]] = 0
    else:
        kb = _bounded_bfs(trans, rev_offsets, rev_sources, s, cycle, False, bwd, queue_b)
    members[0] = s
    local_of[s] = 0
    k = 1
    head = 0
    over = False
    while head < k:
        q = members[head]
        for b in range(256):
            t = trans[q, b]
            if t < 0:
                table[head, b] = -1
            elif fwd[t] < 0 or bwd[t] < 0 or fwd[t] + bwd[t] > cycle:
                table[head, b] = -2
            else:
                lt = local_of[t]
                if lt < 0:
                    if k == max_states:
                        over = True
                        break
                    lt = k
                    local_of[t] = k
                    members[k] = t
                    k += 1
                table[head, b] = lt
        if over:
            break
        head += 1
    for j in range(k):
        local_of[members[j]] = -1
    for j in range(kb):
        bwd[queue_b[j]] = -1
    if ball:
        for j in range(kf):
            bwd[queue_f[j]] = -1
    for j in range(kf):
        fwd[queue_f[j]] = -1
    return -1 if over else k


@_jit
def _loop_walk(table, node_byte, node_depth, node_end, tok_offsets, tok_ids, row, exit_node, exit_local, stack):
    """The trie walk over a loop table: set in ``row`` every token that stays
    inside (stop ids included: the caller clears them), list the nodes whose
    byte first leaves it with the local state before (``exit_*``).  Returns the
    number of exits."""
    for k in range(tok_offsets[0], tok_offsets[1]):  # tokens with no bytes stay where they are
        t = tok_ids[k]
        row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
    stack[0] = 0
    n_nodes = node_byte.shape[0]
    n_exit = 0
    i = 1
    while i < n_nodes:
        d = node_depth[i]
        p = stack[d - 1]
        v = table[p, node_byte[i]]
        if v < 0:
            if v == -2:
                exit_node[n_exit] = i
                exit_local[n_exit] = p
                n_exit += 1
            i = node_end[i]
            continue
        stack[d] = v
        for k in range(tok_offsets[i], tok_offsets[i + 1]):
            t = tok_ids[k]
            row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
        i += 1
    return n_exit


@_jit
def _exit_walks(trans, members, exit_node, exit_local, n_exit, node_byte, node_depth, node_end, tok_offsets,
                tok_ids, is_stop, row, stack):
    """Below each exit node, the real DFA's walk from the state the exit byte
    leads to: set its live non-stop tokens in ``row``."""
    for x in range(n_exit):
        first = exit_node[x]
        stack[node_depth[first] - 1] = members[exit_local[x]]
        _walk_subtree(trans, first, node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop, _NO_SCORE, 0,
                      row, stack)


#: ``_walk_subtree`` without a distance filter.
_NO_SCORE = np.zeros(0, dtype=np.int32)
_NO_SCORE.flags.writeable = False


@_jit
def _walk_subtree(trans, first, node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop, score, limit, row,
                  stack):
    """Set in ``row`` the live non-stop tokens of trie node ``first``'s subtree,
    read from ``stack[depth(first) - 1]`` (set by the caller), whose end state
    ``e`` has ``score[e] <= limit`` (an empty ``score``: every one)."""
    i = first
    end = node_end[first]
    while i < end:
        d = node_depth[i]
        nxt = trans[stack[d - 1], node_byte[i]]
        if nxt < 0:
            i = node_end[i]
            continue
        stack[d] = nxt
        if tok_offsets[i] < tok_offsets[i + 1] and (score.shape[0] == 0 or score[nxt] <= limit):
            for k in range(tok_offsets[i], tok_offsets[i + 1]):
                t = tok_ids[k]
                if not is_stop[t]:
                    row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
        i += 1


@_jit
def _loop_guard_walk(table, tacts, tlimit, m0, node_byte, node_depth, node_end, tok_offsets, tok_ids,
                     out_tok, out_k, exit_node, exit_local, exit_m, exit_k, exit_v, st, mode, kk, vv):
    """``counted_masks._guard_walk`` over a loop table (``tacts``/``tlimit``:
    the members' actions and counter bounds): the tokens that stay inside and
    depend on the counter, with their ``k`` (stop ids included: the caller
    drops them), and the exits with the walk's mode, ``k`` and counter there.
    Returns (tokens, exits)."""
    n = 0
    n_exit = 0
    st[0] = 0
    mode[0] = m0
    kk[0] = 0
    vv[0] = 0
    n_nodes = node_byte.shape[0]
    i = 1
    while i < n_nodes:
        d = node_depth[i]
        p = st[d - 1]
        b = node_byte[i]
        t = table[p, b]
        if t < 0:
            if t == -2:
                exit_node[n_exit] = i
                exit_local[n_exit] = p
                exit_m[n_exit] = mode[d - 1]
                exit_k[n_exit] = kk[d - 1]
                exit_v[n_exit] = vv[d - 1]
                n_exit += 1
            i = node_end[i]
            continue
        m, k, v = _guard_step(tacts[p, b], tlimit[p], mode[d - 1], kk[d - 1], vv[d - 1])
        st[d] = t
        mode[d] = m
        kk[d] = k
        vv[d] = v
        a0 = tok_offsets[i]
        b0 = tok_offsets[i + 1]
        if a0 < b0 and (m == 2 or k > 0):
            kval = NEVER if m == 2 else k
            for q in range(a0, b0):
                out_tok[n] = tok_ids[q]
                out_k[n] = kval
                n += 1
        i += 1
    return n, n_exit


@_jit
def _exit_guard_walks(trans, acts, limit, members, exit_node, exit_local, exit_m, exit_k, exit_v, node_byte,
                      node_depth, node_end, tok_offsets, tok_ids, is_stop, out_tok, out_k, n0, st, mode, kk, vv,
                      work, no_row):
    """Below each exit node, the real DFA's guard walk from the exit's member
    state with the loop walk's mode, ``k`` and counter there."""
    n = n0
    for x in range(exit_node.shape[0]):
        first = exit_node[x]
        n = _guard_walk(trans, acts, limit, members[exit_local[x]], exit_m[x], exit_k[x], exit_v[x], first,
                        node_end[first], node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop,
                        out_tok, out_k, n, st, mode, kk, vv, work, no_row)
    return n


def _loop_guards(trie: TokenTrie, token_key: str, table: np.ndarray, tacts: np.ndarray, tlimit: np.ndarray,
                 m0: int, is_stop: np.ndarray, stop_key: str) -> tuple[np.ndarray, ...]:
    """The guard walk over a counted loop table (cached per process, vocabulary,
    stop ids, table, actions, bounds and starting mode): (text tokens, their k
    -- both by k descending, stably -- exit nodes, exit locals, exit modes, exit
    k, exit counters).  Sorted once here: a string body lists most of the
    vocabulary, and sorting it per state cost ~0.5 ms of every compile
    (:func:`_merge_guards` adds a state's few exit tokens instead)."""
    from poot_vllm.core.cache import compiled_cache

    digest = hashlib.sha1(table.tobytes() + tacts.tobytes() + tlimit.tobytes() + bytes([m0])).hexdigest()

    def build() -> tuple[np.ndarray, ...]:
        out_tok = np.empty(max(trie.size, 1), dtype=np.int32)
        out_k = np.empty(max(trie.size, 1), dtype=np.int32)
        exits = [np.empty(trie.n_nodes, dtype=np.int32) for _ in range(5)]
        stacks = [np.empty(trie.max_depth + 1, dtype=np.int32) for _ in range(4)]
        n, n_exit = _loop_guard_walk(table, tacts, tlimit, np.int32(m0), trie.node_byte, trie.node_depth,
                                     trie.node_end, trie.tok_offsets, trie.tok_ids, out_tok, out_k, *exits, *stacks)
        toks, ks = out_tok[:n], out_k[:n]
        text = ~is_stop[toks]
        toks, ks = toks[text], ks[text]
        order = by_k_descending(ks)
        out = (toks[order], ks[order], *(e[:n_exit].copy() for e in exits))
        for a in out:
            a.flags.writeable = False
        return out

    return compiled_cache().get_or_build(("loop-guard", token_key, stop_key, table.shape[0], digest), build)


@_jit
def _merge_guards(in_tok, in_k, ex_tok, ex_k, hi, out_tok, out_k, bad):
    """A state's guard list from its loop's (``in_*``, by k descending) and its
    exit walks' (``ex_*``, by k descending): as ``counted_masks.state_guards``
    makes it from the two concatenated -- tokens with ``k >= max(hi, 1)`` into
    ``bad``, the others by k descending, the loop's first among equal k.
    Returns (listed, bad) counts."""
    never = max(hi, 1)
    i = 0
    j = 0
    nb = 0
    while i < in_k.shape[0] and in_k[i] >= never:
        bad[nb] = in_tok[i]
        nb += 1
        i += 1
    while j < ex_k.shape[0] and ex_k[j] >= never:
        bad[nb] = ex_tok[j]
        nb += 1
        j += 1
    m = 0
    while i < in_k.shape[0] or j < ex_k.shape[0]:
        if j >= ex_k.shape[0] or (i < in_k.shape[0] and in_k[i] >= ex_k[j]):
            out_tok[m] = in_tok[i]
            out_k[m] = in_k[i]
            i += 1
        else:
            out_tok[m] = ex_tok[j]
            out_k[m] = ex_k[j]
            j += 1
        m += 1
    return m, nb


def _loop_inside(trie: TokenTrie, token_key: str, table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The walk over a loop table (cached per process, vocabulary and table)."""
    from poot_vllm.core.cache import compiled_cache

    digest = hashlib.sha1(table.tobytes()).hexdigest()

    def build() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        row = np.zeros(trie.words, dtype=np.uint32)
        exit_node = np.empty(trie.n_nodes, dtype=np.int32)
        exit_local = np.empty(trie.n_nodes, dtype=np.int32)
        stack = np.empty(trie.max_depth + 1, dtype=np.int16)
        n = _loop_walk(table, trie.node_byte, trie.node_depth, trie.node_end, trie.tok_offsets, trie.tok_ids,
                       row, exit_node, exit_local, stack)
        out = (row, exit_node[:n].copy(), exit_local[:n].copy())
        for a in out:
            a.flags.writeable = False
        return out

    return compiled_cache().get_or_build(("loop-walk", token_key, table.shape[0], digest), build)


def warm_up() -> None:
    """Compile (or load) this module's kernels, and ``masks``' (:func:`poot_vllm.core.masks.warm_up`),
    on a toy DFA, so the first real compile does not pay for it.  Safe to call from any thread."""
    from poot_vllm.core.masks import _build_trie, _ToyDFA, _ToyVocab
    from poot_vllm.core.masks import warm_up as warm_up_masks

    from poot_vllm.core.handoff import warm_up as warm_up_handoff

    warm_up_masks()
    warm_up_handoff()  # the engine's checks of a DFA the API server handed over
    trans = np.full((3, 256), -1, dtype=np.int32)
    trans[0, 97] = 1
    trans[1, 97] = 2
    trans[2, 97] = 2
    trie = _build_trie((b"a", b"aa", None), 3)
    index = DFAMaskIndex.build(_ToyDFA(trans, np.array([False, False, True]), 0),
                               _ToyVocab((b"a", b"aa", None), frozenset({2}), 3), trie)
    _warm_up_kernels(index.transitions, index.accepting, trie, index.is_stop)
    _warm_up_counted(trie, index.is_stop)


#: Schemas whose loops most constraints hold: JSON string bodies, unbounded and counted past the
#: longest token (such bounds share one guard walk), alone, as properties and as array items (a
#: loop's table includes what it loops through); made plain and without a raw ``<`` (tool calls).
COMMON_LOOP_SCHEMAS = ({"type": "string"}, {"type": "string", "maxLength": 4096},
                       {"type": "object", "properties": {"a": {"type": "string"},
                                                         "b": {"type": "string", "maxLength": 4096}},
                        "required": ["a", "b"]},
                       {"type": "array", "items": {"type": "string"}})


def warm_up_loops(vocab: Any) -> None:
    """Make the loop walks (:func:`_loop_inside`, :func:`_loop_guards`) of
    :data:`COMMON_LOOP_SCHEMAS` for ``vocab``: each is a walk of most of the
    trie (~10-40 ms at 128k tokens) that the first constraint holding it would
    otherwise pay in its compile, in the scheduler loop.  Run by the backend's
    start-up thread; the walks stay in the compiled cache like any other."""
    from poot_vllm.core.automata.compilers import regex_to_dfa
    from poot_vllm.core.json_schema import schema_to_regex

    trie = TokenTrie.build(vocab)
    for escaped in ("", "<"):
        for schema in COMMON_LOOP_SCHEMAS:
            PendingMasks(regex_to_dfa(schema_to_regex(schema, escaped=escaped)), vocab, trie, None).prefetch()


def _warm_up_kernels(trans: np.ndarray, accepting: np.ndarray, trie: TokenTrie, is_stop: np.ndarray) -> None:
    n = trans.shape[0]
    _walk_bounds(trans, np.arange(n, dtype=np.int32), 1, np.ones(256, np.int64), np.ones(256, np.int64),
                 np.ones((256, 256), np.int64), np.empty(n, np.int64))
    byte_distances(trans, accepting, 1)
    byte_distances(trans, accepting, 1, np.zeros(trans.shape, dtype=np.int8))
    zeros = np.zeros(n, dtype=np.int32)
    zeros.flags.writeable = False
    _walk_live_subtrees(trans, 0, root_children(trie), trie.node_byte, trie.node_depth, trie.node_end,
                        trie.tok_offsets, trie.tok_ids, is_stop, zeros, 0, np.zeros(trie.words, dtype=np.uint32),
                        np.empty(trie.max_depth + 1, dtype=np.int32))
    offsets, sources = _reverse_edges(trans)
    scratch = np.full((5, n), -1, dtype=np.int32)
    members = np.empty(MAX_LOOP_STATES, dtype=np.int32)
    table = np.empty((MAX_LOOP_STATES, 256), dtype=np.int16)
    for ball in (False, True):
        k = _loop_table(trans, offsets, sources, n - 1, LOOP_CYCLE_BYTES, ball, MAX_LOOP_STATES, scratch[0],
                        scratch[1], scratch[2], scratch[3], scratch[4], members, table)
    row = np.zeros(trie.words, dtype=np.uint32)
    exit_node = np.empty(trie.n_nodes, dtype=np.int32)
    exit_local = np.empty(trie.n_nodes, dtype=np.int32)
    n_exit = _loop_walk(np.ascontiguousarray(table[:max(k, 1)]), trie.node_byte, trie.node_depth, trie.node_end,
                        trie.tok_offsets, trie.tok_ids, row, exit_node, exit_local,
                        np.empty(trie.max_depth + 1, dtype=np.int16))
    exit_node.flags.writeable = False  # as cached by _loop_inside
    exit_local.flags.writeable = False
    _exit_walks(trans, members, exit_node, exit_local, n_exit, trie.node_byte, trie.node_depth, trie.node_end,
                trie.tok_offsets, trie.tok_ids, is_stop, row, np.empty(trie.max_depth + 1, dtype=np.int32))


def _warm_up_counted(trie: TokenTrie, is_stop: np.ndarray) -> None:
    """The counted rows' kernels (``_state_guards``), with the argument types of real calls."""
    from poot_vllm.core.automata.compilers import regex_to_dfa

    dfa = regex_to_dfa("a{0,16}")
    trans, _ = kernel_tables(dfa)
    acts, limit = counter_tables(dfa)
    s = int(np.argmax(limit))
    n = trans.shape[0]
    offsets, sources = _reverse_edges(trans)
    scratch = np.full((5, n), -1, dtype=np.int32)
    members = np.empty(MAX_LOOP_STATES, dtype=np.int32)
    table = np.empty((MAX_LOOP_STATES, 256), dtype=np.int16)
    k = max(_loop_table(trans, offsets, sources, s, LOOP_CYCLE_BYTES, False, MAX_LOOP_STATES, scratch[0],
                        scratch[1], scratch[2], scratch[3], scratch[4], members, table), 1)
    members, table = members[:k].copy(), np.ascontiguousarray(table[:k])
    tacts = np.where(table >= 0, acts[members], 0).astype(np.int8)
    tlimit = np.ascontiguousarray(limit[members])
    out_tok = np.empty(max(trie.size, 1), dtype=np.int32)
    out_k = np.empty(max(trie.size, 1), dtype=np.int32)
    exits = [np.empty(trie.n_nodes, dtype=np.int32) for _ in range(5)]
    stacks = [np.empty(trie.max_depth + 1, dtype=np.int32) for _ in range(4)]
    _, n_exit = _loop_guard_walk(table, tacts, tlimit, np.int32(0), trie.node_byte, trie.node_depth,
                                 trie.node_end, trie.tok_offsets, trie.tok_ids, out_tok, out_k, *exits, *stacks)
    exits = [e[:n_exit].copy() for e in exits]
    for e in exits:
        e.flags.writeable = False  # as cached by _loop_guards
    work = np.zeros(1, dtype=np.int64)
    _exit_guard_walks(trans, acts, limit, members, *exits, trie.node_byte, trie.node_depth, trie.node_end,
                      trie.tok_offsets, trie.tok_ids, is_stop, out_tok, out_k, 0, *stacks, work, _NO_ROW)
    listed = _read_only(out_k[:1], np.int32)
    _merge_guards(listed, listed, listed, listed, np.int32(1), *(np.empty(2, dtype=np.int32) for _ in range(3)))
    _guard_walk(trans, acts, limit, s, 0, 0, 0, 1, trie.n_nodes, trie.node_byte, trie.node_depth, trie.node_end,
                trie.tok_offsets, trie.tok_ids, is_stop, out_tok, out_k, 0, *stacks, work,
                np.zeros(trie.words, dtype=np.uint32))


@_jit
def _walk_live_subtrees(trans, s, root_nodes, node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop,
                        score, limit, row, stack):
    """``masks._walk_dfa``'s row (tokens read from ``s`` ending in ``e`` with
    ``score[e] <= limit``; ``row`` zeroed by the caller), entering only the
    first-level subtrees of the bytes ``s`` reads.  Why: the plain walk visits
    every first-level node (~250 at 128k tokens, each a cache miss in a cold
    trie) to learn that most are dead, which made a narrow state's first row
    (a JSON schema's ``{``) cost ~0.2 ms instead of ~0.02."""
    if score[s] <= limit:
        for k in range(tok_offsets[0], tok_offsets[1]):
            t = tok_ids[k]
            if not is_stop[t]:
                row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
    stack[0] = s
    for b in range(256):
        first = root_nodes[b]
        if first >= 0 and trans[s, b] >= 0:
            _walk_subtree(trans, first, node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop, score, limit,
                          row, stack)


def root_children(trie: TokenTrie) -> np.ndarray:
    """int32 (256,): the first-level trie node of each byte, -1 where no token
    starts with it (kept with the trie)."""
    got = _roots.get(trie)
    if got is None:
        first = np.nonzero(trie.node_depth == 1)[0]
        got = np.full(256, -1, dtype=np.int32)
        got[trie.node_byte[first]] = first
        got.flags.writeable = False
        _roots[trie] = got
    return got


_roots: "weakref.WeakKeyDictionary[TokenTrie, np.ndarray]" = weakref.WeakKeyDictionary()


@_jit
def _walk_bounds(trans, states, n_first, first_size, children, size2, out):
    """Per state in ``states``, an upper bound of the trie nodes its walk visits:
    every first-level node, and below each byte ``b`` it reads, every child and
    the whole subtree of each child ``c`` whose byte the next state reads."""
    for j in range(states.shape[0]):
        s = states[j]
        bound = n_first
        for b in range(256):
            t = trans[s, b]
            if t < 0 or first_size[b] == 0:
                continue
            bound += children[b]
            for c in range(256):
                if size2[b, c] > 1 and trans[t, c] >= 0:
                    bound += size2[b, c] - 1
        out[j] = bound


def _trie_levels(trie: TokenTrie) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """The trie's first two levels: first-level node count, subtree size per byte,
    children per byte, subtree size per byte pair (kept with the trie: 0.5 MiB)."""
    levels = _levels.get(trie)
    if levels is None:
        levels = _levels[trie] = _count_levels(trie)
    return levels


_levels: "weakref.WeakKeyDictionary[TokenTrie, tuple[int, np.ndarray, np.ndarray, np.ndarray]]" = \
    weakref.WeakKeyDictionary()


def _count_levels(trie: TokenTrie) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    depth, byte, end = trie.node_depth, trie.node_byte, trie.node_end
    first = np.nonzero(depth == 1)[0]
    first_size = np.zeros(256, dtype=np.int64)
    first_size[byte[first]] = end[first] - first
    second = np.nonzero(depth == 2)[0]
    parent = byte[first[np.searchsorted(first, second) - 1]]  # the first-level node before it
    children = np.bincount(parent, minlength=256).astype(np.int64)
    size2 = np.zeros((256, 256), dtype=np.int64)
    size2[parent, byte[second]] = end[second] - second
    return len(first), first_size, children, size2


def _expensive_states(dfa: Any, trie: TokenTrie) -> np.ndarray:
    """bool per state: its walk may visit more than ``LAZY_MAX_NODES`` trie nodes
    (by a one-level bound for all states, then a two-level one for the states
    the first does not clear: a state whose bytes are few but common, like a
    space, reads a large subtree that dies one byte down)."""
    n_first, first_size, children, size2 = _trie_levels(trie)
    trans = kernel_tables(dfa)[0]
    bound1 = n_first + dfa_byte_sums(dfa, first_size)[1]
    out = bound1 > LAZY_MAX_NODES
    states = np.flatnonzero(out).astype(np.int32)
    if states.size:
        bound2 = np.empty(states.size, dtype=np.int64)
        _walk_bounds(trans, states, n_first, first_size, children, size2, bound2)
        out[states] = bound2 > LAZY_MAX_NODES
    return out


def lazy_masks_enabled() -> bool:
    """``POOT_LAZY_MASKS`` (default on): serve masks before the full index is built."""
    return os.environ.get("POOT_LAZY_MASKS", "on").strip().lower() not in ("0", "off", "false", "no")


def _spelled_bytes(trie: TokenTrie, is_stop: np.ndarray) -> np.ndarray:
    """bool (256,): the bytes some one-byte text token spells (kept with the
    trie for the last stop flags asked: ``masks.kernel_stops`` hands out one
    array per stop set)."""
    last = _spelled.get(trie)
    if last is not None and last[0] is is_stop:
        return last[1]
    ids, byte = _one_byte_tokens(trie)
    got = np.bincount(byte[~is_stop[ids]], minlength=256) > 0
    _spelled[trie] = (is_stop, got)
    return got


_spelled: "weakref.WeakKeyDictionary[TokenTrie, tuple[np.ndarray, np.ndarray]]" = weakref.WeakKeyDictionary()


def _one_byte_tokens(trie: TokenTrie) -> tuple[np.ndarray, np.ndarray]:
    """The one-byte tokens' ids and bytes (kept with the trie)."""
    got = _one_byte.get(trie)
    if got is None:
        first = np.nonzero(trie.node_depth == 1)[0]
        counts = trie.tok_offsets[first + 1] - trie.tok_offsets[first]
        ids = np.concatenate([trie.tok_ids[trie.tok_offsets[i]:trie.tok_offsets[i + 1]] for i in first]) \
            if first.size else np.zeros(0, np.int32)
        got = _one_byte[trie] = (ids, np.repeat(trie.node_byte[first], counts).astype(np.intp))
    return got


_one_byte: "weakref.WeakKeyDictionary[TokenTrie, tuple[np.ndarray, np.ndarray]]" = weakref.WeakKeyDictionary()


def lazy_eligible(dfa: Any, trie: TokenTrie, is_stop: np.ndarray, max_work: int | None) -> bool:
    """Whether masks may be served before the full index (module docstring)."""
    # (with the trie's first-level sizes: one pass for the four compile steps that ask, masks.dfa_byte_sums)
    read = dfa_byte_sums(dfa, _trie_levels(trie)[1])[2]
    if (read & ~_spelled_bytes(trie, is_stop)).any():
        return False
    if max_work is None or estimate_mask_work(dfa, trie.size) * LAZY_WORK_SHARE <= max_work:
        return True
    return work_bound(dfa, trie) <= max_work


def work_bound(dfa: Any, trie: TokenTrie) -> int:
    """An upper bound of the full build's trie-node visits on this vocabulary.

    A walk from a state visits the trie's first level and, below each byte the
    state reads, at most that byte's subtree; the full build walks each state
    once for its row and, for a counted DFA, at most twice more (the
    successors over the moves every counter allows, and the counter list) --
    where no state is token-dead, as on the lazy path (else it walks the rows
    again, and the DFA is not served lazily: :attr:`PendingMasks.dead_end`).
    Measured over the bench's 268 DFAs at 128k tokens: real work at most
    0.99x the one-walk bound, 2.02x for counted DFAs.
    Where this bound is inside ``max_mask_work`` the background build cannot
    pass it, however far off the vocabulary-free estimate is, so masks may be
    served before it (a Pydantic model with an ``EmailStr``, an ``HttpUrl`` and a
    hostname: estimate 34 M > 1/4 of the limit, bound 62 M, real work 44 M).
    """
    trans, _ = kernel_tables(dfa)
    n_first, first_size, _, _ = _trie_levels(trie)
    walks = 3 if getattr(dfa, "actions", None) is not None else 1
    return walks * int(trans.shape[0] * n_first + int(dfa_byte_sums(dfa, first_size)[1].sum()))


#: Counter lists (:class:`~poot_vllm.core.counted_masks.StateGuards`) the lazy
#: rows of a counted DFA keep at most (past it, the matcher waits for the full
#: index, which shares equal lists): ~40 string-body states at 128k tokens.
GUARD_BYTES = 32 * 1024 * 1024

#: Lazy only where the work estimate is at most this fraction of ``max_mask_work``
#: (1 / 4): the estimate can be a few times off (a vocabulary of lower-case
#: words walks ``[a-z ]`` states ~3x deeper), and near the limit the eager build
#: must run first, so that a constraint whose real work passes the limit fails
#: at compile time as before, not after its reply has started.
LAZY_WORK_SHARE = 4


def byte_distances(trans: np.ndarray, accepting: np.ndarray, stop_cost: int,
                   actions: np.ndarray | None = None) -> np.ndarray:
    """Per state, the fewest bytes to a finished reply plus ``stop_cost``
    (``UNREACHABLE`` where none): the token distance when every byte is a token.
    With a counted DFA's ``actions``, over the moves every counter value allows
    (``counters.without_increments``: no ``ACT_INC`` edge), without copying the table."""
    acts = NO_ACTIONS if actions is None else _read_only(actions, np.int8)
    return _byte_distances(_read_only(trans, np.int32), acts, actions is not None, _read_only(accepting, np.bool_),
                           np.int32(stop_cost), UNREACHABLE)


@_jit
def _byte_distances(trans, acts, counted, accepting, stop_cost, unreachable):
    """:func:`byte_distances`' BFS backwards over the table itself."""
    offsets, preds = table_predecessors(trans, acts, counted)
    return backward_bfs(offsets, preds, accepting, stop_cost, unreachable)


class PendingMasks:
    """One DFA's masks against one vocabulary while (and if) its full index builds.

    Shared by every request on the constraint, like the index it becomes;
    :attr:`index` is set once the full build is done.
    """

    def __init__(self, dfa: Any, vocab: Any, trie: TokenTrie, max_work: int | None) -> None:
        self.dfa, self.vocab, self.trie, self.max_work = dfa, vocab, trie, max_work
        trans, accepting = self.transitions, self.accepting = kernel_tables(dfa)
        self.start = int(dfa.start)
        stop_ids, is_stop = self.stop_ids, self.is_stop = kernel_stops(vocab, trie)
        stop_cost = 1 if stop_ids.size else 0
        n = trans.shape[0]
        #: A counted DFA (``automata.counters``): rows per (state, counter), see "Counters" above.
        self.counted = getattr(dfa, "actions", None) is not None
        if self.counted:
            self.actions, self.limit = counter_tables(dfa)
            #: States whose tokens may depend on the counter (one guard walk each, as in the full build).
            self.guarded = np.zeros(n, dtype=bool)
            self.guarded[_states_to_walk(trans, self.actions, self.limit, trie.max_depth)] = True
            self._guards: dict[int, StateGuards] = {}
            self._guard_bytes = 0
            self._rows_above = CounterRows()
            #: The stop ids' part of a loop's cached guard walk key (its text tokens are kept).
            self._stop_key = hashlib.sha1(stop_ids.tobytes()).hexdigest()
        # Distances over the moves every counter value allows (the full build's rule).
        dist = byte_distances(trans, accepting, stop_cost, self.actions if self.counted else None)
        dist.flags.writeable = False
        self.byte_dist = dist
        finite = dist[dist < UNREACHABLE]
        #: Every state's token distance is at most this: more tokens left and
        #: the plain row is the budget mask.
        self.bound = int(finite.max()) if finite.size else 0
        stop_row = np.zeros(trie.words, dtype=np.uint32)
        _set_bits(stop_row, stop_ids)
        self.stop_row = stop_row.view(np.int32)
        self._zeros = np.zeros(n, dtype=np.int32)
        self._zeros.flags.writeable = False
        self._rows: dict[int, np.ndarray] = {}
        #: States whose walk may be long: rows made at compile time (:meth:`prefetch`), through their loop.
        self.expensive = _expensive_states(dfa, trie)
        self._rev: tuple[np.ndarray, np.ndarray] | None = None  # built at the first loop
        self.index: DFAMaskIndex | None = None
        self.error: BaseException | None = None
        self._done = threading.Event()
        self._claim = threading.Lock()
        self._claimed = False
        self._on_ready: list[Callable[[], None]] = []

    @property
    def n_states(self) -> int:
        return int(self.transitions.shape[0])

    @property
    def dead_end(self) -> bool:
        """Whether some state cannot finish over the moves every counter allows:
        the full build refuses the tokens into it, which one walk cannot know
        (so such a DFA is not served lazily)."""
        return bool((self.byte_dist >= UNREACHABLE).any())

    @property
    def over_memory(self) -> bool:
        """Whether the counter lists made so far pass :data:`GUARD_BYTES`."""
        return self.counted and self._guard_bytes > GUARD_BYTES

    # ------------------------------------------------------------- rows

    def row(self, state: int) -> np.ndarray:
        """``state``'s (read-only, int32) mask row: the full index's, or one trie
        walk, cached.  Of a counted DFA: the tokens allowed at some counter value."""
        index = self.index
        if index is not None:
            return index.rows[index.row_of_state[state]]
        row = self._rows.get(state)
        if row is None:
            loop = self._loop(state) if self.expensive[state] else None
            row = self._loop_row(state, loop) if loop is not None else None
            guards = None
            if self.counted and self.guarded[state]:
                if row is None:  # one walk for both the row and the counter list
                    row = np.zeros(self.trie.words, dtype=np.uint32)
                guards = self._state_guards(state, loop, row)
            elif row is None:
                row = self._walk(state, self._zeros, 0)
            if self.accepting[state]:
                _set_bits(row, self.stop_ids)
            if guards is not None:
                if guards.never.size:
                    row = clear_bits(row, guards.never)
                self._guards[state] = guards  # before the row: a cached row always has its guards
                self._guard_bytes += guards.nbytes
            row = row.view(np.int32)
            row.flags.writeable = False
            self._rows[state] = row  # a race computes the same row twice, never a wrong one
        return row

    def row_at(self, state: int, counter: int) -> np.ndarray:
        """The (read-only, int32) row of (state, counter): the full index's
        ``row_at``, or :meth:`row` minus the tokens the counter no longer fits."""
        index = self.index
        if index is None and self.over_memory:
            index = self.wait()  # the lists passed their memory bound: the full index
        if index is not None:
            return index.row_at(state, counter)
        base = self.row(state)
        if not self.counted:
            return base
        guards = self._guards.get(state)
        if guards is None or counter <= guards.free_upto:
            return base
        return self._rows_above.above(base.view(np.uint32), state, counter, int(self.limit[state]), guards.tok,
                                      guards.neg_k, 0, int(guards.tok.size)).view(np.int32)

    def _walk(self, state: int, score: np.ndarray, limit: int) -> np.ndarray:
        trie = self.trie
        out = np.zeros(trie.words, dtype=np.uint32)
        stack = np.empty(trie.max_depth + 1, dtype=np.int32)
        _walk_live_subtrees(self.transitions, int(state), root_children(trie), trie.node_byte, trie.node_depth,
                            trie.node_end, trie.tok_offsets, trie.tok_ids, self.is_stop, score, int(limit), out,
                            stack)
        return out

    def prefetch(self) -> None:
        """Make the expensive states' rows now (at compile time), so that a
        first visit during decoding costs at most ``LAZY_MAX_NODES`` node visits."""
        for state in np.flatnonzero(self.expensive):
            self.row(int(state))

    def _loop(self, state: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``state``'s loop (module comment above) as (members, canonical
        table), or None where it is too large (the plain walk then)."""
        n = self.n_states
        if self._rev is None:
            self._rev = _reverse_edges(self.transitions)
        scratch = np.full((4, n), -1, dtype=np.int32)
        members = np.empty(MAX_LOOP_STATES, dtype=np.int32)
        table = np.empty((MAX_LOOP_STATES, 256), dtype=np.int16)
        local_of = np.full(n, -1, dtype=np.int32)
        k = _loop_table(self.transitions, self._rev[0], self._rev[1], int(state), LOOP_CYCLE_BYTES, False,
                        MAX_LOOP_STATES, scratch[0], scratch[1], scratch[2], scratch[3], local_of, members, table)
        if k == 1 and not (table[0] == 0).any():  # no loop: the chain ahead, if its positions repeat
            k = _loop_table(self.transitions, self._rev[0], self._rev[1], int(state), LOOP_CYCLE_BYTES, True,
                            MAX_LOOP_STATES, scratch[0], scratch[1], scratch[2], scratch[3], local_of, members,
                            table)
        if k < 1:
            return None
        return members[:k].copy(), np.ascontiguousarray(table[:k])

    def _loop_row(self, state: int, loop: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray | None:
        """``state``'s text tokens through its loop's cached walk (module
        comment above), or None where its component is too large."""
        if loop is None:
            loop = self._loop(state)
            if loop is None:
                return None
        members, table = loop
        trie = self.trie
        inside, exit_node, exit_local = _loop_inside(trie, self.vocab.token_key, table)
        row = inside & ~self.stop_row.view(np.uint32)  # stop ids are never text
        stack = np.empty(trie.max_depth + 1, dtype=np.int32)
        _exit_walks(self.transitions, members, exit_node, exit_local, exit_node.shape[0], trie.node_byte,
                    trie.node_depth, trie.node_end, trie.tok_offsets, trie.tok_ids, self.is_stop, row, stack)
        return row

    def _state_guards(self, state: int, loop: tuple[np.ndarray, np.ndarray] | None,
                      row: np.ndarray) -> StateGuards:
        """A counted state's guard walk (``counted_masks``): through its loop's
        cached guard walk plus the walks below its exits, or over the whole trie
        (then also setting the plain row in ``row``, zeros on entry)."""
        trie = self.trie
        out_tok = np.empty(max(trie.size, 1), dtype=np.int32)
        out_k = np.empty(max(trie.size, 1), dtype=np.int32)
        stacks = [np.empty(trie.max_depth + 1, dtype=np.int32) for _ in range(4)]
        work = np.zeros(1, dtype=np.int64)
        m0 = 0 if self.limit[state] > 0 else 1
        if loop is None:
            n = _guard_walk(self.transitions, self.actions, self.limit, int(state), m0, 0, 0, 1, trie.n_nodes,
                            trie.node_byte, trie.node_depth, trie.node_end, trie.tok_offsets, trie.tok_ids,
                            self.is_stop, out_tok, out_k, 0, *stacks, work, row)
            return state_guards(out_tok[:n], out_k[:n], int(self.limit[state]))
        members, table = loop
        tacts = np.where(table >= 0, self.actions[members], 0).astype(np.int8)  # inside moves only
        # The bounds only matter for a counter set inside a token (mode 1), whose
        # value stays below the token's length: bounds past the longest token
        # are all one, and none is read without a counter set inside the loop
        # (so a string body is one cache entry for any maxLength).
        tlimit = np.minimum(self.limit[members], trie.max_depth).astype(np.int32)
        if m0 == 0 and not (tacts == ACT_SET1).any():
            tlimit[:] = 0
        inside_tok, inside_k, *exits = _loop_guards(trie, self.vocab.token_key, table, tacts, tlimit, m0,
                                                    self.is_stop, self._stop_key)
        n = _exit_guard_walks(self.transitions, self.actions, self.limit, members, *exits, trie.node_byte,
                              trie.node_depth, trie.node_end, trie.tok_offsets, trie.tok_ids, self.is_stop,
                              out_tok, out_k, 0, *stacks, work, _NO_ROW)
        order = by_k_descending(out_k[:n])
        ex_tok, ex_k = _read_only(out_tok[:n][order], np.int32), _read_only(out_k[:n][order], np.int32)
        total = inside_tok.size + n
        tok, k, bad = (np.empty(total, dtype=np.int32) for _ in range(3))
        hi = int(self.limit[state])
        m, nb = _merge_guards(inside_tok, inside_k, ex_tok, ex_k, np.int32(hi), tok, k, bad)
        # Copies where the buffers are mostly unused (the never-fitting tokens are few, but not always).
        out = (bad[:nb].copy(), tok[:m] if 2 * m >= total else tok[:m].copy(), k[:m].copy(), -k[:m])
        for a in out:
            a.flags.writeable = False
        return StateGuards(*out, hi - int(k[0]) if m else int(NO_LIMIT))

    def fill_restricted(self, state: int, budget: int, out: np.ndarray, counter: int = 0) -> None:
        """Only after a failed full build: the tokens whose end state is within
        ``budget - 1`` tokens of the end *by byte distance* (an upper bound of
        the token distance here), stop ids where ``state`` accepts; of a
        counted DFA, those the counter also allows."""
        limit = min(int(budget) - 1, int(UNREACHABLE) - 1)
        out[...] = self._walk(state, self.byte_dist, limit)
        if self.accepting[state] and budget >= 1:
            _set_bits(out, self.stop_ids)
        if self.counted:
            np.bitwise_and(out, self.row_at(state, counter).view(np.uint32), out=out)

    # ------------------------------------------------------- the full build

    def run(self) -> None:
        """Build the full index (once, by whichever thread comes first)."""
        with self._claim:
            if self._claimed:
                return
            self._claimed = True
        try:
            self.index = DFAMaskIndex.build(self.dfa, self.vocab, self.trie, max_work=self.max_work)
            self._rows = {}
        except BaseException as exc:  # noqa: BLE001 - kept, and the rows stay one walk each
            self.error = exc
        finally:
            with self._claim:
                self._done.set()
                callbacks, self._on_ready = self._on_ready, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # noqa: BLE001 - bookkeeping only (the cache's charge)
                pass

    def wait(self) -> DFAMaskIndex | None:
        """The full index, building it here if the background thread has not
        started it yet; None if the build failed."""
        self.run()
        self._done.wait()
        return self.index

    def when_ready(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the full build has finished (at once if it has)."""
        with self._claim:
            if not self._done.is_set():
                self._on_ready.append(callback)
                return
        callback()

    @property
    def ready(self) -> bool:
        return self._done.is_set()

    @property
    def nbytes(self) -> int:
        """The full index's size once built; before, an upper bound of it (one
        row per state, budget tables at most as large again) for the cache."""
        index = self.index
        if index is not None:
            return int(index.nbytes)
        # Counter lists (at most one state's past GUARD_BYTES, 16 bytes a token) and their row memo.
        extra = GUARD_BYTES + 16 * self.trie.size + ROW_MEMO_BYTES if self.counted else 0
        return 2 * self.n_states * self.trie.words * 4 + 64 * self.n_states + extra


# ------------------------------------------------------- the background thread

_jobs: "queue.Queue[PendingMasks]" = queue.Queue()
_worker: threading.Thread | None = None
_worker_lock = threading.Lock()


#: Python's GIL switch interval (seconds) while a background build runs.  The
#: build's Python and numpy code holds the GIL between its nogil kernels; a
#: thread that wants the GIL then (vLLM's scheduler filling masks, the first
#: fill of a new request) waits until the build yields or the interpreter
#: forces a switch, by default after 5 ms.  While a build runs the forced
#: switch comes after this instead (the default is restored when the queue is
#: empty).  ``POOT_BUILD_SWITCH_INTERVAL`` (seconds; 0 leaves it alone).
BUILD_SWITCH_INTERVAL = float(os.environ.get("POOT_BUILD_SWITCH_INTERVAL", "0.0005"))


def _work() -> None:
    import sys

    default = sys.getswitchinterval()
    while True:
        pending = _jobs.get()
        if 0 < BUILD_SWITCH_INTERVAL < default:
            sys.setswitchinterval(BUILD_SWITCH_INTERVAL)
        try:
            pending.run()
        finally:
            if _jobs.empty():  # restored before task_done, so drain() sees the default
                sys.setswitchinterval(default)
            _jobs.task_done()


def drain() -> None:
    """Wait until every queued full build has finished (benchmarks: between
    constraints, so one constraint's build does not run under the next one's timing)."""
    _jobs.join()


#: Full builds queued at most; past it a compile builds its index itself, as
#: without lazy masks (a burst of new constraints cannot queue unbounded work
#: and memory behind the one background thread).
MAX_BACKLOG = 32


def has_room() -> bool:
    """Whether the background thread's queue takes another build."""
    return _jobs.qsize() < MAX_BACKLOG


def submit(pending: PendingMasks) -> None:
    """Queue ``pending``'s full build on this process's one background thread
    (builds run one at a time: a burst of new constraints costs one core)."""
    global _worker
    with _worker_lock:
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_work, name="poot-masks", daemon=True)
            _worker.start()
    _jobs.put(pending)
