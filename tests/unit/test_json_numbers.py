"""Numbers: decimal bounds, the 15-significant-digit grid, multipleOf.

Oracle: jsonschema (Draft 2020-12) on ``json.loads`` of the text, plus
``math.isfinite``.  Soundness: every sampled / accepted text is valid and
finite.  Completeness (within the documented narrowing): every valid value on
the grid, spelled canonically, is accepted.
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import re
import sys
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poot_vllm.core.automata.compilers import regex_to_dfa
from poot_vllm.core.errors import ConstraintSyntaxError, UnsupportedConstruct
from poot_vllm.core.json_schema import decimals, schema_to_regex
from poot_vllm.core.limits import Limits

_spec = importlib.util.spec_from_file_location("json_conformance", Path(__file__).resolve().parents[2] / "scripts" / "json_conformance.py")
conformance = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("json_conformance", conformance)
_spec.loader.exec_module(conformance)

_BIG_BUDGET = Limits(max_automaton_bytes=64 << 20)


def _valid(schema, text: str) -> bool:
    value = json.loads(text)
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def _finite(text: str) -> bool:
    value = json.loads(text)
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


class Compiled:
    def __init__(self, schema):
        self.schema = schema
        self.regex = schema_to_regex(schema)
        self.rx = re.compile(self.regex)
        self.dfa = regex_to_dfa(self.regex, _BIG_BUDGET)

    def __call__(self, text: str) -> bool:
        ok = self.dfa.matches(text.encode())
        assert ok == (self.rx.fullmatch(text) is not None), text
        return ok

    def sound(self, n: int, seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(n):
            text = conformance.sample_regex(self.regex, rng)
            assert self(text), text
            assert _finite(text), text
            assert _valid(self.schema, text), (self.schema, text)


def _canonical(v: Fraction) -> str:
    """The plain fixed-point spelling of a grid value (no trailing zeros, no exponent)."""
    d = Decimal(v.numerator) / Decimal(v.denominator)
    text = format(d.normalize(), "f") if d != 0 else "0"
    return text


def _decimal_text(v: Fraction, places: int) -> str:
    return _canonical(Fraction(round(v * 10**places), 10**places))


# -- examples from the issue -------------------------------------------------------
def test_issue_examples():
    prob = Compiled({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})
    assert prob("0.99") and prob("0.000000000000001") and prob("0.5")
    assert not prob("0") and not prob("1") and not prob("0.0") and not prob("1.0") and not prob("-0.5")
    kelvin = Compiled({"type": "number", "minimum": -273.15})
    assert kelvin("-273.15") and kelvin("-273.1499") and kelvin("0") and kelvin("1000")
    assert not kelvin("-273.16") and not kelvin("-273.150001") and not kelvin("-274")
    positive = Compiled({"type": "number", "exclusiveMinimum": 0})
    assert positive("0.99") and not positive("0")
    free = Compiled({"type": "number"})
    free.sound(300, 0)
    assert not free("-957.6e20266372054") and not free("1e5")


def test_integer_and_number_spellings_stay_json():
    for schema in ({"type": "number"}, {"type": "integer"}, {"type": "number", "minimum": -1.5, "maximum": 2}):
        c = Compiled(schema)
        for bad in ("-0", "01", "1.", ".5", "+1", "-", "1e2", "0x1", "-0.0", "00.5"):
            assert not c(bad), (schema, bad)


def test_unbounded_integers_are_finite_and_bounded():
    c = Compiled({"type": "integer"})
    c.sound(200, 1)
    assert c(str(10**19 - 1)) and c(str(-(10**19) + 1)) and not c(str(10**19))
    # An explicit bound is honoured beyond the default length.
    big = Compiled({"type": "integer", "minimum": 10**30})
    assert big(str(10**30)) and not big(str(10**30 - 1))
    with pytest.raises(UnsupportedConstruct, match="'minimum' at /minimum"):
        schema_to_regex({"type": "integer", "minimum": 10**50})


# -- refusals name what the user wrote ----------------------------------------------
@pytest.mark.parametrize(
    "schema,keyword",
    [
        ({"type": "number", "minimum": 5, "maximum": 3}, "minimum"),
        ({"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 1}, "exclusiveMinimum"),
        ({"type": "integer", "exclusiveMinimum": 0.5, "maximum": 0.9}, "exclusiveMinimum"),
        ({"type": "number", "maximum": -1e16}, "maximum"),
        ({"type": "number", "minimum": 1e300}, "minimum"),
        ({"type": "number", "multipleOf": 0.1}, "multipleOf"),
        ({"type": "integer", "multipleOf": 4099}, "multipleOf"),
        ({"type": "number", "multipleOf": 2**-20}, "multipleOf"),
        ({"type": "integer", "multipleOf": 3, "minimum": 1, "maximum": 2}, "minimum"),
    ],
)
def test_refusals_name_the_keyword_written(schema, keyword):
    with pytest.raises(UnsupportedConstruct, match=re.escape(f"unsupported keyword '{keyword}' at /{keyword}")):
        schema_to_regex(schema)


def test_empty_range_names_both_bounds():
    with pytest.raises(UnsupportedConstruct) as info:
        schema_to_regex({"type": "number", "minimum": 5, "exclusiveMaximum": 3})
    assert "'minimum' and 'exclusiveMaximum'" in str(info.value)


@pytest.mark.parametrize("value", [0, -2, "5", True])
def test_bad_multiple_of(value):
    with pytest.raises(ConstraintSyntaxError, match="'multipleOf' at /multipleOf"):
        schema_to_regex({"type": "integer", "multipleOf": value})


def test_draft4_exclusive_booleans():
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number",
              "minimum": 0, "exclusiveMinimum": True, "maximum": 1.5, "exclusiveMaximum": False}
    c = Compiled(schema)
    assert not c("0") and c("0.1") and c("1.5") and not c("1.6")
    jsonschema.Draft4Validator.check_schema(schema)
    for text in ("0.1", "1.5", "1"):
        assert jsonschema.Draft4Validator(schema).is_valid(json.loads(text))


# -- random decimal bounds ---------------------------------------------------------------
_magnitudes = st.sampled_from([0, 1, 2, 3, 6, 10, 14])


@st.composite
def _bound(draw):
    """A JSON bound: an int, or a float read from a short decimal (as users write them)."""
    kind = draw(st.sampled_from(["int", "dec", "float"]))
    if kind == "int":
        return draw(st.integers(-(10**6), 10**6))
    if kind == "dec":
        places = draw(st.integers(0, 6))
        return float(Decimal(draw(st.integers(-(10**7), 10**7))).scaleb(-places))
    return draw(st.floats(-1e7, 1e7, allow_nan=False, allow_infinity=False))


@st.composite
def _number_schema(draw):
    schema = {"type": draw(st.sampled_from(["number", "integer"]))}
    for side in ("Minimum", "Maximum"):
        choice = draw(st.sampled_from(["none", "incl", "excl", "both"]))
        if choice in ("incl", "both"):
            schema[side.lower()] = draw(_bound())
        if choice in ("excl", "both"):
            schema["exclusive" + side] = draw(_bound())
    return schema


def _probes(schema, data) -> list[Fraction]:
    """Values near every bound (a few grid steps either side, several precisions) and at random."""
    out: list[Fraction] = []
    for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if k in schema:
            b = Fraction(repr(schema[k])) if isinstance(schema[k], float) else Fraction(schema[k])
            for places in (0, 1, 2, 3, 6, 12):
                step = Fraction(1, 10**places)
                for i in (-2, -1, 0, 1, 2):
                    out.append(Fraction(round(b / step)) * step + i * step)
    out += [Fraction(data.draw(st.integers(-(10**8), 10**8)), 10 ** data.draw(st.integers(0, 8))) for _ in range(20)]
    return out


@settings(max_examples=120, deadline=None)
@given(_number_schema(), st.data())
def test_random_bounds_sound_and_complete(schema, data):
    try:
        c = Compiled(schema)
    except UnsupportedConstruct as exc:
        # Only an empty range (among the values poot emits) is refused; check it really is empty.
        assert "no " in str(exc) and "satisfies" in str(exc), exc
        for v in _probes(schema, data):
            if decimals.on_grid(v) and (schema["type"] == "number" or v.denominator == 1):
                assert not _valid(schema, _canonical(v)), (schema, v)
        return
    c.sound(40, data.draw(st.integers(0, 2**16)))
    for v in _probes(schema, data):
        text = _canonical(v)
        if schema["type"] == "integer" and v.denominator != 1:
            assert not c(text)
            continue
        if not decimals.on_grid(v):
            assert not c(text), (schema, text)
            continue
        ok = _valid(schema, text)
        assert c(text) == ok, (schema, text, ok)


# -- multipleOf ------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 2, 4, 5, 8, 10, 20, 25, 50, 125, 1000])
def test_integer_multiple_of_suffix_steps(k):
    c = Compiled({"type": "integer", "multipleOf": k})
    c.sound(150, k)
    for n in list(range(-300, 301)) + [10**18 + i for i in range(-30, 30)] + [-(10**18) + i for i in range(-30, 30)]:
        assert c(str(n)) == (n % k == 0), (k, n)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 40), st.integers(-500, 500), st.integers(0, 600), st.booleans(), st.data())
def test_integer_multiple_of_any_step_with_small_range(k, lo, width, excl, data):
    schema = {"type": "integer", "multipleOf": k, ("exclusiveMinimum" if excl else "minimum"): lo, "maximum": lo + width}
    try:
        c = Compiled(schema)
    except UnsupportedConstruct as exc:
        assert "'exclusiveMinimum'" in str(exc) or "'minimum'" in str(exc) or "'multipleOf'" in str(exc)
        assert not any(_valid(schema, str(n)) for n in range(lo - 2, lo + width + 3))
        return
    c.sound(30, data.draw(st.integers(0, 999)))
    for n in range(lo - 5, lo + width + 6):
        assert c(str(n)) == _valid(schema, str(n)), (schema, n)


@pytest.mark.parametrize("step", [0.5, 0.25, 0.125, 2.5, 1.5, 0.75, 5, 2.0])
def test_number_multiple_of_binary_exact_steps(step):
    schema = {"type": "number", "multipleOf": step, "minimum": -40, "exclusiveMaximum": 40}
    c = Compiled(schema)
    c.sound(150, 3)
    scale = Fraction(step).denominator.bit_length() - 1
    for i in range(-1700, 1700):
        v = Fraction(i, 40)
        text = _canonical(v) if scale == 0 else format(Decimal(v.numerator) / Decimal(v.denominator), f".{scale}f")
        if (v * 10**scale).denominator != 1:
            assert not c(_canonical(v)) or _valid(schema, _canonical(v)), (step, v)
            continue
        assert c(text) == _valid(schema, text), (step, text)


@pytest.mark.parametrize("step", [0.5, 0.25, 2.5, 4])
def test_number_multiple_of_unbounded_is_sound(step):
    Compiled({"type": "number", "multipleOf": step}).sound(200, 5)


def test_regexes_stay_small():
    for schema in ({"type": "number", "minimum": -273.15, "maximum": 1e14},
                   {"type": "number", "exclusiveMinimum": 0.123456789012345, "exclusiveMaximum": 987654321.12345},
                   {"type": "integer", "multipleOf": 8},
                   {"type": "number", "multipleOf": 0.125}):
        assert len(schema_to_regex(schema)) < 8000, schema
