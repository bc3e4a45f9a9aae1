"""Recursive grammars finish inside their token budget (core/grammar/rule_automata.py, rule_masks.py).

The model's distance must be the shortest completion: Lark (the twins of
test_pushdown_matcher.py's table) is the oracle for "a sentence", and the
distance is checked to be (1) zero exactly on sentences, (2) lowered by at
most one per byte (so no completion is shorter) and (3) met by a completion
of exactly that length (so none need be longer).  Then the masks: random
replies under a budget always end, in budget, in a sentence Lark accepts.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from poot_vllm.core.budget import shortest_reply
from poot_vllm.core.constraints import Constraint, Kind
from poot_vllm.core.grammar import parse_gbnf
from poot_vllm.core.grammar.rule_automata import Configurations, rule_automata
from poot_vllm.core.grammar.regular import dependency_order
from poot_vllm.core.matchers.pushdown import PushdownMatcher, compile_pushdown
from poot_vllm.core.vocabulary import TokenVocabulary

import os
from contextlib import contextmanager

from tests.unit.mask_helpers import allowed_set
from tests.unit.test_pushdown_matcher import GRAMMARS, mutate, oracle, sample

GRAMMARS = dict(GRAMMARS)
GRAMMARS.setdefault("arithmetic", (
    'root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= factor (("*" | "/") factor)*\n'
    'factor ::= number | "(" expr ")" | "-" factor\nnumber ::= [0-9] | [1-9] [0-9]+\n',
    'start: expr\nexpr: term (("+" | "-") term)*\nterm: factor (("*" | "/") factor)*\n'
    'factor: NUMBER | "(" expr ")" | "-" factor\nNUMBER: /[1-9][0-9]+|[0-9]/\n'))
GRAMMARS.setdefault("nested-brackets", (
    'root ::= group+\ngroup ::= "(" group* ")" | "[" group* "]" | "{" group* "}"\n',
    'start: group+\ngroup: "(" group* ")" | "[" group* "]" | "{" group* "}"\n'))
# Ambiguous on purpose: after "((((" the shortest completion is 4 bytes, after "((((b" it is 44.
GRAMMARS["ambiguous-depth"] = (
    'root ::= a | b\na ::= "(" a ")" | ""\nb ::= "(" b ")" "yyyyyyyyyy" | "b"\n',
    'start: a | b\na: "(" a ")" |\nb: "(" b ")" "yyyyyyyyyy" | "b"\n')
GRAMMARS["nested-lists-with-text"] = (
    'root ::= value\nvalue ::= list | str | [0-9]+\nlist ::= "[" (value ("," value)*)? "]"\n'
    'str ::= "\\"" [^"\\\\]* "\\""\n',
    'start: value\nvalue: list | STR | DIGITS\nlist: "[" (value ("," value)*)? "]"\n'
    'STR: /"[^"\\\\]*"/\nDIGITS: /[0-9]+/\n')

RECURSIVE = [name for name, (gbnf, _) in GRAMMARS.items() if dependency_order(parse_gbnf(gbnf)) is None]
MODELLED = [name for name in RECURSIVE if rule_automata(parse_gbnf(GRAMMARS[name][0])) is not None]


def test_every_recursive_grammar_but_left_recursion_has_a_model():
    assert {"arithmetic", "nested-brackets", "ambiguous-depth"} <= set(MODELLED)
    assert set(RECURSIVE) - set(MODELLED) == {"left-recursive-precedence"}


def _cost(c: Configurations, configs) -> int:
    return min(c.cost(x) for x in configs)


@pytest.mark.parametrize("name", MODELLED)
def test_distance_is_the_shortest_completion(name):
    gbnf, lark_text = GRAMMARS[name]
    grammar = parse_gbnf(gbnf)
    model = rule_automata(grammar)
    accepts = oracle(lark_text)
    c = Configurations(model)
    rng = random.Random(name)
    strings = [s for s in (sample(grammar, rng) for _ in range(120)) if len(s) <= 30][:40]
    alphabet = "".join(sorted({ch for s in strings for ch in s}))
    strings += [mutate(rng.choice(strings), rng, alphabet) for _ in range(40)]
    assert _cost(c, c.initial()) == model.shortest
    checked = 0
    for s in strings:
        data = s.encode()
        configs = c.initial()
        for i in range(len(data) + 1):
            if i:
                configs = c.step(configs, data[i - 1])
            if not configs:
                assert not accepts(s[:len(data[:i].decode(errors="ignore"))]) or i < len(data)
                break
            cost = _cost(c, configs)
            prefix = data[:i]
            try:
                text = prefix.decode()
            except UnicodeDecodeError:
                continue  # inside a character: Lark reads characters
            # (1) zero exactly on sentences
            assert (cost == 0) == accepts(text), (name, text, cost)
            # (2) one byte lowers it by at most one
            for b in range(256):
                after = c.step(configs, b)
                if after:
                    assert _cost(c, after) >= cost - 1
                    # the static bound the masks rely on
                    assert _cost(c, after) <= max(c.cost(x) for x in configs) + model.inc1
            # (3) a completion of exactly that length: follow a byte that lowers it
            tail, cur = b"", configs
            for _ in range(cost):
                nxt = next(((b, a) for b in range(256) if (a := c.step(cur, b)) and _cost(c, a) == _cost(c, cur) - 1),
                           None)
                assert nxt is not None, (name, text, cost, tail)
                tail += bytes([nxt[0]])
                cur = nxt[1]
            assert accepts((prefix + tail).decode()), (name, text, tail)
            checked += 1
    assert checked >= 40


def test_the_ambiguous_example_jumps():
    """One byte can raise the distance by more than any constant: the set of
    configurations keeps the cheap parse until the byte that kills it."""
    gbnf, _ = GRAMMARS["ambiguous-depth"]
    c = Configurations(rule_automata(parse_gbnf(gbnf)))
    configs = c.advance(c.initial(), b"((((")
    assert _cost(c, configs) == 4
    assert _cost(c, c.advance(configs, b"b")) == 44


# --------------------------------------------------------------------- masks

MULTI = [b"((", b"))", b"()", b"1+", b"+(", b"*(", b"12", b"[]", b"[[", b"]]", b"{}", b"})", b"yyyy",
         b'"ab', b'",', b'"]', b"(b", b"))yyyyyyyyyy", b"abc", b"zz", b"\xe2\x82"]
STOP = 256 + len(MULTI)
VOCAB = TokenVocabulary(tuple([bytes([b]) for b in range(256)] + MULTI + [None]), frozenset({STOP}), STOP + 1, "raw")


@contextmanager
def _grammar_masks(own: bool):
    old = os.environ.get("POOT_GRAMMAR_MASKS")
    os.environ["POOT_GRAMMAR_MASKS"] = "on" if own else "off"
    try:
        yield
    finally:
        if old is None:
            del os.environ["POOT_GRAMMAR_MASKS"]
        else:
            os.environ["POOT_GRAMMAR_MASKS"] = old


def compile_grammar(gbnf: str, vocab: TokenVocabulary = VOCAB, own: bool = True):
    """``own``: poot's masks (RuleMatcher); else xgrammar's matcher with poot's budget."""
    with _grammar_masks(own):
        return compile_pushdown(parse_gbnf(gbnf), vocab)


