"""JSON Schema -> regex: per-keyword accept/reject tables and property tests.

Oracles: ``jsonschema`` (with its format checker) decides validity, ``json``
parses, and the regex is matched with poot's DFA, which must agree with
Python's ``re.fullmatch`` (poot's regex semantics are defined to equal it).
"""

from __future__ import annotations

import importlib.util
import json
from fractions import Fraction
import random
import re
import string
import sys
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poot_vllm.core.automata.compilers import regex_to_dfa
from poot_vllm.core.errors import ConstraintSyntaxError, LimitExceeded, PootError, UnsupportedConstruct
from poot_vllm.core.grammar.gbnf import Grammar
from poot_vllm.core.json_schema import compile_json_schema, schema_to_regex
from poot_vllm.core.json_schema import decimals
from poot_vllm.core.limits import Limits

_spec = importlib.util.spec_from_file_location("json_conformance", Path(__file__).resolve().parents[2] / "scripts" / "json_conformance.py")
conformance = importlib.util.module_from_spec(_spec)
sys.modules["json_conformance"] = conformance
_spec.loader.exec_module(conformance)

#: Tests check the language, not the automaton budget (the budget has its own tests).
_BIG_BUDGET = Limits(max_automaton_bytes=64 << 20)


def matcher(schema):
    """A predicate text -> bool for the compiled schema (poot's DFA, checked against re)."""
    regex = schema_to_regex(schema)
    rx = re.compile(regex)
    dfa = regex_to_dfa(regex, _BIG_BUDGET)

    def both(text: str) -> bool:
        by_dfa = dfa.matches(text.encode("utf-8"))
        assert by_dfa == (rx.fullmatch(text) is not None), f"poot's DFA and re disagree on {text!r}"
        return by_dfa

    return both


def is_valid(schema, text: str) -> bool:
    try:
        value = json.loads(text)
    except ValueError:
        return False
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(value)


def check_table(schema, accept, reject):
    m = matcher(schema)
    for text in accept:
        assert is_valid(schema, text), f"test bug: {text!r} is not valid"
        assert m(text), f"{text!r} should be accepted"
    for text in reject:
        assert not m(text), f"{text!r} should be rejected"


def samples_validate(schema, n=60, seed=1):
    """Random strings of the regex all parse and validate (the core guarantee)."""
    regex = schema_to_regex(schema)
    rx = re.compile(regex)
    rng = random.Random(seed)
    for _ in range(n):
        text = conformance.sample_regex(regex, rng)
        assert rx.fullmatch(text), text
        assert is_valid(schema, text), f"emitted invalid value {text!r}"


# -- objects ---------------------------------------------------------------------------
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "class": {"type": "string"}},
    "required": ["name", "age"],
}


def test_object_sorted_keys_required_and_optional():
    check_table(
        PERSON,
        accept=['{"age":42,"class":"mage","name":"Bel"}', '{"age": 42, "name": "Bel"}', '{"age":1,"name":""}'],
        reject=['{"name":"Bel","age":42}', '{"age":42}', '{"age":42,"name":"Bel","x":1}', '{"age":42,,"name":"B"}',
                '{"age":42,"name":"Bel",}', '{ "age":42,"name":"Bel"}', '{"age":  42,"name":"Bel"}', '{"age":"42","name":"Bel"}'],
    )
    samples_validate(PERSON)


def test_all_optional_keys_are_comma_correct():
    schema = {"type": "object", "properties": {k: {"type": "boolean"} for k in "abcd"}}
    m = matcher(schema)
    import itertools
    for r in range(5):
        for keys in itertools.combinations("abcd", r):
            text = "{" + ",".join(f'"{k}":true' for k in keys) + "}"
            assert m(text), text
    for bad in ['{,"a":true}', '{"a":true,}', '{"b":true"c":true}', '{"b":true,"a":true}']:
        assert not m(bad), bad


def test_first_key_window_narrowing():
    from poot_vllm.core.json_schema.compiler import FIRST_KEY_WINDOW

    keys = [f"k{i:02}" for i in range(FIRST_KEY_WINDOW + 4)]
    m = matcher({"type": "object", "properties": {k: {"type": "null"} for k in keys}})
    for mask in range(0, 1 << len(keys), 7):
        sub = [k for i, k in enumerate(keys) if mask >> i & 1]
        text = "{" + ",".join(f'"{k}":null' for k in sub) + "}"
        # documented narrowing: the first key emitted is one of the first FIRST_KEY_WINDOW optional keys
        assert m(text) == (not sub or keys.index(sub[0]) < FIRST_KEY_WINDOW), text


def test_member_list_regex_is_linear_in_keys():
    small = schema_to_regex({"type": "object", "properties": {f"k{i:03}": {"type": "null"} for i in range(20)}})
    big = schema_to_regex({"type": "object", "properties": {f"k{i:03}": {"type": "null"} for i in range(200)}})
    assert len(big) < 12 * len(small)


def test_min_max_properties_narrow_exactly():
    schema = {"type": "object", "properties": {k: {"type": "integer"} for k in "abc"}, "minProperties": 2, "maxProperties": 2}
    samples_validate(schema)
    check_table(schema, accept=['{"a":1,"b":2}'], reject=['{"a":1}', '{"a":1,"b":2,"c":3}'])


