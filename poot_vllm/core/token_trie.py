"""The vocabulary's token byte strings as a flat trie, built once per vocabulary.

Mask computation walks this trie from every DFA state; sharing prefixes means a
byte that kills the DFA prunes every token starting with that prefix at once.
The trie is stored as numpy arrays in DFS preorder so a numba kernel can walk it
without recursion:

* ``node_byte[i]``   the byte on the edge into node ``i`` (node 0 is the root);
* ``node_depth[i]``  the length of the prefix node ``i`` spells;
* ``node_end[i]``    one past the last node of ``i``'s subtree (skip target);
* ``tok_offsets`` / ``tok_ids``  (CSR): the token ids whose bytes end at node ``i``
  are ``tok_ids[tok_offsets[i]:tok_offsets[i + 1]]``.

Every id with bytes (not ``None``) is in the trie; tokens with empty bytes sit
on the root (allowed in every live state).  Stop ids are not the trie's
business: the trie depends only on ``token_bytes``, so vocabularies that differ
only in their stop ids (one per request's stop set) share one trie, and the
mask builder treats stop ids specially.

Building uses sorting and longest-common-prefix arithmetic in numpy rather than
a Python dict trie (< 1 s for a 152k vocabulary).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from poot_vllm.core.cache import compiled_cache

#: How many prefix columns the vectorised LCP compares; longer shared prefixes
#: (rare) are finished in Python.
_LCP_COLUMNS = 16


@dataclass(frozen=True, eq=False)
class TokenTrie:
    """Token byte strings of one vocabulary as a preorder-flattened trie."""

    node_byte: np.ndarray    # uint8 (n_nodes,)
    node_depth: np.ndarray   # int32 (n_nodes,)
    node_end: np.ndarray     # int32 (n_nodes,)
    tok_offsets: np.ndarray  # int32 (n_nodes + 1,)
    tok_ids: np.ndarray      # int32 (n_trie_tokens,)
    max_depth: int
    #: The model vocab size (bitmask width is ``(size + 31) // 32`` words).
    size: int

    @property
    def n_nodes(self) -> int:
        return int(self.node_byte.shape[0])

    @property
    def words(self) -> int:
        """int32 words per bitmask row."""
        return (self.size + 31) // 32

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.node_byte, self.node_depth, self.node_end,
                                      self.tok_offsets, self.tok_ids))

    @classmethod
    def build(cls, vocab: Any) -> "TokenTrie":
        """The trie of ``vocab`` (a ``TokenVocabulary``).

        Cached in the process's compiled-artefact cache by the vocabulary's
        ``token_key`` (token bytes, size, kind -- not stop ids), so the
        vocabularies of requests with other stop ids share one trie; built
        once even when several compile threads ask at the same time.
        """
        key = ("trie", vocab.token_key)
        return compiled_cache().get_or_build(key, lambda: _build_trie(vocab.token_bytes, vocab.size))


def _freeze(*arrays: np.ndarray) -> None:
    # The trie is shared by every compile and fill thread: make accidental
    # writes fail loudly.
    for a in arrays:
        a.flags.writeable = False


def _build_trie(token_bytes: "tuple[bytes | None, ...]", size: int) -> TokenTrie:
    if len(token_bytes) > size:
        raise ValueError(f"vocabulary has {len(token_bytes)} token strings but size {size}")

    # Group ids by their bytes (several ids may spell the same string).
    ids_of: dict[bytes, list[int]] = {}
    for tid, b in enumerate(token_bytes):
        if b is None:
            continue
        ids_of.setdefault(b, []).append(tid)
    root_ids = ids_of.pop(b"", [])
    keys = sorted(ids_of)
    n = len(keys)

    groups = [ids_of[k] for k in keys]
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=n)
    buf = np.frombuffer(b"".join(keys), dtype=np.uint8)
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])

    lcp = _sorted_lcp(keys, buf, starts, lengths)

    # String i adds the nodes for its depths lcp[i]+1 .. len[i] (>= 1 node since
    # the keys are distinct and sorted, so a prefix precedes its extensions);
    # emitting them string by string is exactly DFS preorder.
    new = lengths - lcp
    first_node = np.ones(n + 1, dtype=np.int64)  # node 0 is the root
    np.cumsum(new, out=first_node[1:])
    first_node[1:] += 1
    n_nodes = int(first_node[-1]) if n else 1

    owner = np.repeat(np.arange(n, dtype=np.int64), new)
    depth_body = (np.arange(n_nodes - 1, dtype=np.int64) - (first_node[owner] - 1)) + lcp[owner] + 1
    node_depth = np.zeros(n_nodes, dtype=np.int32)
    node_depth[1:] = depth_body
    node_byte = np.zeros(n_nodes, dtype=np.uint8)
    node_byte[1:] = buf[starts[owner] + depth_body - 1]

    # Subtree end of the node string i opens at depth d: the first node of the
    # next string j > i with lcp[j] < d (it leaves that subtree), else the end.
    node_end = np.empty(n_nodes, dtype=np.int32)
    node_end[0] = n_nodes
    firsts = np.append(first_node[:n], n_nodes)  # sentinel for "no such j"
    max_depth = int(lengths.max()) if n else 0
    order = np.argsort(depth_body, kind="stable")
    bounds = np.searchsorted(depth_body[order], np.arange(1, max_depth + 2))
    for d in range(1, max_depth + 1):
        body = order[bounds[d - 1]:bounds[d]]  # body indices of nodes at depth d
        if body.size == 0:
            continue
        breakers = np.flatnonzero(lcp < d)
        nxt = np.searchsorted(breakers, owner[body], side="right")
        j = np.where(nxt < breakers.size, breakers[np.minimum(nxt, breakers.size - 1)], n)
        node_end[body + 1] = firsts[j]

    # Token ids per node (CSR): string i ends at its last new node.
    counts = np.zeros(n_nodes, dtype=np.int64)
    counts[0] = len(root_ids)
    terminal = first_node[1:] - 1 if n else np.zeros(0, dtype=np.int64)
    counts[terminal] = np.fromiter(map(len, groups), dtype=np.int64, count=n)
    tok_offsets = np.zeros(n_nodes + 1, dtype=np.int32)
    np.cumsum(counts, out=tok_offsets[1:])
    tok_ids = np.fromiter(itertools.chain(root_ids, itertools.chain.from_iterable(groups)),
                          dtype=np.int32, count=int(tok_offsets[-1]))

    _freeze(node_byte, node_depth, node_end, tok_offsets, tok_ids)
    return TokenTrie(node_byte, node_depth, node_end, tok_offsets, tok_ids, max_depth, size)


def _sorted_lcp(keys: list[bytes], buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """lcp[i] = common prefix length of keys[i-1] and keys[i]; lcp[0] = 0."""
    n = len(keys)
    lcp = np.zeros(n, dtype=np.int64)
    if n < 2:
        return lcp
    width = _LCP_COLUMNS
    # First `width` bytes of each key, padded with 256 (never equal to a byte).
    head = np.full((n, width), 256, dtype=np.int16)
    take = np.minimum(lengths, width)
    rows = np.repeat(np.arange(n), take)
    cols = np.arange(int(take.sum())) - np.repeat(np.cumsum(take) - take, take)
    head[rows, cols] = buf[starts[:-1][rows] + cols]
    differs = head[1:] != head[:-1]
    found = differs.any(axis=1)
    first = differs.argmax(axis=1)
    # A mismatch at the padding means the shorter key ended: that is the lcp.
    lcp[1:] = np.where(found, first, width)
    for i in np.flatnonzero(~found) + 1:  # share >= width bytes: finish by hand
        a, b = keys[i - 1], keys[i]
        k = width
        m = min(len(a), len(b))
        while k < m and a[k] == b[k]:
            k += 1
        lcp[i] = k
    return lcp