def plain_matcher(gbnf: str, vocab: TokenVocabulary = VOCAB) -> PushdownMatcher:
    """xgrammar's matcher alone: the reference mask."""
    comp = compile_grammar(gbnf, vocab, own=False)
    return PushdownMatcher(comp)


def _allowed(m) -> list[int]:
    row = np.zeros((VOCAB.size + 31) // 32, dtype=np.int32)
    m.fill_bitmask(row)
    return sorted(allowed_set(row, VOCAB.size))


@pytest.fixture(scope="module", params=[(name, own) for name in MODELLED for own in (True, False)],
                ids=lambda p: f"{p[0]}-{'poot' if p[1] else 'xgrammar'}")
def compiled(request):
    name, own = request.param
    gbnf, lark_text = GRAMMARS[name]
    comp = compile_grammar(gbnf, own=own)
    assert (comp.compiled is None) == own
    return name, comp, oracle(lark_text)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2**32), st.integers(0, 30))
def test_replies_finish_within_budget(compiled, seed, slack):
    """Random replies biased to open things (the longest tokens, recursion) end,
    with the stop token, inside the budget, and Lark accepts them."""
    name, comp, accepts = compiled
    assert comp.rules is not None
    rng = random.Random(seed)
    shortest = comp.rules.model.shortest + 1
    budget = shortest + slack
    m = comp.new_matcher()
    m.set_token_budget(budget)
    plain = plain_matcher(GRAMMARS[name][0])
    out = b""
    while not m.is_terminated():
        assert m.num_accepted < budget, (name, out)
        allowed = _allowed(m)
        assert allowed, (name, out)
        plain_allowed = _allowed(plain)
        assert set(allowed) <= set(plain_allowed)
        longest = [t for t in allowed if t != STOP and len(VOCAB.token_bytes[t]) > 1]
        t = rng.choice(longest) if longest and rng.random() < 0.7 else rng.choice(allowed)
        assert m.accept_tokens([t]) and plain.accept_tokens([t])
        if t != STOP:
            out += VOCAB.token_bytes[t]
    assert m.num_accepted <= budget
    assert accepts(out.decode()), (name, out)


