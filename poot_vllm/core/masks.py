"""Per-state token masks of a DFA over a vocabulary, computed once at compile time.

For every DFA state ``s`` the allowed-token bitmask (int32 words, bit ``t & 31``
of word ``t >> 5``, ``(size + 31) // 32`` words) has token ``t`` set iff

* walking ``t``'s bytes from ``s`` never reaches the dead state (-1), and
* the state it ends in can still finish the reply *with this vocabulary's
  tokens* (``min_tokens_to_accept`` is finite there);

and every stop id set iff ``s`` is accepting.  The DFA guarantees every state
can reach acceptance byte by byte; the second condition matters only for
vocabularies that cannot spell every byte (no byte fallback): without it a
token could lead into a state from which no token continues, leaving an empty
mask.  For byte-complete vocabularies it never removes anything.

The hot path (``DFAMatcher.fill_bitmask``) is then a row copy.  Identical rows
are stored once (``rows[row_of_state[s]]``), so memory is
``n_unique_rows * words * 4`` bytes plus small per-state arrays (``nbytes``).

The walk is a numba kernel over the preorder trie (:mod:`poot_vllm.core.token_trie`)
that skips a whole subtree as soon as the DFA dies, so a state costs only its
live trie nodes.  :func:`_walk_trie` is the general walk: the API
server's shortest-reply search (:func:`_shortest_text_tokens`, used by
``budget``), the restricted-mask fallback and the json_object closing masks
(``grammar.json_budget``) run it on their own data.  The mask build runs
its plain-DFA twin :func:`_walk_pairs` (same order, same skipping, same work
count), which also reports each token's end state for the budget tables.
The jitted callers stay in this file
(numba's on-disk cache does not notice a change to a jitted callee in another
file); ``json_budget`` calls it from Python, with its scanner as tables.  Kernels are compiled with ``cache=True`` (numba writes them
next to this module, or to ``NUMBA_CACHE_DIR`` if set, or to the per-user cache
when the package directory is read-only) so compilation happens once per
machine; :func:`warm_up` compiles them ahead of the first request.  If no cache
location is writable, kernels are compiled per process instead (a couple of
seconds, once).

Budgets: ``min_tokens_to_accept[s]`` is the fewest tokens that complete a reply
from ``s`` (1 in an accepting state: the stop token; 0 there if the vocabulary
has no stop ids).  :meth:`DFAMaskIndex.restricted_mask` allows only tokens after
which the reply can still complete within a token budget.  It reads budget
tables made at build time (:func:`_build_budget_tables`: per state, the tokens
grouped by the distance of their end state, all groups but one stored and
shared between states), so decoding near the budget is a row copy plus a few
bit edits, not a trie walk.  The build's walk (:func:`_walk_pairs`, the
plain-DFA twin of ``_walk_trie`` that also reports each token's end state)
records what the tables need, so they cost no second walk.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from poot_vllm.core.errors import LimitExceeded, UnsupportedConstruct
from poot_vllm.core.token_trie import TokenTrie, _build_trie

from poot_vllm.core.jit import jit_kernel as _jit
from poot_vllm.core.table_graph import backward_bfs, read_only as _read_only

#: ``min_tokens_to_accept`` of a state from which no token sequence completes.
UNREACHABLE = np.int32(2**30)


#: A packed ``trans[c, b]`` value ``v >= 0`` is the next state ``v & STATE_MASK``
#: and, for machines with a container stack, an action ``v >> ACTION_SHIFT``.
ACTION_SHIFT = 24
STATE_MASK = (1 << ACTION_SHIFT) - 1
ACT_PUSH = 1  #: open a container (the packed next state already names its kind)
ACT_POP = 2   #: close the innermost container (``retop`` then names the one below)


@_jit
def _take_tokens(tok_ids, is_stop, a, b, end, row, write_row, collect, seen, stamp, succ_out, n_succ):
    """One trie node's tokens ``tok_ids[a:b]``, which end in state ``end``: set
    the non-stop ones in ``row`` (if ``write_row``), and with ``collect`` record
    ``end`` once per walk (``seen``/``stamp``).  Returns the successor count."""
    any_set = False
    for k in range(a, b):
        t = tok_ids[k]
        if not is_stop[t]:
            any_set = True
            if not write_row:
                break  # successors only: one text token is enough
            row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
    if collect and any_set and seen[end] != stamp:
        seen[end] = stamp
        succ_out[n_succ] = end
        n_succ += 1
    return n_succ


@_jit
def _walk_trie(trans, start, has_stack, level0, kinds0, top_of, retop,
               node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop,
               score, limit, row, collect, seen, stamp, succ_out, stack, levels, work):
    """The one trie walk: set in ``row`` (uint32 words, zeroed here) every
    non-stop token whose bytes, read from state ``start``, end in a state ``e``
    with ``score[e] + level <= limit``.  Returns the number of successors collected.

    The walk skips a whole trie subtree as soon as ``trans`` says dead (-1), so
    it costs only the live trie nodes.  Every trie walk in poot is this kernel,
    with its data picking the work: a DFA mask (``score`` = token distances),
    the budget BFS (``collect``: successors only), and the json_object closing
    masks (a byte machine with a container stack; see ``json_budget``).

    Plain DFA (``has_stack`` False): ``trans`` holds next states, the level
    stays 0 and ``level0``, ``kinds0``, ``top_of``, ``retop``, ``levels`` are unused.
    With ``has_stack``: ``trans`` values are packed (``ACTION_SHIFT``); a
    push raises the level, a pop lowers it and re-reads the kind of the
    container now innermost (from the nearest state on the walk at that level,
    else ``kinds0[level]``, the stack before the walk) through
    ``retop[state, kind]``; ``top_of[state]`` is a state's innermost kind.

    With ``collect``, also write the distinct end states of the set tokens to
    ``succ_out`` (``seen``/``stamp``: visited marker); an empty ``row`` then
    skips the mask itself (the budget BFS needs only successors).  ``work[0]`` is
    increased by the trie nodes visited (what ``Limits.max_mask_work`` bounds).
    """
    row[:] = 0
    write_row = row.shape[0] > 0
    n_succ = 0
    # Tokens with empty bytes live on the root and end where they start.
    if score[start] + level0 <= limit:
        n_succ = _take_tokens(tok_ids, is_stop, tok_offsets[0], tok_offsets[1], start, row, write_row,
                              collect, seen, stamp, succ_out, n_succ)
    stack[0] = start
    if has_stack:
        levels[0] = level0
    n_nodes = node_byte.shape[0]
    i = 1
    visited = 0
    while i < n_nodes:
        visited += 1
        d = node_depth[i]
        nxt = trans[stack[d - 1], node_byte[i]]
        if nxt < 0:
            i = node_end[i]  # every token below this prefix dies too
            continue
        lvl = 0
        if has_stack:
            lvl = levels[d - 1]
            action = nxt >> ACTION_SHIFT
            nxt &= STATE_MASK
            if action == ACT_PUSH:
                lvl += 1
            elif action == ACT_POP:
                lvl -= 1
                kind = -1
                j = d - 1
                while j >= 0:
                    if levels[j] == lvl:
                        kind = top_of[stack[j]]
                        break
                    j -= 1
                if kind < 0:
                    kind = kinds0[lvl]
                nxt = retop[nxt, kind]
            levels[d] = lvl
        stack[d] = nxt
        a = tok_offsets[i]
        b = tok_offsets[i + 1]
        if a < b and score[nxt] + lvl <= limit:
            n_succ = _take_tokens(tok_ids, is_stop, a, b, nxt, row, write_row,
                                  collect, seen, stamp, succ_out, n_succ)
        i += 1
    work[0] += visited
    return n_succ


#: Placeholders for a plain DFA walk's unused container-stack arguments (read-only,
#: like the real tables, so each kernel has one specialisation).
_NO_KINDS = np.zeros(1, dtype=np.int32)
_NO_KINDS.flags.writeable = False
_NO_RETOP = np.zeros((1, 1), dtype=np.int32)
_NO_RETOP.flags.writeable = False


@_jit
def _walk_dfa(trans, s, node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop,
              end_dist, dist_limit, row, collect, seen, stamp, succ_out, stack, work):
    """:func:`_walk_trie` from DFA state ``s``: tokens whose end state ``e`` has
    ``end_dist[e] <= dist_limit``."""
    return _walk_trie(trans, s, False, 0, _NO_KINDS, _NO_KINDS, _NO_RETOP,
                      node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop,
                      end_dist, dist_limit, row, collect, seen, stamp, succ_out, stack, stack, work)


@_jit
def _shortest_text_tokens(trans, start, accepting, node_byte, node_depth, node_end, tok_offsets, tok_ids,
                          is_stop, max_depth, max_work):
    """Fewest text tokens from ``start`` to an accepting DFA state (BFS over the
    one-token successor graph, each state's successors from one trie walk),
    ``-1`` if none, ``-2`` if the trie-node visits pass ``max_work``
    (``max_work < 0``: no cap)."""
    if accepting[start]:
        return 0
    n = trans.shape[0]
    dist = np.full(n, -1, dtype=np.int32)
    queue = np.empty(n, dtype=np.int32)
    dist[start] = 0
    queue[0] = start
    head = 0
    tail = 1
    no_filter = np.zeros(n, dtype=np.int32)
    seen = np.full(n, -1, dtype=np.int32)
    succ = np.empty(n, dtype=np.int32)
    row = np.empty(0, dtype=np.uint32)  # successors only: no mask row to write
    stack = np.empty(max_depth + 1, dtype=np.int32)
    work = np.zeros(1, dtype=np.int64)
    while head < tail:
        s = queue[head]
        head += 1
        k = _walk_dfa(trans, s, node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop,
                      no_filter, 0, row, True, seen, s, succ, stack, work)
        for j in range(k):
            e = succ[j]
            if dist[e] < 0:
                dist[e] = dist[s] + 1
                if accepting[e]:
                    return dist[e]
                queue[tail] = e
                tail += 1
        if max_work >= 0 and work[0] > max_work:
            return -2
    return -1


@_jit
def _all_successors(trans, walk, known_offsets, known_states, node_byte, node_depth, node_end, tok_offsets,
                    tok_ids, is_stop, max_depth, work):
    """Each state's distinct one-token successors (CSR: offsets, sorted states):
    one :func:`_walk_dfa` per state with ``walk[s]`` (no rows written), the
    known CSR's list for the others (a counted DFA's distances, on its table
    without increments: states that cannot reach an increment within a token
    walk as on the full table)."""
    n = trans.shape[0]
    no_filter = np.zeros(n, dtype=np.int32)
    seen = np.full(n, -1, dtype=np.int32)
    succ = np.empty(n, dtype=np.int32)
    row = np.empty(0, dtype=np.uint32)
    stack = np.empty(max_depth + 1, dtype=np.int32)
    offsets = np.zeros(n + 1, dtype=np.int64)
    flat = np.empty(4 * n + 16, dtype=np.int32)
    m = 0
    for s in range(n):
        if walk[s]:
            k = _walk_dfa(trans, s, node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop,
                          no_filter, 0, row, True, seen, s, succ, stack, work)
        else:
            k = known_offsets[s + 1] - known_offsets[s]
            succ[:k] = known_states[known_offsets[s]:known_offsets[s + 1]]
        if m + k > flat.shape[0]:
            grown = np.empty(2 * (m + k), dtype=np.int32)
            grown[:m] = flat[:m]
            flat = grown
        flat[m:m + k] = np.sort(succ[:k])
        m += k
        offsets[s + 1] = m
    return offsets, flat[:m].copy()


@_jit
def _live_byte_sums(trans, weights, lead, weighted, read):
    """One pass over a DFA's table (see :func:`live_byte_sums`)."""
    for s in range(trans.shape[0]):
        c = 0
        w = 0
        for b in range(256):
            if trans[s, b] >= 0:
                if b < 0x80 or b >= 0xC0:
                    c += 1
                w += weights[b]
                read[b] = True
        lead[s] = c
        weighted[s] = w


