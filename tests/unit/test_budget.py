"""Replies that complete: shortest-reply distances, admission, and json_object
closing budgets, against brute-force oracles."""

from __future__ import annotations

import itertools
import json
import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from poot_vllm.core.budget import ReplyDoesNotFit, check_reply_fits, engine_token_budget, shortest_dfa_reply, shortest_reply
from poot_vllm.core.constraints import Constraint, Kind, compile_automaton
from poot_vllm.core.masks import DFAMaskIndex
from tests.unit.mask_helpers import allowed_set, brute_min_tokens, make_vocab, random_dfa, random_vocab

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALPHABET = b"abc"


# ---------------------------------------------------------------- DFA replies

@FAST
@given(st.integers(0, 2**32))
def test_shortest_dfa_reply_matches_brute_force_and_the_mask_index(seed):
    rng = random.Random(seed)
    dfa = random_dfa(rng, ALPHABET, rng.randint(1, 7))
    vocab = random_vocab(rng, ALPHABET, rng.randint(1, 20), n_stop=rng.choice([0, 1, 2]),
                         all_singles=rng.random() < 0.5)
    want = brute_min_tokens(dfa, vocab)[dfa.start]
    got = shortest_dfa_reply(dfa, vocab)
    if want == math.inf:
        assert got is None
        return
    assert got == want
    index = DFAMaskIndex.build(dfa, vocab)
    assert int(index.min_tokens_to_accept[dfa.start]) == got


def test_shortest_reply_of_real_constraints_with_a_multibyte_vocabulary():
    toks = [bytes([b]) for b in range(32, 127)] + [b'{"', b'name', b'":"', b'"}', b'":', b'"', None]
    vocab = make_vocab(toks, {len(toks) - 1}, len(toks))
    schema = '{"type":"object","properties":{"name":{"type":"string"}},"required":["name"],' \
             '"additionalProperties":false}'
    c = Constraint(Kind.JSON, schema)
    # {"  name  ":"  "}  + stop: the fewest tokens for {"name":""}
    assert shortest_reply(c, vocab) == 5
    choice = Constraint(Kind.CHOICE, json.dumps(["name", "a"]))
    assert shortest_reply(choice, vocab) == 2
    # The mask index agrees (the engine side).
    index = DFAMaskIndex.build(compile_automaton(c), vocab)
    assert index.min_tokens_to_accept[index.dfa.start] == 5


@FAST
@given(st.integers(0, 2**32), st.integers(0, 6), st.data())
def test_dfa_budget_follows_speculative_rollback(seed, slack, data):
    """After accepting draft tokens and rolling some back, the budget mask is
    the one a matcher that only ever saw the kept tokens would give."""
    from poot_vllm.core.matchers.dfa import DFAMatcher

    rng = random.Random(seed)
    dfa = random_dfa(rng, ALPHABET, rng.randint(1, 7))
    vocab = random_vocab(rng, ALPHABET, rng.randint(1, 20), all_singles=True)
    index = DFAMaskIndex.build(dfa, vocab)
    budget = int(index.min_tokens_to_accept[dfa.start]) + slack
    m = DFAMatcher(index)
    m.set_token_budget(budget)
    row = np.zeros(index.words, dtype=np.int32)
    taken: list[int] = []
    for _ in range(budget):
        if m.is_terminated():
            break
        m.fill_bitmask(row)
        t = rng.choice(sorted(allowed_set(row, index.words * 32)))
        assert m.accept_tokens([t])
        taken.append(t)
    back = data.draw(st.integers(0, len(taken)))
    m.rollback(back)
    kept = taken[: len(taken) - back]
    fresh = DFAMatcher(index)
    fresh.set_token_budget(budget)
    assert fresh.accept_tokens(kept)
    if not fresh.is_terminated():
        want = np.zeros_like(row)
        m.fill_bitmask(row)
        fresh.fill_bitmask(want)
        assert np.array_equal(row, want)
    assert m.num_accepted == len(kept)