def test_free_form_object_and_additional_properties_map():
    # free-form objects hold one key (docs: no key may repeat); the last is deeper than FREE_FORM_DEPTH
    check_table({"type": "object"}, accept=['{}', '{"x":[1,"y",null]}', '{"a": "b"}'],
                reject=['[]', '{"a"}', '{"x":[1,{"y":null}]}', '{"a":1,"a":2}'])
    check_table({"type": "object", "additionalProperties": {"type": "integer"}},
                accept=['{}', '{"a":1,"r": -2}'], reject=['{"a":"x"}', '{"a":1.5}', '{"a":1,"a":2}'])
    check_table({"type": "object", "additionalProperties": False}, accept=['{}'], reject=['{"a":1}'])
    samples_validate({"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}})


# -- arrays ------------------------------------------------------------------------------
def test_arrays():
    check_table({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
                accept=['[1]', '[1,2]', '[1, 2, 3]'], reject=['[]', '[1,2,3,4]', '[1,]', '["a"]'])
    check_table({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
                accept=['["a",1]'], reject=['["a"]', '["a",1,2]', '[1,"a"]'])
    check_table({"type": "array", "items": {"type": "array", "items": {"type": "boolean"}}},
                accept=['[]', '[[],[true,false]]'], reject=['[[1]]'])
    samples_validate({"type": "array", "prefixItems": [{"type": "null"}], "items": {"type": "number"}, "minItems": 3, "maxItems": 5})
    samples_validate({"type": "array"})


# -- strings --------------------------------------------------------------------------------
def test_string_escapes_and_controls():
    check_table({"type": "string"},
                accept=['""', '"a b"', r'"\"\\\/\b\f\n\r\t"', r'"\u00e9\u0001"', '"é😀"'],
                # surrogate escapes are never emitted (astral characters are written raw)
                reject=['"\n"', '"\x01"', '"\\x"', '"\\ud800"', r'"\ud83d\ude00"', '"a', '"\\"'])


def test_length_counts_characters_and_escapes_as_one():
    check_table({"type": "string", "minLength": 2, "maxLength": 3},
                accept=['"ab"', '"abc"', r'"\n\t"', r'"\u00e9x"', '"😀é"'],
                reject=['"a"', '"abcd"', r'"\n\t\r\b"'])
    samples_validate({"type": "string", "minLength": 1, "maxLength": 4}, n=100)


@pytest.mark.parametrize(
    "pattern,accept,reject",
    [
        ("^[a-z]+$", ['"abc"'], ['""', '"aB"']),
        ("abc", ['"abc"', '"xxabcxx"', r'"\nabc"'], ['"ab"']),
        ('^a"b$', [r'"a\"b"'], ['"ab"']),
        (r"^\d{3}-\d{4}$", ['"555-1234"'], ['"5555-1234"']),
        (r"^x\n$", [r'"x\n"'], ['"x"']),
        ("^([^,]|$)", ['""', '"a,"'], ['","', '",a"']),
        ("(^a|b$)", ['"a"', '"axx"', '"xxb"'], ['"xa"', '"bx"']),
        (r"^\\$", [r'"\\"'], ['""']),
    ],
)
def test_pattern_is_search_over_decoded_content(pattern, accept, reject):
    schema = {"type": "string", "pattern": pattern}
    check_table(schema, accept, reject)
    samples_validate(schema, n=30)


@pytest.mark.parametrize("pattern", [r"(a)\1", "a*+", r"(?>a)", r"(?=(?<=ab)c)"])
def test_unsupported_patterns_are_refused_with_pointer(pattern):
    with pytest.raises(UnsupportedConstruct, match=r"'pattern' at /properties/p/pattern"):
        schema_to_regex({"type": "object", "properties": {"p": {"type": "string", "pattern": pattern}}})


def _dfa_samples(schema, n: int, seed: int) -> list[str]:
    """Random replies of the schema's DFA (a walk over live bytes; every state can still finish)."""
    dfa = regex_to_dfa(schema_to_regex(schema), _BIG_BUDGET)
    rng, out = random.Random(seed), []
    while len(out) < n:
        state, data = dfa.start, bytearray()
        while not (dfa.accepting[state] and (rng.random() < 0.15 or len(data) > 60)):
            live = [b for b in range(256) if dfa.transitions[state, b] >= 0]
            if not live:
                break
            byte = rng.choice(live)
            data.append(byte)
            state = int(dfa.transitions[state, byte])
        if dfa.accepting[state]:
            out.append(data.decode("utf-8"))
    return out


INTERSECTIONS = [
    # pattern + lengths the pattern does not imply, pattern + format, format + lengths
    ({"type": "string", "pattern": "^[a-z]+$", "maxLength": 5}, ['"abc"', '"abcde"'], ['"abcdef"', '""', '"ab1"']),
    ({"type": "string", "pattern": "[0-9]", "minLength": 3, "maxLength": 6},
     ['"a1b"', '"123456"', '"x\\"9"'], ['"12"', '"abcd"', '"1234567"']),
    ({"type": "string", "pattern": "(?i)^ab", "minLength": 4}, ['"ABcd"', '"abab"'], ['"ABc"', '"xabc"']),
    ({"type": "string", "format": "email", "pattern": "@example\\.com$"}, ['"a@example.com"'], ['"a@example.org"']),
    ({"type": "string", "format": "date", "pattern": "^2024-0[1-6]"}, ['"2024-02-29"'], ['"2023-01-01"', '"2024-07-01"']),
    ({"type": "string", "format": "uuid", "maxLength": 36, "minLength": 36},
     ['"123e4567-e89b-12d3-a456-426614174000"'], ['"123e4567"']),
    ({"type": "string", "format": "ipv4", "maxLength": 9}, ['"10.0.0.1"', '"1.2.3.4"'], ['"10.10.10.1"']),
    # two patterns (allOf): both hold, with the lengths
    ({"allOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"pattern": "q"}], "maxLength": 6},
     ['"aq"', '"qqqqqq"', '"zzqzz"'], ['"AQ"', '"ab"', '"aqaqaqa"', '"q1"']),
    ({"allOf": [{"type": "string", "format": "date"}, {"pattern": "-12-"}, {"pattern": "^19"}]},
     ['"1999-12-31"'], ['"2000-12-31"', '"1999-11-30"']),
]


@pytest.mark.parametrize("schema,accept,reject", INTERSECTIONS)
def test_pattern_format_and_lengths_intersect_exactly(schema, accept, reject):
    """The keywords together are an automaton intersection (a lookahead up to the closing
    quote): what the DFA accepts is exactly what jsonschema validates, in both directions."""
    check_table(schema, accept, reject)
    for text in _dfa_samples(schema, 40, seed=7):
        assert is_valid(schema, text), f"emitted invalid value {text!r}"


def test_lengths_implied_by_the_pattern_add_nothing():
    implied = schema_to_regex({"type": "string", "pattern": "^[0-9]{5}$", "maxLength": 5})
    assert implied == schema_to_regex({"type": "string", "pattern": "^[0-9]{5}$"})


def _same_language(a, b) -> "bytes | None":
    """A byte string one plain DFA accepts and the other does not (None: the same language)."""
    seen = {(a.start, b.start)}
    queue = [(a.start, b.start, b"")]
    while queue:
        sa, sb, text = queue.pop(0)
        if sa >= 0 and sb >= 0 and bool(a.accepting[sa]) != bool(b.accepting[sb]) or \
                (sa < 0) != (sb < 0) and bool(a.accepting[sa] if sa >= 0 else b.accepting[sb]):
            return text
        for byte in range(256):
            na = int(a.transitions[sa, byte]) if sa >= 0 else -1
            nb = int(b.transitions[sb, byte]) if sb >= 0 else -1
            if (na, nb) != (-1, -1) and (na, nb) not in seen:
                seen.add((na, nb))
                queue.append((na, nb, text + bytes([byte])))
    return None


_FOLDED_PATTERNS = ["^[a-z]", "^([^,]|$)", "^[a-z0-9-]+$", "^https?://", "^[A-Z]{2}-\\d+$", "^(ab)+$",
                    "\\.json$", "^x?y?[0-9]*$", "^(a|bc)$", "^$|^[ab]+$", "^\\w+@"]


@settings(max_examples=150, deadline=None)
@given(pattern=st.sampled_from(_FOLDED_PATTERNS), lo=st.integers(0, 6), span=st.one_of(st.none(), st.integers(0, 12)))
def test_lengths_folded_into_a_pattern_are_the_intersection(pattern, lo, span):
    """minLength/maxLength folded into the pattern's one repetition (a counted repetition at
    scale, not a lookahead holding a copy per character) accept exactly what the lookahead
    intersection accepts: the two plain DFAs are equal, byte for byte."""
    from poot_vllm.core.automata.build import Budget, regex_tree_to_dfa
    from poot_vllm.core.json_schema.patterns import translate_pattern
    from poot_vllm.core.json_schema.strings import json_char
    from poot_vllm.core.regex.parser import parse

    hi = None if span is None else lo + span
    schema = {"type": "string", "pattern": pattern, "minLength": lo, **({} if hi is None else {"maxLength": hi})}
    try:
        folded = schema_to_regex(schema)
    except PootError:
        return  # no string fits (the lookahead form is refused the same way below)
    bound = f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}"
    reference = f'"(?=(?:{json_char()}){bound}")(?:{translate_pattern(pattern).regex})"'
    big = 64 << 20
    try:
        b = regex_tree_to_dfa(parse(reference), Budget(big), counted=False)
    except PootError:  # no string fits: the folded form matches none either
        with pytest.raises(PootError):
            regex_tree_to_dfa(parse(folded), Budget(big), counted=False)
        return
    a = regex_tree_to_dfa(parse(folded), Budget(big), counted=False)
    witness = _same_language(a, b)
    assert witness is None, (folded, witness)


@pytest.mark.parametrize("pattern,hi", [("^[A-Z]", 4000), ("^([^,]|$)", 191), ("^https?://", 2083),
                                        ("^[a-z0-9_-]+$", 4000), ("^[A-Z]{2}-\\d+$", 500)])
def test_a_pattern_with_a_large_max_length_is_served_counted(pattern, hi):
    """Pydantic's ``constr(pattern=..., max_length=4000)``: within the default budget (a 400
    while the lengths were a lookahead: its automaton held a copy per character), and every
    sample validates."""
    schema = {"type": "string", "pattern": pattern, "minLength": 1, "maxLength": hi}
    dfa = compile_json_schema(schema)
    assert dfa.counter_limit is not None and max(dfa.counter_limit) >= hi - 8
    samples_validate(schema, n=30, seed=3)  # (drawn from the regex: its counts hold)


@pytest.mark.parametrize(
    "fmt,accept,reject",
    [
        ("date", ['"2024-02-29"', '"2000-02-29"', '"1999-12-31"'], ['"2023-02-29"', '"1900-02-29"', '"2024-13-01"', '"0000-01-01"', '"2024-04-31"']),
        ("time", ['"23:59:59Z"', '"00:00:00.123+05:30"'], ['"24:00:00Z"', '"12:00:00"']),
        ("date-time", ['"2024-01-31T12:00:00Z"'], ['"2024-01-31 12:00:00Z"']),
        ("uuid", ['"123e4567-e89b-12d3-a456-426614174000"'], ['"123e4567e89b12d3a456426614174000"']),
        ("email", ['"a.b+c@example.co"'], ['"a@b"', '"@example.com"', '"a..b@example.com"']),
        ("ipv4", ['"192.168.0.1"', '"0.0.0.0"'], ['"256.1.1.1"', '"01.1.1.1"', '"1.1.1"']),
        ("uri", ['"https://example.com/a?b=c#d"'], ['"example.com"']),
    ],
)
def test_formats(fmt, accept, reject):
    schema = {"type": "string", "format": fmt}
    check_table(schema, accept, reject)
    samples_validate(schema, n=40)


def test_dates_agree_with_python_for_every_day():
    import datetime
    rx = re.compile(schema_to_regex({"type": "string", "format": "date"}))
    for year in (1900, 1996, 2000, 2023, 2024):
        for month in range(1, 13):
            for day in range(1, 33):
                text = f"{year:04}-{month:02}-{day:02}"
                try:
                    datetime.date(year, month, day)
                    ok = True
                except ValueError:
                    ok = False
                assert bool(rx.fullmatch(json.dumps(text))) == ok, text


# -- numbers -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": -7, "maximum": 12},
        {"type": "integer", "exclusiveMinimum": 1.5, "exclusiveMaximum": 9},
        {"type": "integer", "minimum": 1.5, "maximum": 9.9},
        {"type": "integer", "minimum": 3},
        {"type": "integer", "maximum": -3},
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 5, "exclusiveMaximum": True},
    ],
)
def test_integer_bounds_exhaustive(schema):
    m = matcher(schema)
    for n in range(-40, 41):
        assert m(str(n)) == is_valid(schema, str(n)), (schema, n)
    assert not m("-0") and not m("1.0") and not m("01")


def test_integer_huge_bounds():
    schema = {"type": "integer", "minimum": -(2**80), "maximum": 2**70}
    m = matcher(schema)
    for n in (-(2**80), -(2**80) - 1, 2**70, 2**70 + 1, 0, 2**64, -(2**64)):
        assert m(str(n)) == is_valid(schema, str(n)), n


def test_draft4_boolean_exclusive_needs_draft4():
    with pytest.raises(UnsupportedConstruct, match="'exclusiveMinimum' at /exclusiveMinimum"):
        schema_to_regex({"type": "integer", "minimum": 0, "exclusiveMinimum": True})


def test_numbers():
    # Fixed point, at most 15 significant digits (docs/json-schema.md, Numbers): no exponents.
    check_table({"type": "number"}, ['0', '-15000000000', '3.25', '0.000000000000001'],
                ['01', '1.', '.5', '+1', 'NaN', '-', '-1.5e10', '1E+2', '-0', '1234567890123456', '0.0000000000000001'])
    schema = {"type": "number", "minimum": -2, "maximum": 3}
    check_table(schema, ['-2', '-1.999', '3', '3.000', '0', '0.5'], ['-2.001', '3.001', '4', '-0'])
    samples_validate(schema, n=100)
    samples_validate({"type": "number", "exclusiveMinimum": 0}, n=100)
    with pytest.raises(UnsupportedConstruct, match="'multipleOf' at /multipleOf"):
        schema_to_regex({"type": "number", "multipleOf": 0.01})
    check_table({"type": "number", "minimum": 0.5}, ['0.5', '0.50', '7'], ['0.49', '0.4999999'])


@settings(max_examples=200, deadline=None)
@given(st.floats(-1e6, 1e6, allow_nan=False))
def test_number_bounds_property(x):
    schema = {"type": "number", "minimum": -100, "maximum": 1000}
    text = json.dumps(x)
    if "e" not in text and matcher_cache(schema)(text):
        assert is_valid(schema, text)
    if -100 <= x <= 1000 and "e" not in text and text != "-0.0" and decimals.on_grid(Fraction(text)):
        assert matcher_cache(schema)(text), text


_cache: dict = {}


def matcher_cache(schema):
    key = json.dumps(schema, sort_keys=True)
    if key not in _cache:
        _cache[key] = matcher(schema)
    return _cache[key]


# -- enum / const / combinators ------------------------------------------------------------------
def test_enum_and_const():
    check_table({"enum": ["a", 1, None, {"b": [1, 2], "a": "x\n"}]},
                ['"a"', '1', 'null', '{"a":"x\\n","b":[1,2]}', '{"a": "x\\n", "b": [1, 2]}'],
                ['"b"', '2', '{"b":[1,2],"a":"x\\n"}'])
    check_table({"const": "é\"q"}, ['"é\\"q"'], ['"e"'])
    check_table({"type": "string", "enum": ["a", 1]}, ['"a"'], ['1'])
    check_table({"enum": ["ab", "abc"], "maxLength": 2}, ['"ab"'], ['"abc"'])


#: Patterns that take a backtracking engine exponential time on a near-miss value.
REDOS_PATTERNS = ["^(a+)+$", "^(a|a)*$", "^(a|aa)+$", "^(\\w+\\s?)*$", "^([a-zA-Z]+)*$", "^(a*)*$"]


def _in_thread(fn, seconds: float):
    """Run ``fn`` with a generous deadline, so a regression fails instead of hanging the suite."""
    import threading

    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # re-raised in the test's thread
            out["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s: backtracking over user input?"
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.mark.parametrize("pattern", REDOS_PATTERNS)
def test_enum_filtered_by_pattern_never_backtracks(pattern):
    """enum + pattern: each value is checked on poot's DFA, linear in the value.

    With Python's ``re`` a 41-character near miss costs ~2**40 steps (an
    84-byte schema froze a live server for 18 s); on the DFA it is 41 steps.
    """
    near_miss = "a" * 40 + "!"
    schema = {"type": "string", "pattern": pattern, "enum": [near_miss, "aaaa"]}
    regex = _in_thread(lambda: schema_to_regex(schema), 30)
    dfa = regex_to_dfa(regex, _BIG_BUDGET)
    assert dfa.matches(b'"aaaa"')
    assert not dfa.matches(json.dumps(near_miss).encode())
    with pytest.raises(UnsupportedConstruct, match="'enum' at /enum"):
        _in_thread(lambda: schema_to_regex({"type": "string", "pattern": pattern, "enum": [near_miss]}), 30)


_SMALL_VALUES = st.one_of(st.text(alphabet="ab 1!", max_size=6), st.integers(-20, 20), st.booleans(), st.none())


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(_SMALL_VALUES, min_size=1, max_size=6),
    rest=st.sampled_from([
        {"type": "string", "pattern": "^a+b?$"},
        {"type": "string", "pattern": "b$"},
        {"type": "string", "minLength": 2},
        {"type": "integer", "minimum": -3, "maximum": 7},
        {"type": ["string", "boolean"], "maxLength": 1},
        {"type": ["integer", "string"], "maximum": 0, "pattern": "!"},
    ]),
)
def test_enum_with_other_keywords_keeps_exactly_the_valid_values(values, rest):
    """Oracle: jsonschema keeps a value iff poot's DFA accepts its spelling."""
    schema = {**rest, "enum": values}
    valid = {json.dumps(v) for v in values if is_valid(schema, json.dumps(v))}
    if not valid:
        with pytest.raises(UnsupportedConstruct, match="no value satisfies"):
            schema_to_regex(schema)
        return
    m = matcher(schema)
    for v in values:
        assert m(json.dumps(v)) == (json.dumps(v) in valid), v


def test_type_arrays_and_anyof():
    check_table({"type": ["string", "null"]}, ['"x"', 'null'], ['1'])
    check_table({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]}, ['1', '"a"'], ['"ab"', '1.5'])


