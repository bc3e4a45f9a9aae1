"""json_object: exactly one JSON object, any nesting depth, bounded whitespace.

Oracle: ``json.loads`` (strict, no NaN/Infinity) plus the whitespace rule
poot documents (outside strings only single spaces, never at the ends).
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from poot_vllm.core.grammar import json_object_grammar
from poot_vllm.core.matchers.pushdown import PushdownMatcher, compile_pushdown  # noqa: E402
from poot_vllm.core.vocabulary import TokenVocabulary  # noqa: E402
from tests.bench_data import bench_path, needs_bench

STOP = 256
BYTE_VOCAB = TokenVocabulary(tuple([bytes([b]) for b in range(256)] + [None]), frozenset({STOP}), 257, "raw")
LLAMA3 = bench_path("vocab", "llama3-bpe-128k", "tokenizer.json")


@pytest.fixture(scope="module")
def matcher() -> PushdownMatcher:
    return PushdownMatcher(compile_pushdown(json_object_grammar(), BYTE_VOCAB))


def accepts(m: PushdownMatcher, text: str | bytes) -> bool:
    data = text.encode() if isinstance(text, str) else text
    m.reset()
    return m.accept_tokens(list(data)) and m.accept_tokens([STOP])


def allowed(m: PushdownMatcher) -> set[int]:
    row = np.zeros((BYTE_VOCAB.size + 31) // 32, dtype=np.int32)
    m.fill_bitmask(row)
    return set(np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[:BYTE_VOCAB.size]).tolist())


def _reject_constant(name: str):
    raise ValueError(name)


def whitespace_ok(text: str) -> bool:
    """Outside strings: only single spaces, none at the start or end."""
    in_string = escaped = False
    prev_space = True  # a space at the very start is refused
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
            prev_space = False
            continue
        if c in " \t\r\n":
            if c != " " or prev_space:
                return False
            prev_space = True
            continue
        in_string = c == '"'
        prev_space = False
    return not prev_space


def oracle(text: str) -> bool:
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return False
    return isinstance(value, dict) and whitespace_ok(text)


text_no_surrogates = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
scalars = st.none() | st.booleans() | st.integers(-10**20, 10**20) \
    | st.floats(allow_nan=False, allow_infinity=False) | text_no_surrogates
json_values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=4)
                           | st.dictionaries(text_no_surrogates, kids, max_size=4), max_leaves=20)
json_objects = st.dictionaries(text_no_surrogates, json_values, max_size=5)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(obj=json_objects, compact=st.booleans(), ascii_only=st.booleans())
def test_serialized_objects_are_accepted(matcher, obj, compact, ascii_only):
    text = json.dumps(obj, separators=(",", ":") if compact else (", ", ": "), ensure_ascii=ascii_only)
    assert oracle(text)
    assert accepts(matcher, text), text


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(value=json_values.filter(lambda v: not isinstance(v, dict)))
def test_non_objects_at_top_level_are_rejected(matcher, value):
    assert not accepts(matcher, json.dumps(value))


JSON_ALPHABET = '{}[]:,"\\ \n\t0123456789-+.eEtrufalsnbu/\x01é'


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(obj=json_objects, seed=st.integers(0, 2**32), edits=st.integers(1, 3))
def test_mutated_texts_match_the_oracle(matcher, obj, seed, edits):
    """Random edits of valid texts: accepted exactly when json.loads + the whitespace rule accept."""
    rng = random.Random(seed)
    text = json.dumps(obj, separators=rng.choice([(",", ":"), (", ", ": ")]))
    for _ in range(edits):
        i = rng.randrange(len(text) + 1)
        op = rng.random()
        if op < 0.35:
            text = text[:i] + text[i + 1:]
        elif op < 0.7:
            text = text[:i] + rng.choice(JSON_ALPHABET) + text[i + 1:]
        else:
            text = text[:i] + rng.choice(JSON_ALPHABET) + text[i:]
    assert accepts(matcher, text) == oracle(text), text


@pytest.mark.parametrize("text,want", [
    ('{}', True), ('{ }', True), ('{  }', False), (' {}', False), ('{} ', False), ('{}\n', False),
    ('{"a":1}', True), ('{ "a" : 1 }', True), ('{"a":\n1}', False), ('{"a":01}', False),
    ('{"a":-0.5e+10}', True), ('{"a":NaN}', False), ('{"a":Infinity}', False), ('{"a":.5}', False),
    ('{"a":"\\u00e9\\n\\/"}', True), ('{"a":"\\x41"}', False), ('{"a":"\\u12"}', False),
    ('{"a":"tab\there"}', False), ('{"a":"\x7f"}', True), ('{"a":[1,]}', False), ('{"a":1,}', False),
    ('{"a":[ ]}', True), ('{"a":[1 , 2]}', True), ('{"a":true,"b":null,"c":false}', True), ('[]', False),
    ('"x"', False), ('{"a":1}{}', False), ("{'a':1}", False),
])
def test_examples(matcher, text, want):
    assert oracle(text) == want  # the table itself agrees with the oracle
    assert accepts(matcher, text) == want


def test_depth_300_through_the_matcher(matcher):
    depth = 300
    opens = "".join('{"k":' if i % 2 == 0 else "[" for i in range(depth))
    closes = "".join("}" if i % 2 == 0 else "]" for i in reversed(range(depth)))
    text = opens + "0" + closes
    assert oracle(text)
    assert accepts(matcher, text)
    assert not accepts(matcher, text[:-1])
    assert not accepts(matcher, text[:-2] + text[-1] + text[-2])  # closers swapped


def test_masks_bound_whitespace_and_force_an_object(matcher):
    matcher.reset()
    assert allowed(matcher) == {ord("{")}
    matcher.accept_tokens([ord("{")])
    assert allowed(matcher) == {ord(" "), ord('"'), ord("}")}
    matcher.accept_tokens([ord(" ")])
    assert allowed(matcher) == {ord('"'), ord("}")}  # never a second space
    matcher.accept_tokens([ord("}")])
    assert allowed(matcher) == {STOP}


@needs_bench("vocab", "llama3-bpe-128k", "tokenizer.json")
def test_real_tokenizer_tokens_of_valid_objects_are_accepted():
    """Llama-3 BPE tokens cross JSON token boundaries (`{"`, `":`, `"},`): still accepted."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(LLAMA3))
    vocab = TokenVocabulary.from_tokenizer(tok, stop_ids=[128001])
    m = PushdownMatcher(compile_pushdown(json_object_grammar(), vocab))

    @settings(max_examples=40, deadline=None)
    @given(obj=json_objects, compact=st.booleans())
    def check(obj, compact):
        text = json.dumps(obj, separators=(",", ":") if compact else (", ", ": "), ensure_ascii=False)
        ids = tok.encode(text, add_special_tokens=False)
        assert b"".join(vocab.token_bytes[i] for i in ids) == text.encode()
        m.reset()
        assert m.accept_tokens(ids) and m.accept_tokens([128001]) and m.is_terminated(), text

    check()
