"""Grammars without recursion run as DFAs (core/grammar/regular.py).

The DFA must accept exactly what the grammar does: the oracle is Lark (the
twins of test_pushdown_matcher.py's table) on sampled and mutated strings.
Recursive, exponentially inlined and over-budget grammars stay pushdown, and
nothing here ever refuses a grammar the parser accepted.
"""

from __future__ import annotations

import random

import pytest

from poot_vllm.core.automata.dfa import DFA
from poot_vllm.core.errors import LimitExceeded
from poot_vllm.core.constraints import Constraint, Kind, check_mask_work, compile_automaton
from poot_vllm.core.grammar import parse_gbnf
from poot_vllm.core.grammar.gbnf import Grammar
from poot_vllm.core.grammar.regular import MAX_INLINED_POSITIONS, dependency_order, regular_dfa
from poot_vllm.core.limits import DEFAULT_LIMITS, Limits

from tests.unit.test_pushdown_matcher import GRAMMARS, mutate, oracle, sample

REGULAR = [name for name, (gbnf, _) in GRAMMARS.items() if dependency_order(parse_gbnf(gbnf)) is not None]


def test_the_table_holds_regular_and_recursive_grammars():
    assert len(REGULAR) >= 3 and len(REGULAR) < len(GRAMMARS)


@pytest.mark.parametrize("name", REGULAR)
def test_dfa_accepts_exactly_what_lark_accepts(name):
    gbnf, lark_text = GRAMMARS[name]
    grammar = parse_gbnf(gbnf)
    dfa = regular_dfa(grammar)
    assert dfa is not None
    accepts = oracle(lark_text)
    rng = random.Random(name)
    strings = [s for s in (sample(grammar, rng) for _ in range(200)) if len(s) <= 40][:80]
    alphabet = "".join(sorted({c for s in strings for c in s})) + " (-)*é\n"
    strings += [mutate(rng.choice(strings), rng, alphabet) for _ in range(200)]
    verdicts = {True: 0, False: 0}
    for s in strings:
        want = accepts(s)
        verdicts[want] += 1
        assert dfa.matches(s.encode("utf-8")) == want, (s, want)
    assert verdicts[True] >= 10 and verdicts[False] >= 10, verdicts


def test_lark_grammars_without_recursion_are_dfas_too():
    dfa = compile_automaton(Constraint(Kind.GRAMMAR, 'start: WORD ("," WORD)*\n%import common.WORD\n'))
    assert isinstance(dfa, DFA)
    assert dfa.matches(b"abc,de") and not dfa.matches(b"abc,") and not dfa.matches(b"")


def test_recursive_grammars_stay_pushdown():
    for gbnf in ['root ::= "(" root ")" | "x"', 'root ::= a\na ::= "[" b "]"\nb ::= a | ""']:
        automaton = compile_automaton(Constraint(Kind.GRAMMAR, gbnf))
        assert isinstance(automaton, Grammar), gbnf


def test_exponential_inlining_stays_pushdown():
    """Each rule uses the one before twice: 2**40 positions inlined.  Counted per
    rule before anything is built, so this returns at once rather than building."""
    rules = ['r0 ::= [a-z]'] + [f"r{i} ::= r{i - 1} r{i - 1}" for i in range(1, 41)] + ["root ::= r40"]
    grammar = parse_gbnf("\n".join(rules))
    assert regular_dfa(grammar) is None
    assert isinstance(compile_automaton(Constraint(Kind.GRAMMAR, "\n".join(rules))), Grammar)
    small = parse_gbnf("\n".join(rules[:4] + ["root ::= r3"]))  # 8 positions: a DFA
    assert regular_dfa(small).matches(b"abcdefgh")
    assert MAX_INLINED_POSITIONS < 2 ** 40


def test_a_long_chain_of_rules_does_not_recurse_in_python():
    rules = ["root ::= r0"] + [f'r{i} ::= "x" r{i + 1}' for i in range(2999)] + ['r2999 ::= "!"']
    dfa = regular_dfa(parse_gbnf("\n".join(rules), Limits(max_grammar_bytes=1 << 20, max_grammar_cost=1 << 20)))
    assert dfa is not None and dfa.matches(b"x" * 2999 + b"!") and not dfa.matches(b"x" * 2998 + b"!")


def test_over_the_automaton_budget_stays_pushdown_never_a_400():
    gbnf = 'root ::= [ab]* "a" [ab]{17}'  # 2**17 DFA states: a 400 as a regex, served here
    automaton = compile_automaton(Constraint(Kind.GRAMMAR, gbnf))
    assert isinstance(automaton, Grammar)


def test_mask_work_over_the_limit_is_no_400_for_a_grammar():
    """The engine runs such a grammar on the pushdown matcher instead (adapter backend)."""
    c = Constraint(Kind.GRAMMAR, 'root ::= [a-z]{1,40} "-" [0-9]{1,40}')
    dfa = compile_automaton(c)
    assert isinstance(dfa, DFA)
    tiny = Limits(max_mask_work=10)
    check_mask_work(dfa, 128_000, tiny, c)  # no exception
    with pytest.raises(LimitExceeded, match="max_mask_work"):  # a regex with the same DFA is refused
        check_mask_work(dfa, 128_000, tiny, Constraint(Kind.REGEX, "[a-z]{1,40}-[0-9]{1,40}"))
    assert DEFAULT_LIMITS.max_mask_work > 10
