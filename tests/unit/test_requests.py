"""Request fields -> constraint mapping (vLLM-free)."""

from __future__ import annotations

import json

import pytest

from poot_vllm.core.constraints import Kind
from poot_vllm.core.errors import LimitExceeded, PootError
from poot_vllm.core.limits import Limits
from poot_vllm.adapter.requests import constraint_from_fields, constraint_from_response_format


def test_precedence_order():
    all_fields = {"guided_json": {"type": "null"}, "guided_grammar": 'root ::= "a"', "guided_regex": "b", "guided_choice": ["c"]}
    order = ["guided_choice", "guided_regex", "guided_grammar", "guided_json"]
    kinds = [Kind.CHOICE, Kind.REGEX, Kind.GRAMMAR, Kind.JSON]
    for i, kind in enumerate(kinds):
        fields = {k: v for k, v in all_fields.items() if k in order[i:]}
        assert constraint_from_fields(fields, {"type": "json_object"}).kind is kind


def test_response_format_variants():
    assert constraint_from_fields({}, None) is None
    assert constraint_from_fields({}, {"type": "text"}) is None
    assert constraint_from_fields({}, {"type": "json_object"}).kind is Kind.JSON_OBJECT
    c = constraint_from_response_format({"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {"type": "boolean"}}})
    assert c.kind is Kind.JSON and json.loads(c.spec) == {"type": "boolean"}


@pytest.mark.parametrize("rf", [{"type": "xml"}, {"type": "json_schema"}, {"type": "json_schema", "json_schema": {"name": "x"}}, "json"])
def test_bad_response_format(rf):
    with pytest.raises(PootError) as e:
        constraint_from_fields({}, rf)
    assert e.value.field == "response_format"


def test_limits_name_field_and_limit():
    limits = Limits(max_regex_bytes=10, max_grammar_bytes=10, max_schema_bytes=30)
    for field, value, name in (
        ("guided_regex", "a" * 11, "max_regex_bytes"),
        ("guided_grammar", 'root ::= "aaaaaaaa"', "max_grammar_bytes"),
        ("guided_json", {"type": "string", "description": "x" * 40}, "max_schema_bytes"),
        ("guided_json", json.dumps({"type": "string", "description": "x" * 40}), "max_schema_bytes"),
    ):
        with pytest.raises(LimitExceeded) as e:
            constraint_from_fields({field: value}, None, limits)
        assert e.value.field == field and name in str(e.value)
    # exactly at the limit is accepted
    assert constraint_from_fields({"guided_regex": "a" * 10}, None, limits).kind is Kind.REGEX


def test_non_json_schema_text_and_bad_types():
    with pytest.raises(PootError) as e:
        constraint_from_fields({"guided_json": "{not json"})
    assert e.value.field == "guided_json" and "JSON" in str(e.value)
    with pytest.raises(PootError):
        constraint_from_fields({"guided_json": [1, 2]})
    with pytest.raises(PootError):
        constraint_from_fields({"guided_choice": []})
    with pytest.raises(PootError):
        constraint_from_fields({"guided_whitespace_pattern": " *", "guided_json": {}})