def test_oneof_with_a_discriminator_is_a_plain_alternation():
    schema = {"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind"]},
                        {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"]}]}
    check_table(schema, ['{"kind":"a","x":1}', '{"kind":"b"}'], ['{"kind":"c"}'])
    samples_validate(schema)
    branches = schema_to_regex({"anyOf": schema["oneOf"]})
    assert schema_to_regex(schema) == branches  # provably disjoint: no difference to build
    # the discriminator's enum narrowed in each branch of a parent's property (allOf after merging)
    parent = {"type": "object", "properties": {"kind": {"type": "string", "enum": ["a", "b", "c"]}, "x": {"type": "integer"}},
              "additionalProperties": False}
    branches = [{"required": ["kind"], "properties": {"kind": {"enum": [k]}}} for k in "ab"]
    assert schema_to_regex({**parent, "oneOf": branches}) == schema_to_regex({**parent, "anyOf": branches})
    check_table({**parent, "oneOf": branches}, ['{"kind":"a"}', '{"kind":"b","x":1}'], ['{"kind":"c"}', "{}"])


# (schema, accepted, rejected): overlapping oneOf is each branch minus the others (A and not B),
# 'not' is the rest of the schema intersected with the values failing it; both exact here.
DIFFERENCES = [
    ({"oneOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "integer", "minimum": 5, "maximum": 14}]},
     ["0", "4", "10", "14"], ["5", "9", "15", "-1"]),
    ({"oneOf": [{"type": "string", "maxLength": 3}, {"type": "string", "pattern": "^a"}]},
     ['"b"', '""', '"abcd"'], ['"a"', '"abc"', '"bcde"']),
    ({"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}]},
     ['{"a":1}', '{"b":"x"}'], ['{"a":1,"b":"x"}', "{}"]),
    ({"oneOf": [{"type": "string"}, {"enum": ["x", "y", 3]}]}, ['"a"', "3"], ['"x"', '"y"', "4"]),
    ({"oneOf": [{"type": ["string", "null"]}, {"type": "string", "format": "date"}], "maxLength": 10},
     ["null"], ['"a"', '"2024-01-01"']),
    ({"not": {"type": "null"}}, ["1", '"a"', "{}", "[]", "true"], ["null"]),
    ({"type": "string", "not": {"pattern": "^a"}, "maxLength": 3}, ['"b"', '""', '"ba"'], ['"a"', '"abc"', '"bbbb"']),
    ({"type": "integer", "not": {"enum": [1, 2, 3]}, "minimum": 0, "maximum": 5}, ["0", "4", "5"], ["1", "2", "3", "6"]),
    ({"type": "number", "not": {"const": 1.5}, "minimum": 1, "maximum": 2}, ["1", "1.25", "2", "1.75"], ["1.5", "2.5"]),
    ({"type": "string", "not": {"enum": ["a", "b", "a.b"]}, "maxLength": 3}, ['"c"', '""', '"axb"'], ['"a"', '"b"', '"a.b"']),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "not": {"required": ["a"]}}, ["{}"], ['{"a":1}']),
    ({"type": "object", "properties": {"a": {"type": "integer", "maximum": 5}}, "required": ["a"],
      "not": {"properties": {"a": {"minimum": 3}}}}, ['{"a":2}', '{"a":-7}'], ['{"a":3}', '{"a":5}']),
    ({"not": {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]}}, ["-1", "null", "true"], ['"a"', "1"]),
    ({"type": "array", "items": {"type": "integer"}, "not": {"minItems": 2}, "maxItems": 3}, ["[]", "[1]"], ["[1,2]"]),
    ({"type": "boolean", "not": {"const": True}}, ["false"], ["true"]),
    ({"type": "string", "maxLength": 2, "not": {"not": {"pattern": "^x"}}}, ['"x"', '"xy"'], ['"y"', '""']),
    # conditionals: if/then/else is anyOf [I and T, (not I) and E]; dependencies are nots
    ({"type": "integer", "minimum": 0, "maximum": 9, "if": {"minimum": 5}, "then": {"multipleOf": 2}, "else": {"maximum": 2}},
     ["0", "2", "6", "8"], ["3", "4", "5", "7", "9"]),
    ({"type": "string", "maxLength": 3, "if": {"pattern": "^a"}, "then": {"minLength": 2}}, ['"ab"', '"b"', '""'], ['"a"']),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "dependentRequired": {"a": ["b"]}},
     ["{}", '{"b":1}', '{"a":1,"b":2}'], ['{"a":1}']),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},
      "dependencies": {"a": ["b"], "b": {"properties": {"a": {"minimum": 3}}}}},
     ["{}", '{"b":true}', '{"a":3,"b":false}'], ['{"a":1}', '{"a":1,"b":true}']),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "dependentSchemas": {"a": {"properties": {"b": {"maximum": 3}}}}}, ["{}", '{"b":9}', '{"a":1,"b":2}', '{"a":1}'],
     ['{"a":1,"b":4}']),
    # contains: each item is 'items and contains' (counted) or 'items and not contains'
    ({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "contains": {"minimum": 5}},
     ["[5]", "[1,5]", "[5,1,7]"], ["[]", "[1,2]"]),
    ({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "contains": {"minimum": 5},
      "minContains": 2, "maxContains": 3}, ["[5,6]", "[1,5,2,6,7]"], ["[5]", "[5,6,7,8]"]),
    ({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "contains": {"minimum": 5},
      "minContains": 0, "maxContains": 1, "maxItems": 3}, ["[]", "[1]", "[1,5,2]"], ["[5,6]", "[1,2,3,4]"]),
    ({"type": "array", "items": {"enum": [1, 2, 3]}, "contains": {"const": 3}, "minItems": 3},
     ["[3,1,2]", "[1,3,3]"], ["[3]", "[1,2,1]"]),
    # unevaluated*: additionalProperties/items of the merged schema where what is evaluated is static;
    # in each anyOf/oneOf/if branch otherwise; a subschema's own see only its own keywords
    ({"type": "object", "properties": {"foo": {"const": 1}}, "allOf": [{"properties": {"bar": {"const": 2}}}],
      "unevaluatedProperties": False}, ["{}", '{"bar":2,"foo":1}'], ['{"baz":1}']),
    ({"type": "object", "properties": {"foo": {"const": 1}}, "anyOf": [{"properties": {"bar": {"const": 2}}}],
      "unevaluatedProperties": False}, ['{"bar":2}', '{"bar":2,"foo":1}'], ['{"baz":1}']),
    ({"type": "object", "properties": {"foo": {"const": 1}},
      "anyOf": [{"properties": {"bar": {"const": 2}}, "unevaluatedProperties": False}]}, ['{"bar":2}', "{}"],
     ['{"bar":2,"foo":1}', '{"foo":1}']),
    ({"type": "object", "properties": {"foo": {"const": 1}}, "if": {"properties": {"bar": {"const": 2}}, "required": ["bar"]},
      "then": {"required": ["foo"]}, "unevaluatedProperties": False}, ['{"bar":2,"foo":1}', "{}", '{"foo":1}'], ['{"bar":2}']),
    ({"type": "array", "prefixItems": [{"enum": ["a", "b"]}], "unevaluatedItems": {"type": "integer", "minimum": 0, "maximum": 5}},
     ['["a"]', '["a",1,2]'], ['["a","b"]', '["a",9]']),
    # allOf of a tuple and an items schema: items (no tuple on its side) covers every index
    ({"type": "array", "allOf": [{"prefixItems": [{"enum": [1, 2]}]}, {"items": {"type": "integer", "maximum": 3}}]},
     ["[1]", "[1,2]", "[2,3,-1]"], ["[1,5]", "[3]"]),
    # uniqueItems: finite items each once, in sorted order; others one per first-character slot
    ({"type": "array", "items": {"enum": ["a", "b", "c", 1]}, "uniqueItems": True},
     ["[]", '["a"]', '["a","b","c",1]', '["b","c"]'], ['["a","a"]', '[1,1]', '[1,"a"]']),
    ({"type": "array", "items": {"type": "string", "maxLength": 3}, "uniqueItems": True},
     ["[]", '["app","kiw","zoo"]', '["","1a","x"]'], ['["ab","ac"]', '["a","a"]']),
    ({"type": "array", "items": {"type": "integer", "minimum": -9, "maximum": 99}, "uniqueItems": True, "minItems": 2,
      "maxItems": 3}, ["[-1,0]", "[0,1,2]"], ["[1]", "[1,1]", "[1,12]", "[0,1,2,3]"]),
    ({"type": "array", "items": {"type": ["boolean", "null", "number"], "maximum": 5}, "uniqueItems": True},
     ["[true,false]", "[-2,1.5,true,null]"], ["[true,true]", "[1,1.0]"]),
    # two anyOf meeting in allOf: every pair of branches
    ({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}],
      "allOf": [{"anyOf": [{"type": "integer", "minimum": 3}, {"type": "string"}]}]}, ["3", '"a"'], ["1", '"abc"']),
]