@pytest.mark.parametrize("own", [True, False])
def test_far_from_the_end_the_mask_is_the_grammars(own):
    gbnf, _ = GRAMMARS["arithmetic"]
    comp = compile_grammar(gbnf, own=own)
    m = comp.new_matcher()
    m.set_token_budget(1000)
    plain = plain_matcher(gbnf)
    for t in [ord("("), ord("("), 256 + MULTI.index(b"12")]:
        assert _allowed(m) == _allowed(plain)
        m.accept_tokens([t])
        plain.accept_tokens([t])
    m.set_token_budget(m.num_accepted + 4)  # "))" + stop: only closing fits now
    allowed = _allowed(m)
    assert 256 + MULTI.index(b"))") in allowed and ord(")") in allowed
    assert ord("(") not in allowed and ord("+") not in allowed and STOP not in allowed


@pytest.mark.parametrize("own", [True, False])
def test_budget_follows_rollback(own):
    gbnf, _ = GRAMMARS["nested-brackets"]
    comp = compile_grammar(gbnf, own=own)
    m = comp.new_matcher()
    m.set_token_budget(9)
    text = [256 + MULTI.index(b"(("), ord("["), ord("{")]
    assert m.accept_tokens(text)
    after = _allowed(m)
    assert m.accept_tokens([ord("}"), ord("]")])
    m.rollback(2)
    assert _allowed(m) == after
    assert m.validate_tokens([ord("}"), ord("]"), ord(")")]) == [ord("}"), ord("]"), ord(")")]
    assert _allowed(m) == after
    fresh = comp.new_matcher()
    fresh.set_token_budget(9)
    fresh.accept_tokens(text)
    assert _allowed(fresh) == after
    m.reset()
    start = comp.new_matcher()
    start.set_token_budget(9)
    assert m.num_accepted == 0 and _allowed(m) == _allowed(start)


def test_a_walk_past_its_work_cap_falls_back_to_single_bytes_and_still_finishes():
    gbnf, lark_text = GRAMMARS["nested-lists-with-text"]
    comp = compile_grammar(gbnf, own=False)  # (poot's own fill has its own fallback: test_rule_masks)
    accepts = oracle(lark_text)
    cap = comp.rules.work_cap
    try:
        comp.rules.work_cap = 3
        comp.rules._memo = None  # (masks remembered from other tests' full walks would answer instead)
        m = comp.new_matcher()
        m.set_token_budget(14)
        out = b""
        for t in [ord("["), ord("["), 256 + MULTI.index(b'"ab')]:
            m.accept_tokens([t])
            out += VOCAB.token_bytes[t]
        while not m.is_terminated():
            allowed = _allowed(m)
            assert all(t == STOP or len(VOCAB.token_bytes[t]) == 1 for t in allowed)
            t = max(allowed)
            m.accept_tokens([t])
            out += VOCAB.token_bytes[t] if t != STOP else b""
        assert m.num_accepted <= 14 and accepts(out.decode()), out
    finally:
        comp.rules.work_cap = cap
        comp.rules._memo = None  # (nor may this test's fallbacks answer for later ones)


