"""Mistral tool calls forced by poot, read back by vLLM's ``mistral`` parser, in a real `vllm serve`.

The server is ``mistral_server`` (tests/e2e/conftest.py): a tiny random-weight
MistralForCausalLM with Mistral's own v3 SentencePiece tokenizer
(Mistral-7B-Instruct-v0.3's, from ``mistral_common``'s package data, loaded as a
Hugging Face tokenizer) and the chat template ``mistral_common`` generates for it
(``[AVAILABLE_TOOLS] [...][/AVAILABLE_TOOLS][INST] ...[/INST]``), served with
``--tool-call-parser mistral``.  poot forces the bare array
``[{"name": ..., "arguments":{...}}, ...]`` that the parser reads for
required / named calls (``[TOOL_CALLS]`` is a control token, never generated as
content).  A random model emits garbage unless constrained, so every parsed,
schema-valid call is the constraint at work.
"""

from __future__ import annotations

import json

import openai
import pytest

from tests.clients.client_models import GetWeather, Remember
from tests.e2e.tool_schemas import SCHEMAS, TOOLS, assert_every_choice_calls_tools, check_calls

MESSAGES = [{"role": "user", "content": "Weather?"}]


@pytest.fixture(scope="module")
def client(mistral_server):
    client = openai.OpenAI(base_url=mistral_server.base_url, api_key="EMPTY", max_retries=0, timeout=180)
    client._poot_model = mistral_server.model
    return client


def _create(client, messages=MESSAGES, **kwargs):
    return client.chat.completions.create(model=client._poot_model, messages=messages, tools=TOOLS,
                                          max_tokens=300, **kwargs)


def _check_calls(calls) -> list[str]:
    """Each call names a tool and its arguments validate against that tool's schema;
    its id is the 9-character alphanumeric id vLLM's mistral parser gives (so the
    reply went through that parser)."""
    for call in calls:
        assert call.id.isalnum() and len(call.id) == 9, call
    return check_calls(calls)


def _named(name: str) -> dict:
    return {"type": "function", "function": {"name": name}}


