"""Token trie and per-state masks against brute-force oracles."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mask_helpers import (
    allowed_set,
    brute_min_tokens,
    dfa_from_regex,
    load_byte_level_vocab,
    make_vocab,
    random_dfa,
    random_vocab,
    walk,
)
from poot_vllm.core.errors import PootError
from poot_vllm.core.masks import UNREACHABLE, DFAMaskIndex, warm_up
from poot_vllm.core.token_trie import TokenTrie
from tests.bench_data import bench_path, needs_bench

ALPHABET = b"abc"
LLAMA3 = bench_path("vocab", "llama3-bpe-128k", "tokenizer.json")

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def trie_tokens(trie: TokenTrie) -> dict[int, bytes]:
    """Read every token back out of the flat trie, checking subtree bounds on the way."""
    out = {int(t): b"" for t in trie.tok_ids[trie.tok_offsets[0]:trie.tok_offsets[1]]}
    path: list[int] = []
    for i in range(1, trie.n_nodes):
        d = int(trie.node_depth[i])
        path = path[: d - 1] + [int(trie.node_byte[i])]
        end = int(trie.node_end[i])
        assert all(trie.node_depth[k] > d for k in range(i + 1, end))
        assert end == trie.n_nodes or trie.node_depth[end] <= d
        for k in range(trie.tok_offsets[i], trie.tok_offsets[i + 1]):
            out[int(trie.tok_ids[k])] = bytes(path)
    return out


@FAST
@given(st.lists(st.one_of(st.none(), st.binary(max_size=24)), max_size=80))
def test_trie_holds_exactly_the_tokens_with_bytes(tokens):
    size = len(tokens) + 7
    trie = TokenTrie.build(make_vocab(tokens, set(), size, kind="raw"))
    assert trie_tokens(trie) == {i: b for i, b in enumerate(tokens) if b is not None}
    assert trie.size == size and trie.words == (size + 31) // 32


def test_trie_is_cached_per_token_bytes_and_read_only():
    toks = (b"ab", b"a", None, b"b")
    v1 = make_vocab(toks, {2}, 4)
    v2 = make_vocab(v1.token_bytes, {3}, 4)  # same strings, other stop ids
    trie = TokenTrie.build(v1)
    assert TokenTrie.build(v2) is trie
    with pytest.raises(ValueError):
        trie.node_end[0] = 0


# ------------------------------------------------------------------ oracles

def oracle_masks(dfa, vocab) -> tuple[list[set[int]], list[float]]:
    """Allowed ids per state: a text token whose bytes never die and whose end
    state can still finish (brute force); stop ids iff accepting."""
    dist = brute_min_tokens(dfa, vocab)
    masks = []
    for s in range(dfa.transitions.shape[0]):
        allowed = {t for t in vocab.stop_ids if dfa.accepting[s]}
        for t, b in enumerate(vocab.token_bytes):
            if b is None or t in vocab.stop_ids:
                continue
            e = walk(dfa, s, b)
            if e >= 0 and dist[e] < math.inf:
                allowed.add(t)
        masks.append(allowed)
    return masks, dist


def check_index(dfa, vocab) -> DFAMaskIndex:
    index = DFAMaskIndex.build(dfa, vocab)
    expected, dist = oracle_masks(dfa, vocab)
    n_bits = index.words * 32
    for s, allowed in enumerate(expected):
        assert allowed_set(index.row(s), n_bits) == allowed, f"state {s}"
    got_dist = [math.inf if d >= UNREACHABLE else int(d) for d in index.min_tokens_to_accept]
    assert got_dist == dist
    # Identical rows are stored once.
    assert index.n_unique_rows == len({frozenset(a) for a in expected})
    assert index.nbytes >= index.n_unique_rows * index.words * 4
    return index


def random_case(seed: int, all_singles: bool):
    rng = random.Random(seed)
    dfa = random_dfa(rng, ALPHABET, rng.randint(1, 7))
    vocab = random_vocab(rng, ALPHABET, rng.randint(1, 25), n_stop=rng.choice([0, 1, 2]),
                         extra_size=rng.randint(0, 40), all_singles=all_singles)
    return dfa, vocab


@FAST
@given(st.integers(0, 2**32))
def test_masks_match_walk_oracle_when_every_byte_is_a_token(seed):
    dfa, vocab = random_case(seed, all_singles=True)
    index = check_index(dfa, vocab)
    # With single-byte tokens every state can finish, so the mask is exactly
    # "walking the bytes never dies" (+ stop ids iff accepting).
    for s in range(index.n_states):
        plain = {t for t, b in enumerate(vocab.token_bytes)
                 if b is not None and t not in vocab.stop_ids and walk(dfa, s, b) >= 0}
        plain |= set(vocab.stop_ids) if dfa.accepting[s] else set()
        assert allowed_set(index.row(s), index.words * 32) == plain


@FAST
@given(st.integers(0, 2**32))
def test_masks_exclude_tokens_into_states_the_vocabulary_cannot_finish(seed):
    dfa, vocab = random_case(seed, all_singles=False)
    try:
        check_index(dfa, vocab)
    except PootError:
        # Refused exactly when no token sequence finishes from the start.
        assert brute_min_tokens(dfa, vocab)[dfa.start] == math.inf


@pytest.mark.parametrize("pattern", [
    "(ab|c)*a?", "a{2,5}b?c", "(a|b)*c(a|b)*", "abc|acb|b+", "(aa|bb)*(c|)",
])
def test_masks_of_regex_dfas(pattern):
    dfa = dfa_from_regex(pattern, "abc")
    for seed in range(3):
        rng = random.Random(seed)
        check_index(dfa, random_vocab(rng, ALPHABET, 30, extra_size=rng.randint(0, 40)))


def test_unfinishable_constraint_is_refused():
    dfa = dfa_from_regex("ab", "ab")
    vocab = make_vocab([b"a", b"bb", None], {2}, 3)  # nothing spells "b" after "a"
    with pytest.raises(PootError, match="tokens"):
        DFAMaskIndex.build(dfa, vocab)


@FAST
@given(st.integers(0, 2**32))
def test_restricted_mask_keeps_exactly_the_tokens_that_finish_in_budget(seed):
    dfa, vocab = random_case(seed, all_singles=seed % 2 == 0)
    try:
        index = DFAMaskIndex.build(dfa, vocab)
    except PootError:
        return
    dist = brute_min_tokens(dfa, vocab)
    finite = [d for d in dist if d < math.inf]
    row = np.zeros(index.words, dtype=np.int32)
    for s in range(index.n_states):
        plain = allowed_set(index.row(s), index.words * 32)
        for budget in range(0, int(max(finite)) + 3):
            index.restricted_mask(s, budget, row)
            got = allowed_set(row, index.words * 32)
            want = {t for t in plain if t in vocab.stop_ids and budget >= 1}
            want |= {t for t in plain if t not in vocab.stop_ids
                     and dist[walk(dfa, s, vocab.token_bytes[t])] <= budget - 1}
            assert got == want, (s, budget)
            if budget >= index.plain_row_budget[s]:
                assert got == plain  # the matcher relies on this to skip the walk


def brute_restricted(dfa, vocab, dist: list[float], state: int, budget: int) -> set[int]:
    """The restricted mask by definition: a text token iff its bytes walk from
    ``state`` without dying to a state that finishes in ``budget - 1`` tokens;
    the stop ids iff ``state`` accepts and ``budget >= 1``."""
    want = {t for t, b in enumerate(vocab.token_bytes)
            if b is not None and t not in vocab.stop_ids and (e := walk(dfa, state, b)) >= 0
            and dist[e] <= budget - 1}
    if dfa.accepting[state] and budget >= 1:
        want |= set(vocab.stop_ids)
    return want


#: How ``restricted_mask`` is made: the budget tables from the tokens the mask
#: build recorded; the tables from a second walk (nothing recorded); no tables
#: (their memory bound 0: one trie walk per mask).
TABLE_MODES = ("recorded", "rewalked", "walk")


def _build_in_mode(dfa, vocab, mode: str, monkeypatch) -> DFAMaskIndex:
    import poot_vllm.core.masks as masks

    if mode == "rewalked":
        monkeypatch.setattr(masks, "_RECORD_MAX_TOKENS", 0)
    index = DFAMaskIndex.build(dfa, vocab, budget_table_bytes=0 if mode == "walk" else None)
    monkeypatch.undo()
    return index


@pytest.mark.parametrize("mode", TABLE_MODES)
@FAST
@given(seed=st.integers(0, 2**32), n_states=st.integers(2, 9), p_edge=st.sampled_from([0.3, 0.6, 0.9]))
def test_restricted_masks_equal_the_definition_for_every_budget(mode, seed, n_states, p_edge):
    """Every state, every budget (below the shortest completion, through the
    thresholds, past the plain-row budget), against walking each token's bytes."""
    with pytest.MonkeyPatch.context() as mp:
        rng = random.Random(seed)
        dfa = random_dfa(rng, ALPHABET, n_states, p_edge=p_edge)
        vocab = random_vocab(rng, ALPHABET, rng.randint(3, 30), extra_size=rng.randint(0, 40),
                             all_singles=seed % 3 == 0, n_stop=rng.choice([0, 1, 2]))
        try:
            index = _build_in_mode(dfa, vocab, mode, mp)
        except PootError:
            return  # the vocabulary cannot spell any reply (test_unfinishable_constraint_is_refused)
    dist = brute_min_tokens(dfa, vocab)
    top = max(int(index.plain_row_budget.max()), max(d for d in dist if d < math.inf)) + 2
    row = np.full(index.words, -1, dtype=np.int32)  # stale bits must not survive
    for s in range(index.n_states):
        for budget in range(-1, top + 1):
            index.restricted_mask(s, budget, row)
            assert allowed_set(row, index.words * 32) == brute_restricted(dfa, vocab, dist, s, budget), (s, budget)
    if mode == "walk":
        assert index.budget.grp_tokens.size == 0  # nothing stored past the bound


