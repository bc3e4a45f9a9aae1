"""Free-key objects never repeat a key (strict parsers reject ``{"a":1,"a":2}``).

Oracles: a strict JSON parser (``json.loads`` with an ``object_pairs_hook``
that raises on a repeated key, at every nesting level) and jsonschema.  The
narrowing (one key per first-character slot, docs/json-schema.md) is
checked from both sides: keys in distinct slots are accepted, two keys of
one slot are not.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import random
import sys
from pathlib import Path
from typing import Annotated, Any, Dict, Literal

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, StringConstraints

from poot_vllm.core.errors import UnsupportedConstruct
from poot_vllm.core.json_schema import compile_json_schema, schema_to_regex

_spec = importlib.util.spec_from_file_location("json_conformance", Path(__file__).resolve().parents[2] / "scripts" / "json_conformance.py")
conformance = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("json_conformance", conformance)
_spec.loader.exec_module(conformance)


class DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise DuplicateKey(f"repeated key in {keys}")
    return dict(pairs)


def strict_loads(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_no_duplicates)


def assert_samples_strict(schema: Any, n: int = 200, seed: int = 0) -> None:
    """Random walks of the schema's regex parse strictly (no repeated key anywhere) and validate."""
    regex = schema_to_regex(schema)
    dfa = compile_json_schema(schema)  # within the default automaton budget
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = cls(schema)
    rng = random.Random(seed)
    for _ in range(n):
        text = conformance.sample_regex(regex, rng) if "(?" not in regex else conformance.sample_dfa(dfa, rng)
        if text is None:
            continue
        assert dfa.matches(text.encode("utf-8")), text
        value = strict_loads(text)
        assert validator.is_valid(value), text


MAPS = [
    {"type": "object", "additionalProperties": {"type": "integer"}},
    {"type": "object", "additionalProperties": {"type": "string"}},
    {"type": "object", "additionalProperties": {"type": "boolean"}, "maxProperties": 3},
    {"type": "object", "additionalProperties": {"type": "number"}, "minProperties": 1},
    {"type": "object"},
    {"type": "object", "additionalProperties": True},
    {},
    {"type": "array", "items": {"type": "object", "additionalProperties": {"type": "integer"}}},
    {"type": "object", "additionalProperties": {"type": "object", "additionalProperties": {"type": "string"}}},
    {"type": "object", "additionalProperties": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                                                "required": ["a"]}},
]


@pytest.mark.parametrize("schema", MAPS, ids=[json.dumps(s)[:60] for s in MAPS])
def test_emitted_maps_never_repeat_a_key(schema):
    assert_samples_strict(schema)


def accepts(schema: Any, text: str) -> bool:
    return compile_json_schema(schema).matches(text.encode("utf-8"))


def test_repeated_keys_are_never_emitted():
    for schema in MAPS[:2] + [{"type": "object"}, {}]:
        value = '1' if "integer" in json.dumps(schema) else '"x"'
        assert not accepts(schema, f'{{"a":{value},"a":{value}}}'), schema
        assert not accepts(schema, f'{{"a":{value},"\\u0061":{value}}}'), schema  # the same key, escaped


#: keys with distinct slots: "", a digit, one of a-h, one of i-q, one of r-z (either case), other
_SLOT_KEYS = [[""], ["0", "7", "42"], ["age", "Bob", "cat", "hello"], ["id", "name", "Mary", "query"],
              ["score", "Zed", "total"], ["_x", " space", "é", "-"]]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.booleans(), min_size=len(_SLOT_KEYS), max_size=len(_SLOT_KEYS)), st.data())
def test_keys_in_distinct_slots_are_accepted(used, data):
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    keys = [data.draw(st.sampled_from(options)) for options, u in zip(_SLOT_KEYS, used) if u]
    text = json.dumps({k: i for i, k in enumerate(keys)}, ensure_ascii=False)
    assert accepts(schema, text), text