@pytest.mark.parametrize("schema,accept,reject", DIFFERENCES)
def test_overlapping_oneof_and_not_are_exact_differences(schema, accept, reject):
    check_table(schema, accept, reject)
    for text in _dfa_samples(schema, 40, seed=11):
        assert is_valid(schema, text), f"emitted invalid value {text!r}"


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-20, 20) | st.sampled_from(["", "a", "x", "ab", "abc", "2024-01-01", "b"])
    | st.sampled_from([1.5, 0.25, -2.5]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
    max_leaves=4)


@pytest.mark.parametrize("index", range(len(DIFFERENCES)))
@settings(max_examples=60, deadline=None)
@given(value=_VALUES)
def test_differences_agree_with_jsonschema(index, value):
    """Both directions against jsonschema on the canonical spelling: accepted => valid; for these
    schemas (all keywords poot can negate) valid => accepted too, except non-integer numbers
    outside 'type: integer' and values past poot's narrowings (dropped below)."""
    schema = DIFFERENCES[index][0]
    dfa = _compiled(json.dumps(schema))
    text = json.dumps(value, separators=(",", ":"), sort_keys=True)
    accepted = dfa.matches(text.encode())
    if accepted:
        assert is_valid(schema, text), text
    elif is_valid(schema, text):
        # poot writes typed values by their keywords and only listed keys (Departures 1 and 4)
        assert _a_documented_narrowing(schema, value), text


def _longest_tuple(schema) -> int:
    """The longest ``prefixItems`` anywhere in the schema."""
    if isinstance(schema, dict):
        own = len(schema["prefixItems"]) if isinstance(schema.get("prefixItems"), list) else 0
        return max([own] + [_longest_tuple(v) for v in schema.values()])
    if isinstance(schema, list):
        return max([0] + [_longest_tuple(v) for v in schema])
    return 0


def _a_documented_narrowing(schema, value) -> bool:
    text = json.dumps(value)
    if "{" in text or text.count("[") > 1:
        return True  # objects: only listed keys; free-form values: one key, two levels (Departures 1, 5)
    if isinstance(value, float) and not value.is_integer() and '"integer"' in json.dumps(schema):
        return True  # the numbers failing 'type: integer' are not written (docs: not and oneOf)
    if isinstance(value, list) and '"uniqueItems"' in json.dumps(schema):
        return True  # unique items: sorted values / one per first-character slot (docs: uniqueItems)
    if isinstance(value, list) and len(value) < _longest_tuple(schema):
        return True  # tuples are emitted in full (Departures 7)
    if isinstance(value, str) and '"format"' in json.dumps(schema):
        return True  # nor the strings failing a 'format'
    return False


@__import__("functools").lru_cache(maxsize=None)
def _compiled(schema_json: str):
    return compile_json_schema(json.loads(schema_json), _BIG_BUDGET)


def test_oneof_whose_difference_poot_cannot_write_is_refused():
    # integer and number: number-but-not-integer values have no positive schema (a narrowing) and
    # every integer matches both: no value is left
    with pytest.raises(UnsupportedConstruct, match="'oneOf' at /oneOf: branches 0 and 1 overlap"):
        schema_to_regex({"oneOf": [{"type": "integer"}, {"type": "number"}]})
    with pytest.raises(UnsupportedConstruct, match="'not' at /not: no value poot can write"):
        schema_to_regex({"type": "string", "not": {"format": "email"}})


