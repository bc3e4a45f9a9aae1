"""Speculative decoding through ``PootGrammar``, step by step as vLLM 0.32 drives it,
against a replay oracle, for both matchers (DFA and pushdown); and the
grammar's guards: an internal error never escapes into the engine core.

vLLM's speculative step, per request: ``validate_tokens(drafts)`` trims the
drafts (must not change state); ``grammar_bitmask`` then accepts each kept
draft one at a time to fill one mask row per position and ``rollback``s them
all; after the forward pass ``accept_tokens`` takes the accepted drafts plus
the bonus token.  The oracle is a fresh matcher fed the kept tokens (replay).
The per-matcher tests in test_matcher.py / test_pushdown_matcher.py cover
arbitrary accept/validate/rollback histories; this file checks the protocol
through the adapter vLLM actually calls.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torch  # with vLLM, a required test dependency: an import failure fails, never skips

from poot_vllm.adapter.backend import PootGrammar  # noqa: E402
from poot_vllm.core.automata.compilers import compile_regex  # noqa: E402
from poot_vllm.core.matchers.base import Matcher  # noqa: E402
from poot_vllm.core.matchers.compiled import CompiledDFA  # noqa: E402
from poot_vllm.core.grammar import parse_gbnf
from poot_vllm.core.matchers.pushdown import compile_pushdown  # noqa: E402
from poot_vllm.core.vocabulary import TokenVocabulary  # noqa: E402

STOP = 0
PIECES = [b"a", b"b", b"c", b"ab", b"ba", b"abc", b"(", b")", b"((", b"))", b"()", b",", b"1", b"12", b" "]
VOCAB = TokenVocabulary((None, *PIECES, None), frozenset({STOP}), len(PIECES) + 2, "raw")
WORDS = (VOCAB.size + 31) // 32


def _dfa_factory():
    compiled = CompiledDFA.build(compile_regex(r"(ab|ba|c)*( ?\((1|12)(,12)*\))?"), VOCAB)
    return lambda: compiled.new_matcher()


def _pushdown_factory():
    grammar = parse_gbnf('root ::= item*\nitem ::= "a" | "b" | "(" item* ")" | "1" "2"?')
    compiled = compile_pushdown(grammar, VOCAB)
    return lambda: compiled.new_matcher()


FACTORIES = {"dfa": _dfa_factory(), "pushdown": _pushdown_factory()}


def allowed(grammar: PootGrammar) -> set[int]:
    mask = torch.zeros((1, WORDS), dtype=torch.int32)
    grammar.fill_bitmask(mask, 0)
    bits = np.unpackbits(mask.numpy().view(np.uint8), bitorder="little")[:VOCAB.size]
    return set(np.flatnonzero(bits).tolist())


def replay(factory, tokens: list[int]) -> PootGrammar:
    g = PootGrammar(factory())
    assert g.accept_tokens("replay", tokens)
    return g


def longest_prefix(factory, kept: list[int], drafts: list[int]) -> list[int]:
    """Oracle for validate_tokens: replay, then add drafts one at a time."""
    out: list[int] = []
    for t in drafts:
        g = replay(factory, kept + out)
        if g.is_terminated() or t not in allowed(g):
            break
        out.append(t)
        if t == STOP:
            break
    return out


@pytest.mark.parametrize("kind", sorted(FACTORIES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_speculative_steps_match_replay(kind, seed):
    factory = FACTORIES[kind]
    rng = random.Random(seed)
    g = PootGrammar(factory())
    kept: list[int] = []
    for _ in range(rng.randint(1, 10)):
        if g.is_terminated():
            break
        k = 3
        # Drafts: mostly allowed tokens (a repeating prompt), sometimes junk.
        drafts, probe = [], replay(factory, kept)
        for _ in range(k):
            options = sorted(allowed(probe)) if not probe.is_terminated() else []
            t = rng.choice(options) if options and rng.random() < 0.8 else rng.randrange(VOCAB.size)
            drafts.append(t)
            if t in options and t != STOP:
                probe.accept_tokens("probe", [t])
        before = allowed(g)
        valid = g.validate_tokens(drafts)
        assert valid == longest_prefix(factory, kept, drafts)
        assert allowed(g) == before and not g.is_terminated()  # validate never mutates

        # grammar_bitmask: one row per kept draft position and the bonus, then roll back.
        rows = []
        advanced = 0
        for t in valid:
            rows.append(allowed(g))
            if g.is_terminated() or not g.accept_tokens("r", [t]):
                break
            advanced += 1
        rows.append(allowed(g) if not g.is_terminated() else None)
        g.rollback(advanced)
        assert allowed(g) == before and not g.is_terminated()
        for i, row in enumerate(rows[:-1]):
            assert row == allowed(replay(factory, kept + valid[:i]))

        # The target model accepts some drafts and samples a bonus token from the mask.
        n_ok = rng.randint(0, len(valid))
        step = valid[:n_ok]
        probe = replay(factory, kept + step)
        if not probe.is_terminated():
            step.append(rng.choice(sorted(allowed(probe))))
        assert g.accept_tokens("r", step)
        kept += step
        oracle = replay(factory, kept)
        assert g.is_terminated() == oracle.is_terminated()
        if not oracle.is_terminated():
            assert allowed(g) == allowed(oracle)


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_both_matchers_keep_one_protocol(kind):
    """Same rules, same errors, whichever automaton is behind the matcher."""
    m = FACTORIES[kind]()
    assert isinstance(m, Matcher)
    with pytest.raises(ValueError, match="must be >= 0"):
        m.rollback(-1)
    with pytest.raises(ValueError, match="only 0 were accepted"):
        m.rollback(1)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 0"):
        m.set_token_budget(-1)
    assert m.accept_tokens([1, 2]) and m.num_accepted == 2  # "ab"
    assert m.validate_tokens([STOP, 1]) == [STOP] and not m.is_terminated()
    assert m.accept_tokens([STOP, 1]) and m.is_terminated() and m.num_accepted == 3  # "a" after the stop: ignored
    assert m.accept_tokens([1]) and m.validate_tokens([1]) == [] and m.num_accepted == 3
    m.rollback(2)
    assert not m.is_terminated() and m.num_accepted == 1
    m.rollback(1)
    assert m.accept_tokens([7]) and not m.accept_tokens([STOP]) and m.num_accepted == 1  # "(" is no reply
    m.reset()
    assert m.num_accepted == 0 and m.accept_tokens([2, 1, STOP]) and m.is_terminated()


# ------------------------------------------------------------------ guards

class Exploding:
    """A matcher whose every method raises (an internal poot bug)."""

    def __getattr__(self, name):
        def boom(*args, **kwargs):
            raise RuntimeError(f"boom in {name}")
        return boom


def test_internal_errors_never_escape_and_fail_only_that_request():
    g = PootGrammar(Exploding())
    mask = torch.zeros((2, WORDS), dtype=torch.int32)
    g.fill_bitmask(mask, 1)  # must not raise
    assert (mask[1] == -1).all() and (mask[0] == 0).all()  # a harmless row, only its own
    assert g.failed
    assert g.accept_tokens("req", [1]) is False  # vLLM then ends this request with an error
    assert g.validate_tokens([1, 2]) == []        # no draft survives
    g.rollback(1)
    assert g.is_terminated() is False


@pytest.mark.parametrize("op", ["accept", "validate", "rollback", "terminated"])
def test_each_entry_point_is_guarded(op):
    g = PootGrammar(Exploding())
    if op == "accept":
        assert g.accept_tokens("req", [1]) is False
    elif op == "validate":
        assert g.validate_tokens([1]) == []
    elif op == "rollback":
        g.rollback(2)
    else:
        assert g.is_terminated() is False
    assert g.failed and g.accept_tokens("req", [1]) is False


def test_a_healthy_grammar_is_unaffected_by_the_guards():
    g = PootGrammar(FACTORIES["dfa"]())
    assert g.accept_tokens("req", [1, 2]) and not g.failed  # "a" "b"
    assert allowed(g) == allowed(replay(FACTORIES["dfa"], [1, 2]))