_NO_WEIGHTS = np.zeros(256, dtype=np.int64)
_NO_WEIGHTS.flags.writeable = False


def live_byte_sums(trans: np.ndarray, weights: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per state of ``trans`` (int32, C-contiguous): its live bytes that can start
    a UTF-8 character (int64), the sum of ``weights`` (int64, per byte) over its
    live bytes (int64); and per byte, whether any state reads it.  One numba pass:
    the numpy spelling (a bool matrix, a bool @ int64 product) cost 0.1-0.4 ms
    per compile on a few hundred states, every compile."""
    n = trans.shape[0]
    lead = np.empty(n, dtype=np.int64)
    weighted = np.empty(n, dtype=np.int64)
    read = np.zeros(256, dtype=np.bool_)
    _live_byte_sums(_read_only(trans, np.int32), _NO_WEIGHTS if weights is None else _read_only(weights, np.int64),
                    lead, weighted, read)
    return lead, weighted, read


def dfa_byte_sums(dfa: Any, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`live_byte_sums` of ``dfa``'s table, kept with the DFA for the last
    ``weights`` asked (``None``: any; the caller reads the weight-free sums
    only): an engine compile asks four times (the lazy check, the work
    estimate, the work bound and the expensive states), ~0.1 ms a pass on a
    few hundred states."""
    got = _byte_sums.get(dfa)
    if got is not None and (weights is None or got[0] is weights):
        return got[1]
    sums = live_byte_sums(kernel_tables(dfa)[0], weights)
    _byte_sums[dfa] = (weights, sums)
    return sums


_byte_sums: "weakref.WeakKeyDictionary[Any, tuple[np.ndarray | None, tuple]]" = weakref.WeakKeyDictionary()


@_jit
def _token_distances(succ_offsets, succ_states, accepting, stop_cost, unreachable):
    """Fewest tokens from each state to a finished reply: multi-source BFS
    backwards over the one-token successor graph (all edges cost one token)."""
    n = accepting.shape[0]
    pred_offsets = np.zeros(n + 1, dtype=np.int64)
    for k in range(succ_states.shape[0]):
        pred_offsets[succ_states[k] + 1] += 1
    for s in range(n):
        pred_offsets[s + 1] += pred_offsets[s]
    cursor = pred_offsets[:-1].copy()
    preds = np.empty(succ_states.shape[0], dtype=np.int32)
    for s in range(n):
        for k in range(succ_offsets[s], succ_offsets[s + 1]):
            e = succ_states[k]
            preds[cursor[e]] = s
            cursor[e] += 1
    return backward_bfs(pred_offsets, preds, accepting, stop_cost, unreachable)


def warm_up() -> None:
    """Compile (or load from numba's cache) the kernels on a toy input, so the
    first real compile does not pay for it.  Safe to call from any thread."""
    # "aa+" with tokens "a", "aa": state 0's tokens end 1 and 2 tokens from a
    # finished reply, so it gets a budget table (compiling the grouping kernels).
    trans = np.full((3, 256), -1, dtype=np.int32)
    trans[0, 97] = 1
    trans[1, 97] = 2
    trans[2, 97] = 2
    vocab = _ToyVocab((b"a", b"aa", None), frozenset({2}), 3)
    trie = _build_trie(vocab.token_bytes, vocab.size)  # not TokenTrie.build: keep the cache for real ones
    index = DFAMaskIndex.build(_ToyDFA(trans, np.array([False, False, True]), 0), vocab, trie)
    live_byte_sums(trans)
    row = np.zeros(index.words, dtype=np.int32)
    index.restricted_mask(0, 2, row)
    index._walk_restricted(0, 2, row.view(np.uint32))  # the walk kept for states past the tables' bound
    # A counted DFA (counted_masks): its walks, and a row near a region's bound.
    from poot_vllm.core.automata.compilers import regex_to_dfa

    counted = regex_to_dfa("a{0,16}")
    index = DFAMaskIndex.build(counted, vocab, trie)
    s = int(np.argmax(counted.counter_limit))
    index.row_at(s, int(counted.counter_limit[s]))
    index.fill_restricted_at(s, int(counted.counter_limit[s]), 1, row.view(np.uint32))


@dataclass(frozen=True)
class _ToyDFA:
    transitions: np.ndarray
    accepting: np.ndarray
    start: int


@dataclass(frozen=True)
class _ToyVocab:
    token_bytes: tuple
    stop_ids: frozenset
    size: int
    kind: str = "raw"


@dataclass(frozen=True, eq=False)
class _Rows:
    rows: np.ndarray
    row_of_state: np.ndarray
    succ_offsets: np.ndarray
    succ_states: np.ndarray
    #: Per state: tokens recorded by end state (-1: not recorded), the
    #: majority end state, and the recorded (token, end) pairs, CSR.
    rec_n: np.ndarray
    rec_maj: np.ndarray
    rec_offsets: np.ndarray
    rec_tok: np.ndarray
    rec_end: np.ndarray


def _set_bits(words: np.ndarray, ids: np.ndarray) -> None:
    """Set bits ``ids`` in uint32 ``words``."""
    np.bitwise_or.at(words, ids >> 5, np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32)))


