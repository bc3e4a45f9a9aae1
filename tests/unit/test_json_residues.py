"""multipleOf by residues: steps that no small regex spells (3, 7, 12, 0.75), exact over wide ranges.

Oracle: jsonschema (Draft 2020-12) on ``json.loads`` of the text.  The schema's
DFA must accept a value iff jsonschema does (for values poot spells: the
canonical integer, the fixed-point grid), and every random walk of it must
validate.  The residue automaton itself is checked against ``n % k``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poot_vllm.core.automata.build import Budget, regex_tree_to_dfa
from poot_vllm.core.automata.compilers import compile_regex
from poot_vllm.core.automata.residues import RESIDUE_BASE, residue_dfa, residue_lookahead, residue_markers
from poot_vllm.core.errors import EmptyLanguage, LimitExceeded, UnsupportedConstruct
from poot_vllm.core.grammar.gbnf import Grammar
from poot_vllm.core.json_schema import compile_json_schema, served_regex
from poot_vllm.core.regex.parser import parse

_spec = importlib.util.spec_from_file_location("json_conformance", Path(__file__).resolve().parents[2] / "scripts" / "json_conformance.py")
conformance = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("json_conformance", conformance)
_spec.loader.exec_module(conformance)


def _valid(schema, text: str) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))


def _walks_validate(schema, dfa, n: int, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(n):
        text = conformance.sample_dfa(dfa, rng)
        assert text is not None and _valid(schema, text), (schema, text)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 60), st.lists(st.integers(-10**20, 10**20), min_size=1, max_size=30))
def test_the_residue_automaton_is_n_mod_k(k, values):
    with residue_markers(""):
        dfa = regex_tree_to_dfa(parse(residue_lookahead(k) + "-?(0|[1-9][0-9]*)"), Budget(1 << 22))
    assert residue_dfa(k).transitions.shape[0] == k + 3
    for n in values + [0, k, -k, k + 1, 10 * k]:
        assert dfa.matches(str(n).encode()) == (n % k == 0), (k, n)


@pytest.mark.parametrize("k", [3, 6, 7, 9, 11, 12, 13, 14, 15, 21, 24, 30, 36])
def test_integer_multiple_of_any_step_over_the_whole_range(k):
    """Before: refused ("residues mod k over bounded-length numbers have no small regex")."""
    schema = {"type": "integer", "multipleOf": k}
    dfa = compile_json_schema(schema)
    _walks_validate(schema, dfa, 60, k)
    rng = random.Random(k)
    values = list(range(-200, 201)) + [rng.randrange(-10**18, 10**18) for _ in range(300)]
    values += [v * k for v in (10**17, -(10**17), 123456789012345)]
    for n in values:
        assert dfa.matches(str(n).encode()) == _valid(schema, str(n)), (k, n)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([3, 7, 9, 11, 12]), st.integers(-10**12, 10**12), st.integers(1000 * 40, 10**13),
       st.booleans(), st.booleans(), st.data())
def test_integer_multiple_of_with_bounds(k, lo, width, lo_excl, hi_excl, data):
    """Wide ranges (more than 1000 multiples), inclusive or exclusive on either side: steps up to 12
    fit the default automaton budget with any bounds (larger ones with simpler bounds, see below)."""
    hi = lo + width
    schema = {"type": "integer", "multipleOf": k, ("exclusiveMinimum" if lo_excl else "minimum"): lo,
              ("exclusiveMaximum" if hi_excl else "maximum"): hi}
    dfa = compile_json_schema(schema)
    _walks_validate(schema, dfa, 15, data.draw(st.integers(0, 999)))
    near = [lo + d for d in range(-2 * k, 2 * k)] + [hi + d for d in range(-2 * k, 2 * k)]
    inside = [data.draw(st.integers(lo - 10, hi + 10)) for _ in range(40)]
    for n in near + inside:
        assert dfa.matches(str(n).encode()) == _valid(schema, str(n)), (schema, n)


@pytest.mark.parametrize("step", [0.75, 1.5, 0.375, 3, 4.5, 2.25])
def test_number_multiple_of_steps_with_an_odd_factor(step):
    """Multiples of p / 2**t spelled with t fraction digits, p with a factor no suffix spells."""
    schema = {"type": "number", "multipleOf": step}
    dfa = compile_json_schema(schema)
    _walks_validate(schema, dfa, 60, 1)
    scale = Fraction(step).denominator.bit_length() - 1
    rng = random.Random(2)
    for i in list(range(-400, 400)) + [rng.randrange(-10**12, 10**12) for _ in range(300)]:
        v = Fraction(i, 8)
        if (v * 10**scale).denominator != 1:
            continue
        text = format(Decimal(v.numerator) / Decimal(v.denominator), f".{scale}f") if scale else str(int(v))
        if text == "-0" or text.startswith("-0") and Decimal(text) == 0:
            continue
        assert dfa.matches(text.encode()) == _valid(schema, text), (step, text)


def test_a_pydantic_model_with_multiples_is_served_and_validates():
    """``Field(multiple_of=3)`` on int fields and ``multiple_of=0.75`` on a float: a 400 before."""
    import pydantic

    class Order(pydantic.BaseModel):
        dozen_eggs: int = pydantic.Field(multiple_of=12, ge=0)
        triple: int = pydantic.Field(multiple_of=3)
        hours: float = pydantic.Field(multiple_of=0.75, gt=0, le=1000)

    schema = Order.model_json_schema()
    dfa = compile_json_schema(schema)
    rng = random.Random(0)
    for _ in range(40):
        text = conformance.sample_dfa(dfa, rng)
        assert text is not None
        order = Order.model_validate_json(text)
        assert order.dozen_eggs % 12 == 0 and order.triple % 3 == 0 and (order.hours / 0.75).is_integer()


def test_the_marker_is_a_plain_character_outside_schema_builds():
    """A user's regex holding the marker character means that character (no residue)."""
    marker = chr(RESIDUE_BASE + 7)
    dfa = compile_regex(f"(?={marker}){marker}1")
    assert dfa.matches(f"{marker}1".encode()) and not dfa.matches(b"7")
    with pytest.raises(EmptyLanguage):
        compile_regex(f"(?={marker})[0-9]+")


