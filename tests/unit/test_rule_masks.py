"""poot's own grammar masks (core/grammar/rule_masks.py, matchers/rules.py).

The oracle is xgrammar's matcher on the same grammar and vocabulary: at every
step of random replies, poot's mask must be exactly xgrammar's, and both must
accept and refuse the same tokens; the sentences they end in are checked by
each grammar's Lark twin.  Rollback, validation and the fallbacks are held to
the same masks.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from poot_vllm.core.grammar import parse_gbnf
from poot_vllm.core.grammar.rule_automata import rule_automata
from poot_vllm.core.matchers.rules import RuleMatcher
from poot_vllm.core.vocabulary import TokenVocabulary

from tests.unit.test_grammar_budget import GRAMMARS, MODELLED, STOP, VOCAB, _allowed, compile_grammar, plain_matcher
from tests.unit.test_pushdown_matcher import oracle, sample, tokenize_randomly


def _row(m, vocab) -> np.ndarray:
    row = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    m.fill_bitmask(row)
    return row


def _walk_both(gbnf: str, vocab: TokenVocabulary, rng: random.Random, steps: int, bias_text: bytes = b""):
    """Random replies on poot's and xgrammar's matchers in lockstep; masks equal at every step."""
    comp = compile_grammar(gbnf, vocab, own=True)
    assert comp.compiled is None, "expected poot's own masks"
    mine, ref = comp.new_matcher(), plain_matcher(gbnf, vocab)
    assert isinstance(mine, RuleMatcher)
    stop = min(vocab.stop_ids)
    out = b""
    for _ in range(steps):
        a, b = _row(mine, vocab), _row(ref, vocab)
        assert np.array_equal(a, b), (out, sorted(set(np.flatnonzero(np.unpackbits(a.view(np.uint8), bitorder="little")))
                                             ^ set(np.flatnonzero(np.unpackbits(b.view(np.uint8), bitorder="little")))))
        allowed = np.flatnonzero(np.unpackbits(a.view(np.uint8), bitorder="little")[:vocab.size]).tolist()
        if not allowed or mine.is_terminated():
            break
        text = [t for t in allowed if t != stop]
        t = rng.choice(text) if text and rng.random() < 0.9 else rng.choice(allowed)
        # A token the grammar refuses is refused by both, state unchanged.
        bad = rng.randrange(vocab.size)
        if bad not in allowed:
            assert not mine.accept_tokens([bad]) and not ref.accept_tokens([bad])
        assert mine.accept_tokens([t]) and ref.accept_tokens([t])
        if t != stop:
            out += vocab.token_bytes[t]
    return mine, ref, out


@pytest.mark.parametrize("name", MODELLED)
def test_masks_equal_xgrammars_along_random_replies(name):
    gbnf, lark_text = GRAMMARS[name]
    accepts = oracle(lark_text)
    for seed in range(6):
        mine, ref, out = _walk_both(gbnf, VOCAB, random.Random(seed), 40)
        assert mine.is_terminated() == ref.is_terminated()
        if mine.is_terminated():
            assert accepts(out.decode()), out


@pytest.mark.parametrize("name", MODELLED)
def test_sampled_sentences_are_accepted_token_by_token(name):
    """Sentences of the grammar, split into tokens at random: accepted, then the stop token."""
    gbnf, _ = GRAMMARS[name]
    comp = compile_grammar(gbnf, own=True)
    grammar = parse_gbnf(gbnf)
    rng = random.Random(name)
    for _ in range(30):
        s = sample(grammar, rng)
        if len(s) > 60:
            continue
        ids = tokenize_randomly(s.encode(), VOCAB, rng)
        m = comp.new_matcher()
        assert m.accept_tokens(ids), s
        assert STOP in _allowed(m)
        assert m.accept_tokens([STOP]) and m.is_terminated()


def test_rollback_and_validate_keep_the_masks():
    gbnf, _ = GRAMMARS["nested-lists-with-text"]
    comp = compile_grammar(gbnf, own=True)
    m, ref = comp.new_matcher(), plain_matcher(gbnf)
    ids = [ord("["), ord("["), ord('"'), ord("a"), ord('"'), ord("]"), ord(","), ord("7")]
    assert m.accept_tokens(ids) and ref.accept_tokens(ids)
    before = _allowed(m)
    assert m.validate_tokens([ord("]"), STOP, ord("x")]) == ref.validate_tokens([ord("]"), STOP, ord("x")]) \
        == [ord("]"), STOP]
    assert _allowed(m) == before == _allowed(ref)
    assert m.accept_tokens([ord("]"), STOP]) and m.is_terminated()
    m.rollback(2)  # the stop token and "]"
    assert not m.is_terminated() and _allowed(m) == before
    m.rollback(3)
    ref.rollback(3)
    assert _allowed(m) == _allowed(ref)
    m.reset()
    assert m.num_accepted == 0 and _allowed(m) == _allowed(plain_matcher(gbnf))


def test_a_fill_past_its_work_cap_checks_every_token_and_agrees():
    gbnf, _ = GRAMMARS["ambiguous-depth"]
    comp = compile_grammar(gbnf, own=True)
    m, ref = comp.new_matcher(), plain_matcher(gbnf)
    ids = [ord("(")] * 3
    m.accept_tokens(ids)
    ref.accept_tokens(ids)
    cap = comp.rules.work_cap
    try:
        comp.rules.work_cap = 1
        assert _allowed(m) == _allowed(ref)
    finally:
        comp.rules.work_cap = cap


def test_left_recursion_and_no_model_stay_on_xgrammar():
    gbnf, _ = GRAMMARS["left-recursive-precedence"]
    assert rule_automata(parse_gbnf(gbnf)) is None
    comp = compile_grammar(gbnf, own=True)
    assert comp.compiled is not None and not isinstance(comp.new_matcher(), RuleMatcher)


# ---------------------------------------------------- real vocabularies

@pytest.fixture(scope="module", params=("llama2-spm-32k", "llama3-bpe-128k"))
def real_vocab(request):
    from transformers import AutoTokenizer

    from tests.bench_data import require_bench

    tok = AutoTokenizer.from_pretrained(str(require_bench("vocab", request.param, "tokenizer.json").parent))
    return TokenVocabulary.from_tokenizer(tok, stop_ids=[tok.eos_token_id])


@pytest.mark.parametrize("name", ["arithmetic", "nested-lists-with-text", "ambiguous-depth", "nested-brackets"])
def test_masks_equal_xgrammars_on_real_vocabularies(real_vocab, name):
    gbnf, lark_text = GRAMMARS[name]
    accepts = oracle(lark_text)
    for seed in range(3):
        mine, ref, out = _walk_both(gbnf, real_vocab, random.Random(seed), 25)
        if mine.is_terminated():
            assert accepts(out.decode()), out