def test_allof_merges_and_refs():
    schema = {
        "$defs": {"Base": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
                  "a/b~c": {"type": "string", "maxLength": 2}},
        "allOf": [{"$ref": "#/$defs/Base"}, {"properties": {"tag": {"$ref": "#/$defs/a~1b~0c"}}, "required": ["tag"]}],
    }
    check_table(schema, ['{"id":1,"tag":"ab"}'], ['{"id":1}', '{"id":1,"tag":"abc"}'])
    samples_validate(schema)
    check_table({"definitions": {"x y": {"type": "null"}}, "$ref": "#/definitions/x%20y"}, ['null'], ['1'])
    closed = {"allOf": [{"properties": {"a": {"type": "integer"}}, "additionalProperties": False},
                        {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]}
    with pytest.raises(UnsupportedConstruct):
        schema_to_regex(closed)  # b is required by one branch and forbidden by the other


def test_external_refs_refused():
    with pytest.raises(UnsupportedConstruct, match=r"'\$ref' at /\$ref: an external reference: it names another document"):
        schema_to_regex({"$ref": "other.json#/x"})
    with pytest.raises(UnsupportedConstruct, match=r"never fetches"):
        schema_to_regex({"$id": "https://example.com/a.json", "$ref": "https://example.com/b.json"})
    with pytest.raises(UnsupportedConstruct, match=r"no subschema declares '\$anchor': 'nowhere'"):
        schema_to_regex({"properties": {"a": {"$ref": "#nowhere"}}})
    # one anchor name on two subschemas of one resource is ambiguous: refused, not a guess
    twice = {"$defs": {"a": {"$anchor": "x", "type": "null"}, "b": {"$anchor": "x", "type": "boolean"}}, "$ref": "#x"}
    with pytest.raises(UnsupportedConstruct, match="declares it twice"):
        schema_to_regex(twice)
    # a pointer inside a resource whose $id two subschemas declare: which resource is unknowable
    same_id = {"$defs": {"a": {"$id": "x.json", "$ref": "#/$defs/n", "$defs": {"n": {"type": "null"}}},
                         "b": {"$id": "x.json", "type": "boolean"}, "n": {"type": "integer"}},
               "$ref": "#/$defs/a"}
    with pytest.raises(UnsupportedConstruct, match=r"at /\$defs/a/\$ref: .*two subschemas declare"):
        schema_to_regex(same_id)


# Identifiers the document answers itself: anchors and $id resources (JSON Schema's own base-URI rules,
# with jsonschema's resolver as the oracle in check_table).
@pytest.mark.parametrize("schema, accept, reject", [
    # $anchor (2019-09+) and a draft-7 plain-name $id
    ({"$defs": {"n": {"$anchor": "small", "type": "integer", "maximum": 9}}, "properties": {"a": {"$ref": "#small"}}},
     ['{"a":9}', '{}'], ['{"a":10}', '{"a":"x"}']),
    ({"$schema": "http://json-schema.org/draft-07/schema#",
      "definitions": {"n": {"$id": "#flag", "type": "boolean"}}, "items": {"$ref": "#flag"}, "type": "array"},
     ['[true,false]', '[]'], ['[1]']),
    # an embedded resource: its pointers and relative references resolve against its own $id
    ({"$id": "https://example.com/root.json", "type": "object", "required": ["b"],
      "properties": {"b": {"$ref": "nested/b.json"}},
      "$defs": {"B": {"$id": "nested/b.json", "$ref": "#/$defs/inner",
                      "$defs": {"inner": {"type": "string", "maxLength": 2}}},
                "inner": {"type": "integer"}}},
     ['{"b":"ab"}'], ['{"b":1}', '{"b":"abc"}']),
    # a full URI, a pointer into another resource, and an anchor in another resource
    ({"$id": "https://example.com/root.json",
      "properties": {"x": {"$ref": "https://example.com/t.json#/$defs/n"}, "y": {"$ref": "t.json#pos"}},
      "$defs": {"T": {"$id": "t.json", "$defs": {"n": {"type": "null"},
                                                "p": {"$anchor": "pos", "type": "integer", "minimum": 1}}}}},
     ['{"x":null,"y":1}', '{}'], ['{"x":0}', '{"y":0}']),
    # URN bases (urljoin does not resolve fragments against them)
    ({"$id": "urn:uuid:deadbeef-1234-0000-0000-4321feebdaed", "properties": {"f": {"$ref": "#/$defs/f"}},
      "$defs": {"f": {"enum": ["a", "b"]}}},
     ['{"f":"a"}'], ['{"f":"c"}']),
    # the same anchor name in two resources is two anchors
    ({"$id": "https://example.com/r.json", "properties": {"v": {"$ref": "#v"}, "w": {"$ref": "w.json#v"}},
      "$defs": {"v": {"$anchor": "v", "type": "boolean"},
                "w": {"$id": "w.json", "$defs": {"v": {"$anchor": "v", "type": "null"}}}}},
     ['{"v":true,"w":null}'], ['{"v":null}', '{"w":true}']),
])
def test_refs_to_anchors_and_ids(schema, accept, reject):
    check_table(schema, accept, reject)
    samples_validate(schema)


@pytest.mark.parametrize("schema, accept, reject", [
    # positions of different kinds never hold equal values: exact; no item after the tuple (a narrowing)
    ({"type": "array", "prefixItems": [{"type": "string", "maxLength": 3}, {"type": "integer"}], "uniqueItems": True},
     ['["a",1]', '["",-2]'], ['["a",1,2]', '["a","a"]', '[1,"a"]']),
    ({"type": "array", "prefixItems": [{"const": False}, {"type": "null"}, {"enum": [True]}],
      "items": False, "uniqueItems": True}, ['[false,null,true]'], ['[false,false]', '[false,null,true,true]']),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
      "items": [{"type": "object", "maxProperties": 0}, {"type": "array", "maxItems": 0}],
      "uniqueItems": True, "minItems": 2}, ['[{},[]]'], ['[{}]', '[{},[],1]']),
])
def test_unique_items_on_tuples_of_distinct_kinds(schema, accept, reject):
    check_table(schema, accept, reject)
    samples_validate(schema)


@pytest.mark.parametrize("schema, message", [
    ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "string"}], "uniqueItems": True},
     "positions 0 and 1 may hold equal values"),
    ({"type": "array", "prefixItems": [{"type": "boolean"}, {"const": True}], "uniqueItems": True},
     "positions 0 and 1 may hold equal values"),
    ({"type": "array", "prefixItems": [{"type": "string"}], "minItems": 2, "uniqueItems": True},
     "no item follows the tuple"),
])
def test_unique_items_on_tuples_refused_where_values_may_repeat(schema, message):
    with pytest.raises(UnsupportedConstruct, match=rf"'uniqueItems' at /uniqueItems: .*{message}"):
        schema_to_regex(schema)


# $dynamicRef where the dynamic scope cannot change the target (jsonschema's resolver is the oracle)
_LIST = {"$id": "list", "type": "array", "maxItems": 3, "items": {"$dynamicRef": "#items"},
         "$defs": {"items": {"$dynamicAnchor": "items"}}}


@pytest.mark.parametrize("schema, accept, reject", [
    # to a plain $anchor: a $ref
    ({"$id": "https://example.com/r", "type": "array", "items": {"$dynamicRef": "#it"},
      "$defs": {"it": {"$anchor": "it", "type": "integer"}}}, ['[1,2]', '[]'], ['["a"]']),
    # the root resource declares the name: it wins wherever the reference sits (the "extensible list")
    ({"$id": "https://example.com/strings", "$ref": "list",
      "$defs": {"s": {"$dynamicAnchor": "items", "type": "string", "maxLength": 2}, "list": _LIST}},
     ['["a","bc"]', '[]'], ['[1]', '["abc"]', '[1,2,3,4]']),
    # one subschema alone declares it: a $ref (here recursive: a tree)
    ({"$defs": {"t": {"$id": "https://example.com/t", "$dynamicAnchor": "n", "type": "array", "maxItems": 2,
                      "items": {"$dynamicRef": "#n"}}}, "$ref": "https://example.com/t"},
     ['[]', '[[],[[]]]'], ['[1]', '[[],[],[]]']),
    # beside a $ref, both apply
    ({"$defs": {"i": {"$anchor": "i", "type": "integer"}, "p": {"minimum": 0}},
      "$ref": "#/$defs/p", "$dynamicRef": "#i"}, ['0', '7'], ['-1', '1.5', '"a"']),
])
def test_dynamic_refs_the_document_answers_alone(schema, accept, reject):
    check_table(schema, accept, reject)
    samples_validate(schema)


def test_dynamic_refs_that_depend_on_the_path_are_refused():
    # two resources declare "items" and the root does not: the list's items depend on who referred to it
    schema = {"$id": "https://example.com/root", "type": "object",
              "properties": {"s": {"$ref": "strings"}, "n": {"$ref": "numbers"}},
              "$defs": {"strings": {"$id": "strings", "$ref": "list",
                                    "$defs": {"i": {"$dynamicAnchor": "items", "type": "string"}}},
                        "numbers": {"$id": "numbers", "$ref": "list",
                                    "$defs": {"i": {"$dynamicAnchor": "items", "type": "number"}}},
                        "list": _LIST}}
    with pytest.raises(UnsupportedConstruct, match=r"'\$dynamicRef' at .*/items/\$dynamicRef: .*declare it at the root"):
        schema_to_regex(schema)


# $recursiveRef (2019-09) where the dynamic scope cannot change the target (jsonschema's resolver is the oracle)
_2019 = "https://json-schema.org/draft/2019-09/schema"
_TREE_2019 = {"$schema": _2019, "$recursiveAnchor": True, "type": "object", "required": ["v"],
              "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "maxItems": 2,
                                                                "items": {"$recursiveRef": "#"}}}}