@pytest.mark.parametrize("name", ["nested-lists-with-text", "arithmetic", "ambiguous-depth"])
def test_budget_masks_past_the_work_cap_stay_grammatical_with_tables(name):
    """With budget tables the matcher takes ``within``'s result as the mask itself, so past the
    work cap it must still hold only grammatical tokens (one-byte tokens checked one by one),
    never the root walk's shortcut that sets whole subtrees for a later intersection."""
    gbnf, _ = GRAMMARS[name]
    comp = compile_grammar(gbnf, own=True)
    masks, rng = comp.rules, random.Random(name)
    assert masks.cost_off is not None
    words = (VOCAB.size + 31) // 32
    cap = masks.work_cap
    try:
        masks.work_cap = 3
        masks._memo = None
        for _ in range(8):
            m = _random_prefix(comp, rng, 1, 8)
            state, configs = m._configs, m._history[-1]
            for limit in (0, 2, 5, 40):
                row = np.zeros(words, dtype=np.int32)
                masks.within(state, configs, limit, row)
                got = allowed_set(row, VOCAB.size)
                for t in got:
                    after = state.advance(configs, VOCAB.token_bytes[t])
                    assert after and min(state.cost(c) for c in after) <= limit, (name, configs, limit, t)
    finally:
        masks.work_cap = cap
        masks._memo = None


@pytest.mark.parametrize("own", [True, False])
def test_budget_below_the_shortest_reply_still_heads_for_the_end(own):
    gbnf, lark_text = GRAMMARS["arithmetic"]
    comp = compile_grammar(gbnf, own=own)
    m = comp.new_matcher()
    m.accept_tokens([ord("("), ord("(")])
    m.set_token_budget(3)
    out = b"(("
    for _ in range(10):
        allowed = _allowed(m)
        t = STOP if STOP in allowed else min(allowed)
        m.accept_tokens([t])
        if m.is_terminated():
            break
        out += VOCAB.token_bytes[t]
    assert m.is_terminated() and oracle(lark_text)(out.decode()), out


def test_left_recursion_keeps_no_budget():
    gbnf, _ = GRAMMARS["left-recursive-precedence"]
    comp = compile_pushdown(parse_gbnf(gbnf), VOCAB)
    assert comp.rules is None and comp.compiled is not None  # xgrammar's matcher serves it
    m = comp.new_matcher()
    m.set_token_budget(3)
    assert not m.supports_budget


def test_admission_still_refuses_only_what_cannot_fit():
    """A recursive grammar's admission stays a lower bound (the stop token);
    the budget masks make the rest fit."""
    gbnf, _ = GRAMMARS["arithmetic"]
    assert shortest_reply(Constraint(Kind.GRAMMAR, gbnf), VOCAB) == 1


@pytest.mark.parametrize("own", [True, False])
def test_a_token_only_an_expensive_parse_reads_is_checked_on_that_parse(own):
    """After "((((" the cheap parse (a) needs 4 bytes; the other (b) needs 45, and after the
    token "(b" (which only b reads) 55.  With 24 bytes left, every token a reads fits, but "(b"
    must go (a walk that skipped the "(" subtree for a's sake let it through: found by the
    random-reply test)."""
    gbnf, _ = GRAMMARS["ambiguous-depth"]
    comp = compile_grammar(gbnf, own=own)
    m = comp.new_matcher()
    m.set_token_budget(30)
    assert m.accept_tokens([ord("(")] * 4)
    allowed = _allowed(m)
    paren_b = 256 + MULTI.index(b"(b")
    assert ord("(") in allowed and ord(")") in allowed and paren_b not in allowed
    m.set_token_budget(80)
    assert paren_b in _allowed(m)


@pytest.mark.parametrize("own", [True, False])
def test_drafts_the_budget_mask_refuses_are_not_validated(own):
    """Speculative decoding: vLLM keeps any draft validate_tokens passes, so a draft the
    grammar allows but the budget mask refuses must stop there (replies overran
    max_tokens under ngram drafts in a real server before)."""
    gbnf, _ = GRAMMARS["arithmetic"]
    comp = compile_grammar(gbnf, own=own)
    m = comp.new_matcher()
    m.set_token_budget(6)
    assert m.accept_tokens([ord("("), ord("(")])  # "))" + stop still fit in the 4 tokens left
    assert ord("(") not in _allowed(m)
    assert m.validate_tokens([ord("("), ord("1")]) == []            # grammatical, over the budget
    assert m.validate_tokens([ord("1"), ord(")"), ord(")"), STOP]) == [ord("1"), ord(")"), ord(")"), STOP]
    assert m.validate_tokens([ord("1"), ord("+")]) == [ord("1")]      # "+" leaves no room for a term
    assert m.num_accepted == 2
    m.set_token_budget(None)
    assert m.validate_tokens([ord("("), ord("1")]) == [ord("("), ord("1")]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data(), st.integers(0, 2**32), st.integers(0, 12), st.booleans())
