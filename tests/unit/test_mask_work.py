"""The compile-work bounds: ``max_mask_work`` (token masks of a DFA) and the
class weighting of ``max_grammar_cost`` (xgrammar), see docs/safeguards.md."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mask_helpers import random_dfa, random_vocab, walk
from poot_vllm.core.automata.build import Budget, regex_tree_to_dfa
from poot_vllm.core.automata.compilers import compile_regex
from poot_vllm.core.constraints import check_mask_work
from poot_vllm.core.errors import LimitExceeded, PootError
from poot_vllm.core.grammar import grammar_cost, parse_gbnf
from poot_vllm.core.grammar.gbnf import CharClass, class_cost
from poot_vllm.core.limits import Limits
from poot_vllm.core.masks import TRIE_NODES_PER_TOKEN, WIDE_STATE_BYTES, DFAMaskIndex, estimate_mask_work
from poot_vllm.core.regex.parser import parse

ALPHABET = b"abc"


def oracle_work(dfa, vocab) -> int:
    """Trie nodes the walk visits: per state, every distinct token prefix whose
    parent prefix is still alive from that state (the walk tests each child)."""
    prefixes = {tb[:k] for tb in vocab.token_bytes if tb for k in range(1, len(tb) + 1)}
    total = 0
    for s in range(dfa.transitions.shape[0]):
        for p in prefixes:
            if walk(dfa, s, p[:-1]) >= 0:
                total += 1
    return total


def _index(seed: int):
    rng = random.Random(seed)
    while True:
        dfa = random_dfa(rng, ALPHABET, rng.randint(1, 6))
        # all_singles: every byte is a token, so no state is token-dead (one pass).
        vocab = random_vocab(rng, ALPHABET, rng.randint(3, 20), n_stop=1, all_singles=True)
        try:
            return dfa, vocab, DFAMaskIndex.build(dfa, vocab)
        except PootError:
            continue


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32))
def test_work_counts_the_trie_nodes_the_walk_visits(seed):
    dfa, vocab, index = _index(seed)
    assert index.mask_work == oracle_work(dfa, vocab)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32))
def test_build_stops_past_max_mask_work_and_not_at_it(seed):
    dfa, vocab, index = _index(seed)
    work = index.mask_work
    again = DFAMaskIndex.build(dfa, vocab, max_work=work)  # exactly at the limit: accepted
    assert np.array_equal(again.rows[again.row_of_state], index.rows[index.row_of_state])
    if work > 0:
        with pytest.raises(LimitExceeded) as exc:
            DFAMaskIndex.build(dfa, vocab, max_work=work - 1)
        assert "max_mask_work" in str(exc.value) and "POOT_MAX_MASK_WORK" in str(exc.value)


def test_estimate_charges_wide_states_the_vocabulary_size():
    # 100 character states (~178 bytes can start a character), plus the states
    # inside multi-byte characters (only continuation bytes: charged the minimum).
    wide = compile_regex("[^\"]{100}")
    inner = int(((wide.transitions[:, :0x80] < 0).all(axis=1) & (wide.transitions[:, 0xC0:] < 0).all(axis=1)).sum())
    assert inner > 100
    per_token = TRIE_NODES_PER_TOKEN
    assert estimate_mask_work(wide, 1280) == per_token * (100 * 1280 + inner * 10)
    narrow = compile_regex("x{100}")  # 1 live byte per state (and the final state: the minimum)
    assert estimate_mask_work(narrow, 1280) == per_token * 101 * 1280 // WIDE_STATE_BYTES


def test_check_mask_work_refuses_over_the_limit_only():
    dfa = compile_regex("[^\"]{100}")
    est = estimate_mask_work(dfa, 128_000)
    check_mask_work(dfa, 128_000, Limits(max_mask_work=est))
    with pytest.raises(LimitExceeded) as exc:
        check_mask_work(dfa, 128_000, Limits(max_mask_work=est - 1))
    assert "max_mask_work" in str(exc.value)
    check_mask_work(parse_gbnf('root ::= [^"]*'), 128_000, Limits(max_mask_work=1))  # grammars: not DFAs


def test_default_limit_admits_realistic_string_fields():
    # ~500 free-text states at 128k tokens is the documented scale (expanded, as an
    # ambiguous repetition is built); a counted string costs its few states however long.
    expanded = lambda hi: regex_tree_to_dfa(parse(f'"[^"]{{0,{hi}}}"'), Budget(4 << 20), counted=False)
    check_mask_work(expanded(400), 128_256, Limits())
    with pytest.raises(LimitExceeded):
        check_mask_work(expanded(600), 128_256, Limits())
    counted = compile_regex('"[^"]{0,4000}"')
    assert counted.counted
    check_mask_work(counted, 128_256, Limits())


@pytest.mark.parametrize("text,cost", [("[0-9]", 1), ("[a-z]", 3), ("[a-zA-Z0-9_]", 7), ('[^"]', 22), (".", 22),
                                       ("[é]", 1), ("[\\u0100-\\uFFFF]", 5)])
def test_class_cost_grows_with_first_bytes(text, cost):
    grammar = parse_gbnf(f"root ::= {text}")
    node = grammar.rules[0].body
    node = node if isinstance(node, CharClass) else next(n for n in getattr(node, "items", ()) if isinstance(n, CharClass))
    assert class_cost(node) == cost == grammar_cost(grammar)


def test_wide_repetitions_hit_max_grammar_cost():
    parse_gbnf('root ::= [^"]{46}')  # 1012 units: accepted
    with pytest.raises(LimitExceeded, match="max_grammar_cost"):
        parse_gbnf('root ::= [^"]{47}')
    parse_gbnf('root ::= [^"]* "x"')  # unbounded runs stay cheap


def test_runs_of_optional_wide_classes_are_weighted():
    # xgrammar: 18 optional [^"] in a row took ~5 s at 128k tokens; 7 fit now, 8 do not.
    parse_gbnf("root ::= " + " ".join('[^"]?' for _ in range(7)))
    with pytest.raises(LimitExceeded, match="max_grammar_cost"):
        parse_gbnf("root ::= " + " ".join('[^"]?' for _ in range(8)))
    parse_gbnf("root ::= " + " ".join('"a"?' for _ in range(40)))  # literals: unchanged (900 units)


def test_mask_work_refusal_of_a_schema_names_its_largest_parts():
    from poot_vllm.core.constraints import Constraint, Kind, compile_automaton
    from poot_vllm.core.json_schema import canonical_schema_text

    # minLength 40 keeps the strings expanded: many wide states in /properties/long
    schema = {"type": "object", "properties": {"long": {"type": "string", "minLength": 40, "maxLength": 60},
                                               "n": {"type": "integer"}}, "required": ["long", "n"]}
    constraint = Constraint(Kind.JSON, canonical_schema_text(schema, Limits()))
    dfa = compile_automaton(constraint, Limits())
    with pytest.raises(LimitExceeded) as exc:
        check_mask_work(dfa, 128_256, Limits(max_mask_work=1_000_000), constraint)
    message = str(exc.value)
    assert "max_mask_work" in message and "/properties/long: maxLength contributes" in message, message
