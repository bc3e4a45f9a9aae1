"""The complement of a schema as positive pieces (negation.py), against jsonschema and Python's re."""

from __future__ import annotations

import re

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poot_vllm.core.json_schema.compiler import SchemaCompiler
from poot_vllm.core.automata.compilers import regex_escape
from poot_vllm.core.json_schema.negation import not_pattern
from poot_vllm.core.limits import Limits

PATTERNS = ["^a", "b$", "a|b", "^(ab)+$", "x.z", "^$", "[0-9]{2}", "(?i)^Q", "a\\.b", "^(?:c|dd)*$"]
TEXTS = st.text(alphabet="abxzQq.0123\n", max_size=6)


@settings(max_examples=300, deadline=None)
@given(pattern=st.sampled_from(PATTERNS), text=TEXTS)
def test_not_pattern_matches_exactly_what_the_pattern_does_not(pattern, text):
    negated = not_pattern(pattern)
    if negated is None:  # global flags: only allowed at the very start, so not negated
        assert pattern.startswith("(?i)")
        return
    assert (re.search(negated, text) is not None) == (re.search(pattern, text) is None)


@given(text=st.text(max_size=8))
def test_escaped_enum_strings_match_themselves(text):
    # 'not enum' writes the listed strings with regex_escape inside a pattern
    assert re.fullmatch(regex_escape(text), text)


SCHEMAS = [
    {"type": "string", "minLength": 2, "maxLength": 4},
    {"type": "integer", "minimum": -3, "exclusiveMaximum": 7},
    {"type": "number", "exclusiveMinimum": 0.5, "maximum": 2},
    {"enum": ["a", 1, None, True, 2.5]},
    {"const": "x"},
    {"type": ["string", "null"], "pattern": "^a"},
    {"type": "object", "required": ["a"], "properties": {"a": {"type": "number", "minimum": 0}, "b": {"type": "string"}}},
    {"type": "array", "minItems": 1, "maxItems": 2},
    {"anyOf": [{"type": "string", "maxLength": 1}, {"type": "integer", "maximum": 0}]},
    {"not": {"type": "boolean"}},
    {"minProperties": 1, "maxProperties": 1},
    {"type": "integer"},
    {"type": "string", "format": "date"},
    {"type": "array", "items": {"type": "integer"}},
    {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "integer", "maximum": 5}]},
]
EXACT = {0, 2, 3, 4, 5, 6, 7, 9, 10}  # indices whose every keyword has a positive complement

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-6, 9) | st.sampled_from([0.25, 0.5, 1.5, 2.5, -0.5])
    | st.text(alphabet="abx1-", max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
    max_leaves=5)


def _pieces(schema):
    compiler = SchemaCompiler(schema, Limits())
    return compiler._negator(()).negate(schema)


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
@settings(max_examples=150, deadline=None)
@given(value=VALUES)
def test_pieces_lie_outside_the_schema_and_cover_its_complement_when_exact(index, value):
    schema = SCHEMAS[index]
    neg = _pieces(schema)
    assert neg.exact == (index in EXACT), neg
    valid = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).is_valid(value)
    in_a_piece = any(jsonschema.Draft202012Validator(p).is_valid(value) for p in neg.pieces)
    if in_a_piece:
        assert not valid, (value, neg.pieces)  # sound: a piece never holds a valid value
    elif neg.exact:
        assert valid, (value, neg.pieces)  # exact: every invalid value is in a piece


def test_a_complement_too_large_to_write_is_refused_naming_the_keyword():
    """1,600 dependentRequired pairs become one 'not' whose complement has too many combinations:
    a refusal after a bounded number of merges, not a slow build."""
    from poot_vllm.core.errors import UnsupportedConstruct
    from poot_vllm.core.json_schema import schema_to_regex

    schema = {"type": "object",
              "dependentRequired": {f"a{i}": [f"b{j}" for j in range(40)] for i in range(40)}}
    with pytest.raises(UnsupportedConstruct, match=r"'not' at /not: writing the values that fail it takes more than"):
        schema_to_regex(schema)