def test_the_prompt_is_mistrals(mistral_server):
    """The served prompt is Mistral's: tools in ``[AVAILABLE_TOOLS]`` before the
    last ``[INST]``, each marker one control token (the replies' 9-character
    call ids below show they went through vLLM's mistral parser)."""
    import urllib.request

    body = json.dumps({"model": mistral_server.model, "messages": MESSAGES, "tools": TOOLS}).encode()
    req = urllib.request.Request(mistral_server.url + "/tokenize", body, {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        tokens = json.load(r)["tokens"]
    # <s> [AVAILABLE_TOOLS] ... [/AVAILABLE_TOOLS] [INST] ... [/INST]: control tokens 1, 6, 7, 3, 4
    assert tokens[:2] == [1, 6] and tokens[-1] == 4 and 7 in tokens and 3 in tokens, tokens


def test_required_gives_schema_valid_calls(client):
    assert_every_choice_calls_tools(_create(client, tool_choice="required", n=3, temperature=1.0), 3, _check_calls)


def test_required_without_parallel_calls_gives_exactly_one_call(client):
    reply = _create(client, tool_choice="required", parallel_tool_calls=False, n=2, temperature=1.0)
    for choice in reply.choices:
        assert choice.finish_reason == "tool_calls", choice
        assert len(_check_calls(choice.message.tool_calls)) == 1, choice


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_named_gives_exactly_one_call_to_that_tool(client, name):
    reply = _create(client, tool_choice=_named(name), n=2, temperature=1.0)
    for choice in reply.choices:
        assert choice.finish_reason == "tool_calls", choice
        assert choice.message.tool_calls and not choice.message.content, choice
        assert _check_calls(choice.message.tool_calls) == [name]


def test_a_second_turn_renders_the_calls_and_is_forced_again(client):
    """The first reply's calls (Mistral's 9-character ids) and a tool result go back
    through Mistral's template (``[TOOL_CALLS] [...]</s>[TOOL_RESULTS] ...``)."""
    first = _create(client, tool_choice=_named("get_clock")).choices[0].message
    messages = MESSAGES + [
        {"role": "assistant", "tool_calls": [c.model_dump() for c in first.tool_calls]},
        {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "12:00"},
        {"role": "user", "content": "And the forecast?"},
    ]
    choice = _create(client, messages=messages, tool_choice=_named("get_forecast")).choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert _check_calls(choice.message.tool_calls) == ["get_forecast"]


def _stream(client, **kwargs):
    """A streamed reply, assembled: ([(id, name, arguments)], content, finish_reason)."""
    calls, content, finish = {}, "", None
    for chunk in _create(client, stream=True, **kwargs):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        content += choice.delta.content or ""
        for tc in choice.delta.tool_calls or []:
            call = calls.setdefault(tc.index, [None, None, ""])
            if tc.id:
                call[0] = tc.id
            if tc.function and tc.function.name:
                assert call[1] is None, "a call's name came twice"
                assert not call[2], "the arguments came before the name"
                call[1] = tc.function.name
            call[2] += (tc.function.arguments or "") if tc.function else ""
    assert sorted(calls) == list(range(len(calls))), calls
    return [tuple(calls[i]) for i in sorted(calls)], content, finish


def _check_streamed_against_plain(client, **kwargs) -> list[str]:
    """The streamed reply and the same request (same ``seed``, so the same tokens)
    not streamed: the same calls, each valid, content empty, ``finish_reason``
    ``tool_calls``, and the streamed arguments, parsed as they came, the plain ones.

    The random model splits ``"arguments"`` from its ``:`` in about 1 call in
    5, which made vLLM's mistral parser stream the arguments as ``:{...}``
    (``MistralParser._extract_tool_calls_streaming_pre_v11_tokenizer``);
    poot's ``mistral_streaming`` hook (stock) and patches/0005 (fork) fix it,
    so the streamed arguments must parse as they are.
    """
    plain = _create(client, **kwargs).choices[0]
    streamed, content, finish = _stream(client, **kwargs)
    assert plain.finish_reason == finish == "tool_calls", (plain, finish)
    assert not content.strip() and not plain.message.content, (content, plain)
    names = _check_calls(plain.message.tool_calls)
    assert [name for _, name, _ in streamed] == names, (streamed, plain)
    for (call_id, name, arguments), call in zip(streamed, plain.message.tool_calls):
        assert call_id and call_id.isalnum() and len(call_id) == 9, streamed
        assert json.loads(arguments) == json.loads(call.function.arguments), (streamed, plain)
    return names


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_named_streamed_call_is_the_non_streamed_call(client, name, seed):
    assert _check_streamed_against_plain(client, tool_choice=_named(name), seed=seed) == [name]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_required_streamed_calls_are_the_non_streamed_calls(client, seed):
    assert _check_streamed_against_plain(client, tool_choice="required", temperature=1.0, seed=seed)


@pytest.mark.parametrize("tool_choice", ["required", _named("Remember")], ids=["required", "named"])
def test_openai_pydantic_function_tool(client, tool_choice):
    """The OpenAI SDK's strict tools (``pydantic_function_tool``): ``parsed_arguments`` is the model."""
    models = {"GetWeather": GetWeather, "Remember": Remember}
    completion = client.chat.completions.parse(
        model=client._poot_model, messages=MESSAGES, max_tokens=300, tool_choice=tool_choice,
        tools=[openai.pydantic_function_tool(GetWeather), openai.pydantic_function_tool(Remember)])
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.tool_calls, choice
    for call in choice.message.tool_calls:
        assert isinstance(call.function.parsed_arguments, models[call.function.name]), call
    if isinstance(tool_choice, dict):
        assert [c.function.name for c in choice.message.tool_calls] == ["Remember"]
