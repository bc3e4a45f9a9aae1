"""Test helpers for masks/matcher tests: small DFAs, synthetic vocabularies, oracles.

The DFAs and vocabularies are the real ``DFA`` / ``TokenVocabulary``: a
constructor that refuses a helper's object is a failure, not a stand-in.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections import deque
from pathlib import Path

import numpy as np

from poot_vllm.core.automata.dfa import DFA
from poot_vllm.core.vocabulary import TokenVocabulary


def make_dfa(transitions: np.ndarray, accepting: np.ndarray, start: int) -> DFA:
    return DFA(transitions=np.ascontiguousarray(transitions, dtype=np.int32),
               accepting=np.asarray(accepting, dtype=bool), start=start)


def make_vocab(token_bytes, stop_ids, size: int, kind: str = "byte_level") -> TokenVocabulary:
    token_bytes = tuple(token_bytes) + (None,) * (size - len(token_bytes))
    return TokenVocabulary(token_bytes=token_bytes, stop_ids=frozenset(stop_ids), size=size, kind=kind)


# --------------------------------------------------------------------- DFAs

def trim(trans: np.ndarray, accepting: np.ndarray, start: int):
    """Keep states reachable from start and co-reachable to acceptance; renumber.
    Returns None if the language is empty."""
    n = trans.shape[0]
    reach = {start}
    todo = [start]
    while todo:
        s = todo.pop()
        for t in set(trans[s].tolist()) - {-1}:
            if t not in reach:
                reach.add(t)
                todo.append(t)
    live = {s for s in range(n) if accepting[s]}
    changed = True
    while changed:
        changed = False
        for s in range(n):
            if s not in live and any(t in live for t in trans[s].tolist() if t >= 0):
                live.add(s)
                changed = True
    keep = sorted(reach & live)
    if start not in keep:
        return None
    new_id = {s: i for i, s in enumerate(keep)}
    out = np.full((len(keep), 256), -1, dtype=np.int32)
    for s in keep:
        for b, t in enumerate(trans[s].tolist()):
            if t in new_id:
                out[new_id[s], b] = new_id[t]
    return out, accepting[keep].copy(), new_id[start]


def random_dfa(rng: random.Random, alphabet: bytes, n_states: int, p_edge: float = 0.6, p_accept: float = 0.3):
    """A random trimmed DFA over ``alphabet`` (retries until the language is non-empty)."""
    while True:
        trans = np.full((n_states, 256), -1, dtype=np.int32)
        for s in range(n_states):
            for b in alphabet:
                if rng.random() < p_edge:
                    trans[s, b] = rng.randrange(n_states)
        acc = np.array([rng.random() < p_accept for _ in range(n_states)])
        got = trim(trans, acc, 0)
        if got is not None:
            return make_dfa(*got)


def dfa_from_regex(pattern: str, alphabet: str, horizon: int = 4, max_states: int = 200):
    """The DFA of ``pattern`` over ``alphabet`` by brute force: a prefix's state is
    which suffixes (up to ``horizon`` chars) complete a full match.  Exact for
    patterns whose residuals are told apart by short suffixes (the small test
    patterns); every state it produces is live by construction."""
    rx = re.compile(pattern, re.DOTALL)
    suffixes = ["".join(p) for k in range(horizon + 1) for p in itertools.product(alphabet, repeat=k)]

    def sig(prefix: str):
        return tuple(rx.fullmatch(prefix + w) is not None for w in suffixes)

    start_sig = sig("")
    if not any(start_sig):
        raise ValueError("empty language")
    states = {start_sig: 0}
    reps = [""]
    rows: list[dict[int, int]] = [{}]
    i = 0
    while i < len(reps):
        for c in alphabet:
            g = sig(reps[i] + c)
            if not any(g):
                continue
            if g not in states:
                if len(reps) >= max_states:
                    raise ValueError("too many states")
                states[g] = len(reps)
                reps.append(reps[i] + c)
                rows.append({})
            rows[i][ord(c)] = states[g]
        i += 1
    trans = np.full((len(reps), 256), -1, dtype=np.int32)
    for s, r in enumerate(rows):
        for b, t in r.items():
            trans[s, b] = t
    accepting = np.array([rx.fullmatch(r) is not None for r in reps])
    return make_dfa(trans, accepting, 0)


# --------------------------------------------------------------- vocabularies

def random_vocab(rng: random.Random, alphabet: bytes, n_tokens: int, *, n_none: int = 3,
                 n_stop: int = 1, extra_size: int = 5, max_len: int = 4, all_singles: bool = False):
    """Random tokens of 1..max_len bytes over ``alphabet``, some None ids, stop id(s)
    (placed at random ids, with None bytes), and ``extra_size`` unused ids past
    the tokenizer (size not a multiple of 32 in general)."""
    toks: list[bytes | None] = [bytes(rng.choice(alphabet) for _ in range(rng.randint(1, max_len)))
                                for _ in range(n_tokens)]
    if all_singles:
        toks += [bytes([b]) for b in alphabet]
    toks += [None] * (n_none + n_stop)
    rng.shuffle(toks)
    none_ids = [i for i, t in enumerate(toks) if t is None]
    stops = set(rng.sample(none_ids, n_stop))
    return make_vocab(toks, stops, len(toks) + extra_size)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable char table used by byte-level BPE vocabularies."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def load_byte_level_vocab(path: str | Path):
    """A byte-level BPE ``tokenizer.json`` as a vocabulary (added/special tokens: None;
    the first special token is the stop id)."""
    data = json.loads(Path(path).read_text())
    decode = {c: b for b, c in bytes_to_unicode().items()}
    vocab = data["model"]["vocab"]
    added = {t["id"]: t["content"] for t in data.get("added_tokens", [])}
    size = max(max(vocab.values()), max(added, default=0)) + 1
    toks: list[bytes | None] = [None] * size
    for s, i in vocab.items():
        if i not in added:
            toks[i] = bytes(decode[c] for c in s)
    stops = {min(added)} if added else set()
    return make_vocab(toks, stops, size)


# ------------------------------------------------------------------- oracles

def walk(dfa, state: int, data: bytes) -> int:
    """End state of ``data`` from ``state``; -1 if the DFA dies (a counted DFA:
    from counter 0, honouring the counter)."""
    if getattr(dfa, "actions", None) is not None:
        return dfa.run(data, state)[0]
    for b in data:
        state = int(dfa.transitions[state, b])
        if state < 0:
            return -1
    return state


def brute_min_tokens(dfa, vocab) -> list[float]:
    """Per state: fewest tokens (stop included) to finish a reply, by BFS over
    token sequences walked byte by byte; inf if none."""
    n = dfa.transitions.shape[0]
    stop_cost = 1 if vocab.stop_ids else 0
    text = [b for t, b in enumerate(vocab.token_bytes) if b is not None and t not in vocab.stop_ids]
    out = []
    for s in range(n):
        best = float("inf")
        seen = {s}
        frontier = deque([(s, 0)])
        while frontier:
            q, k = frontier.popleft()
            if dfa.accepting[q]:
                best = k + stop_cost
                break
            for b in text:
                e = walk(dfa, q, b)
                if e >= 0 and e not in seen:
                    seen.add(e)
                    frontier.append((e, k + 1))
        out.append(best)
    return out


def bit(row: np.ndarray, t: int) -> bool:
    return bool((int(row[t >> 5]) >> (t & 31)) & 1)


def allowed_set(row: np.ndarray, size: int) -> set[int]:
    return {t for t in range(size) if bit(row, t)}


def chain_dfa(segments: list[tuple[bytes, int, int]]):
    """DFA of a concatenation of ``[class]{lo,hi}`` segments (a literal byte is a
    one-byte class with lo=hi=1).  For speed tests without ``compile_regex``;
    a segment's class must be disjoint from the classes that may follow it
    while it is optional (so the chain is deterministic)."""
    states: dict[tuple[int, int], int] = {}  # (segment, count so far) -> id

    def sid(key):
        if key not in states:
            states[key] = len(states)
        return states[key]

    def complete(i: int, c: int) -> bool:
        while i < len(segments):
            if c < segments[i][1]:
                return False
            i, c = i + 1, 0
        return True

    edges: dict[int, dict[int, int]] = {}
    todo = [(0, 0)]
    sid((0, 0))
    while todo:
        key = todo.pop()
        if states[key] in edges:
            continue
        out = edges[states[key]] = {}
        # Stay in segment j (if under its maximum), or move past it once satisfied.
        j, cj = key
        while j < len(segments):
            cls, lo, hi = segments[j]
            if cj < hi:
                for b in cls:
                    nxt = (j, cj + 1)
                    assert b not in out or out[b] == sid(nxt), "segments overlap: not deterministic"
                    out[b] = sid(nxt)
                    todo.append(nxt)
            if cj < lo:
                break
            j, cj = j + 1, 0
    trans = np.full((len(states), 256), -1, dtype=np.int32)
    accepting = np.zeros(len(states), dtype=bool)
    for key, s in states.items():
        for b, t in edges.get(s, {}).items():
            trans[s, b] = t
        accepting[s] = complete(*key)
    return make_dfa(trans, accepting, 0)