@pytest.mark.parametrize("schema, accept, reject", [
    # one resource: "#" is the root, anchored or not (a recursive tree)
    (_TREE_2019, ['{"v":1}', '{"kids":[{"v":2},{"kids":[{"v":4}],"v":3}],"v":1}'],
     ['{"kids":[{}],"v":1}', '{"kids":[{"v":"x"}],"v":1}', '{}']),
    # every resource anchored: the root is the outermost scope, so the extension's rules reach the leaves
    ({"$schema": _2019, "$id": "https://example.com/strict-tree", "$recursiveAnchor": True, "$ref": "tree",
      "unevaluatedProperties": False,
      "$defs": {"tree": {"$id": "https://example.com/tree", "$recursiveAnchor": True, "type": "object",
                         "properties": {"data": {"type": "integer"},
                                        "children": {"type": "array", "maxItems": 2,
                                                     "items": {"$recursiveRef": "#"}}}}}},
     ['{"data":1}', '{"children":[{"data":2}],"data":1}'], ['{"children":[{"daat":2}]}', '{"x":1}']),
    # the reference's own resource is not anchored: the root of that resource
    ({"$schema": _2019, "$id": "https://example.com/root", "type": "object", "properties": {"t": {"$ref": "tree"}},
      "$defs": {"tree": {"$id": "https://example.com/tree", "type": "array", "maxItems": 2,
                         "items": {"$recursiveRef": "#"}}}},
     ['{"t":[]}', '{"t":[[],[[]]]}'], ['{"t":[1]}', '{"t":{}}']),
])
def test_recursive_refs_the_document_answers_alone(schema, accept, reject):
    check_table(schema, accept, reject)
    samples_validate(schema)
    if schema is _TREE_2019:
        assert isinstance(compile_json_schema(schema), Grammar)  # exact at any depth (a grammar rule)


def test_recursive_refs_that_depend_on_the_path_are_refused():
    # the tree is anchored and the root is not: who referred to the tree would decide
    schema = {"$schema": _2019, "$id": "https://example.com/root", "type": "object",
              "properties": {"t": {"$ref": "tree"}},
              "$defs": {"tree": {"$id": "https://example.com/tree", "$recursiveAnchor": True, "type": "array",
                                 "items": {"$recursiveRef": "#"}}}}
    with pytest.raises(UnsupportedConstruct, match=r"'\$recursiveRef' at .*/items/\$recursiveRef: .*every resource"):
        schema_to_regex(schema)


def test_draft7_ignores_an_id_beside_ref():
    # Draft-07 ignores every sibling of $ref, $id included: "#/definitions/a" is from the document root.
    schema = {"$schema": "http://json-schema.org/draft-07/schema#",
              "definitions": {"a": {"type": "integer"}},
              "properties": {"p": {"$id": "https://example.com/other.json", "$ref": "#/definitions/a"}}}
    check_table(schema, ['{"p":3}'], ['{"p":"x"}'])


# Recursive $ref (issue 14): schema_to_regex unrolls it to RECURSION_DEPTHS levels (the DFA that
# tool calls and a schema the grammar path cannot write use); compile_json_schema serves it as a
# grammar, exact at any depth (test_json_recursive.py).
TREE = {"$defs": {"Node": {"type": "object", "required": ["v"], "additionalProperties": False, "properties": {
    "v": {"type": "integer", "minimum": 0, "maximum": 9},
    "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}, "$ref": "#/$defs/Node"}


def _tree(depth: int) -> str:
    """A chain of ``depth`` nested nodes in poot's spelling."""
    text = '{"v":1}'
    for _ in range(depth - 1):
        text = '{"kids":[' + text + ',{"v":2}],"v":3}'
    return text


def test_recursive_ref_is_unrolled_to_the_default_depth():
    from poot_vllm.core.json_schema import RECURSION_DEPTHS

    levels = RECURSION_DEPTHS[0]
    check_table(TREE, [_tree(d) for d in range(1, levels + 1)] + ['{"kids":[],"v":0}'],
                [_tree(levels + 1), '{"kids":[{}],"v":0}', '{"v":10}'])
    assert is_valid(TREE, _tree(levels + 1))  # valid, but deeper than poot unrolls: a narrowing
    samples_validate(TREE, n=80)


def test_recursion_through_the_root_optional_fields_and_all_of():
    linked = {"type": "object", "required": ["v"], "properties": {"v": {"type": "boolean"}, "next": {"$ref": "#"}}}
    check_table(linked, ['{"v":true}', '{"next":{"next":{"v":false},"v":true},"v":true}'], ['{"next":{},"v":true}'])
    samples_validate(linked)
    # Pydantic v1 wrote recursive fields as allOf: [{$ref}] (with a description beside it)
    v1 = {"definitions": {"N": {"type": "object", "required": ["v"], "properties": {
        "v": {"type": "integer", "minimum": 0, "maximum": 3},
        "child": {"allOf": [{"$ref": "#/definitions/N"}], "description": "the child"}}}}, "$ref": "#/definitions/N"}
    check_table(v1, ['{"child":{"child":{"v":1},"v":2},"v":0}'], ['{"child":{"v":4},"v":0}'])
    samples_validate(v1)


def test_mutual_recursion_and_value_unions():
    from typing import Dict, List, Optional, Union

    from pydantic import BaseModel
    from typing_extensions import TypeAliasType

    class Dept(BaseModel):
        name: str
        staff: List["Emp"] = []

    class Emp(BaseModel):
        name: str
        dept: Optional[Dept] = None

    Dept.model_rebuild()
    Value = TypeAliasType("Value", Union[int, bool, None, List["Value"], Dict[str, "Value"]])

    class Doc(BaseModel):
        data: Value

    for model in (Dept, Doc):
        schema = model.model_json_schema()
        samples_validate(schema, n=60)
        for text in (conformance.sample_regex(schema_to_regex(schema), random.Random(i)) for i in range(20)):
            model.model_validate_json(text)
    m = matcher(Dept.model_json_schema())
    assert m('{"name":"d","staff":[{"dept":{"name":"e","staff":[]},"name":"x"}]}')
    # The JSON-like union at depth 4 passes the automaton budget: a shallower depth that fits is
    # chosen (the unrolled DFA; compile_json_schema serves it as a grammar: test_json_recursive.py).
    doc = regex_to_dfa(schema_to_regex(Doc.model_json_schema()))
    assert doc.matches(b'{"data":[{"a":1},[]]}') and doc.matches(b'{"data":null}')


def test_recursion_without_an_end_is_refused_naming_the_ref():
    endless = {"$defs": {"N": {"type": "object", "required": ["next"], "properties": {"next": {"$ref": "#/$defs/N"}}}},
               "$ref": "#/$defs/N"}
    with pytest.raises(UnsupportedConstruct, match=r"'\$ref' at /\$defs/N/properties/next.*unrolled to 4 levels.*a way to end"):
        compile_json_schema(endless)
    # ... unless an anyOf branch ends it
    ended = {"$defs": {"N": {"type": "object", "required": ["next"], "properties": {
        "next": {"anyOf": [{"$ref": "#/$defs/N"}, {"type": "null"}]}}}}, "$ref": "#/$defs/N"}
    check_table(ended, ['{"next":null}', '{"next":{"next":null}}'], ['{}'])


def test_optional_property_and_items_that_no_value_fills_are_left_out():
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 1},
                                               "b": {"type": "array", "items": {"enum": []}}}}
    check_table(schema, ['{}', '{"b":[]}'], ['{"a":3}', '{"b":[1]}'])
    with pytest.raises(UnsupportedConstruct):
        schema_to_regex({"type": "array", "items": {"enum": []}, "minItems": 1})


def test_free_form_any_value_is_bounded_depth_not_empty_object():
    m = matcher(True)
    for text in ('{"a":[1,"x"]}', '{"a":{"b":null}}', '"s"', '[[1]]', '-1.5', 'true'):
        assert m(text), text
    assert not m('[[[1]]]')  # deeper than FREE_FORM_DEPTH
    samples_validate({}, n=40)
    with pytest.raises(UnsupportedConstruct, match="'<false>'"):
        schema_to_regex(False)


def test_untyped_properties_narrow_to_object():
    check_table({"properties": {"a": {"type": "integer"}}, "required": ["a"]}, ['{"a":1}'], ['"x"', '1'])


# -- patternProperties: listed keys obey every pattern their name matches -------------------------
PATTERNED = {"type": "object",
             "properties": {"foo": {"type": "number"}, "bar": {"type": "string", "maxLength": 3}, "id": {"type": "integer"}},
             "patternProperties": {"^f": {"type": "integer", "minimum": 3}, "o$": {"maximum": 10}, "^b": {"minLength": 2}},
             "required": ["foo"], "additionalProperties": False}


def test_pattern_properties_constrain_the_listed_keys_they_match():
    check_table(PATTERNED,
                accept=['{"foo": 3}', '{"foo": 10}', '{"bar": "ab", "foo": 4}', '{"foo": 5, "id": -7}'],
                reject=['{"foo": 2}', '{"foo": 11}', '{"foo": 3.5}', '{"bar": "a", "foo": 4}'])
    samples_validate(PATTERNED)


def test_pattern_properties_apply_instead_of_additional_properties():
    schema = {"type": "object", "properties": {}, "required": ["x-id"],
              "patternProperties": {"^x-": {"type": "string", "maxLength": 2}},
              "additionalProperties": {"type": "integer"}}
    check_table(schema, accept=['{"x-id": "ab"}'], reject=['{"x-id": 5}', '{"x-id": "abc"}'])
    samples_validate(schema)


def test_pattern_properties_without_listed_keys_emit_matching_free_keys():
    # free keys must match a pattern (no additionalProperties: keys matching none are not emitted,
    # as Pydantic's Dict[constr(pattern=...), X] rejects them) and take that pattern's schema
    check_table({"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
                accept=["{}", '{"x-a": "b"}', '{"x-": ""}'], reject=['{"y": "b"}', '{"x-a": 1}', '{"x": "b"}'])


# -- refusals and errors --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "schema,pointer",
    [
        ({"type": "object", "properties": {"tags": {"type": "array", "prefixItems": [{}, {}], "uniqueItems": True}}}, "/properties/tags/uniqueItems"),
        ({"type": "string", "not": {"format": "email"}}, "/not"),
        ({"type": "array", "contains": {}, "unevaluatedItems": False}, "/unevaluatedItems"),
        ({"type": "object", "patternProperties": {"a": {}, "b": {}, "c": {}, "d": {}}}, "/patternProperties"),
        ({"type": "integer", "multipleOf": 4099}, "/multipleOf"),
        ({"type": "array", "prefixItems": [{}], "contains": {}}, "/contains"),
        ({"type": "string", "format": "ports"}, "/format"),
        ({"type": "array", "items": {"$dynamicRef": "#meta"}}, "/items/$dynamicRef"),
        ({"type": "object", "propertyNames": {"format": "ports"}}, "/propertyNames/format"),
    ],
)
def test_refusals_name_keyword_and_pointer(schema, pointer):
    keyword = pointer.rsplit("/", 1)[1]
    with pytest.raises(UnsupportedConstruct, match=re.escape(f"unsupported keyword '{keyword}' at {pointer}")):
        schema_to_regex(schema)


def test_wrong_typed_keyword_values():
    with pytest.raises(PootError, match=r"'minimum' at /properties/n/minimum"):
        schema_to_regex({"type": "object", "properties": {"n": {"type": "integer", "minimum": "5"}}})
    with pytest.raises(PootError, match="'type'"):
        schema_to_regex({"type": "strin"})
    with pytest.raises(PootError, match="'maxLength'"):
        schema_to_regex({"type": "string", "maxLength": -1})
    with pytest.raises(PootError, match=r"'dependentRequired' at /dependentRequired"):
        schema_to_regex({"type": "object", "dependentRequired": {"a": "b"}})


def test_compile_json_schema_skips_the_user_regex_limit():
    schema = {"type": "object", "properties": {f"k{i}": {"type": "string", "format": "date"} for i in range(12)}}
    assert len(schema_to_regex(schema)) > Limits().max_regex_bytes
    dfa = compile_json_schema(schema, _BIG_BUDGET)
    assert dfa.matches(b'{"k0":"2024-02-29"}') and not dfa.matches(b'{"k0":"2023-02-29"}')


def test_annotations_and_unknown_keywords_are_ignored():
    base = schema_to_regex({"type": "string"})
    assert schema_to_regex({"type": "string", "title": "t", "description": "d", "examples": ["x"], "default": "y",
                            "$comment": "c", "deprecated": True, "x-vendor": 1, "strip": True}) == base


def test_text_input_limits_and_syntax():
    assert schema_to_regex('{"type": "null"}') == "null"
    with pytest.raises(ConstraintSyntaxError):
        schema_to_regex("{not json")
    with pytest.raises(ConstraintSyntaxError):
        schema_to_regex('{"enum": [NaN]}')
    with pytest.raises(LimitExceeded, match="max_schema_bytes.*not parsed"):
        schema_to_regex(" " * (4 * 16384 + 1) + "{}")
    with pytest.raises(PootError):
        schema_to_regex("[" * 5000 + "]" * 5000)


def test_schema_size_is_measured_without_spaces():
    """max_schema_bytes bounds the canonical text: a pretty-printed schema (as
    ``json.dumps(indent=...)`` sends it) is served when its compact text fits."""
    schema = {"type": "object", "properties": {f"field_{i}": {"type": "integer"} for i in range(400)}}
    pretty = json.dumps(schema, indent=8)
    compact = json.dumps(schema, separators=(",", ":"))
    assert len(pretty) > 16384 >= len(compact)
    assert schema_to_regex(pretty) == schema_to_regex(schema)


def _size_refusal(schema: "dict | str") -> str:
    with pytest.raises(LimitExceeded, match="max_schema_bytes") as info:
        schema_to_regex(schema)
    return str(info.value)


def test_schema_size_refusal_names_where_the_bytes_are():
    # one large definition among small ones: opened down to its many properties
    big = {"type": "object", "properties": {f"k{i}": {"type": "integer", "minimum": i} for i in range(700)}}
    schema = {"$defs": {"Big": big, "Small": {"type": "string"}}, "$ref": "#/$defs/Big"}
    message = _size_refusal(schema)
    assert "/$defs/Big/properties (700 entries)" in message, message
    assert "annotations" not in message, message  # none in it: not advised
    # a few large parts are named largest first, with their share of the text
    parts = {name: {"type": "object", "properties": {f"{name}{i}": {"enum": [i, f"value-{i}"]} for i in range(n)}}
             for name, n in (("Order", 250), ("Customer", 200), ("Note", 20))}
    message = _size_refusal({"type": "object", "properties": parts})
    named = message.split("largest parts: ")[1]
    assert named.index("/properties/Order ") < named.index("/properties/Customer ") < named.index(
        "/properties/Note "), message
    # descriptions that dominate the text: the cheapest cut is said
    described = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "words " * 8}
                                                  for i in range(300)}}
    assert "are annotations (description, title" in _size_refusal(described)
    # a property called "description" is not an annotation
    props = {"description": {"enum": ["x" * 60] * 1}, **{f"q{i}": {"enum": ["y" * 60]} for i in range(300)}}
    assert "annotations" not in _size_refusal({"type": "object", "properties": props})