def kernel_tables(dfa: Any) -> tuple[np.ndarray, np.ndarray]:
    """The DFA's transitions (int32) and acceptance as C-contiguous read-only views
    (whatever the DFA's own flags), so every kernel call has one array type: one
    numba specialisation, compiled by warm_up."""
    trans = np.ascontiguousarray(dfa.transitions, dtype=np.int32).view()
    trans.flags.writeable = False
    accepting = np.ascontiguousarray(dfa.accepting, dtype=np.bool_).view()
    accepting.flags.writeable = False
    if trans.ndim != 2 or trans.shape[1] != 256 or accepting.shape != (trans.shape[0],):
        raise ValueError(f"bad DFA shapes: transitions {trans.shape}, accepting {accepting.shape}")
    return trans, accepting


def kernel_stops(vocab: Any, trie: TokenTrie) -> tuple[np.ndarray, np.ndarray]:
    """The vocabulary's stop ids (sorted int32) and a per-token stop flag, read-only
    (one numba specialisation, shared with restricted_mask).  Kept with the trie
    per stop set: every compile asks twice, and a fresh 128k flag array each
    time cost ~0.04 ms of the time to a first mask."""
    key = frozenset(vocab.stop_ids)
    per_trie = _stops.get(trie)
    if per_trie is None:
        per_trie = _stops[trie] = {}
    got = per_trie.get(key)
    if got is None:
        stop_ids = np.array(sorted(t for t in key if 0 <= t < trie.size), dtype=np.int32)
        is_stop = np.zeros(trie.size, dtype=np.bool_)
        is_stop[stop_ids] = True
        stop_ids.flags.writeable = False
        is_stop.flags.writeable = False
        got = (stop_ids, is_stop)
        if len(per_trie) >= _STOP_SETS_PER_TRIE:  # clients choose stop sets: bounded, oldest first
            try:
                per_trie.pop(next(iter(per_trie)), None)
            except (RuntimeError, StopIteration):  # another thread changed it meanwhile: it stays bounded
                pass
        per_trie[key] = got
    return got


_STOP_SETS_PER_TRIE = 64
_stops: "weakref.WeakKeyDictionary[TokenTrie, dict[frozenset, tuple[np.ndarray, np.ndarray]]]" = \
    weakref.WeakKeyDictionary()


#: The build's Python loops (dedupe lookups, a few us per state) give up the
#: GIL every this many + 1 states: a build on a background thread
#: (``lazy_masks``) or on vLLM's compile pool then delays the scheduler's own
#: Python by tens of microseconds, not by a whole chunk's loop (~1 ms).
_YIELD_EVERY = 31

#: Rows computed per numba call (bounds the scratch buffer), and the
#: successor buffer's minimum size (a call stops early when it might overflow).
_CHUNK_BYTES = 4 * 1024 * 1024
_SUCC_CHUNK = 1 << 16