def test_random_grammars_finish_within_budget(data, seed, slack, own):
    """Random recursive grammars (test_rule_masks' generator), random replies biased to long
    tokens: each ends with the stop token inside shortest + 1 + slack tokens, on either mask."""
    from hypothesis import assume

    from poot_vllm.core.errors import PootError
    from tests.unit.test_rule_masks import RANDOM_VOCAB, random_grammars

    gbnf = data.draw(random_grammars())
    try:
        model = rule_automata(parse_gbnf(gbnf))
    except PootError:
        model = None
    assume(model is not None)
    comp = compile_grammar(gbnf, RANDOM_VOCAB, own=own)
    stop = min(RANDOM_VOCAB.stop_ids)
    budget = model.shortest + 1 + slack
    rng = random.Random(seed)
    m = comp.new_matcher()
    m.set_token_budget(budget)
    while not m.is_terminated():
        assert m.num_accepted < budget, gbnf
        row = np.zeros((RANDOM_VOCAB.size + 31) // 32, dtype=np.int32)
        m.fill_bitmask(row)
        allowed = sorted(allowed_set(row, RANDOM_VOCAB.size))
        assert allowed, gbnf
        longer = [t for t in allowed if t != stop and len(RANDOM_VOCAB.token_bytes[t]) > 1]
        assert m.accept_tokens([rng.choice(longer) if longer and rng.random() < 0.6 else rng.choice(allowed)])


@pytest.mark.parametrize("list_cap", [None, 0], ids=["listed", "too-many-to-list"])
@pytest.mark.parametrize("name", MODELLED)
def test_budget_masks_are_the_tokens_that_still_fit_across_replies(name, list_cap):
    """``RuleMasks.within`` (from the tokens a remembered grammar mask listed
    as returning, else remembered per grammar across replies, keyed by the
    stack it read and the limit less the distance below it) against the
    definition: a grammatical text token is kept iff some configuration after
    it finishes within the limit.  Many replies and limits over one memo; with
    no room in the lists, every mask with a returning token walks."""
    gbnf, _ = GRAMMARS[name]
    comp = compile_grammar(gbnf, own=True)
    masks, rng = comp.rules, random.Random(name)
    if list_cap is not None:
        # (compiled grammars are cached: a fresh memo, put back afterwards)
        cap, masks._ret_cap, masks._memo = masks._ret_cap, list_cap, None
        try:
            _check_budget_masks(name, comp, masks, rng, list_cap)
        finally:
            masks._ret_cap, masks._memo = cap, None
    else:
        _check_budget_masks(name, comp, masks, rng, list_cap)


@pytest.mark.parametrize("name", MODELLED)
def test_budget_masks_of_a_grammar_past_the_table_bounds_walk_to_the_same_tokens(name, monkeypatch):
    """A grammar past ``MAX_TABLE_STATES`` (or ``MAX_TABLE_BYTES``) has no budget tables: its
    budget masks are a walk from the root with the limit (``RuleMasks.within``'s fallback,
    remembered per stack and limit), intersected by the caller with the grammar mask, against
    the same definition."""
    from poot_vllm.core.grammar import rule_masks

    gbnf, _ = GRAMMARS[name]
    comp = compile_grammar(gbnf, own=True)
    monkeypatch.setattr(rule_masks, "MAX_TABLE_STATES", 0)
    masks = rule_masks.RuleMasks(comp.rules.model, VOCAB, comp.rules.trie)  # (the same model: its configurations)
    assert masks.cost_off is None and masks.has_masks
    _check_budget_masks(name, comp, masks, random.Random(name), 0)


def _random_prefix(comp, rng, lo: int, hi: int):
    """A fresh matcher after ``lo..hi`` random text tokens the grammar allows."""
    m = comp.new_matcher()
    for _ in range(rng.randint(lo, hi)):
        text = [t for t in _allowed(m) if t != STOP]
        if not text:
            break
        m.accept_tokens([rng.choice(text)])
    return m


def _check_budget_masks(name, comp, masks, rng, list_cap):
    words = (VOCAB.size + 31) // 32
    listed = [0, 0]  # (walked, listed)
    for _ in range(12):
        m = _random_prefix(comp, rng, 0, 12)
        state, configs = m._configs, m._history[-1]
        grammar = set(_allowed(m)) - {STOP}
        costs = {t: min((state.cost(c) for c in state.advance(configs, VOCAB.token_bytes[t])), default=None)
                 for t in grammar}
        for limit in sorted({rng.randint(0, 12) for _ in range(4)}):
            row = np.zeros(words, dtype=np.int32)
            masks.within(state, configs, limit, row)
            seen = state.memo_slots.get(configs)
            if seen is not None:
                n = int(masks._ret[1][seen[0]])
                listed[n >= 0] += 1
                assert list_cap is None or n <= 0  # no room: only masks without returning tokens are listed
            fits = {t for t, c in costs.items() if c is not None and c <= limit}
            assert allowed_set(row, VOCAB.size) & grammar == fits, (name, configs, limit)
            if masks.cost_off is not None:
                # With budget tables it is the grammar's own walk cut at the limit: nothing else.
                assert allowed_set(row, VOCAB.size) == fits, (name, configs, limit)
    if name != "empty-alternatives" and list_cap is None:
        assert listed[1] > 0, (name, listed)  # budget masks from listed returning tokens were checked


@pytest.mark.parametrize("name", [n for n in MODELLED if n != "empty-alternatives"])
def test_budget_tables_hold_each_states_tokens_by_the_distance_they_leave(name):
    """A state's budget table (``RuleMasks.cost_thr``/``cost_row``): for each
    distance but the largest, exactly the tokens its row reads without
    returning whose best end is within it -- checked against the
    configurations each token reaches from the state at the bottom of a stack."""
    gbnf, _ = GRAMMARS[name]
    masks = compile_grammar(gbnf, own=True).rules
    model = masks.model
    assert masks.cost_off is not None and len(masks.cost_thr) > 0, name  # the tables are in use
    state = Configurations(model)
    for g in range(model.n_states):
        row = set(allowed_set(masks.rows[masks.state_row[g]].view(np.int32), VOCAB.size))
        best = {}
        for t in row:
            # From (g, no frame below): ends that never return below g's level.
            ends = [c for c in state.advance(((g, -1),), VOCAB.token_bytes[t])]
            best[t] = min(state.cost(c) for c in ends)
        # From row_fits on the whole row fits; the costliest end bounds the fill.
        assert masks.row_fits[g] == max(best.values(), default=0) <= masks.row_cost[g], (name, g)
        for e in range(masks.cost_off[g], masks.cost_off[g + 1]):
            thr, k = int(masks.cost_thr[e]), int(masks.cost_row[e])
            assert thr < masks.row_fits[g]
            assert set(allowed_set(masks.table_rows[k].view(np.int32), VOCAB.size)) == {
                t for t, c in best.items() if c <= thr}, (name, g, thr)


@pytest.mark.parametrize("name", MODELLED)
def test_the_budget_mask_is_its_definition_and_the_fill_bound_holds(name):
    """With a budget, poot's mask is exactly the grammatical text tokens after
    which some configuration finishes in the tokens left (then the stop token
    where the grammar may end), whether the budget walk ran or the fill's
    bound (every allowed token leaves configurations finishing within it)
    showed that no token can break the budget; and that bound is a bound."""
    gbnf, _ = GRAMMARS[name]
    comp = compile_grammar(gbnf, own=True)
    rng = random.Random(name)
    words = (VOCAB.size + 31) // 32
    for slack in (0, 3, 9, 40):
        m = comp.new_matcher()
        budget = comp.rules.model.shortest + 1 + slack
        m.set_token_budget(budget)
        plain = comp.new_matcher()
        while not m.is_terminated():
            state, configs = m._configs, m._history[-1]
            grammar = set(_allowed(plain)) - {STOP}
            cost = {t: min(state.cost(c) for c in state.advance(configs, VOCAB.token_bytes[t])) for t in grammar}
            bound = comp.rules.fill(state, configs, np.zeros(words, dtype=np.int32))
            assert bound is None or bound >= max(cost.values(), default=0), (name, configs)
            limit = budget - m.num_accepted - 1 - 1
            expected = {t for t, c in cost.items() if c <= limit}
            if STOP in _allowed(plain):
                expected.add(STOP)
            assert set(_allowed(m)) == expected, (name, slack, m.num_accepted)
            t = rng.choice(sorted(expected))
            assert m.accept_tokens([t]) and plain.accept_tokens([t])
