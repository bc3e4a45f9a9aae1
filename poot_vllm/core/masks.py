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
live trie nodes.  It is poot's only trie walk (:func:`_walk_trie`): the
API server's shortest-reply search (:func:`_shortest_text_tokens`, used by
``budget``) and the json_object closing masks (``grammar.json_budget``) run
the same kernel on their own data.  Its jitted callers stay in this file
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
which the reply can still complete within a token budget.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from poot_vllm.core.errors import LimitExceeded, UnsupportedConstruct
from poot_vllm.core.token_trie import TokenTrie, _build_trie

try:
    import numba
except ImportError as exc:  # pragma: no cover - numba ships with vLLM
    raise ImportError("poot_vllm needs numba (pip install numba); it is a vLLM dependency") from exc

#: ``min_tokens_to_accept`` of a state from which no token sequence completes.
UNREACHABLE = np.int32(2**30)


def _jit(fn: Callable) -> Callable:
    """``njit(cache=True, nogil=True)``, without the on-disk cache if no location is writable."""
    try:
        return numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        warnings.warn("poot: no writable numba cache directory (set NUMBA_CACHE_DIR); "
                      "mask kernels are compiled in every process", RuntimeWarning, stacklevel=2)
        return numba.njit(nogil=True)(fn)


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
    dist = np.full(n, unreachable, dtype=np.int32)
    queue = np.empty(n, dtype=np.int32)
    tail = 0
    for s in range(n):
        if accepting[s]:
            dist[s] = stop_cost
            queue[tail] = s
            tail += 1
    head = 0
    while head < tail:
        e = queue[head]
        head += 1
        for k in range(pred_offsets[e], pred_offsets[e + 1]):
            p = preds[k]
            if dist[p] == unreachable:
                dist[p] = dist[e] + 1
                queue[tail] = p
                tail += 1
    return dist


def warm_up() -> None:
    """Compile (or load from numba's cache) the kernels on a toy input, so the
    first real compile does not pay for it.  Safe to call from any thread."""
    trans = np.full((2, 256), -1, dtype=np.int32)
    trans[0, 97] = 1
    trans[1, 97] = 1
    vocab = _ToyVocab((b"a", b"aa", None), frozenset({2}), 3)
    trie = _build_trie(vocab.token_bytes, vocab.size)  # not TokenTrie.build: keep the cache for real ones
    index = DFAMaskIndex.build(_ToyDFA(trans, np.array([False, True]), 0), vocab, trie)
    index.restricted_mask(0, 1, np.zeros(index.words, dtype=np.int32))


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


def _set_bits(words: np.ndarray, ids: np.ndarray) -> None:
    """Set bits ``ids`` in uint32 ``words``."""
    np.bitwise_or.at(words, ids >> 5, np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32)))


#: Rows computed per numba call (bounds the scratch buffer), and the
#: successor buffer's minimum size (a call stops early when it might overflow).
_CHUNK_BYTES = 4 * 1024 * 1024
_SUCC_CHUNK = 1 << 16


