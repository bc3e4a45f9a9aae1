"""Llama 3 tool calls forced by poot, read back by vLLM's ``llama3_json`` parser, in a real `vllm serve`.

The server is ``think_server`` (tests/e2e/conftest.py): a tiny random-weight
Qwen2 model whose tokenizer also has Llama 3's ``<|python_tag|>``, served with
``--tool-call-parser llama3_json`` (and a reasoning parser, switched off per
request with ``enable_thinking: false`` so the constraint applies from the
first token).  poot forces ``{"name": ..., "parameters": {...}}`` (``; `` between
calls), the text the Llama 3.1 template asks for; a random model emits garbage
unless constrained, so every parsed, schema-valid call is the constraint at work.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from tests.e2e.tool_schemas import FORECAST, SCHEMAS, TOOLS, assert_every_choice_calls_tools, check_calls

NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture(scope="module")
def client(think_server):
    import openai

    client = openai.OpenAI(base_url=think_server.base_url, api_key="EMPTY", max_retries=0, timeout=180)
    client._poot_model = think_server.model
    return client


def _create(client, **kwargs):
    return client.chat.completions.create(
        model=client._poot_model, messages=[{"role": "user", "content": "Weather?"}], tools=TOOLS,
        max_tokens=300, extra_body=NO_THINKING, **kwargs)


def test_required_gives_schema_valid_calls(client):
    assert_every_choice_calls_tools(_create(client, tool_choice="required", n=3, temperature=1.0), 3)


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_named_gives_exactly_one_call_to_that_tool(client, name):
    reply = _create(client, tool_choice={"type": "function", "function": {"name": name}}, n=2, temperature=1.0)
    for choice in reply.choices:
        assert choice.message.tool_calls and not choice.message.content, choice
        assert check_calls(choice.message.tool_calls) == [name]


def test_named_streamed_call_assembles_to_a_schema_valid_call(client):
    stream = _create(client, tool_choice={"type": "function", "function": {"name": "get_forecast"}}, stream=True)
    names, arguments, content = [], "", ""
    for chunk in stream:
        delta = chunk.choices[0].delta if chunk.choices else None
        content += (delta.content or "") if delta else ""
        for tc in (delta.tool_calls or []) if delta else []:
            if tc.function and tc.function.name:
                names.append(tc.function.name)
            arguments += (tc.function.arguments or "") if tc.function else ""
    assert names == ["get_forecast"] and not content.strip()
    jsonschema.validate(json.loads(arguments), FORECAST)
