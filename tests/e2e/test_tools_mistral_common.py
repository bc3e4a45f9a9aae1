"""Mistral tool calls forced by poot on a server that uses ``mistral_common``'s tokenizer.

The hub's Mistral repositories ship ``consolidated.safetensors`` and
``tokenizer.model.v3`` (or ``tekken.json``), so vLLM's ``tokenizer_mode auto``
serves them with ``mistral_common``'s tokenizer (vLLM's ``MistralTokenizer``)
and renders prompts with ``mistral_common`` rather than a chat template.  poot
reads that tokenizer's vocabulary like a Hugging Face one.  Here
``tiny-mistral-spm`` (the same tiny model and v3 vocabulary as
test_tools_mistral.py) is served with ``--tokenizer-mode mistral``: forced
calls come back through vLLM's ``mistral`` parser, streamed or whole, and a
JSON Schema reply conforms.
"""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from tests.e2e.test_tools_mistral import _check_calls, _check_streamed_against_plain, _create, _named
from tests.e2e.tool_schemas import SCHEMAS, assert_every_choice_calls_tools


@pytest.fixture(scope="module")
def client(mistral_common_server):
    client = openai.OpenAI(base_url=mistral_common_server.base_url, api_key="EMPTY", max_retries=0, timeout=180)
    client._poot_model = mistral_common_server.model
    return client


def test_the_server_uses_mistral_commons_tokenizer(mistral_common_server):
    log = mistral_common_server.log_path.read_text(errors="replace")
    assert "tokenizer_mode=mistral" in log, log[-3000:]


def test_required_gives_schema_valid_calls(client):
    assert_every_choice_calls_tools(_create(client, tool_choice="required", n=2, temperature=1.0), 2, _check_calls)


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_named_gives_exactly_one_call_to_that_tool(client, name):
    choice = _create(client, tool_choice=_named(name), temperature=1.0).choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert _check_calls(choice.message.tool_calls) == [name]


@pytest.mark.parametrize("seed", [1, 2])
def test_required_streamed_calls_are_the_non_streamed_calls(client, seed):
    assert _check_streamed_against_plain(client, tool_choice="required", temperature=1.0, seed=seed)


def test_json_schema_reply_conforms(client):
    schema = SCHEMAS["get_forecast"]
    reply = client.chat.completions.create(
        model=client._poot_model, messages=[{"role": "user", "content": "Weather?"}], max_tokens=200, n=2,
        temperature=1.0, response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}})
    for choice in reply.choices:
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), schema)