def test_tool_schema_size_refusal_names_the_tool():
    from poot_vllm.core.tool_calls import tool_call_spec

    big = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * 30} for i in range(600)}}
    with pytest.raises(LimitExceeded, match="schema of tool 'lookup' exceeds the limit max_schema_bytes") as info:
        tool_call_spec([("ok", {"type": "object"}), ("lookup", big)], parallel=True)
    assert "/properties (600 entries)" in str(info.value)


def test_regex_size_limit_is_checked_while_building():
    # Each level references the previous one 4 times: 4**12 copies if built naively.
    defs = {"d0": {"type": "string", "format": "date-time"}}
    for i in range(1, 13):
        defs[f"d{i}"] = {"type": "object", "properties": {k: {"$ref": f"#/$defs/d{i-1}"} for k in "abcd"}}
    with pytest.raises(LimitExceeded, match="max_schema_regex_bytes"):
        schema_to_regex({"$defs": defs, "$ref": "#/$defs/d12"})
    with pytest.raises(LimitExceeded, match="max_schema_regex_bytes"):
        schema_to_regex({"type": "string", "format": "email"}, Limits(max_schema_regex_bytes=50))


# -- property tests: (b) generated valid instances are accepted ---------------------------------------
_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8)
_person = st.fixed_dictionaries({"name": _text, "age": st.integers(-(10**19) + 1, 10**19 - 1)}, optional={"class": _text})


@settings(max_examples=200, deadline=None)
@given(_person)
def test_generated_valid_objects_are_accepted(value):
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    assert is_valid(PERSON, text)
    assert matcher_cache(PERSON)(text)


_NESTED = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 4},
                                             "score": {"type": "integer", "minimum": -50, "maximum": 50},
                                             "kind": {"enum": ["x", "y"]}, "ok": {"type": ["boolean", "null"]}},
           "required": ["kind"]}
_nested_values = st.fixed_dictionaries(
    {"kind": st.sampled_from(["x", "y"])},
    optional={"tags": st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=5), max_size=4),
              "score": st.integers(-50, 50), "ok": st.one_of(st.booleans(), st.none())},
)


@settings(max_examples=200, deadline=None)
@given(_nested_values, st.randoms(use_true_random=False))
def test_nested_roundtrip_both_directions(value, rnd):
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    assert matcher_cache(_NESTED)(text), text
    sample = conformance.sample_regex(schema_to_regex(_NESTED), rnd)
    assert is_valid(_NESTED, sample), sample


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=string.ascii_letters + string.digits + "-_.,\"\\\n é", max_size=12))
def test_pattern_agrees_with_re_search_on_decoded_strings(content):
    # Whenever poot accepts the canonical spelling, Python's re.search agrees.
    for pattern in (r"^[A-Za-z_][A-Za-z0-9_]*$", r"\d+", r"^a.c", r"[^,]$", r"^(foo|bar)?-?\d{1,3}$"):
        schema = {"type": "string", "pattern": pattern}
        accepted = matcher_cache(schema)(json.dumps(content, ensure_ascii=False))
        if accepted:
            assert re.search(pattern, content), (pattern, content)


