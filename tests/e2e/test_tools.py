"""tool_choice required / named forced by poot through the model's own codec, in a real `vllm serve`.

The tiny models have random weights: they emit garbage unless constrained,
so every reply below that parses into schema-valid ``tool_calls`` is the
constraint at work.  Servers: the tiny Qwen2 byte-level BPE model and
the tiny Llama SentencePiece model (both ChatML with ``<tool_call>`` added
tokens), each with ``--enable-auto-tool-choice --tool-call-parser hermes``.
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Oslo", "Zürich"]},
        "unit": {"type": "string", "maxLength": 4},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]},
                   "nested": {"type": "object", "properties": {"h24": {"type": "boolean"}},
                              "required": ["h24"], "additionalProperties": False}},
    "required": ["zone", "nested"],
    "additionalProperties": False,
}
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME, "ping": None}
TOOLS = [{"type": "function", "function": {"name": n, "description": n, **({"parameters": s} if s else {})}}
         for n, s in SCHEMAS.items()]
MESSAGES = [{"role": "user", "content": "What's the weather?"}]
MAX_TOKENS = 400


@pytest.fixture(scope="module", params=["bpe", "spm"])
def client(request):
    """An openai client on each tiny model (byte-level BPE, SentencePiece)."""
    import openai

    server = request.getfixturevalue("bpe_server" if request.param == "bpe" else "spm_server")
    client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=180)
    client._poot_model = server.model
    return client


def _check_calls(calls: list[tuple[str | None, str, str]], allowed: set[str]) -> None:
    assert calls, "no tool_calls"
    for call_id, name, arguments in calls:
        assert call_id, "a tool call without an id"
        assert name in allowed, name
        args = json.loads(arguments)
        schema = SCHEMAS[name]
        if schema is None:
            assert args == {}
        else:
            jsonschema.validate(args, schema)


def _create(client, stream: bool, **kwargs):
    """One chat completion; streaming replies are assembled the way OpenAI clients do."""
    body = {"model": client._poot_model, "messages": MESSAGES, "max_tokens": MAX_TOKENS, "tools": TOOLS,
            "temperature": 1.0, **kwargs}
    if not stream:
        resp = client.chat.completions.create(**body)
        choice = resp.choices[0]
        calls = [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
        assert all(c.type == "function" for c in choice.message.tool_calls or [])
        return choice.message.content, calls, choice.finish_reason
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **body):
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            for tc in delta.tool_calls or []:
                entry = calls.setdefault(tc.index, [None, None, ""])
                if tc.id:
                    entry[0] = tc.id
                if tc.function and tc.function.name:
                    entry[1] = tc.function.name
                if tc.function and tc.function.arguments:
                    entry[2] += tc.function.arguments
            finish = choice.finish_reason or finish
    return content, [tuple(calls[i]) for i in sorted(calls)], finish


def _assert_forced(content, calls, finish, allowed, max_calls=None):
    _check_calls(calls, allowed)
    if max_calls is not None:
        assert len(calls) <= max_calls
    assert finish == "tool_calls", finish
    assert not (content or "").strip(), f"leftover content {content!r}"
    assert "<tool_call>" not in (content or "")


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "single"])
def test_required_calls_one_of_the_tools(client, stream, parallel):
    for seed in range(2):
        content, calls, finish = _create(client, stream, tool_choice="required", parallel_tool_calls=parallel,
                                         seed=seed)
        _assert_forced(content, calls, finish, set(SCHEMAS), max_calls=None if parallel else 1)


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
@pytest.mark.parametrize("name", ["get_weather", "get_time", "ping"])
def test_named_tool_is_called_with_conforming_arguments(client, stream, name):
    content, calls, finish = _create(client, stream, parallel_tool_calls=False,
                                     tool_choice={"type": "function", "function": {"name": name}})
    _assert_forced(content, calls, finish, {name}, max_calls=1)


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_tool_forcing_wins_over_guided_json_and_response_format(client, stream):
    content, calls, finish = _create(
        client, stream, tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False,
        extra_body={"guided_json": {"type": "integer"}},
        response_format={"type": "json_object"})
    _assert_forced(content, calls, finish, {"get_weather"}, max_calls=1)


def test_auto_leaves_tools_unconstrained_and_guided_fields_apply(client):
    for choice in ("auto", "none", None):
        kwargs = {"tool_choice": choice} if choice else {}
        content, calls, finish = _create(client, False, max_tokens=8, parallel_tool_calls=False,
                                         extra_body={"guided_choice": ["alpha", "beta"]}, **kwargs)
        assert content in ("alpha", "beta") and not calls, (choice, content, calls)


def _post(server, body):
    return httpx.post(server.base_url + "/chat/completions", timeout=120,
                      json={"model": server.model, "messages": MESSAGES, "max_tokens": 8, **body})


@pytest.mark.parametrize("stream", [False, True])
def test_impossible_tool_choice_is_a_400(bpe_server, stream):
    for body in ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
                 {"tool_choice": "required"}):
        r = _post(bpe_server, {"stream": stream, **body})
        assert r.status_code == 400, r.text[:300]
        assert r.json()["error"]["param"] == "tool_choice", r.text[:300]


@pytest.mark.parametrize("stream", [False, True])
def test_unsupported_tool_schema_is_a_400_naming_the_tool(bpe_server, stream):
    bad = [{"type": "function", "function": {"name": "bad", "parameters": {
        "type": "object", "properties": {"s": {"type": "string", "pattern": "(a)\\1"}}, "required": ["s"]}}}]
    r = _post(bpe_server, {"stream": stream, "tools": bad, "tool_choice": "required"})
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == "tools" and "'bad'" in err["message"], err


@pytest.mark.parametrize("stream", [False, True])
def test_structural_tag_reaching_poot_is_a_clear_400(bpe_server, stream):
    tag = {"type": "structural_tag", "format": {"type": "const_string", "value": "hi"}}
    r = _post(bpe_server, {"stream": stream, "structured_outputs": {"structural_tag": json.dumps(tag)}})
    assert r.status_code == 400, r.text[:300]
    assert "structural tag" in r.json()["error"]["message"].lower()
    assert bpe_server.healthy()


# Realistically nested tools, sent the way SDKs send them (parallel_tool_calls left at its default).
from tests.helpers.tool_codecs import NESTED  # noqa: E402

NESTED_SCHEMAS = dict(NESTED)  # free text too: an order's customer_id and its items' notes
NESTED_TOOLS = [{"type": "function", "function": {"name": n, "parameters": s}} for n, s in NESTED_SCHEMAS.items()]


def _assert_nested(content, calls, finish, allowed):
    assert calls, "no tool_calls"
    assert finish == "tool_calls", finish
    assert not (content or "").strip(), f"leftover content {content!r}"
    for call_id, name, arguments in calls:
        assert call_id and name in allowed, (call_id, name)
        jsonschema.validate(json.loads(arguments), NESTED_SCHEMAS[name])


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_required_with_default_parallel_calls_serves_nested_tools(client, stream):
    for seed in range(3):
        content, calls, finish = _create(client, stream, tools=NESTED_TOOLS, tool_choice="required", seed=seed)
        _assert_nested(content, calls, finish, set(NESTED_SCHEMAS))


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
@pytest.mark.parametrize("parallel", [None, True], ids=["default", "parallel"])
def test_named_tool_choice_is_exactly_one_call(client, stream, parallel):
    extra = {} if parallel is None else {"parallel_tool_calls": parallel}
    for seed in range(2):
        content, calls, finish = _create(client, stream, tools=NESTED_TOOLS, seed=seed,
                                         tool_choice={"type": "function", "function": {"name": "create_order"}}, **extra)
        _assert_nested(content, calls, finish, {"create_order"})
        assert len(calls) == 1, calls


#: A recursive tool (a $ref that reaches itself): its forced calls are a grammar, exact at any depth.
OUTLINE = {"$defs": {"Section": {"type": "object", "required": ["title"], "additionalProperties": False,
                                 "properties": {"title": {"type": "string", "maxLength": 8},
                                                "sections": {"type": "array", "maxItems": 2,
                                                             "items": {"$ref": "#/$defs/Section"}}}}},
           "type": "object", "required": ["root"], "additionalProperties": False,
           "properties": {"root": {"$ref": "#/$defs/Section"}}}
RECURSIVE_SCHEMAS = {"outline": OUTLINE, "get_weather": WEATHER}
RECURSIVE_TOOLS = [{"type": "function", "function": {"name": n, "parameters": s}} for n, s in RECURSIVE_SCHEMAS.items()]


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
@pytest.mark.parametrize("choice", ["required", "named"])
def test_a_recursive_tool_is_forced_and_finishes_inside_max_tokens(client, stream, choice):
    """required (parallel calls allowed by default) or named, at a max_tokens a random model would
    overrun without the budget: every call parses, validates, and the reply ends with the calls."""
    tool_choice = "required" if choice == "required" else {"type": "function", "function": {"name": "outline"}}
    allowed = set(RECURSIVE_SCHEMAS) if choice == "required" else {"outline"}
    for seed in range(3):
        content, calls, finish = _create(client, stream, tools=RECURSIVE_TOOLS, tool_choice=tool_choice, seed=seed,
                                         max_tokens=120)
        assert calls and finish == "tool_calls", (content, calls, finish)
        assert not (content or "").strip(), f"leftover content {content!r}"
        for call_id, name, arguments in calls:
            assert call_id and name in allowed, (call_id, name)
            jsonschema.validate(json.loads(arguments), RECURSIVE_SCHEMAS[name])
        if choice == "named":
            assert len(calls) == 1, calls
