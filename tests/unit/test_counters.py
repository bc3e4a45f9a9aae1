"""Counted repetitions (``core/automata/counters.py``): one copy of the item and a
counter, exact against Python's ``re``, with masks, budgets and the matcher
checked against brute-force oracles over the counted DFA's own semantics."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mask_helpers import make_vocab
from poot_vllm.core.automata.build import Budget, regex_tree_to_dfa
from poot_vllm.core.automata.compilers import regex_to_dfa
from poot_vllm.core.budget import shortest_dfa_reply
from poot_vllm.core.errors import LimitExceeded
from poot_vllm.core.json_schema import compile_json_schema
from poot_vllm.core.limits import DEFAULT_LIMITS, Limits
from poot_vllm.core.masks import DFAMaskIndex
from poot_vllm.core.matchers.compiled import CompiledDFA
from poot_vllm.core.regex.parser import parse

COUNTED = [
    r'"(?:[^"\\]|\\.){0,20}"',
    r'(?:"[ab]{0,17}",){2,5}x',
    r'[ab]{3,30}x',
    r'x(?:ab|é){1,18}"',
    r'(?:a|b){0,16}',
    r'(?:ab|a){0,40}b',  # not ambiguous after all: both readings of "b" leave the counter alone
    # lookaheads beside counted regions (a pattern with max_length or an email next to a long
    # text field): the assertion construction carries the counter
    r'(?=[ab]{2,5},)[ab]+,"[ab]{0,20}"',
    r'(?!ab)[abx]{0,24}"(?:é|x){0,17}',
    r'"[ab]{0,18}"(?=,"|x)(?:,"[ab]{1,30}")*x?',
]
AMBIGUOUS = [r'[a-z]{0,300}[a-z0-9]', r'x[a-z]{3,40}[xyz]', r'(?:[ab]{0,20}c?)*',
             r'(?:(?=ab|ba)[ab]){0,30}x',  # an assertion inside the counted item: built expanded
             r'"[ab]{0,18}"(?=,"|x)(?:,"(?=ba|bb)[ab]{1,30}")*x?']  # a lookahead asking for a second item


def _bits(row: np.ndarray) -> set[int]:
    words = np.asarray(row).view(np.uint32)
    return set(np.nonzero(np.unpackbits(words.view(np.uint8), bitorder="little"))[0].tolist())


@pytest.fixture(scope="module")
def vocab_tokens():
    rnd = random.Random(0)
    alphabet = [b"a", b"b", b'"', b"\\", b"x", "é".encode(), b","]
    toks = set(alphabet)
    while len(toks) < 120:
        toks.add(b"".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 25))))
    toks = sorted(toks)
    return make_vocab(toks + [b""], [len(toks)], len(toks) + 1), toks


@pytest.mark.parametrize("pattern", COUNTED)
def test_large_repetitions_are_counted_and_small(pattern):
    dfa = regex_to_dfa(pattern)
    expanded = regex_tree_to_dfa(parse(pattern), Budget(1 << 24), counted=False)
    assert dfa.counted and not expanded.counted
    assert 2 * dfa.n_states < expanded.n_states


@pytest.mark.parametrize("pattern", AMBIGUOUS)
def test_ambiguous_regions_are_built_expanded_and_exact(pattern):
    dfa = regex_to_dfa(pattern)
    assert not dfa.counted
    rx = re.compile(pattern)
    rnd = random.Random(1)
    for _ in range(500):
        text = "".join(rnd.choice("abcxyz0") for _ in range(rnd.randint(0, 45)))
        assert dfa.matches(text.encode()) == bool(rx.fullmatch(text)), text


_TEXTS = st.text(alphabet=st.sampled_from('ab"\\xé,c'), max_size=60)


@pytest.mark.parametrize("pattern", COUNTED)
@settings(max_examples=300, deadline=None)
@given(text=_TEXTS, n=st.integers(0, 45))
def test_counted_dfa_agrees_with_re(pattern, text, n):
    dfa = regex_to_dfa(pattern)
    rx = re.compile(pattern)
    for t in (text, "x" + "ab" * n + '"', '"' + "a" * n + '"', ('"' + "b" * (n % 19) + '",') * 3 + "x", "a" * n + "x"):
        assert dfa.matches(t.encode()) == bool(rx.fullmatch(t)), (pattern, t)


def test_the_exponential_regex_is_still_refused_by_the_budget():
    # {17} has no optional copies to count: the blow-up is the subset construction's
    with pytest.raises(LimitExceeded, match="max_automaton_bytes"):
        regex_to_dfa("(a|b)*a(a|b){17}")
    dfa = regex_to_dfa("(a|b)*a(a|b){3}")
    assert dfa.matches(b"babba") and not dfa.matches(b"abbab")


@pytest.mark.parametrize("pattern", COUNTED)
def test_masks_at_every_counter_value_match_the_token_walk(pattern, vocab_tokens):
    vocab, toks = vocab_tokens
    dfa = regex_to_dfa(pattern)
    index = DFAMaskIndex.build(dfa, vocab)
    stop = len(toks)
    for s in range(dfa.n_states):
        limit = int(dfa.counter_limit[s])
        for c in ([0] if limit == 0 else range(1, limit + 1)):
            want = {t for t, data in enumerate(toks) if dfa.run(data, s, c)[0] >= 0}
            if dfa.accepting[s]:
                want.add(stop)
            assert _bits(index.row_at(s, c)) == want, (pattern, s, c)


@pytest.mark.parametrize("pattern", COUNTED[:4])
def test_budgeted_replies_conform_and_finish_in_time(pattern, vocab_tokens):
    vocab, toks = vocab_tokens
    dfa = regex_to_dfa(pattern)
    compiled = CompiledDFA(DFAMaskIndex.build(dfa, vocab))
    shortest = shortest_dfa_reply(dfa, vocab)
    assert shortest == compiled.index.min_tokens_to_accept[dfa.start]  # admission and engine agree
    rnd = random.Random(2)
    for budget in [shortest, shortest + 1, shortest + 3, None]:
        for _ in range(60):
            m = compiled.new_matcher()
            m.set_token_budget(budget)
            text, n = b"", 0
            while True:
                row = np.zeros(compiled.index.words, dtype=np.int32)
                m.fill_bitmask(row)
                allowed = sorted(_bits(row))
                assert allowed, (pattern, text)
                t = rnd.choice(allowed)
                assert m.accept_tokens([t])
                n += 1
                if t == len(toks):
                    break
                text += toks[t]
                assert n < 200
            assert dfa.matches(text), (pattern, text)
            assert budget is None or n <= budget
            m.rollback(n)  # the counter is rolled back with the state
            assert m.counter == 0 and m.state == dfa.start


def test_long_text_fields_and_wide_models_fit_the_default_budget():
    for schema in (
        {"type": "object", "properties": {"body": {"type": "string", "maxLength": 4000}}, "required": ["body"]},
        {"type": "object", "properties": {f"f{i:02d}": {"type": "string", "maxLength": 250} for i in range(30)},
         "required": [f"f{i:02d}" for i in range(30)]},
    ):
        dfa = compile_json_schema(json.dumps(schema), DEFAULT_LIMITS)
        assert dfa.counted
        inst = {k: "é" * v["maxLength"] for k, v in schema["properties"].items()}
        assert dfa.matches(json.dumps(inst, ensure_ascii=False).encode())
        too_long = dict(inst)
        key = next(iter(inst))
        too_long[key] += "a"
        assert not dfa.matches(json.dumps(too_long, ensure_ascii=False).encode())


def test_counted_regions_inside_an_expanded_repetition_each_count():
    # items of an array of bounded strings: every string has its own region
    dfa = regex_to_dfa(r'\[(?:"[a-z]{0,20}"(?:,"[a-z]{0,20}"){0,2})?\]')
    assert dfa.counted
    assert dfa.matches(('["' + "a" * 20 + '","' + "b" * 20 + '"]').encode())
    assert not dfa.matches(('["a","' + "b" * 21 + '"]').encode())


def test_small_limits_are_still_exact(vocab_tokens):
    # a token longer than the region: refused where it would pass the bound
    vocab, toks = vocab_tokens
    dfa = regex_to_dfa(r'x[ab]{0,16}"')
    index = DFAMaskIndex.build(dfa, vocab, max_work=Limits().max_mask_work)
    allowed = _bits(index.row_at(dfa.start, 0))
    for t in allowed - {len(toks)}:
        assert dfa.run(toks[t])[0] >= 0


def test_an_ambiguous_repetition_stays_expanded_on_its_own():
    # the LDH label's [a-z0-9-]{0,19}[a-z0-9] would be an ambiguous region (one byte could continue it or
    # leave it): it is expanded alone, and the long repetition beside it stays one loop and a counter
    # (before, the subset construction found the ambiguity and expanded the whole regex: an email
    # format beside a 4000-character text field was a 400)
    pattern = r'(?:[a-z](?:[a-z0-9-]{0,19}[a-z0-9])?\.)+[a-z]{2,6}:"[^"]{0,4000}"'
    dfa = regex_to_dfa(pattern)
    assert dfa.counted and dfa.n_states < 200
    rx = re.compile(pattern)
    rnd = random.Random(4)
    for _ in range(400):
        label = "".join(rnd.choice("ab0-") for _ in range(rnd.randint(0, 22)))
        text = f'x{label}.com:"' + "q" * rnd.choice([0, 5, 3999, 4000, 4001]) + '"'
        assert dfa.matches(text.encode()) == bool(rx.fullmatch(text)), text


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 255), st.integers(0, n - 1)), max_size=4 * n),
    st.lists(st.integers(-1, 10), min_size=n, max_size=n))))
def test_reach_within_is_the_most_bytes_to_spare_over_any_path(case):
    """``counted_masks.reach_within`` (which states a token may carry into a
    region past its bound: they get a guard walk) against its definition, a
    fixpoint over paths: ``r[s] = max(left[s], max over successors t of r[t] - 1)``."""
    from poot_vllm.core.counted_masks import reach_within

    n, edges, left = case
    trans = np.full((n, 256), -1, dtype=np.int32)
    for s, b, t in edges:
        trans[s, b] = t
    want = list(left)
    changed = True
    while changed:
        changed = False
        for s in range(n):
            for t in trans[s][trans[s] >= 0]:
                if want[t] - 1 > want[s]:
                    want[s], changed = want[t] - 1, True
    assert reach_within(trans, np.array(left, dtype=np.int64)).tolist() == want