def test_admission_names_both_numbers():
    vocab = make_vocab([bytes([b]) for b in range(32, 127)] + [None], {95}, 96)
    c = Constraint(Kind.REGEX, "hello world")  # 11 single-byte tokens + stop
    check_reply_fits(c, 12, vocab)
    check_reply_fits(c, None, vocab)
    with pytest.raises(ReplyDoesNotFit) as info:
        check_reply_fits(c, 11, vocab)
    msg = str(info.value)
    assert "12" in msg and "11" in msg and info.value.field == "max_tokens"
    assert (info.value.shortest, info.value.allowed) == (12, 11)


def test_recursive_grammar_admission_is_only_a_lower_bound():
    vocab = make_vocab([bytes([b]) for b in range(32, 127)] + [None], {95}, 96)
    c = Constraint(Kind.GRAMMAR, 'root ::= "a" "b" x\nx ::= "c" | "(" x ")"')
    assert shortest_reply(c, vocab) == 1  # the stop token: never refuses a reply that fits
    check_reply_fits(c, 4, vocab)


def test_grammar_without_recursion_is_admitted_by_its_shortest_reply():
    """A regular grammar is a DFA: admission knows its shortest reply exactly."""
    vocab = make_vocab([bytes([b]) for b in range(32, 127)] + [None], {95}, 96)
    c = Constraint(Kind.GRAMMAR, 'root ::= "a" "b" c\nc ::= "c" | "cc"')
    assert shortest_reply(c, vocab) == 4  # a, b, c, stop
    check_reply_fits(c, 4, vocab)
    with pytest.raises(ReplyDoesNotFit) as info:
        check_reply_fits(c, 3, vocab)
    assert (info.value.shortest, info.value.allowed) == (4, 3)


@pytest.mark.parametrize("max_tokens,max_model_len,prompt,want", [
    (64, 2048, 100, 64), (64, 120, 100, 20), (None, 120, 100, 20), (None, None, None, None), (5, None, 3, 5),
])
def test_engine_budget_is_capped_by_the_context(max_tokens, max_model_len, prompt, want):
    assert engine_token_budget(max_tokens, max_model_len, prompt) == want


# ------------------------------------------------------------- json_object

from poot_vllm.core.grammar import json_object_grammar  # noqa: E402
from poot_vllm.core.matchers.pushdown import PushdownMatcher, compile_pushdown  # noqa: E402
from poot_vllm.core.grammar.json_budget import JsonCloser, closing_tables, shortest_object_tokens  # noqa: E402
from poot_vllm.core.vocabulary import TokenVocabulary  # noqa: E402

MULTI = [b'{}', b'"}', b'}}', b']}', b'"a":', b'true', b', "', b'[[', b'{"', b'":"', b'"]', b'null}', b'\\u00',
         b'0,', b'1.5e', b'\xe2\x82', b'ab', b' {', b'"x": [']
STOP = 256 + len(MULTI)
VOCAB = TokenVocabulary(tuple([bytes([b]) for b in range(256)] + MULTI + [None]), frozenset({STOP}), STOP + 1, "raw")
#: Bytes a shortest completion can use (the brute-force search alphabet).
COMPLETION_ALPHABET = '{}]":0,nulrtfase['


def _conforms(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict) and text.startswith("{")
    except ValueError:
        return False


def _brute_closing_bytes(prefix: str, bound: int) -> int:
    """Fewest chars (from a completion alphabet) that make ``prefix`` a JSON object."""
    for n in range(bound + 1):
        for tail in itertools.product(COMPLETION_ALPHABET, repeat=n):
            if _conforms(prefix + "".join(tail)):
                return n
    return bound + 1


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-50, 50) | st.floats(allow_nan=False, allow_infinity=False, width=16)
    | st.text(alphabet="ab\"\\é", max_size=3),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(alphabet="k\"", max_size=2), inner, max_size=2),
    max_leaves=5,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.text(alphabet="ab", max_size=2), json_values, max_size=3), st.data())
def test_closing_bytes_match_brute_force(obj, data):
    text = json.dumps(obj, ensure_ascii=False)
    cut = data.draw(st.integers(0, len(text)))
    prefix = text[:cut]
    closer = JsonCloser()
    closer.advance(prefix.encode())
    cost = closer.cost()
    if cost > 4:  # the brute force below is exponential; depth is covered by the examples test
        prefix, cost = prefix[: max(0, cut - 1)], None
        return
    if "\\u" in prefix[-5:] or any(ord(ch) > 127 for ch in prefix[-1:]):
        return  # hex digits / multi-byte chars are outside the small completion alphabet
    assert _brute_closing_bytes(prefix, cost) == cost, prefix