# -- unsatisfiable branches are dropped ----------------------------------------------------------------
def test_unsatisfiable_anyof_branches_are_dropped():
    schema = {"anyOf": [{"type": "integer", "minimum": 10, "maximum": 5}, {"type": "string", "maxLength": 3}, {"enum": []}]}
    check_table(schema, accept=['"ab"'], reject=['7', '10', '5'])
    samples_validate(schema)
    typed = {"type": ["integer", "null"], "minimum": 10, "maximum": 5}
    check_table(typed, accept=['null'], reject=['7', '10'])


def test_oneof_drops_exactly_empty_branches_and_stays_disjoint():
    schema = {"oneOf": [{"enum": []}, {"type": "integer", "minimum": 3, "maximum": 1}, {"type": "integer", "maximum": 3},
                        {"type": "string"}]}
    check_table(schema, accept=['3', '-5', '"x"'], reject=['4'])
    samples_validate(schema)
    # empty only on poot's number grid (1e-20 > 0 is a valid value): the other branch still excludes it
    tiny = {"oneOf": [{"type": "number", "exclusiveMinimum": 0, "maximum": 1e-20}, {"type": "number"}]}
    check_table(tiny, accept=["0", "-1", "1", "0.5"], reject=["null"])
    samples_validate(tiny)


def test_nothing_left_is_refused_naming_every_emptied_keyword():
    with pytest.raises(UnsupportedConstruct) as info:
        schema_to_regex({"required": ["x"], "properties": {
            "x": {"anyOf": [{"enum": []}, {"type": "integer", "minimum": 3, "maximum": 1}]}}})
    message = str(info.value)
    assert "at /properties/x/anyOf" in message
    assert "/properties/x/anyOf/0/enum" in message and "/properties/x/anyOf/1/minimum" in message


# -- an automaton over its budget names the schema parts that make it large --------------------------
def test_budget_refusal_names_the_largest_parts():
    # minLength 3000 keeps the string expanded (a counter needs lo <= 32); the
    # array's items hold counted strings, so the list itself is expanded
    schema = {"type": "object", "properties": {"body": {"type": "string", "minLength": 3000, "maxLength": 4000},
                                               "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 400},
                                               "n": {"type": "integer", "minimum": 0, "maximum": 100}}}
    with pytest.raises(LimitExceeded, match="max_automaton_bytes") as info:
        compile_json_schema(schema)
    message = str(info.value)
    parts = message[message.index("largest parts of the schema: "):]
    assert re.match(r"largest parts of the schema: /properties/body: maxLength contributes \d+% of it; lower maxLength", parts), parts
    assert "lower maxLength" in message and "/properties/tags: maxItems" in message
    # with the two named parts lowered the schema compiles: the parts named were the ones to change
    schema["properties"]["body"]["minLength"] = 0  # a counted string: maxLength 4000 is served
    schema["properties"]["tags"]["maxItems"] = 2
    compile_json_schema(schema)


def test_budget_refusal_names_free_form_values_when_they_drive_it():
    # Github_easy/o55159: five untyped fields ({"strip": true}) beside two counted strings; the
    # free-form values' copies (one per continuation) pass the budget, not the strings
    untyped = ("created_at", "created_by", "id", "updated_at", "updated_by")
    label = {"type": "object", "additionalProperties": False, "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 191, "pattern": "^([^,]|$)"},
        "slug": {"type": ["string", "null"], "maxLength": 191}, **{k: {"strip": True} for k in untyped}}}
    schema = {"definitions": {"label": label}, "properties": {"label": {"$ref": "#/definitions/label"}},
              "required": ["label"]}
    with pytest.raises(LimitExceeded, match="max_automaton_bytes") as info:
        compile_json_schema(schema)
    parts = str(info.value).split("largest parts of the schema: ")[1]
    named = re.findall(r"/definitions/label/properties/(\w+): a free-form value contributes \d+% of it; give it a type",
                       parts)
    assert len(named) == 3 and set(named) <= set(untyped), parts
    # typed as the advice says, it compiles
    for k in untyped:
        label["properties"][k] = {"type": "string"}
    compile_json_schema(schema)


def test_budget_refusal_names_defs_pointers_for_refs():
    schema = {"$defs": {"Big": {"type": "string", "minLength": 5000}}, "type": "object",
              "properties": {"a": {"$ref": "#/$defs/Big"}}}
    with pytest.raises(LimitExceeded, match=r"/\$defs/Big: minLength contributes"):
        compile_json_schema(schema)


# Free-form values nest 2 containers deep, or 1 where 2 would pass the automaton budget
# (json_schema.FREE_FORM_DEPTHS): served narrower instead of refused, always the same way.
THREE_FREE = {"type": "object", "properties": {k: {} for k in "abc"}, "required": list("abc"),
              "additionalProperties": False}


def test_free_form_values_are_shallower_where_two_levels_pass_the_budget():
    from poot_vllm.core.json_schema import served_regex

    with pytest.raises(LimitExceeded):  # three depth-2 values: over the default budget
        regex_to_dfa(schema_to_regex(THREE_FREE))
    dfa = compile_json_schema(THREE_FREE)
    assert served_regex(THREE_FREE) == schema_to_regex(THREE_FREE, free_form=1)
    assert compile_json_schema(json.dumps(THREE_FREE)).transitions.shape == dfa.transitions.shape  # the same depth
    one_level = {"a": [1, "x"], "b": {"k": None}, "c": 2.5}
    two_levels = {"a": [[1]], "b": {"k": None}, "c": 2.5}
    as_text = lambda v: json.dumps(v, sort_keys=True, separators=(",", ":")).encode()  # noqa: E731
    assert dfa.matches(as_text(one_level)) and not dfa.matches(as_text(two_levels))
    rng = random.Random(3)
    for _ in range(40):
        text = conformance.sample_dfa(dfa, rng)
        jsonschema.validate(json.loads(text), THREE_FREE)
    # one free-form value fits at depth 2, and keeps it
    one = {"type": "object", "properties": {"a": {}}, "required": ["a"], "additionalProperties": False}
    assert compile_json_schema(one).matches(b'{"a":[[1]]}')


def test_a_schema_over_the_budget_at_either_free_form_depth_is_refused_naming_its_parts():
    # a free-form value beside a part that passes the budget alone: shallower free-form values
    # do not help, and the 400 names the part to change (not the free-form value)
    schema = {"type": "object", "properties": {"body": {"type": "string", "minLength": 5000}, "extra": {}}}
    with pytest.raises(LimitExceeded, match=r"max_automaton_bytes.*largest parts of the schema: /properties/body: "
                                            r"minLength contributes"):
        compile_json_schema(schema)


def test_a_forced_tool_with_free_form_parameters_is_served_shallower_too():
    from poot_vllm.core.constraints import Constraint, Kind, compile_automaton
    from poot_vllm.core.tool_calls import tool_call_spec

    dfa = compile_automaton(Constraint(Kind.TOOL_CALL, tool_call_spec([("f", THREE_FREE)], parallel=True)))
    call = b'<tool_call>\n{"name": "f", "arguments": {"a":[1,"x"],"b":{"k":null},"c":2.5}}\n</tool_call>'
    assert dfa.matches(call) and dfa.matches(call + b"\n" + call)
    assert not dfa.matches(call.replace(b'[1,"x"]', b"[[1]]"))


def test_a_pattern_with_max_length_beside_a_long_text_field_keeps_the_text_counted():
    # Pydantic's constr(pattern=..., max_length=...) is a lookahead; a lookahead used to expand
    # every counted repetition of the schema, so a 4000-character body beside it was a 400
    schema = {"type": "object", "properties": {
        "slug": {"type": "string", "pattern": "^[a-z0-9-]+$", "maxLength": 40},
        "body": {"type": "string", "maxLength": 4000}}, "required": ["body", "slug"], "additionalProperties": False}
    dfa = compile_json_schema(schema)
    assert dfa.actions is not None  # the body is one loop and a counter
    ok = b'{"body":"' + b"x" * 4000 + b'","slug":"' + b"a-1" * 13 + b'"}'
    assert dfa.matches(ok)
    assert not dfa.matches(ok.replace(b"x" * 4000, b"x" * 4001))
    assert not dfa.matches(ok.replace(b"a-1" * 13, b"a-1" * 14))  # 42 > maxLength 40
    assert not dfa.matches(ok.replace(b"a-1" * 13, b"A"))
    rng = random.Random(7)
    for _ in range(40):
        jsonschema.validate(json.loads(conformance.sample_dfa(dfa, rng, max_bytes=20000)), schema)


def test_an_email_beside_a_long_text_field_is_served_with_the_text_counted():
    from pydantic import BaseModel, EmailStr, Field

    class Message(BaseModel):
        to: EmailStr
        body: str = Field(max_length=4000)

    dfa = compile_json_schema(Message.model_json_schema())
    assert dfa.actions is not None  # the body is one loop and a counter
    rng = random.Random(11)
    for _ in range(40):
        Message.model_validate_json(conformance.sample_dfa(dfa, rng, max_bytes=20000))  # EmailStr: email_validator
    assert dfa.matches(b'{"body":"' + b"x" * 4000 + b'","to":"a@example.com"}')
    assert not dfa.matches(b'{"body":"' + b"x" * 4001 + b'","to":"a@example.com"}')