@_jit
def _walk_states(trans, lo, hi, node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop,
                 end_dist, dist_limit, accepting, stop_ids, rows, hashes, succ_counts, succ_flat,
                 seen, succ_buf, stack, work, max_work):
    """:func:`_walk_dfa` for states ``lo..hi-1`` into ``rows[0..]`` (stop ids set
    in accepting states), with a 64-bit FNV-1a hash of each row in ``hashes``
    and each state's sorted distinct successors appended to ``succ_flat``
    (``succ_counts`` per state).

    Returns ``(states done, successors written, over)``: it stops early before
    ``succ_flat`` could overflow, and right after the state at which
    ``work[0]`` passes ``max_work`` (``over``; ``max_work < 0``: unbounded).
    """
    n = trans.shape[0]
    m = 0
    for s in range(lo, hi):
        if m + n > succ_flat.shape[0]:
            return s - lo, m, False
        j = s - lo
        row = rows[j]
        k = _walk_dfa(trans, s, node_byte, node_depth, node_end, tok_offsets, tok_ids, is_stop,
                        end_dist, dist_limit, row, True, seen, s, succ_buf, stack, work)
        if max_work >= 0 and work[0] > max_work:
            return j + 1, m, True
        if accepting[s]:
            for t in stop_ids:
                row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
        succ_flat[m:m + k] = np.sort(succ_buf[:k])
        succ_counts[j] = k
        m += k
        h = np.uint64(14695981039346656037)
        for w in row:
            h = (h ^ np.uint64(w)) * np.uint64(1099511628211)
        hashes[j] = h
    return hi - lo, m, False


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

    unique: list[np.ndarray] = []
    index_of: dict[int, int] = {}
    row_of_state = np.empty(n, dtype=np.int32)
    succ_offsets = np.zeros(n + 1, dtype=np.int64)
    succ_parts: list[np.ndarray] = []
    s = 0
    while s < n:
        done, m, over = _walk_states(trans, s, min(n, s + chunk), trie.node_byte, trie.node_depth, trie.node_end,
                                     trie.tok_offsets, trie.tok_ids, is_stop, end_dist, dist_limit, accepting,
                                     stop_ids, buf, hashes, succ_counts, succ_flat, seen, succ_buf, stack,
                                     work, limit)
        if over:
            raise LimitExceeded(
                "computing the token masks of this constraint", "max_mask_work", max_work,
                "trie-node visits", f"stopped after {s + done} of {n} automaton states; constraints with "
                "many states inside free-text strings (long patterns, many string properties) cost most")
        succ_parts.append(succ_flat[:m].copy())
        np.cumsum(succ_counts[:done], out=succ_offsets[s + 1:s + done + 1])
        succ_offsets[s + 1:s + done + 1] += succ_offsets[s]
        for j in range(done):
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
    return _Rows(rows, row_of_state, succ_offsets, succ_states)


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
        return sum(a.nbytes for a in (self.rows, self.row_of_state, self.stop_row, self.is_stop,
                                      self.min_tokens_to_accept, self.plain_row_budget,
                                      self.succ_offsets, self.succ_states))

    def row(self, state: int) -> np.ndarray:
        """The cached (read-only) mask row of ``state``."""
        return self.rows[self.row_of_state[state]]

    def restricted_mask(self, state: int, budget: int, out_row: np.ndarray) -> None:
        """Write to ``out_row`` the tokens allowed in ``state`` after which the reply
        can still finish within ``budget`` tokens in total (the token itself
        included): a text token whose end state ``e`` has
        ``min_tokens_to_accept[e] <= budget - 1``, a stop id iff ``state`` is
        accepting and ``budget >= 1``.  Empty if ``budget < min_tokens_to_accept[state]``.
        """
        if out_row.dtype != np.int32 or out_row.shape != (self.words,):
            raise ValueError(f"out_row must be int32 of shape ({self.words},), got {out_row.dtype} {out_row.shape}")
        out = out_row.view(np.uint32)
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
              max_work: int | None = None) -> "DFAMaskIndex":
        """Compute every state's mask and token distances.

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
        # A read-only view (whatever the DFA's own flags) so every kernel call
        # has one array type: one numba specialisation, compiled by warm_up.
        trans = np.ascontiguousarray(dfa.transitions, dtype=np.int32).view()
        trans.flags.writeable = False
        accepting = np.ascontiguousarray(dfa.accepting, dtype=np.bool_).view()
        accepting.flags.writeable = False
        if trans.ndim != 2 or trans.shape[1] != 256 or accepting.shape != (trans.shape[0],):
            raise ValueError(f"bad DFA shapes: transitions {trans.shape}, accepting {accepting.shape}")
        stop_ids = np.array(sorted(t for t in vocab.stop_ids if 0 <= t < trie.size), dtype=np.int32)
        is_stop = np.zeros(trie.size, dtype=np.bool_)
        is_stop[stop_ids] = True
        # Frozen before the walks so every kernel call sees read-only arrays
        # (one numba specialisation, shared with restricted_mask).
        stop_ids.flags.writeable = False
        is_stop.flags.writeable = False
        stop_cost = 1 if stop_ids.size else 0

        work = np.zeros(1, dtype=np.int64)
        built = _build_rows(trans, accepting, trie, stop_ids, is_stop, work=work, max_work=max_work)
        dist = _token_distances(built.succ_offsets, built.succ_states, accepting,
                                np.int32(stop_cost), UNREACHABLE)
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

        arrays = (built.rows, built.row_of_state, stop_row, dist,
                  plain_budget, built.succ_offsets, built.succ_states)
        for a in arrays:
            a.flags.writeable = False
        return cls(dfa, vocab, trie, trans, accepting, stop_ids, is_stop, built.rows, built.row_of_state, stop_row,
                   dist, plain_budget, built.succ_offsets, built.succ_states, stop_cost,
                   time.perf_counter() - t0, int(work[0]))


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
    live = np.asarray(dfa.transitions) >= 0
    lead = live[:, :0x80].sum(axis=1) + live[:, 0xC0:].sum(axis=1)
    frac = np.clip(lead, 1, WIDE_STATE_BYTES) / WIDE_STATE_BYTES
    return int(float(frac.sum()) * TRIE_NODES_PER_TOKEN * int(vocab_size))
