"""Free-key objects never repeat a key (strict parsers reject ``{"a":1,"a":2}``).

Oracles: a strict JSON parser (``json.loads`` with an ``object_pairs_hook``
that raises on a repeated key, at every nesting level) and jsonschema.  The
narrowing (one key per first-character slot, docs/json-schema.md) is
checked from both sides: keys in distinct slots are accepted, two keys of
one slot are not.
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path
from typing import Any, Dict, Literal

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

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
        text = conformance.sample_regex(regex, rng)
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
    with pytest.raises(UnsupportedConstruct, match=r"'propertyNames' at /properties/m/propertyNames"):
        schema_to_regex({"type": "object", "properties": {"m": {"type": "object", "propertyNames": {"pattern": "^a"}}}})
    with pytest.raises(UnsupportedConstruct, match=r"'propertyNames'.*'z'"):
        schema_to_regex({"type": "object", "required": ["z"], "properties": {"z": {}}, "propertyNames": {"enum": ["a"]}})