def test_budget_tables_are_counted_and_shared_between_states():
    """The tables are in ``nbytes`` (what the compiled-artefact cache charges),
    and one group of tokens is stored once however many states use it."""
    from poot_vllm.core.automata.compilers import compile_regex

    # Five string fields: inside each, the same tokens end mid-escape (far).
    dfa = compile_regex(r'\{("[a-z]": "([^"\\]|\\n)*", ){4}"z": 1\}')
    vocab = make_vocab([bytes([b]) for b in range(32, 127)] + [b'\\', b'", "', b'\\n', b'", "z": 1}', None],
                       {99}, 100)
    index = DFAMaskIndex.build(dfa, vocab)
    assert index.budget_nbytes > 0
    assert index.nbytes >= index.budget_nbytes + index.rows.nbytes
    b = index.budget
    refs = b.ent_ref[b.ent_ref >= 0]
    assert refs.size > len(b.grp_offsets) - 1  # some stored group serves several states
    walked = DFAMaskIndex.build(dfa, vocab, budget_table_bytes=0)
    row, want = np.zeros(index.words, np.int32), np.zeros(index.words, np.int32)
    for s in range(index.n_states):
        for budget in range(int(index.min_tokens_to_accept[s]) - 1, int(index.plain_row_budget[s]) + 1):
            index.restricted_mask(s, budget, row)
            walked.restricted_mask(s, budget, want)
            assert (row == want).all(), (s, budget)