# -- oneOf told apart by patterns (a discriminator property, as MCP / form schemas write it) ----------
from poot_vllm.core.json_schema.patterns import patterns_disjoint  # noqa: E402

DISJOINT_CASES = [
    ("^basic:date:$", "^basic:datetime:$", True),
    ("^(basic:integer|data(:[a-z0-9:]+)?):$", "^basic:decimal:$", True),
    ("^data(:[a-z0-9:]+)?:$", "^data:x:$", False),  # data:x: is both
    ("a", "b", False),  # "ab" is found by both (search, not fullmatch)
    ("^a", "^b", True),
    ("^x$", "^x\n$", False),  # Python's $ also matches before a final newline: "x\n" is both
    ("^\\d$", "^[\u0660-\u0669]$", False),  # \d is Unicode for validators (poot emits ASCII digits)
    ("^[a-z]+$", "^[0-9]+$", True),
    ("(a)\\1", "b", False),  # a backreference: not provable, so not claimed
]


@pytest.mark.parametrize("first,second,disjoint", DISJOINT_CASES)
def test_patterns_disjoint_is_proven_under_python_search_semantics(first, second, disjoint):
    assert patterns_disjoint(first, second, Limits().max_automaton_bytes) is disjoint
    assert patterns_disjoint(second, first, Limits().max_automaton_bytes) is disjoint


@settings(max_examples=300, deadline=None)
@given(first=st.sampled_from(PATTERNS), second=st.sampled_from(PATTERNS), text=TEXTS)
def test_patterns_called_disjoint_share_no_text(first, second, text):
    if patterns_disjoint(first, second, Limits().max_automaton_bytes):
        assert not (re.search(first, text) and re.search(second, text)), (first, second, text)


def _conformance():
    """scripts/json_conformance.py (its DFA sampler honours lookaheads)."""
    import importlib.util
    import sys
    from pathlib import Path

    if "json_conformance" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "json_conformance", Path(__file__).resolve().parents[2] / "scripts" / "json_conformance.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["json_conformance"] = module
        spec.loader.exec_module(module)
    return sys.modules["json_conformance"]


def _branch(i: int, value: dict) -> dict:
    return {"type": "object", "required": ["kind", "v"], "additionalProperties": False,
            "properties": {"kind": {"type": "string", "pattern": f"^basic:t{i % 10}:{'x' if i >= 10 else ''}$"},
                           "v": value}}


def test_a_oneof_discriminated_by_patterns_is_served_and_exact():
    """12 branches told apart by the patterns of their 'kind': before the proof, the differences
    (A and not B, ...) passed max_schema_regex_bytes; now every sampled reply matches exactly one branch."""
    import json
    import random

    from poot_vllm.core.json_schema import compile_json_schema

    conformance = _conformance()
    values = [{"type": "integer"}, {"type": "string", "maxLength": 8}, {"type": "boolean"}, {"type": "number"}]
    schema = {"oneOf": [_branch(i, values[i % 4]) for i in range(12)]}
    dfa = compile_json_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(7)
    kinds = set()
    for _ in range(300):
        text = conformance.sample_dfa(dfa, rng)
        if text is None:
            continue
        value = json.loads(text)
        validator.validate(value)
        kinds.add(value["kind"])
    assert len(kinds) >= 6, kinds  # the walks reach many branches


def test_overlapping_patterns_still_exclude_the_shared_values():
    """'^a' and 'b$' overlap ("ab"): no proof, so oneOf keeps the difference (a value matching both is never emitted)."""
    from poot_vllm.core.json_schema import compile_json_schema

    schema = {"oneOf": [{"type": "string", "pattern": "^a", "maxLength": 3},
                        {"type": "string", "pattern": "b$", "maxLength": 3}]}
    dfa = compile_json_schema(schema)
    assert not dfa.matches(b'"ab"') and not dfa.matches(b'"aab"')
    assert dfa.matches(b'"aa"') and dfa.matches(b'"bb"')