def test_narrowing_one_key_per_slot():
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert accepts(schema, '{"age":1,"name":2,"zip":3}')
    text = '{"a":1,"\\"quoted":2}'  # a first character JSON never holds raw: its escape, in the last slot
    assert accepts(schema, text) and strict_loads(text) == {"a": 1, '"quoted': 2}
    assert not accepts(schema, '{"age":1,"city":2}')  # both start in a-h: documented narrowing
    assert not accepts(schema, '{"name":1,"age":2}')  # slots in order


def test_max_properties_bounds_the_slots():
    schema = {"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 2}
    assert accepts(schema, '{"a":1}') and accepts(schema, '{"a":1,"z":2}')
    assert_samples_strict(schema)
    regex_texts = [conformance.sample_regex(schema_to_regex(schema), random.Random(i)) for i in range(200)]
    assert all(len(strict_loads(t)) <= 2 for t in regex_texts)


def test_min_properties_one_and_refusal_above():
    schema = {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1}
    assert not accepts(schema, "{}") and accepts(schema, '{"a":1}')
    with pytest.raises(UnsupportedConstruct, match=r"'minProperties' at /minProperties"):
        schema_to_regex({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2})


def test_free_form_objects_hold_one_key():
    assert accepts({}, '{"a":[1,"x"]}') and accepts({}, '{}')
    assert not accepts({}, '{"a":1,"b":2}')


# -- propertyNames with a finite set: Pydantic's Dict[Literal[...], X] and Dict[SomeEnum, X] -------------------
class Colour(BaseModel):
    counts: Dict[Literal["red", "green", "blue"], int]
    flags: Dict[Literal["x"], bool] = {}


def test_literal_keyed_dicts_emit_only_the_allowed_keys_each_once():
    schema = Colour.model_json_schema()
    assert "propertyNames" in json.dumps(schema)
    regex = schema_to_regex(schema)
    rng = random.Random(1)
    seen: set[str] = set()
    for _ in range(200):
        text = conformance.sample_regex(regex, rng)
        strict_loads(text)
        model = Colour.model_validate_json(text)
        seen |= set(model.counts)
    assert seen == {"red", "green", "blue"}
    assert accepts(schema, '{"counts":{"blue":1,"green":2,"red":3}}')
    assert not accepts(schema, '{"counts":{"pink":1}}')


def test_enum_property_names_through_ref_and_refusals():
    schema = {"$defs": {"K": {"enum": ["a", "b"], "type": "string"}}, "type": "object",
              "propertyNames": {"$ref": "#/$defs/K"}, "additionalProperties": {"type": "integer"}}
    assert accepts(schema, '{"a":1,"b":2}') and not accepts(schema, '{"c":1}')
    with pytest.raises(UnsupportedConstruct, match=r"'format' at /properties/m/propertyNames"):
        schema_to_regex({"type": "object", "properties": {"m": {"type": "object", "propertyNames": {"format": "ports"}}}})
    with pytest.raises(UnsupportedConstruct, match=r"'propertyNames'.*'z'"):
        schema_to_regex({"type": "object", "required": ["z"], "properties": {"z": {}}, "propertyNames": {"enum": ["a"]}})


# -- keys constrained by a schema: propertyNames and patternProperties on free keys ------------------------
class Limited(BaseModel):
    short: Dict[Annotated[str, StringConstraints(max_length=4)], int]
    pattern: Dict[Annotated[str, StringConstraints(pattern=r"^[a-z]+$")], bool]


def _walks(schema: Any, n: int, seed: int = 0) -> list[str]:
    dfa = compile_json_schema(schema)
    rng = random.Random(seed)
    return [t for t in (conformance.sample_dfa(dfa, rng) for _ in range(n)) if t is not None]


def test_constrained_key_dicts_validate_with_pydantic():
    """Pydantic's Dict[constr(max_length=4), X] (propertyNames) and Dict[constr(pattern=...), X]
    (patternProperties): every emitted key is an allowed name, never repeated, and keys are emitted."""
    schema = Limited.model_json_schema()
    assert "propertyNames" in json.dumps(schema) and "patternProperties" in json.dumps(schema)
    assert_samples_strict(schema, n=100)
    keys: set[str] = set()
    for text in _walks(schema, 150):
        model = Limited.model_validate_json(text)
        strict_loads(text)
        keys |= set(model.short) | set(model.pattern)
    assert any(len(k) == 4 for k in keys) and any(k.isalpha() and k.islower() for k in keys)
    assert accepts(schema, '{"pattern":{"abc":true,"zz":false},"short":{"":1,"abcd":2}}')
    assert not accepts(schema, '{"pattern":{},"short":{"abcde":1}}')
    assert not accepts(schema, '{"pattern":{"aB":true},"short":{}}')


MIXED = {"type": "object",
         "patternProperties": {"^a": {"type": "integer"}, "b$": {"type": "string", "maxLength": 2}},
         "additionalProperties": {"type": "boolean"}}


@functools.lru_cache(maxsize=1)
def _mixed_dfa():
    return compile_json_schema(MIXED)


@settings(max_examples=300, deadline=None)
@given(key=st.text(alphabet="abxé", max_size=3),
       value=st.one_of(st.integers(-1000, 1000), st.text(alphabet="xy", max_size=3), st.booleans()))
def test_free_keys_take_the_schemas_of_the_patterns_they_match(key, value):
    """A one-key map (every key fits its slot) against jsonschema: what poot accepts is valid,
    and every valid one-key map with a printable-ASCII key is accepted (the narrowing: a key
    that must miss a pattern is printable ASCII)."""
    text = json.dumps({key: value}, ensure_ascii=False)
    valid = jsonschema.Draft202012Validator(MIXED).is_valid({key: value})
    accepted = _mixed_dfa().matches(text.encode("utf-8"))
    if accepted:
        assert valid, text
    if valid and key.isascii():
        assert accepted, text


def test_pattern_kinds_in_samples_and_refusals():
    for text in _walks(MIXED, 200, seed=3):
        assert jsonschema.Draft202012Validator(MIXED).is_valid(strict_loads(text)), text
    # each kind of key takes its own schema: ^a integer, b$ short string, others boolean
    assert all(accepts(MIXED, t) for t in ['{"ax":1}', '{"xb":"hi"}', '{"q":true}', '{"ax":1,"q":false,"xb":""}'])
    assert not any(accepts(MIXED, t) for t in ['{"ax":true}', '{"xb":"hij"}', '{"xb":1}', '{"q":1}', '{"é":true}'])
    assert not accepts(MIXED, '{"ab":1}') and not accepts(MIXED, '{"ab":"x"}')  # both patterns: no value fits
    # keys matching no pattern, without additionalProperties: none is emitted (Pydantic rejects them)
    only = {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}}
    assert accepts(only, '{"x-a":1}') and not accepts(only, '{"y":1}')
    with pytest.raises(UnsupportedConstruct, match=r"'patternProperties' at /properties/m/patternProperties: 4 patterns on free keys"):
        schema_to_regex({"type": "object", "properties": {"m": {"type": "object", "patternProperties": {
            "a": {}, "b": {}, "c": {}, "d": {}}}}})


def test_property_names_filter_listed_keys():
    schema = {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"},
              "properties": {"ok": {"type": "integer"}, "Bad": {"type": "integer"}}}
    assert accepts(schema, '{"ok":1}') and not accepts(schema, '{"Bad":1}')
    with pytest.raises(UnsupportedConstruct, match=r"'propertyNames' at /propertyNames: required property 'Bad'"):
        schema_to_regex({**schema, "required": ["Bad"]})
    # a name schema no string satisfies allows only the empty object
    assert accepts({"type": "object", "propertyNames": {"type": "integer"}}, "{}")
    assert not accepts({"type": "object", "propertyNames": {"type": "integer"}}, '{"a":1}')
