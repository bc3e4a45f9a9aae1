"""A DFA table as a graph: predecessors and shortest distances to acceptance.

Shared by the mask index (token distances over one-token successors), the
lazy masks (byte distances straight from the table) and the counted masks
(how far a token may carry into a counted region); numba kernels over the
dense ``(n, 256)`` int32 tables every automaton in poot uses.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poot_vllm.core.automata.counters import ACT_INC
from poot_vllm.core.jit import jit_kernel as _jit


def read_only(a: np.ndarray, dtype: Any) -> np.ndarray:
    """A C-contiguous read-only view: one numba specialisation per kernel, whoever
    owns the array (read-only and writable arrays are distinct numba types)."""
    view = np.ascontiguousarray(a, dtype=dtype).view()
    view.flags.writeable = False
    return view


@_jit
def backward_bfs(pred_offsets, preds, accepting, stop_cost, unreachable):
    """Per state, the fewest edges to an accepting state, plus ``stop_cost``
    (``unreachable`` where none): a BFS backwards over the predecessors in CSR
    (``preds[pred_offsets[e]:pred_offsets[e + 1]]`` lead to ``e``)."""
    n = accepting.shape[0]
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


@_jit
def table_predecessors(trans, acts, counted):
    """A DFA table's edges by target (CSR ``preds[offsets[t]:offsets[t + 1]]``), one
    per (state, successor) run of bytes (repeats would only cost re-checks);
    with ``counted``, no ``ACT_INC`` edge (``counters.without_increments``)."""
    n = trans.shape[0]
    offsets = np.zeros(n + 1, dtype=np.int64)
    for s in range(n):
        last = -1
        for b in range(256):
            t = trans[s, b]
            if t >= 0 and t != last and not (counted and acts[s, b] == ACT_INC):
                offsets[t + 1] += 1
                last = t
    for s in range(n):
        offsets[s + 1] += offsets[s]
    cursor = offsets[:-1].copy()
    preds = np.empty(offsets[n], dtype=np.int32)
    for s in range(n):
        last = -1
        for b in range(256):
            t = trans[s, b]
            if t >= 0 and t != last and not (counted and acts[s, b] == ACT_INC):
                preds[cursor[t]] = s
                cursor[t] += 1
                last = t
    return offsets, preds


#: ``table_predecessors`` of a table without counter actions.
NO_ACTIONS = np.zeros((1, 256), dtype=np.int8)
NO_ACTIONS.flags.writeable = False