def test_index_is_read_only():
    dfa, vocab = random_case(7, all_singles=True)
    index = DFAMaskIndex.build(dfa, vocab)
    for a in (index.rows, index.row_of_state, index.min_tokens_to_accept, index.plain_row_budget):
        with pytest.raises(ValueError):
            a[...] = 0


# ------------------------------------------------------- a real 128k vocabulary

JSON_ISH = r'\{"name": "[^"\\]{1,40}", "age": [0-9]{1,3}, "tags": \[("[a-z]{1,10}"(, "[a-z]{1,10}"){0,4})?\]\}'


def real_vocab_dfas():
    """(name, DFA) pairs from the project's regex compiler."""
    from poot_vllm.core.automata.compilers import compile_regex

    return [("[a-z ]{0,40}", compile_regex("[a-z ]{0,40}")), (JSON_ISH, compile_regex(JSON_ISH))]


@needs_bench("vocab", "llama3-bpe-128k", "tokenizer.json")
def test_masks_on_llama3_vocabulary():
    """Masks over 128k real tokens (build costs: scripts/bench_masks.py)."""
    warm_up()
    vocab = load_byte_level_vocab(LLAMA3)
    for name, dfa in real_vocab_dfas():
        index = DFAMaskIndex.build(dfa, vocab)
        # Exactly the tokens that start some reply are allowed first (stop: iff "" is a reply).
        opening = allowed_set(index.row(dfa.start), vocab.size)
        want = {t for t, b in enumerate(vocab.token_bytes)
                if b and t not in vocab.stop_ids and walk(dfa, dfa.start, b) >= 0}
        assert opening == want | (set(vocab.stop_ids) if dfa.accepting[dfa.start] else set()), name
        if name.startswith("\\{"):
            assert all(vocab.token_bytes[t].startswith(b"{") for t in opening)