def test_a_marker_in_a_users_pattern_is_never_read_as_a_residue():
    """A ``pattern`` holding the marker lookahead keeps its own meaning (the next character is
    U+F0007, which no digit is): only "x" matches, never a multiple of 7."""
    marker = chr(RESIDUE_BASE + 7)
    schema = {"type": "object", "required": ["s"],
              "properties": {"s": {"type": "string", "pattern": f"^(?:(?={marker})[0-9]|x)$"}}}
    dfa = compile_json_schema(schema)
    assert dfa.matches(b'{"s":"x"}') and not dfa.matches(b'{"s":"7"}') and not dfa.matches(b'{"s":"0"}')


def test_a_schema_holding_a_marker_character_is_refused_naming_multiple_of():
    """Its markers would be ambiguous, so poot refuses the step as before, saying why."""
    schema = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 7},
                                               "tag": {"enum": [chr(RESIDUE_BASE + 7)]}}}
    with pytest.raises(UnsupportedConstruct, match=r"'multipleOf' at /properties/n/multipleOf.*reserves"):
        compile_json_schema(schema)


@pytest.mark.parametrize("k,bounds", [(41, {}), (77, {"minimum": 0}), (99, {"minimum": 1, "maximum": 10**9})])
def test_larger_odd_steps_with_simple_bounds(k, bounds):
    """What Pydantic writes (``Field(multiple_of=77, ge=0)``) fits with steps in the tens."""
    schema = {"type": "integer", "multipleOf": k, **bounds}
    dfa = compile_json_schema(schema)
    _walks_validate(schema, dfa, 30, k)
    rng = random.Random(k)
    for n in [rng.randrange(-10**12, 10**12) for _ in range(200)] + [k * rng.randrange(10**9) for _ in range(50)]:
        assert dfa.matches(str(n).encode()) == _valid(schema, str(n)), (schema, n)


def test_large_odd_steps_over_wide_ranges_are_refused_quickly_naming_the_range():
    """97 residues times 19 digit positions: over max_automaton_bytes, a 400 naming the range."""
    with pytest.raises(LimitExceeded, match="max_automaton_bytes.*widen the step or narrow the range"):
        compile_json_schema({"type": "integer", "multipleOf": 97})
    dfa = compile_json_schema({"type": "integer", "multipleOf": 97, "minimum": 0, "maximum": 10**6})
    assert dfa.matches(b"97000") and not dfa.matches(b"97001")


def test_a_recursive_schema_with_a_residue_takes_the_unrolled_dfa():
    """Rules mode cannot hold a residue lookahead: the tree is unrolled (and stays exact)."""
    schema = {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer", "multipleOf": 7},
                                                                  "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                                 "required": ["v"]}},
              "$ref": "#/$defs/node"}
    compiled = compile_json_schema(schema)
    assert not isinstance(compiled, Grammar)
    _walks_validate(schema, compiled, 40, 3)
    assert "(?=" in served_regex(schema)