@_jit
def _walk_states(trans, lo, hi, node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop,
                 end_dist, dist_limit, accepting, stop_ids, rows, hashes, succ_counts, succ_flat,
                 seen, succ_buf, stack, work, max_work, pair_tok, pair_end, cnt,
                 rec_n, rec_maj, rec_tok, rec_end, rec_left):
    """The trie walk (:func:`_walk_pairs`) for states ``lo..hi-1`` into
    ``rows[0..]`` (stop ids set in accepting states), with a 64-bit FNV-1a hash
    of each row in ``hashes`` and each state's sorted distinct successors
    appended to ``succ_flat`` (``succ_counts`` per state).

    For the budget tables it also keeps each state's tokens by end state,
    without a second walk: ``rec_maj[j]`` is the end state most tokens reach,
    and the other tokens go to ``rec_tok``/``rec_end`` (``rec_n[j]`` of them;
    -1 once ``rec_left[0]`` tokens are recorded in all, and those states are
    walked again if they need a table).

    Returns ``(states done, successors written, over, tokens recorded)``: it
    stops early before ``succ_flat`` or ``rec_tok`` could overflow, and right
    after the state at which ``work[0]`` passes ``max_work`` (``over``;
    ``max_work < 0``: unbounded).
    """
    n = trans.shape[0]
    n_vocab = is_stop.shape[0]
    m = 0
    r = 0
    for s in range(lo, hi):
        if m + n > succ_flat.shape[0] or r + n_vocab > rec_tok.shape[0]:
            return s - lo, m, False, r
        j = s - lo
        row = rows[j]
        n_pairs, k = _walk_pairs(trans, s, node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop,
                                 end_dist, dist_limit, pair_tok, pair_end, row, seen, succ_buf, cnt, stack, work)
        if max_work >= 0 and work[0] > max_work:
            return j + 1, m, True, r
        if accepting[s]:
            for t in stop_ids:
                row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
        succ_flat[m:m + k] = np.sort(succ_buf[:k])
        succ_counts[j] = k
        m += k
        maj = -1
        most = 0
        for q in range(k):
            e = succ_buf[q]
            if cnt[e] > most:
                most = cnt[e]
                maj = e
        rec_maj[j] = maj
        others = n_pairs - most
        if others == 0:
            rec_n[j] = 0
        elif others <= rec_left[0]:
            for i in range(n_pairs):
                if pair_end[i] != maj:
                    rec_tok[r] = pair_tok[i]
                    rec_end[r] = pair_end[i]
                    r += 1
            rec_left[0] -= others
            rec_n[j] = others
        else:
            rec_n[j] = -1
        h = np.uint64(14695981039346656037)
        for w in row:
            h = (h ^ np.uint64(w)) * np.uint64(1099511628211)
        hashes[j] = h
    return hi - lo, m, False, r


#: Tokens the mask build keeps by end state for the budget tables, at most
#: (transient: 8 bytes each); states past it are walked a second time.
_RECORD_MAX_TOKENS = 4 * 1024 * 1024


