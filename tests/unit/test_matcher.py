"""DFAMatcher: accept / validate / rollback / fill_bitmask / budgets, against replay oracles."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mask_helpers import (
    allowed_set,
    bit,
    brute_min_tokens,
    dfa_from_regex,
    make_vocab,
    random_dfa,
    random_vocab,
    walk,
)
from poot_vllm.core.errors import PootError
from poot_vllm.core.masks import DFAMaskIndex
from poot_vllm.core.matchers.dfa import DFAMatcher

ALPHABET = b"abc"
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def random_index(seed: int) -> DFAMaskIndex:
    rng = random.Random(seed)
    while True:
        dfa = random_dfa(rng, ALPHABET, rng.randint(1, 6))
        vocab = random_vocab(rng, ALPHABET, rng.randint(3, 20), n_stop=rng.choice([1, 2]),
                             extra_size=rng.randint(0, 40), all_singles=rng.random() < 0.5)
        try:
            return DFAMaskIndex.build(dfa, vocab)
        except PootError:
            continue  # the vocabulary cannot spell this language: draw again


class Replay:
    """Reference model: the accepted tokens, replayed byte by byte through the DFA."""

    def __init__(self, index: DFAMaskIndex) -> None:
        self.dfa, self.vocab, self.index = index.dfa, index.vocab, index
        self.tokens: list[int] = []
        self.dist = brute_min_tokens(self.dfa, self.vocab)

    def state_after(self, tokens: list[int]) -> tuple[int, bool]:
        s, done = self.dfa.start, False
        for t in tokens:
            if t not in self.vocab.stop_ids:
                s = walk(self.dfa, s, self.vocab.token_bytes[t])
            else:
                done = True
        return s, done

    def ok(self, state: int, token: int) -> bool:
        """Oracle: may ``token`` follow in ``state``?"""
        if not 0 <= token < self.vocab.size:
            return False
        if token in self.vocab.stop_ids:
            return bool(self.dfa.accepting[state])
        b = self.vocab.token_bytes[token]
        if b is None:
            return False
        e = walk(self.dfa, state, b)
        return e >= 0 and self.dist[e] < math.inf

    def longest_prefix(self, ids: list[int]) -> list[int]:
        s, done = self.state_after(self.tokens)
        if done:
            return []
        out = []
        for t in ids:
            if not self.ok(s, t):
                break
            out.append(t)
            if t in self.vocab.stop_ids:
                break
            s = walk(self.dfa, s, self.vocab.token_bytes[t])
        return out


def token_ids(index: DFAMaskIndex, rng: random.Random, state: int, k: int) -> list[int]:
    """Mostly tokens allowed somewhere along the way, sometimes anything (incl. out of range)."""
    ids = []
    for _ in range(k):
        row = index.row(state)
        allowed = sorted(allowed_set(row, index.words * 32))
        if allowed and rng.random() < 0.8:
            t = rng.choice(allowed)
        else:
            t = rng.randrange(-2, index.vocab.size + 3)
        ids.append(t)
        if t in allowed and t not in index.vocab.stop_ids:
            state = walk(index.dfa, state, index.vocab.token_bytes[t])
    return ids


def assert_matches(m: DFAMatcher, ref: Replay) -> None:
    state, done = ref.state_after(ref.tokens)
    assert m.state == state
    assert m.is_terminated() == done
    assert m.num_accepted == len(ref.tokens)
    row = np.zeros(ref.index.words, dtype=np.int32)
    m.fill_bitmask(row)
    if done:
        assert allowed_set(row, ref.index.words * 32) == set(ref.vocab.stop_ids)
    else:
        want = {t for t in range(ref.index.words * 32) if ref.ok(state, t)}
        assert allowed_set(row, ref.index.words * 32) == want


@FAST
@given(st.integers(0, 2**32), st.lists(st.tuples(st.sampled_from("avrx"), st.integers(0, 4)), max_size=25))
def test_operations_agree_with_replay(seed, ops):
    index = random_index(seed)
    rng = random.Random(seed)
    m = DFAMatcher(index)
    ref = Replay(index)
    for op, k in ops:
        if op == "a":
            ids = token_ids(index, rng, m.state, k)
            accepted_before = list(ref.tokens)
            want = ref.longest_prefix(ids)
            done_before = m.is_terminated()
            ok = m.accept_tokens(ids)
            if done_before:
                assert ok  # tokens after termination are ignored
            else:
                ref.tokens = accepted_before + want
                stopped = bool(want) and want[-1] in index.vocab.stop_ids
                assert ok == (len(want) == len(ids) or stopped)
        elif op == "v":
            ids = token_ids(index, rng, m.state, k)
            before = (m.state, m.num_accepted, m.is_terminated())
            assert m.validate_tokens(ids) == ref.longest_prefix(ids)
            assert (m.state, m.num_accepted, m.is_terminated()) == before
        elif op == "r":
            n = min(k, len(ref.tokens))
            m.rollback(n)
            if n:
                del ref.tokens[-n:]
            fresh = DFAMatcher(index)
            assert fresh.accept_tokens(ref.tokens)
            assert (fresh.state, fresh.is_terminated(), fresh.num_accepted) == \
                   (m.state, m.is_terminated(), m.num_accepted)
        else:
            m.reset()
            ref.tokens = []
        assert_matches(m, ref)


def test_rejection_keeps_earlier_tokens_and_termination_semantics():
    dfa = dfa_from_regex("ab*", "ab")
    vocab = make_vocab([b"a", b"b", b"bb", None, b"ba"], {3}, 40)
    m = DFAMatcher(DFAMaskIndex.build(dfa, vocab))
    assert not m.accept_tokens([1])           # "b" cannot start
    assert m.num_accepted == 0
    assert not m.accept_tokens([0, 2, 4, 1])  # "a","bb" ok, "ba" dies
    assert m.num_accepted == 2
    assert m.validate_tokens([1, 3, 1]) == [1, 3]  # stops after the stop token
    assert m.accept_tokens([3, 0, 39, 12345])       # stop, then ignored
    assert m.is_terminated() and m.num_accepted == 3
    assert m.validate_tokens([1]) == []
    row = np.zeros(2, dtype=np.int32)
    m.fill_bitmask(row)
    assert allowed_set(row, 64) == {3}
    m.rollback(1)
    assert not m.is_terminated() and m.num_accepted == 2
    assert m.accept_tokens([1, 3]) and m.is_terminated()
    with pytest.raises(ValueError):
        m.rollback(5)


def test_stop_only_in_accepting_states_and_ids_outside_tokenizer_never_allowed():
    # size 70 (not a multiple of 32): words 3; ids 5..69 have no bytes.
    dfa = dfa_from_regex("(ab)+", "ab")
    vocab = make_vocab([b"a", b"b", b"ab", None, b"ba"], {3}, 70)
    index = DFAMaskIndex.build(dfa, vocab)
    m = DFAMatcher(index)
    row = np.full(3, -1, dtype=np.int32)
    m.fill_bitmask(row)
    assert allowed_set(row, 96) == {0, 2}  # "a", "ab"; no stop (not accepting)
    assert not m.accept_tokens([3])
    m.accept_tokens([2])
    m.fill_bitmask(row)
    assert allowed_set(row, 96) == {0, 2, 3}
    # Bit t & 31 of word t >> 5.
    assert bit(row, 3) and row[0] == (1 << 0) | (1 << 2) | (1 << 3) and row[1] == 0 and row[2] == 0
    assert not m.accept_tokens([64]) and not m.accept_tokens([70]) and not m.accept_tokens([-1])


def test_bit_31_and_high_words():
    dfa = dfa_from_regex("a", "a")
    toks = [None] * 100
    toks[31] = b"a"
    toks[95] = b"a"
    vocab = make_vocab(toks, {0}, 100)
    m = DFAMatcher(DFAMaskIndex.build(dfa, vocab))
    row = np.zeros(4, dtype=np.int32)
    m.fill_bitmask(row)
    assert allowed_set(row, 128) == {31, 95}
    assert row[0] == np.int32(-2**31) and row[2] == np.int32(-2**31)


def test_a_long_reply_rolls_back_to_any_point():
    dfa = dfa_from_regex("([ab][ab][ab])*", "ab")  # three states: position mod 3
    vocab = make_vocab([b"a", b"b", b"ab", None], {3}, 4)
    index = DFAMaskIndex.build(dfa, vocab)
    m = DFAMatcher(index)
    rng = random.Random(0)
    tokens = [rng.randrange(3) for _ in range(500)]
    assert m.accept_tokens(tokens)
    for keep in (497, 250, 0):
        m.rollback(m.num_accepted - keep)
        fresh = DFAMatcher(index)
        fresh.accept_tokens(tokens[:keep])
        assert m.num_accepted == keep and m.state == fresh.state
    with pytest.raises(ValueError, match="only 0 were accepted"):
        m.rollback(1)


@FAST
@given(st.integers(0, 2**32), st.integers(0, 12))
def test_budget_masks_always_finish_in_budget(seed, slack):
    index = random_index(seed)
    d0 = int(index.min_tokens_to_accept[index.dfa.start])
    budget = d0 + slack
    rng = random.Random(seed)
    m = DFAMatcher(index)
    m.set_token_budget(budget)
    row = np.zeros(index.words, dtype=np.int32)
    while not m.is_terminated():
        assert m.num_accepted < budget, "ran out of budget"
        m.fill_bitmask(row)
        allowed = sorted(allowed_set(row, index.words * 32))
        plain = allowed_set(index.row(m.state), index.words * 32)
        assert allowed and set(allowed) <= plain
        remaining = budget - m.num_accepted
        if remaining >= index.plain_row_budget[m.state]:
            assert set(allowed) == plain  # enough budget: the plain cached row
        assert m.accept_tokens([rng.choice(allowed)])
    assert m.num_accepted <= budget


def test_budget_below_minimum_follows_shortest_completion():
    dfa = dfa_from_regex("abc", "abc")
    vocab = make_vocab([b"a", b"b", b"c", b"ab", None], {4}, 5)
    m = DFAMatcher(DFAMaskIndex.build(dfa, vocab))
    m.set_token_budget(1)  # impossible: "ab","c",stop needs 3
    row = np.zeros(1, dtype=np.int32)
    m.fill_bitmask(row)
    assert allowed_set(row, 32) == {3}  # the token on a shortest path
    m.set_token_budget(None)
    m.fill_bitmask(row)
    assert allowed_set(row, 32) == {0, 3}


def test_fill_bitmask_on_a_128k_vocabulary():
    """[abc ]* over 128k tokens: every token and the stop stay allowed, token after
    token (the per-call cost is measured by scripts/bench_masks.py, not here)."""
    rng = random.Random(1)
    size = 128_256
    toks = [bytes(rng.choice(b"abc ") for _ in range(rng.randint(1, 6))) for _ in range(size - 1)] + [None]
    dfa = dfa_from_regex("[abc ]*", "abc ")
    index = DFAMaskIndex.build(dfa, make_vocab(toks, {size - 1}, size))
    m = DFAMatcher(index)
    row = np.zeros(index.words, dtype=np.int32)
    for t in range(0, size - 1, 997):
        m.fill_bitmask(row)
        assert (row == -1).all()  # size is a multiple of 32: every bit of every word
        assert m.accept_tokens([t])
    m.fill_bitmask(row)
    assert allowed_set(row, index.words * 32) == set(range(size))