def test_stop_flags_are_kept_per_stop_set_and_bounded(monkeypatch):
    """``kernel_stops`` hands every compile of one stop set the same read-only
    arrays, another stop set its own, and keeps a bounded number of sets (a
    client picks stop ids per request)."""
    from poot_vllm.core import masks
    from poot_vllm.core.vocabulary import with_stop_ids

    vocab = make_vocab([b"a", b"b", b"ab", None, None], {3}, 8)
    trie = TokenTrie.build(vocab)
    ids, flags = masks.kernel_stops(vocab, trie)
    assert ids.tolist() == [3] and np.flatnonzero(flags).tolist() == [3] and not flags.flags.writeable
    assert masks.kernel_stops(vocab, trie)[1] is flags
    other = with_stop_ids(vocab, {3, 4})
    assert masks.kernel_stops(other, trie)[0].tolist() == [3, 4]
    monkeypatch.setattr(masks, "_STOP_SETS_PER_TRIE", 2)
    for extra in range(5):
        masks.kernel_stops(with_stop_ids(vocab, {3, extra}), trie)
    assert len(masks._stops[trie]) <= 2


def test_byte_sums_kept_with_a_dfa_are_those_of_its_table_whatever_was_asked_before():
    """The compile steps share one pass over the table (masks.dfa_byte_sums): the
    sums each asks for are the ones a fresh pass gives, in any order of asking."""
    from poot_vllm.core.automata.compilers import regex_to_dfa
    from poot_vllm.core.masks import dfa_byte_sums, kernel_tables, live_byte_sums

    rng = np.random.default_rng(0)
    for regex in ('"[^"]{0,40}"', "(ab|cd)*[0-9]+", "[\u00e0-\u00ff]x?"):
        dfa = regex_to_dfa(regex)
        trans = kernel_tables(dfa)[0]
        w1, w2 = (rng.integers(0, 1000, 256).astype(np.int64) for _ in range(2))
        for weights in (None, w1, None, w2, w2, w1, None):
            got = dfa_byte_sums(dfa, weights)
            fresh = live_byte_sums(trans, weights)
            assert np.array_equal(got[0], fresh[0]) and np.array_equal(got[2], fresh[2])
            if weights is not None:
                assert np.array_equal(got[1], fresh[1])