def _build_rows(trans: np.ndarray, accepting: np.ndarray, trie: TokenTrie, stop_ids: np.ndarray,
                is_stop: np.ndarray, end_dist: np.ndarray | None = None, dist_limit: int = 0,
                work: np.ndarray | None = None, max_work: int | None = None) -> _Rows:
    """Walk the trie from every state: deduplicated rows plus the successor CSR.

    ``work[0]`` accumulates the trie nodes visited; past ``max_work`` the build
    stops with :class:`LimitExceeded` (checked after each state: one state
    costs at most the trie's node count, a few ms).
    """
    if work is None:
        work = np.zeros(1, dtype=np.int64)
    n = trans.shape[0]
    words = trie.words
    if end_dist is None:  # first pass: no distance filter
        end_dist = np.zeros(n, dtype=np.int32)
        # Read-only like the real distances, so numba compiles one specialisation.
        end_dist.flags.writeable = False
    seen = np.full(n, -1, dtype=np.int32)
    succ_buf = np.empty(n, dtype=np.int32)
    stack = np.empty(trie.max_depth + 1, dtype=np.int32)
    # The per-state loop runs in numba a chunk of states at a time (no Python
    # per state but the dedupe lookup): chunk rows, their hashes, successors.
    chunk = max(1, min(n, _CHUNK_BYTES // (4 * words)))
    buf = np.zeros((chunk, words), dtype=np.uint32)
    hashes = np.zeros(chunk, dtype=np.uint64)
    succ_counts = np.zeros(chunk, dtype=np.int64)
    succ_flat = np.empty(max(n, _SUCC_CHUNK), dtype=np.int32)
    limit = -1 if max_work is None else int(max_work)
    pair_tok = np.empty(max(trie.size, 1), dtype=np.int32)
    pair_end = np.empty(max(trie.size, 1), dtype=np.int32)
    cnt = np.zeros(n, dtype=np.int64)
    rec_n = np.zeros(n, dtype=np.int64)
    rec_maj = np.full(n, -1, dtype=np.int32)
    rec_tok = np.empty(2 * max(trie.size, 1024), dtype=np.int32)
    rec_end = np.empty(rec_tok.size, dtype=np.int32)
    rec_left = np.array([_RECORD_MAX_TOKENS], dtype=np.int64)
    rec_parts: list[tuple[np.ndarray, np.ndarray]] = []

    unique: list[np.ndarray] = []
    index_of: dict[int, int] = {}
    row_of_state = np.empty(n, dtype=np.int32)
    succ_offsets = np.zeros(n + 1, dtype=np.int64)
    succ_parts: list[np.ndarray] = []
    s = 0
    while s < n:
        done, m, over, r = _walk_states(trans, s, min(n, s + chunk), trie.node_byte, trie.node_depth,
                                        trie.node_end, trie.tok_offsets, trie.tok_ids, is_stop, end_dist, dist_limit,
                                        accepting, stop_ids, buf, hashes, succ_counts, succ_flat, seen, succ_buf,
                                        stack, work, limit, pair_tok, pair_end, cnt, rec_n[s:], rec_maj[s:],
                                        rec_tok, rec_end, rec_left)
        rec_parts.append((rec_tok[:r].copy(), rec_end[:r].copy()))
        if over:
            raise LimitExceeded(
                "computing the token masks of this constraint", "max_mask_work", max_work,
                "trie-node visits", f"stopped after {s + done} of {n} automaton states; constraints with "
                "many states inside free-text strings (long patterns, many string properties) cost most")
        succ_parts.append(succ_flat[:m].copy())
        np.cumsum(succ_counts[:done], out=succ_offsets[s + 1:s + done + 1])
        succ_offsets[s + 1:s + done + 1] += succ_offsets[s]
        for j in range(done):
            if j & _YIELD_EVERY == _YIELD_EVERY:
                time.sleep(0)  # let other threads take the GIL (see _YIELD_EVERY)
            # 64-bit hash as the dedupe key; equality is still checked, so a
            # collision costs a duplicate row, never a wrong one.
            key = int(hashes[j])
            u = index_of.get(key)
            if u is None or not np.array_equal(unique[u], buf[j]):
                u = len(unique)
                unique.append(buf[j].copy())
                index_of.setdefault(key, u)
            row_of_state[s + j] = u
        s += done
    rows = np.stack(unique).view(np.int32) if unique else np.zeros((0, words), dtype=np.int32)
    succ_states = np.concatenate(succ_parts).astype(np.int32) if succ_parts else np.zeros(0, np.int32)
    rec_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.maximum(rec_n, 0), out=rec_offsets[1:])
    rec_tok = np.concatenate([p[0] for p in rec_parts]) if rec_parts else np.zeros(0, np.int32)
    rec_end = np.concatenate([p[1] for p in rec_parts]) if rec_parts else np.zeros(0, np.int32)
    return _Rows(rows, row_of_state, succ_offsets, succ_states, rec_n, rec_maj, rec_offsets, rec_tok, rec_end)


# --------------------------------------------------------------- budget tables
#
# A restricted mask (``restricted_mask``) keeps the tokens whose end state is
# within ``budget - 1`` tokens of a finished reply.  Per state, the allowed
# text tokens fall into a few groups by the distance of their end state, so
# each restricted mask is the plain row minus the groups that are too far, or
# the union of the groups that are near enough.  The build stores, for each
# state whose successors lie at two or more distances, every group but the
# largest (the "implicit" one: the plain row minus the others), deduplicated
# across states; decode time then touches only the stored tokens.

#: ``budget_info`` columns, one row per state (int32): the plain row, the
#: budget at and above which the plain row is the answer, the state's entries
#: ``[lo, hi)`` in ``budget_entry_*``, whether it accepts, and how its
#: restricted masks are made (``BUDGET_*``).
_I_ROW, _I_PLAIN, _I_LO, _I_HI, _I_ACC, _I_KIND = range(6)
BUDGET_NONE = 0   #: every text token at one distance: a restricted mask is stops or nothing
BUDGET_TABLE = 1  #: groups stored: a copy plus set/clear of the stored groups' bits
BUDGET_WALK = 2   #: over the table memory bound: one trie walk per restricted mask


@_jit
def _walk_pairs(trans, s, node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop,
                score, limit, pair_tok, pair_end, row, seen, succ_out, cnt, stack, work):
    """Every non-stop token whose bytes walk from ``s`` to a state ``e`` with
    ``score[e] <= limit``, as ``(pair_tok[i], pair_end[i] = e)``; returns
    ``(their count, successors)``.  The plain-DFA case of :func:`_walk_trie`
    (same order, same subtree skipping, same ``work``), for the callers that
    need each token's end state: the mask build (:func:`_walk_states`) and the
    budget groups (:func:`_budget_groups`).  Like ``_walk_trie`` with
    ``collect``, it also sets the tokens in ``row`` (uint32 words, zeroed here;
    skipped if empty) and lists the distinct end states in ``succ_out``
    (``seen[e] == s`` marks them), with ``cnt[e]`` tokens each."""
    write_row = row.shape[0] > 0
    if write_row:
        row[:] = 0
    n = 0
    k = 0
    n_nodes = node_byte.shape[0]
    stack[0] = s
    i = 0  # the root: tokens with no bytes end where they start
    nxt = s
    visited = 0
    while i < n_nodes:
        if i > 0:
            visited += 1
            d = node_depth[i]
            nxt = trans[stack[d - 1], node_byte[i]]
            if nxt < 0:
                i = node_end[i]  # every token below this prefix dies too
                continue
            stack[d] = nxt
        a = tok_offsets[i]
        b = tok_offsets[i + 1]
        if a < b and score[nxt] <= limit:
            m0 = n
            for q in range(a, b):
                t = tok_ids[q]
                if not is_stop[t]:
                    pair_tok[n] = t
                    pair_end[n] = nxt
                    n += 1
                    if write_row:
                        row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
            if n > m0:
                if seen[nxt] != s:
                    seen[nxt] = s
                    succ_out[k] = nxt
                    cnt[nxt] = 0
                    k += 1
                cnt[nxt] += n - m0
        i += 1
    work[0] += visited
    return n, k


@_jit
def _budget_groups(trans, states, lo, node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop,
                   dist, unreachable, rec_n, rec_maj, rec_offsets, rec_tok, rec_end,
                   pair_tok, pair_end, pair_dist, stack, counts, cursor,
                   state_n_entries, ent_dist, ent_len, ent_explicit, ent_hash, toks, work,
                   no_row, seen, succ, cnt):
    """Group the text tokens of ``states[lo:]`` by end distance (counting sort,
    ascending distance, trie order within a group): per state its entries
    (distance, size, explicit, FNV-1a hash of the tokens) and the explicit
    groups' tokens, concatenated in ``toks``.  One group is implicit (not
    written): the distance of the majority end state where the mask build
    recorded the state's other tokens (``rec_n[s] >= 0``: no walk here), else
    the largest group of a fresh walk.  Returns ``(states done, entries,
    tokens)``, stopping before the buffers could overflow.  ``counts`` and
    ``cursor`` are zeroed scratch indexed by distance (< n_states + 2)."""
    n_vocab = is_stop.shape[0]
    ne = 0
    nt = 0
    n_states = trans.shape[0]
    for j in range(lo, states.shape[0]):
        if ne + n_states + 2 > ent_dist.shape[0] or nt + n_vocab > toks.shape[0]:
            return j - lo, ne, nt
        s = states[j]
        if rec_n[s] >= 0:
            n = rec_n[s]
            o = rec_offsets[s]
            for i in range(n):
                pair_tok[i] = rec_tok[o + i]
                pair_dist[i] = dist[rec_end[o + i]]
            forced = dist[rec_maj[s]]
        else:
            n, _ = _walk_pairs(trans, s, node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop,
                               dist, unreachable - 1, pair_tok, pair_end, no_row, seen, succ, cnt, stack, work)
            for i in range(n):
                pair_dist[i] = dist[pair_end[i]]
            forced = -1
        dmin = unreachable
        dmax = -1
        if forced >= 0:
            dmin = forced
            dmax = forced
        for i in range(n):
            d = pair_dist[i]
            counts[d] += 1
            if d < dmin:
                dmin = d
            if d > dmax:
                dmax = d
        best = forced
        if best < 0:
            best = dmin
            for d in range(dmin, dmax + 1):
                if counts[d] > counts[best]:
                    best = d
        e0 = ne
        c = nt
        for d in range(dmin, dmax + 1):
            if counts[d] == 0 and d != best:
                continue
            ent_dist[ne] = d
            ent_len[ne] = counts[d]
            ent_explicit[ne] = d != best
            if d != best:
                cursor[d] = c
                c += counts[d]
            ne += 1
        for i in range(n):
            d = pair_dist[i]
            if d != best:
                toks[cursor[d]] = pair_tok[i]
                cursor[d] += 1
        c = nt
        for e in range(e0, ne):
            h = np.uint64(14695981039346656037)
            if ent_explicit[e]:
                for k in range(c, c + ent_len[e]):
                    h = (h ^ np.uint64(toks[k])) * np.uint64(1099511628211)
                c += ent_len[e]
            ent_hash[e] = h
        nt = c
        for d in range(dmin, dmax + 1):
            counts[d] = 0
            cursor[d] = 0
        state_n_entries[j - lo] = ne - e0
    return states.shape[0] - lo, ne, nt


@_jit
def _budget_row(s, budget, info, rows, stop_ids, ent_dist, ent_ref, grp_offsets, grp_tokens, out):
    """The restricted mask of ``s`` for a ``budget`` (see
    :meth:`DFAMaskIndex.restricted_mask`) into ``out`` (uint32 words), for a
    state whose kind is not ``BUDGET_WALK``: a row copy, then the set or clear
    of the stored groups' bits (whichever side holds the implicit group)."""
    plain = rows[info[s, _I_ROW]]
    if budget >= info[s, _I_PLAIN]:
        out[:] = plain
        return
    limit = budget - 1
    lo = info[s, _I_LO]
    hi = info[s, _I_HI]
    implicit_near = False
    for e in range(lo, hi):
        if ent_ref[e] < 0:
            implicit_near = ent_dist[e] <= limit
    if implicit_near:  # the plain row (stops included: budget >= 1 here) minus the far groups
        out[:] = plain
        for e in range(lo, hi):
            g = ent_ref[e]
            if g >= 0 and ent_dist[e] > limit:
                for k in range(grp_offsets[g], grp_offsets[g + 1]):
                    t = grp_tokens[k]
                    out[t >> 5] &= ~(np.uint32(1) << np.uint32(t & 31))
        return
    out[:] = 0
    for e in range(lo, hi):  # the near groups (all stored: the implicit one is far)
        g = ent_ref[e]
        if g >= 0 and ent_dist[e] <= limit:
            for k in range(grp_offsets[g], grp_offsets[g + 1]):
                t = grp_tokens[k]
                out[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
    if info[s, _I_ACC] and budget >= 1:
        for t in stop_ids:
            out[t >> 5] |= np.uint32(1) << np.uint32(t & 31)


#: The budget tables may hold at most this much beyond the plain rows'
#: size (their own bound: ``max(rows.nbytes, BUDGET_TABLE_MIN_BYTES)``);
#: states past it keep the trie walk.
BUDGET_TABLE_MIN_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, eq=False)
class _BudgetTables:
    info: np.ndarray         # int32 (n_states, 6): the ``_I_*`` columns
    ent_dist: np.ndarray     # int32 (n_entries,): a group's end distance, ascending per state
    ent_ref: np.ndarray      # int32 (n_entries,): its stored group, -1 for the implicit one
    grp_offsets: np.ndarray  # int64 (n_groups + 1,)
    grp_tokens: np.ndarray   # int32: the stored groups' token ids
    work: int                # trie nodes the grouping walks visited
    rows_u32: np.ndarray     # the index's rows as uint32 words (a view: what the kernel copies)


def _build_budget_tables(trans: np.ndarray, accepting: np.ndarray, trie: TokenTrie, is_stop: np.ndarray,
                         dist: np.ndarray, plain_budget: np.ndarray, built: _Rows, max_bytes: int) -> _BudgetTables:
    """The per-state distance groups behind :meth:`DFAMaskIndex.restricted_mask`.

    Only states whose successors lie at two or more distances need one (with
    one distance, a restricted mask has no text token at all).  Their tokens
    come from what the mask build recorded (its tokens by end state); only
    states it could not record (past ``_RECORD_MAX_TOKENS``) are walked again.  Groups are stored
    once however many states share them (a 64-bit hash, equality checked), and
    at most ``max_bytes`` of token ids: the states past that bound are marked
    ``BUDGET_WALK``.
    """
    n = trans.shape[0]
    info = np.zeros((n, 6), dtype=np.int32)
    info[:, _I_ROW] = built.row_of_state
    succ_offsets, succ_states = built.succ_offsets, built.succ_states
    info[:, _I_PLAIN] = plain_budget
    info[:, _I_ACC] = accepting
    need = np.zeros(n, dtype=np.bool_)
    has = succ_offsets[1:] > succ_offsets[:-1]
    if succ_states.size:
        ds = dist[succ_states]
        starts = succ_offsets[:-1][has]
        need[has] = np.minimum.reduceat(ds, starts) != np.maximum.reduceat(ds, starts)
    states = np.flatnonzero(need).astype(np.int32)

    ent_dist: list[int] = []
    ent_ref: list[int] = []
    groups: list[bytes] = []  # each an int32 token-id array's bytes
    group_of: dict[tuple[int, int], list[int]] = {}
    stored = 0
    work = np.zeros(1, dtype=np.int64)
    if states.size:
        size = trie.size
        pair_tok = np.empty(max(size, 1), dtype=np.int32)
        pair_end = np.empty(max(size, 1), dtype=np.int32)
        pair_dist = np.empty(max(size, 1), dtype=np.int32)
        stack = np.empty(trie.max_depth + 1, dtype=np.int32)
        counts = np.zeros(n + 2, dtype=np.int64)
        cursor = np.zeros(n + 2, dtype=np.int64)
        cap_e = 2 * (n + 2) + 4096
        n_entries = np.zeros(states.size, dtype=np.int64)
        e_dist = np.empty(cap_e, dtype=np.int32)
        e_len = np.empty(cap_e, dtype=np.int64)
        e_explicit = np.empty(cap_e, dtype=np.bool_)
        e_hash = np.empty(cap_e, dtype=np.uint64)
        toks = np.empty(4 * max(size, 1024), dtype=np.int32)
        j = 0
        while j < states.size:
            done, _, _ = _budget_groups(trans, states, j, trie.node_byte, trie.node_depth, trie.node_end,
                                        trie.tok_offsets, trie.tok_ids, is_stop, dist, UNREACHABLE, built.rec_n,
                                        built.rec_maj, built.rec_offsets, built.rec_tok, built.rec_end, pair_tok,
                                        pair_end, pair_dist, stack, counts, cursor, n_entries, e_dist, e_len,
                                        e_explicit, e_hash, toks, work, np.zeros(0, dtype=np.uint32),
                                        np.full(n, -1, dtype=np.int32), np.empty(n, dtype=np.int32),
                                        np.zeros(n, dtype=np.int64))
            e = 0
            c = 0
            # Python per entry (a few per state), on lists: the dedupe lookup.
            n_of, dist_of, len_of = n_entries[:done].tolist(), e_dist.tolist(), e_len.tolist()
            explicit_of, hash_of = e_explicit.tolist(), e_hash.tolist()
            for k in range(done):
                if k & _YIELD_EVERY == _YIELD_EVERY:
                    time.sleep(0)  # let other threads take the GIL (see _YIELD_EVERY)
                s = int(states[j + k])
                m = n_of[k]
                refs: list[int] = []
                new_bytes = 0
                fresh: list[tuple[tuple[int, int], bytes]] = []
                for q in range(e, e + m):
                    if not explicit_of[q]:
                        refs.append(-1)
                        continue
                    length = len_of[q]
                    # 64-bit hash as the dedupe key, equality still checked (a
                    # collision costs a duplicate group, never a wrong one).
                    data = toks[c:c + length].tobytes()
                    c += length
                    key = (hash_of[q], length)
                    g = next((g for g in group_of.get(key, ()) if groups[g] == data), None)
                    if g is None:
                        g = len(groups) + len(fresh)
                        fresh.append((key, data))
                        new_bytes += len(data)
                    refs.append(g)
                if stored + new_bytes > max_bytes:
                    info[s, _I_KIND] = BUDGET_WALK
                else:
                    for key, data in fresh:
                        group_of.setdefault(key, []).append(len(groups))
                        groups.append(data)
                    stored += new_bytes
                    info[s, _I_KIND] = BUDGET_TABLE
                    info[s, _I_LO] = len(ent_dist)
                    ent_dist.extend(dist_of[e:e + m])
                    ent_ref.extend(refs)
                    info[s, _I_HI] = len(ent_dist)
                e += m
            j += done
    grp_offsets = np.zeros(len(groups) + 1, dtype=np.int64)
    if groups:
        np.cumsum([len(g) // 4 for g in groups], out=grp_offsets[1:])
    grp_tokens = np.frombuffer(b"".join(groups), dtype=np.int32).copy()
    rows_u32 = built.rows.view(np.uint32)
    rows_u32.flags.writeable = False
    return _BudgetTables(info, np.array(ent_dist, dtype=np.int32), np.array(ent_ref, dtype=np.int32),
                         grp_offsets, grp_tokens.astype(np.int32, copy=False), int(work[0]), rows_u32)


@dataclass(frozen=True, eq=False)
class DFAMaskIndex:
    """Everything a :class:`~poot_vllm.core.matchers.dfa.DFAMatcher` needs, read-only after build
    (shared by every request using the same compiled constraint)."""

    dfa: Any                 # poot_vllm.core.automata.dfa.DFA
    vocab: Any               # poot_vllm.core.vocabulary.TokenVocabulary
    trie: TokenTrie
    transitions: np.ndarray  # int32 (n_states, 256), C-contiguous copy used by the kernels
    accepting: np.ndarray    # bool (n_states,)
    stop_ids: np.ndarray     # int32, sorted: the vocabulary's stop ids
    is_stop: np.ndarray      # bool (size,)
    rows: np.ndarray         # int32 (n_unique_rows, words)
    row_of_state: np.ndarray  # int32 (n_states,)
    stop_row: np.ndarray     # int32 (words,): only the stop ids (what a finished reply allows)
    #: Fewest tokens that finish a reply from each state (stop token included);
    #: ``UNREACHABLE`` where no token sequence can.
    min_tokens_to_accept: np.ndarray  # int32 (n_states,)
    #: Smallest remaining budget at which the plain row already keeps every
    #: allowed token finishable in time (below it, use ``restricted_mask``).
    plain_row_budget: np.ndarray  # int32 (n_states,)
    #: Distinct one-token successors of each state, CSR (for budget work).
    succ_offsets: np.ndarray  # int64 (n_states + 1,)
    succ_states: np.ndarray   # int32
    #: Token cost of a stop (1, or 0 when the vocabulary has no stop ids).
    stop_cost: int
    build_seconds: float
    #: Trie nodes the build visited (what ``Limits.max_mask_work`` bounds).
    mask_work: int = 0
    #: What ``restricted_mask`` reads instead of walking the trie (see
    #: :func:`_build_budget_tables`); None only for indexes built before them.
    budget: _BudgetTables | None = None
    #: Seconds the budget tables took after the walk (part of ``build_seconds``).
    budget_seconds: float = 0.0
    #: A counted DFA's counter tables (:mod:`poot_vllm.core.counted_masks`);
    #: None for a plain DFA.  Rows above are then each state's tokens allowed at
    #: some counter value, and distances hold for every counter value.
    counter: Any = None

    @property
    def n_states(self) -> int:
        return int(self.transitions.shape[0])

    @property
    def words(self) -> int:
        return self.trie.words

    @property
    def n_unique_rows(self) -> int:
        return int(self.rows.shape[0])

    @property
    def nbytes(self) -> int:
        """Memory this index holds beyond the DFA and the (shared) trie."""
        arrays = [self.rows, self.row_of_state, self.stop_row, self.is_stop, self.min_tokens_to_accept,
                  self.plain_row_budget, self.succ_offsets, self.succ_states]
        if self.budget is not None:
            b = self.budget
            arrays += [b.info, b.ent_dist, b.ent_ref, b.grp_offsets, b.grp_tokens]
        return sum(a.nbytes for a in arrays) + (self.counter.nbytes if self.counter is not None else 0)

    @property
    def budget_nbytes(self) -> int:
        """The part of ``nbytes`` that the budget tables take."""
        b = self.budget
        return 0 if b is None else sum(a.nbytes for a in (b.info, b.ent_dist, b.ent_ref, b.grp_offsets,
                                                           b.grp_tokens))

    def row(self, state: int) -> np.ndarray:
        """The cached (read-only) mask row of ``state`` (of a counted DFA: at some counter value)."""
        return self.rows[self.row_of_state[state]]

    def row_at(self, state: int, counter: int) -> np.ndarray:
        """The (read-only, int32) mask row of ``state`` with ``counter`` (any DFA; the counter is
        ignored without one)."""
        if self.counter is None:
            return self.rows[self.row_of_state[state]]
        return self.counter.row(self.rows.view(np.uint32), self.row_of_state, state, counter).view(np.int32)

    def fill_restricted_at(self, state: int, counter: int, budget: int, out: np.ndarray) -> None:
        """:meth:`fill_restricted` for (state, counter): the tokens near enough the end that
        the counter also allows (distances hold for every counter value)."""
        self.fill_restricted(state, budget, out)
        if self.counter is not None and counter > self.counter.free_upto[state]:
            np.bitwise_and(out, self.row_at(state, counter).view(np.uint32), out=out)
        elif self.counter is not None:
            np.bitwise_and(out, self.rows[self.row_of_state[state]].view(np.uint32), out=out)

    def restricted_mask(self, state: int, budget: int, out_row: np.ndarray) -> None:
        """Write to ``out_row`` the tokens allowed in ``state`` after which the reply
        can still finish within ``budget`` tokens in total (the token itself
        included): a text token whose end state ``e`` has
        ``min_tokens_to_accept[e] <= budget - 1``, a stop id iff ``state`` is
        accepting and ``budget >= 1``.  Empty if ``budget < min_tokens_to_accept[state]``.
        """
        if out_row.dtype != np.int32 or out_row.shape != (self.words,):
            raise ValueError(f"out_row must be int32 of shape ({self.words},), got {out_row.dtype} {out_row.shape}")
        # Clamped into int32 range: every budget past it gives the plain row, every one below 0 the same as -1.
        budget = max(-1, min(int(budget), int(UNREACHABLE)))
        self.fill_restricted(int(state), budget, out_row.view(np.uint32))

    def fill_restricted(self, state: int, budget: int, out: np.ndarray) -> None:
        """:meth:`restricted_mask` into uint32 words, unchecked (the matcher's hot path)."""
        b = self.budget
        if b is not None and b.info[state, _I_KIND] != BUDGET_WALK:
            # A copy and the stored groups' bits (numba, GIL released): no trie walk.
            _budget_row(state, budget, b.info, b.rows_u32, self.stop_ids, b.ent_dist,
                        b.ent_ref, b.grp_offsets, b.grp_tokens, out)
            return
        self._walk_restricted(state, budget, out)

    def _walk_restricted(self, state: int, budget: int, out: np.ndarray) -> None:
        """``restricted_mask`` by one trie walk (states past the tables' memory bound)."""
        trie = self.trie
        stack = np.empty(trie.max_depth + 1, dtype=np.int32)
        limit = min(int(budget) - 1, int(UNREACHABLE) - 1)
        _walk_dfa(self.transitions, int(state), trie.node_byte, trie.node_depth, trie.node_end,
                    trie.tok_offsets, trie.tok_ids, self.is_stop, self.min_tokens_to_accept, limit,
                    out, False, _NO_SEEN, 0, _NO_SEEN, stack, np.zeros(1, dtype=np.int64))
        if self.accepting[state] and budget >= 1:
            _set_bits(out, self.stop_ids)

    @classmethod
    def build(cls, dfa: Any, vocab: Any, trie: TokenTrie | None = None,
              max_work: int | None = None, budget_table_bytes: int | None = None) -> "DFAMaskIndex":
        """Compute every state's mask, token distances and budget tables.

        ``budget_table_bytes`` bounds the budget tables' token ids (default
        ``max(rows.nbytes, BUDGET_TABLE_MIN_BYTES)``: at most the size of the
        masks themselves); states past it keep one trie walk per restricted mask.

        Raises :class:`~poot_vllm.core.errors.UnsupportedConstruct` if the model's
        tokens cannot spell any complete reply from the start state, and
        :class:`~poot_vllm.core.errors.LimitExceeded` once the walks visit more than
        ``max_work`` trie nodes (``Limits.max_mask_work``; None: unbounded).
        """
        t0 = time.perf_counter()
        if trie is None:
            trie = TokenTrie.build(vocab)
        elif trie.size != vocab.size:
            raise ValueError(f"trie is for vocab size {trie.size}, vocabulary has {vocab.size}")
        trans, accepting = kernel_tables(dfa)
        stop_ids, is_stop = kernel_stops(vocab, trie)
        stop_cost = 1 if stop_ids.size else 0

        work = np.zeros(1, dtype=np.int64)
        built = _build_rows(trans, accepting, trie, stop_ids, is_stop, work=work, max_work=max_work)
        counted = getattr(dfa, "actions", None) is not None
        if counted:
            # Distances over the moves every counter value allows (no increments):
            # witnessed by real replies whatever the counter (see counters.without_increments).
            from poot_vllm.core.automata.counters import without_increments
            from poot_vllm.core.counted_masks import states_near_increments

            noinc = without_increments(trans, dfa.actions).view()
            noinc.flags.writeable = False
            near = states_near_increments(trans, dfa.actions, trie.max_depth)
            d_offsets, d_states = _all_successors(noinc, near, built.succ_offsets, built.succ_states,
                                                  trie.node_byte, trie.node_depth, trie.node_end,
                                                  trie.tok_offsets, trie.tok_ids, is_stop,
                                                  np.int64(trie.max_depth), work)
        else:
            d_offsets, d_states = built.succ_offsets, built.succ_states
        dist = _token_distances(d_offsets, d_states, accepting, np.int32(stop_cost), UNREACHABLE)
        dist.flags.writeable = False
        start = int(dfa.start)
        if dist[start] >= UNREACHABLE:
            raise UnsupportedConstruct(
                "no sequence of this model's tokens spells a reply that matches the constraint "
                "(the vocabulary lacks tokens for some required bytes); change the constraint")
        if (dist >= UNREACHABLE).any():
            # Some states are token-dead: redo the walk, refusing tokens that end in one.
            built = _build_rows(trans, accepting, trie, stop_ids, is_stop, dist, int(UNREACHABLE) - 1,
                                work=work, max_work=max_work)

        plain_budget = np.zeros(trans.shape[0], dtype=np.int32)
        offs, succ = built.succ_offsets, built.succ_states
        has_succ = offs[1:] > offs[:-1]
        if succ.size:
            succ_max = np.maximum.reduceat(dist[succ], offs[:-1][has_succ])
            plain_budget[has_succ] = succ_max + 1
        plain_budget[accepting] = np.maximum(plain_budget[accepting], stop_cost)
        plain_budget[dist >= UNREACHABLE] = 0

        stop_row = np.zeros(trie.words, dtype=np.uint32)
        _set_bits(stop_row, stop_ids)
        stop_row = stop_row.view(np.int32)

        counter = None
        if counted:
            from dataclasses import replace

            from poot_vllm.core.counted_masks import build_counter_masks

            counter, rows, row_of_state = build_counter_masks(dfa, trans, trie, is_stop, built.rows,
                                                              built.row_of_state, work, max_work)
            built = replace(built, rows=rows, row_of_state=row_of_state)

        t1 = time.perf_counter()
        budget = _build_budget_tables(trans, accepting, trie, is_stop, dist, plain_budget, built,
                                      max(int(built.rows.nbytes), BUDGET_TABLE_MIN_BYTES)
                                      if budget_table_bytes is None else int(budget_table_bytes))
        t2 = time.perf_counter()

        arrays = (built.rows, built.row_of_state, stop_row, dist,
                  plain_budget, built.succ_offsets, built.succ_states,
                  budget.info, budget.ent_dist, budget.ent_ref, budget.grp_offsets, budget.grp_tokens)
        for a in arrays:
            a.flags.writeable = False
        return cls(dfa, vocab, trie, trans, accepting, stop_ids, is_stop, built.rows, built.row_of_state, stop_row,
                   dist, plain_budget, built.succ_offsets, built.succ_states, stop_cost,
                   t2 - t0, int(work[0]), budget, t2 - t1, counter)


_NO_SEEN = np.zeros(1, dtype=np.int32)  # placeholder when successors are not collected


#: A state with at least this many live bytes (e.g. inside a JSON string,
#: ``.``) is assumed to let the walk visit most of the trie.
WIDE_STATE_BYTES = 128
#: Trie nodes per vocabulary token (~2.1 for byte-level BPE at 128k tokens):
#: what a wide state costs, per token.
TRIE_NODES_PER_TOKEN = 2


def estimate_mask_work(dfa: Any, vocab_size: int) -> int:
    """A cheap, vocabulary-free estimate of :meth:`DFAMaskIndex.build`'s work
    (trie-node visits), for refusing a constraint on the API server before the
    engine is asked.

    Measured against a 128k byte-level vocabulary (~2 trie nodes per token), a
    state inside free text visits about the whole trie, one inside a JSON
    string about half of it, and a state with few live bytes far less.  So
    each state is charged
    ``TRIE_NODES_PER_TOKEN * vocab_size * min(1, lead_bytes / WIDE_STATE_BYTES)``, where
    ``lead_bytes`` counts the live bytes that can start a character (UTF-8
    continuation bytes 0x80-0xBF do not: few tokens start with one, so states
    inside a multi-byte character are cheap), and at least
    ``1 / WIDE_STATE_BYTES``: about the real cost for wide states, an
    over-estimate for narrow ones (which cost little in total).  The engine
    counts the real work and stops at the same limit.
    """
    lead, _, _ = dfa_byte_sums(dfa)
    frac = np.clip(lead, 1, WIDE_STATE_BYTES) / WIDE_STATE_BYTES
    limit = getattr(dfa, "counter_limit", None)
    if limit is not None:  # a counted region's states also walk for the counter (counted_masks)
        frac = frac * np.where(np.asarray(limit) > 0, 2, 1)
    return int(float(frac.sum()) * TRIE_NODES_PER_TOKEN * int(vocab_size))
