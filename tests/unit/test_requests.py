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


# -- whitespace_pattern: honoured for JSON schemas, a 400 naming the field otherwise -----------------
def _dfa(constraint):
    from poot_vllm.core.json_schema import compile_json_schema

    return compile_json_schema(constraint.spec)


_PAIR = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}


def test_guided_whitespace_pattern_replaces_the_separators():
    c = constraint_from_fields({"guided_json": _PAIR, "guided_whitespace_pattern": "[\\n ]{0,2}"})
    dfa = _dfa(c)
    for text in ('{"a":1,"b":2}', '{"a":\n 1,\n\n"b": 2}'):
        assert dfa.matches(text.encode()) and json.loads(text) == {"a": 1, "b": 2}
    assert not dfa.matches(b'{"a":   1,"b":2}')  # three characters: beyond the pattern
    compact = _dfa(constraint_from_fields({"guided_whitespace_pattern": ""},
                                          {"type": "json_schema", "json_schema": {"name": "p", "schema": _PAIR}}))
    assert compact.matches(b'{"a":1,"b":2}') and not compact.matches(b'{"a": 1,"b":2}')


@pytest.mark.parametrize("pattern,needle", [("\\s*", "unbounded"), (" +", "unbounded"), ("[ x]?", "not JSON whitespace"),
                                            ("[ ]{0,40}", "at most 16"), ("(", "")])
def test_unusable_whitespace_patterns_are_refused_naming_the_field(pattern, needle):
    with pytest.raises(PootError) as e:
        constraint_from_fields({"guided_json": _PAIR, "guided_whitespace_pattern": pattern})
    assert e.value.field == "guided_whitespace_pattern" and needle in str(e.value)


def test_whitespace_pattern_without_a_json_schema_is_refused_not_ignored():
    for fields in ({"guided_regex": "a+", "guided_whitespace_pattern": " ?"}, {"guided_whitespace_pattern": " ?"}):
        with pytest.raises(PootError) as e:
            constraint_from_fields(fields, None)
        assert e.value.field == "guided_whitespace_pattern" and "JSON schemas only" in str(e.value)
    with pytest.raises(PootError) as e:
        constraint_from_fields({"guided_whitespace_pattern": " ?"}, {"type": "json_object"})
    assert e.value.field == "guided_whitespace_pattern"


def test_structured_outputs_params_whitespace_reaches_the_engine_compile():
    from types import SimpleNamespace

    from poot_vllm.adapter.params import constraint_from_params

    def params(**kw):
        base = dict(json=None, regex=None, choice=None, grammar=None, json_object=None, structural_tag=None,
                    whitespace_pattern=None, disable_any_whitespace=False)
        return SimpleNamespace(**{**base, **kw})

    dfa = _dfa(constraint_from_params(params(json=json.dumps(_PAIR), whitespace_pattern="\\n?")))
    assert dfa.matches(b'{"a":\n1,\n"b":2}') and not dfa.matches(b'{"a": 1,"b":2}')
    dfa = _dfa(constraint_from_params(params(json=_PAIR, disable_any_whitespace=True)))
    assert dfa.matches(b'{"a":1,"b":2}') and not dfa.matches(b'{"a": 1,"b":2}')
    with pytest.raises(PootError) as e:
        constraint_from_params(params(regex="a+", whitespace_pattern=" ?"))
    assert e.value.field == "structured_outputs.whitespace_pattern"
    with pytest.raises(PootError) as e:
        constraint_from_params(params(json=_PAIR, whitespace_pattern="\\s*"))
    assert e.value.field == "structured_outputs.whitespace_pattern" and "unbounded" in str(e.value)


def test_chat_request_whitespace_pattern_is_carried_or_refused(monkeypatch):
    """Through vLLM's own request object: honoured inside the constraint, or a 400 naming the field."""
    import vllm  # noqa: F401  -- a required test dependency
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.exceptions import VLLMValidationError

    from poot_vllm.adapter.patches import apply_all
    from poot_vllm.adapter.params import constraint_from_params

    monkeypatch.setenv("POOT_SERVER_BACKEND", "poot")
    apply_all(eager=True)

    def chat(**extra):
        return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], **extra)

    rf = {"type": "json_schema", "json_schema": {"name": "p", "schema": _PAIR}}
    for request in (chat(response_format=rf, structured_outputs={"json": _PAIR, "whitespace_pattern": "\\n?"}),
                    chat(structured_outputs={"json": _PAIR, "whitespace_pattern": "\\n?"}),
                    chat(guided_json=_PAIR, guided_whitespace_pattern="\\n?")):
        so = request.extract_structured_outputs()
        dfa = _dfa(constraint_from_params(so))  # what the engine compiles
        assert dfa.matches(b'{"a":\n1,\n"b":2}') and not dfa.matches(b'{"a": 1,"b":2}')
    for request, field in ((chat(structured_outputs={"json": _PAIR, "whitespace_pattern": "\\s*"}), "structured_outputs.whitespace_pattern"),
                           (chat(guided_json=_PAIR, guided_whitespace_pattern="\\s*"), "guided_whitespace_pattern"),
                           (chat(structured_outputs={"regex": "a+", "whitespace_pattern": " ?"}), "structured_outputs.whitespace_pattern")):
        with pytest.raises(VLLMValidationError) as e:
            request.extract_structured_outputs()
        assert e.value.parameter == field
