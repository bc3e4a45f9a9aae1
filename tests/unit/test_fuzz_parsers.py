"""Fuzz the three constraint parsers: any input compiles or raises PootError.

Hostile text (random bytes of regex / GBNF / JSON-Schema syntax, mutations of
real constraints, lone surrogates, NULs) must never escape as another
exception type (a 500 on the API server) and must stay within the bounded
work of ``Limits``.  Speed is not asserted (benchmarks measure it).
"""

from __future__ import annotations


import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from poot_vllm.core.automata.compilers import compile_regex
from poot_vllm.core.json_schema import compile_json_schema
from poot_vllm.core.errors import PootError
from poot_vllm.core.grammar import parse_gbnf
from poot_vllm.core.json_schema import schema_to_regex
from poot_vllm.core.limits import Limits

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
# Small limits so the fuzzer reaches every bound often, and each case stays cheap.
SMALL = Limits(max_regex_bytes=512, max_grammar_bytes=2048, max_grammar_cost=256, max_schema_bytes=4096,
               max_schema_regex_bytes=32 * 1024, max_automaton_bytes=64 * 1024)

def _run(kind: str, fn, arg) -> None:
    """Call ``fn(arg)``; anything but success or PootError fails the test."""
    try:
        fn(arg)
    except PootError as exc:
        assert str(exc), f"a {kind} refusal must say what to change"


# ------------------------------------------------------------------ regex

REGEX_ATOMS = ["a", "b", "(", ")", "(?:", "(?=", "(?P<n>", "|", "*", "+", "?", "*?", "{", "}", "{2}", "{1,3}",
               "{1000}", "{,5}", "[", "]", "[^", "a-z", "-", "^", "$", ".", "\\", "\\d", "\\w", "\\s", "\\b",
               "\\1", "\\x4", "\\x41", "\\u12", "\\u00e9", "\\p{L}", "\\N", "é", "\x00", "\ud800", "\udfff",
               "😀", "\\", "\n", "(?i)", "(?#c)", "(a|b)*", "{99999999999}", "[[:alpha:]]", "&&", "~"]
regex_text = st.lists(st.sampled_from(REGEX_ATOMS) | st.text(max_size=3), max_size=30).map("".join)


@FUZZ
@given(regex_text)
def test_regex_compiles_or_refuses(pattern):
    _run("regex", lambda p: compile_regex(p, SMALL), pattern)


@FUZZ
@given(st.text(max_size=60))
def test_regex_arbitrary_text(pattern):
    _run("regex", lambda p: compile_regex(p, SMALL), pattern)


@pytest.mark.parametrize("pattern", [
    "(a|b)*a(a|b){40}", "a{1000}{1000}", "((a*)*)*b", "(a+)+$", "(" * 300 + "a" + ")" * 300,
    "(?:(?:(?:a{50}){50}){50})", "[\\x00-\\x{10FFFF}]", "\\xff\\xfe", "a\udcff", ".{4096}",
    "(.*,){30}", "[^a]{1,4096}", "(\\w+\\s?)*$",
])
def test_pathological_regexes_are_bounded(pattern):
    _run("regex", lambda p: compile_regex(p, SMALL), pattern)
    _run("regex", lambda p: compile_regex(p, Limits()), pattern)


# ------------------------------------------------------------------- GBNF

GBNF_ATOMS = ["root", " ::= ", "::=", " ", "\n", "x", "rule", '"a"', '"', "'", "[a-z]", "[^", "]", "(", ")", "|",
              "*", "+", "?", "{2}", "{1,3}", "{1000}", "{2,}", "#c\n", ".", "\\", "\\x41", "\\u00", "root ::= root",
              '"\\"', "\x00", "\ud800", "é", "<[1]>", "root ::= x\nx ::= x x", "::= ::="]
gbnf_text = st.lists(st.sampled_from(GBNF_ATOMS) | st.text(max_size=3), max_size=30).map("".join)


@FUZZ
@given(gbnf_text)
def test_gbnf_parses_or_refuses(text):
    _run("gbnf", lambda t: parse_gbnf(t, SMALL), text)


@FUZZ
@given(st.text(max_size=80))
def test_gbnf_arbitrary_text(text):
    _run("gbnf", lambda t: parse_gbnf(t, SMALL), "root ::= " + text)


@pytest.mark.parametrize("text", [
    "root ::= " + "(" * 200 + '"a"' + ")" * 200,
    'root ::= ("a"{100}){100}',
    'root ::= x\nx ::= y\ny ::= x',
    'root ::= root "a"',
    'root ::= "a"?' * 1 + ' "b"?' * 400,
    'root ::= [',
    'root ::= "unterminated',
    "root ::= missing",
    "notroot ::= \"a\"",
    'root ::= "\\xZZ"',
])
def test_malformed_or_huge_grammars_are_refused(text):
    _run("gbnf", lambda t: parse_gbnf(t, SMALL), text)
    _run("gbnf", lambda t: parse_gbnf(t, Limits()), text)


# ----------------------------------------------------------------- schema

KEYWORDS = ["type", "properties", "required", "items", "prefixItems", "enum", "const", "minimum", "maximum",
            "exclusiveMinimum", "minLength", "maxLength", "pattern", "format", "anyOf", "oneOf", "allOf", "not",
            "$ref", "$defs", "definitions", "additionalProperties", "minItems", "maxItems", "uniqueItems",
            "multipleOf", "if", "then", "patternProperties", "minProperties", "$id", "$schema", "default"]
leaves = (st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
          | st.sampled_from(["string", "integer", "number", "object", "array", "boolean", "null", "date-time",
                             "#", "#/$defs/a", "#/properties", "http://example.com/s.json", "^[a-z]+$", "(a|b)*",
                             "\\", "\ud800", "x"]))
schemas = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYWORDS) | st.text(max_size=4),
                                                               inner, max_size=5),
    max_leaves=25,
)


def _schema(schema):
    schema_to_regex(schema, SMALL)
    compile_json_schema(schema, SMALL)


@FUZZ
@given(schemas)
def test_schema_compiles_or_refuses(schema):
    _run("schema", _schema, schema)


@FUZZ
@given(st.text(max_size=60))
def test_schema_text_compiles_or_refuses(text):
    _run("schema", _schema, text)


def _nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


@pytest.mark.parametrize("schema", [
    _nested(200), '{"items":' * 1500 + "{}" + "}" * 1500, "[" * 1900 + "]" * 1900, {"$ref": "#"}, {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}},
    {"$ref": "http://example.com/other.json"}, {"type": "integer", "minimum": "5"}, {"type": 5},
    {"properties": []}, {"enum": []}, {"type": "string", "pattern": "(a|b)*a(a|b){30}"},
    {"type": "array", "items": {"type": "string"}, "minItems": 10**9}, {"type": "string", "maxLength": 10**9},
    "[1, 2", "not json", "\x00", 5, [], {"anyOf": [{"type": "string", "minLength": 100 + i} for i in range(40)]},
])
def test_hostile_schemas_are_refused_or_compiled(schema):
    _run("schema", _schema, schema)
    _run("schema", lambda s: compile_json_schema(s, Limits()), schema)