def test_closing_bytes_inside_utf8_and_escapes():
    for prefix, want in [(b'{"a":"\xe2', 4), (b'{"a":"\xe2\x82', 3), (b'{"a":"\\', 3), (b'{"a":"\\u1', 5),
                         (b'{"\\u12', 6), (b'{"a":[1,', 3), (b'{"a":[{"x":1}],', 5), (b'{"a":fa', 4), (b'', 2)]:
        c = JsonCloser()
        c.advance(prefix)
        assert c.cost() == want, prefix


@pytest.fixture(scope="module")
def compiled():
    return compile_pushdown(json_object_grammar(), VOCAB)


def _allowed(m: PushdownMatcher) -> list[int]:
    row = np.zeros((VOCAB.size + 31) // 32, dtype=np.int32)
    m.fill_bitmask(row)
    return sorted(allowed_set(row, VOCAB.size))


def test_json_object_shortest_reply(compiled):
    assert compiled.closing is not None
    assert shortest_object_tokens(compiled.closing) == 1  # b"{}" is one token
    assert shortest_reply(Constraint(Kind.JSON_OBJECT, ""), VOCAB) == 2
    no_pair = TokenVocabulary(tuple([bytes([b]) for b in range(256)] + [None]), frozenset({256}), 257, "raw")
    assert shortest_reply(Constraint(Kind.JSON_OBJECT, ""), no_pair) == 3


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), st.integers(2, 40))
def test_json_object_replies_finish_within_budget(compiled, seed, budget):
    """Random walks over the budget mask (biased to open things) always end in a
    conforming object, with the stop token, within the budget."""
    rng = random.Random(seed)
    m = compiled.new_matcher()
    m.set_token_budget(budget)
    out = b""
    plain = PushdownMatcher(compiled)
    while not m.is_terminated():
        assert m.num_accepted < budget, "ran out of budget"
        allowed = _allowed(m)
        assert allowed, out
        plain_allowed = _allowed(plain)
        assert set(allowed) <= set(plain_allowed)
        if budget - m.num_accepted - 2 >= m._closer.cost() + compiled.closing.max_increase:
            assert allowed == plain_allowed  # far from the limit: the mask is unchanged
        openers = [t for t in allowed if t < STOP and VOCAB.token_bytes[t][:1] in (b"{", b"[", b'"', b",", b"\\")]
        t = rng.choice(openers) if openers and rng.random() < 0.6 else rng.choice(allowed)
        assert m.accept_tokens([t]) and plain.accept_tokens([t])
        if t != STOP:
            out += VOCAB.token_bytes[t]
    assert m.num_accepted <= budget
    assert _conforms(out.decode()), out


def test_budget_follows_rollback(compiled):
    m = compiled.new_matcher()
    m.set_token_budget(12)
    text = [VOCAB.token_bytes.index(b) for b in (b'{"', b"a", b'"', b":", b"[[", b"1")]
    assert m.accept_tokens(text)
    after = _allowed(m)
    assert m.accept_tokens([ord(","), ord("2")])
    m.rollback(2)
    assert _allowed(m) == after
    assert m.validate_tokens([ord("]"), ord("]")]) == [ord("]"), ord("]")]
    assert _allowed(m) == after
    fresh = compiled.new_matcher()
    fresh.set_token_budget(12)
    fresh.accept_tokens(text)
    assert _allowed(fresh) == after
    m.reset()
    assert m.num_accepted == 0 and m._closer.cost() == 2


def test_budget_below_the_shortest_reply_still_closes(compiled):
    m = compiled.new_matcher()
    m.set_token_budget(1)
    out = b""
    for _ in range(10):
        allowed = _allowed(m)
        assert allowed
        t = allowed[-1] if STOP not in allowed else STOP
        m.accept_tokens([t])
        if m.is_terminated():
            break
        out += VOCAB.token_bytes[t]
    assert m.is_terminated() and _conforms(out.decode())