@pytest.mark.parametrize("parallel", [False, True])
def test_forced_tool_calls_carry_the_residue(parallel):
    """A forced call's arguments keep the residue (the call DFA is built with the markers on)."""
    from poot_vllm.core.tool_calls.forcing import compile_tool_call_constraint, tool_call_spec

    params = {"type": "object", "properties": {"crates": {"type": "integer", "multipleOf": 7, "minimum": 0}},
              "required": ["crates"]}
    dfa = compile_tool_call_constraint(tool_call_spec([("pack", params)], parallel=parallel))
    rng = random.Random(4)
    for _ in range(30):
        text = conformance.sample_dfa(dfa, rng)
        assert text is not None
        for call in text.split("<tool_call>")[1:]:
            body = json.loads(call.split("</tool_call>")[0])
            assert body["name"] == "pack" and jsonschema.Draft202012Validator(params).is_valid(body["arguments"]), text
            assert body["arguments"]["crates"] % 7 == 0


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([2, 3, 4, 6, 7, 10, 12, 0.5, 0.75, 1.5, 2.5]), st.sampled_from([2, 3, 5, 8, 9, 0.25, 0.5, 1.25]),
       st.integers(0, 2**32))
def test_multiple_of_in_allof_anyof_and_oneof_merges_into_their_least_common_multiple(a, b, seed):
    """``allOf`` / ``anyOf`` / ``oneOf`` each holding a ``multipleOf`` (the suite's
    allOf/11) was "combine them by hand"; a multiple of both is a multiple of their
    lcm, so the DFA accepts exactly what jsonschema does over a wide range."""
    schema = {"allOf": [{"multipleOf": a}], "anyOf": [{"multipleOf": b}], "minimum": -10**6, "maximum": 10**6}
    dfa = compile_json_schema(schema)
    # spelled as poot spells the merged step's grid (fixed point, its binary scale in digits)
    fa, fb = Fraction(a), Fraction(b)
    scale = math.gcd(fa.denominator, fb.denominator).bit_length() - 1  # the lcm's denominator: gcd of theirs
    common = next(k * fa for k in range(1, 10**4) if (k * fa / fb).denominator == 1)  # the least, by search
    rng = random.Random(seed)
    accepted = 0
    for x in [common, -common, 3 * common] + [Fraction(rng.randint(-8000, 8000), 4) for _ in range(200)]:
        text = format(Decimal(x.numerator) / Decimal(x.denominator), f".{scale}f") if scale else str(int(x))
        if (x * 10**scale).denominator != 1 or Decimal(text) == 0 or abs(x) > 10**6:
            continue
        ok = dfa.matches(text.encode())
        assert ok == _valid(schema, text), (a, b, text)
        accepted += ok
    assert accepted >= 3
    _walks_validate(schema, dfa, 30, seed)


def test_items_and_contains_multiples_merge():
    schema = {"items": {"multipleOf": 2}, "contains": {"multipleOf": 3}, "maxItems": 3}
    dfa = compile_json_schema(schema)
    assert dfa.matches(b"[6]") and dfa.matches(b"[12]") and not dfa.matches(b"[3]") and not dfa.matches(b"[4]")
    _walks_validate(schema, dfa, 40, 0)
    with pytest.raises(UnsupportedConstruct, match="allOf"):  # a step not exact in binary is never merged
        compile_json_schema({"allOf": [{"multipleOf": 0.1}, {"multipleOf": 3}]})


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([2, 3, 7, 12, 25, 36, 2.5, 0.75, 1.5]), st.integers(0, 2**32),
       st.sampled_from([None, (0, 500), (-10**6, 10**6)]))
def test_not_multiple_of_is_a_negated_residue_over_the_integers(step, seed, bounds):
    """``not: {multipleOf: k}`` was refused ("no value poot can write fails the
    'not' schema"): the integers that are no multiple are a negated residue
    lookahead.  Exactly jsonschema's answer on every integer tried (a float step
    is checked by float division: the range stops where that stays exact)."""
    schema = {"type": "integer", "not": {"multipleOf": step}}
    if bounds:
        schema.update(minimum=bounds[0], maximum=bounds[1])
    dfa = compile_json_schema(schema)
    rng = random.Random(seed)
    cap = 2**53 // Fraction(step).denominator if isinstance(step, float) else 10**18
    lo, hi = bounds or (-cap, cap)
    for n in list(range(-60, 60)) + [rng.randint(lo, hi) for _ in range(200)]:
        if lo <= n <= hi:
            assert dfa.matches(str(n).encode()) == _valid(schema, str(n)), (step, n)
    _walks_validate(schema, dfa, 60, seed)


def test_not_multiple_of_under_properties_and_of_an_untyped_value():
    # inside an object, and of any value: the integers are the piece poot writes (non-integers
    # failing an integer step are not written: a narrowing, docs/json-schema.md)
    for schema in ({"type": "object", "properties": {"n": {"type": "integer", "not": {"multipleOf": 12}}}, "required": ["n"]},
                   {"not": {"multipleOf": 3}}):
        dfa = compile_json_schema(schema)
        _walks_validate(schema, dfa, 80, 3)
    assert compile_json_schema({"not": {"multipleOf": 3}}).matches(b"4")
    with pytest.raises(UnsupportedConstruct, match="'not' at /not"):  # every integer is a multiple of 1/2
        compile_json_schema({"type": "integer", "not": {"multipleOf": 0.5}})