def test_vocabulary_without_single_byte_closers_has_no_json_budget():
    toks = tuple([bytes([b]) for b in range(256) if b != ord("}")] + [b"x}", None])
    vocab = TokenVocabulary(toks, frozenset({len(toks) - 1}), len(toks), "raw")
    assert closing_tables(vocab) is None
    m = compile_pushdown(json_object_grammar(), vocab).new_matcher()
    m.set_token_budget(3)
    assert not m.supports_budget


# ------------------------------------------- budget tables on real vocabularies

REAL_VOCABS = ("llama2-spm-32k", "llama3-bpe-128k")
REAL_SCHEMAS = {
    "strings_and_arrays": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["name", "tags"], "additionalProperties": False,
    },
    "enum_number_nested": {
        "type": "object",
        "properties": {"kind": {"enum": ["alpha", "beta", "gamma delta"]}, "size": {"type": "integer"},
                       "owner": {"type": "object", "properties": {"id": {"type": "number"}, "ok": {"type": "boolean"}},
                                 "required": ["id", "ok"], "additionalProperties": False}},
        "required": ["kind", "size", "owner"], "additionalProperties": False,
    },
    "pattern_items": {
        "type": "array", "minItems": 1,
        "items": {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
                                                   "note": {"type": "string", "maxLength": 12}},
                  "required": ["code", "note"], "additionalProperties": False},
    },
}


@pytest.fixture(scope="module", params=REAL_VOCABS)
def real_vocab(request):
    from transformers import AutoTokenizer

    from poot_vllm.core.vocabulary import TokenVocabulary
    from tests.bench_data import require_bench

    tok = AutoTokenizer.from_pretrained(str(require_bench("vocab", request.param, "tokenizer.json").parent))
    return TokenVocabulary.from_tokenizer(tok, stop_ids=[tok.eos_token_id])


@pytest.mark.parametrize("name", sorted(REAL_SCHEMAS))
def test_budget_tables_on_real_vocabularies(real_vocab, name):
    """Real tokenizers and JSON Schemas: the budget tables give exactly the
    masks of the trie walk they replace (every state, every budget where they
    differ from the plain row), a few of them checked token by token against
    the definition, and budget-aware replies finish in time and validate."""
    import jsonschema

    from poot_vllm.core.json_schema import compile_json_schema
    from poot_vllm.core.matchers.dfa import DFAMatcher
    from tests.unit.mask_helpers import walk

    vocab, schema = real_vocab, REAL_SCHEMAS[name]
    dfa = compile_json_schema(json.dumps(schema))
    index = DFAMaskIndex.build(dfa, vocab)
    walked = DFAMaskIndex.build(dfa, vocab, budget_table_bytes=0)
    assert walked.budget.grp_tokens.size == 0 and index.budget.grp_tokens.size > 0
    dist, plain = index.min_tokens_to_accept, index.plain_row_budget
    row, want = np.zeros(index.words, np.int32), np.zeros(index.words, np.int32)
    for s in range(index.n_states):
        for budget in range(int(dist[s]) - 1, int(plain[s]) + 1):
            index.restricted_mask(s, budget, row)
            walked.restricted_mask(s, budget, want)
            assert (row == want).all(), (s, budget)

    rng = random.Random(name)
    text_ids = [t for t, b in enumerate(vocab.token_bytes) if b is not None and t not in vocab.stop_ids]
    for s in rng.sample(range(index.n_states), 3):
        budget = int(plain[s]) - 1
        index.restricted_mask(s, budget, row)
        by_definition = {t for t in text_ids if (e := walk(dfa, s, vocab.token_bytes[t])) >= 0
                         and dist[e] <= budget - 1}
        if dfa.accepting[s] and budget >= 1:
            by_definition |= set(vocab.stop_ids)
        assert allowed_set(row, index.words * 32) == by_definition, s

    shortest = int(dist[dfa.start])
    for slack in (0, 1, 4):
        for _ in range(3):
            m = DFAMatcher(index)
            m.set_token_budget(shortest + slack)
            out = []
            while not m.is_terminated():
                m.fill_bitmask(row)
                allowed = sorted(allowed_set(row, vocab.size))
                tok = rng.choice(allowed)
                assert m.accept_tokens([tok])
                if tok not in vocab.stop_ids:
                    out.append(vocab.token_bytes[tok])
            assert m.num_accepted <= shortest + slack
            jsonschema.validate(json.loads(b"".join(out).decode()), schema)
