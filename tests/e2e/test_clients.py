"""The client libraries people use, unchanged, against a real poot server.

Each library builds its own request from a Pydantic model (its schema
conversion, its ``response_format`` / ``tools`` / ``tool_choice``, its
streaming) and validates the reply itself: it returns a parsed Pydantic object
or raises.  The tiny models have random weights, so a parsed object is the
constraint at work.  Library defaults are kept (LangChain's
``function_calling`` sends ``parallel_tool_calls: false`` and a named tool on
its own; pydantic-ai sends ``tool_choice: "required"``); only ``max_tokens`` is
set, and retries are off so a failure is never hidden by a second request.

instructor is in test_instructor.py: no release installs beside vLLM's
openai / jiter / rich versions (see pyproject.toml), so it runs from a client
venv of its own, as in a user's app.
"""

from __future__ import annotations

import asyncio

import openai
import pytest

from tests.clients.client_models import PROMPT, TOOL_MODELS, GetWeather, Owner, Remember

MAX_TOKENS = 200


@pytest.fixture(scope="module", params=["bpe", "spm"])
def json_server(request):
    """Structured replies on both tokenizer families (byte-level BPE, SentencePiece)."""
    return request.getfixturevalue(f"{request.param}_server")


def _sync_client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=180)


def _async_client(server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=180)


def _messages() -> list[dict]:
    return [{"role": "user", "content": PROMPT}]


# ---------------------------------------------------------------- OpenAI SDK


def test_openai_parse_returns_the_model(json_server):
    completion = _sync_client(json_server).chat.completions.parse(
        model=json_server.model, messages=_messages(), response_format=Owner, max_tokens=MAX_TOKENS)
    choice = completion.choices[0]
    assert choice.finish_reason == "stop", choice
    assert isinstance(choice.message.parsed, Owner), choice.message


def test_openai_stream_helper_parses_the_model(bpe_server):
    client = _sync_client(bpe_server)
    with client.chat.completions.stream(model=bpe_server.model, messages=_messages(), response_format=Owner,
                                        max_tokens=MAX_TOKENS) as stream:
        deltas = [event for event in stream if event.type == "content.delta"]
        final = stream.get_final_completion()
    assert len(deltas) > 1, "the reply came in one piece: not a stream"
    assert isinstance(final.choices[0].message.parsed, Owner), final.choices[0].message


def _parsed_calls(message) -> list:
    calls = message.tool_calls or []
    assert calls, f"no tool_calls: {message}"
    for call in calls:
        assert isinstance(call.function.parsed_arguments, TOOL_MODELS[call.function.name]), call
    return calls


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "Remember"}}],
                         ids=["required", "named"])
def test_openai_pydantic_function_tool(bpe_server, tool_choice):
    completion = _sync_client(bpe_server).chat.completions.parse(
        model=bpe_server.model, messages=_messages(), max_tokens=MAX_TOKENS, tool_choice=tool_choice,
        tools=[openai.pydantic_function_tool(GetWeather), openai.pydantic_function_tool(Remember)])
    choice = completion.choices[0]
    calls = _parsed_calls(choice.message)
    assert choice.finish_reason == "tool_calls", choice
    if isinstance(tool_choice, dict):
        assert [c.function.name for c in calls] == ["Remember"]


def test_openai_stream_helper_with_a_named_tool(bpe_server):
    client = _sync_client(bpe_server)
    with client.chat.completions.stream(
            model=bpe_server.model, messages=_messages(), max_tokens=MAX_TOKENS,
            tools=[openai.pydantic_function_tool(GetWeather)],
            tool_choice={"type": "function", "function": {"name": "GetWeather"}}) as stream:
        done = [event for event in stream if event.type == "tool_calls.function.arguments.done"]
        final = stream.get_final_completion()
    assert [event.name for event in done] == ["GetWeather"]
    assert isinstance(done[0].parsed_arguments, GetWeather)
    assert [c.function.name for c in _parsed_calls(final.choices[0].message)] == ["GetWeather"]


# ---------------------------------------------------------------- LangChain


def _chat_openai(server):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(base_url=server.base_url, api_key="EMPTY", model=server.model, max_retries=0,
                      max_tokens=MAX_TOKENS, timeout=180)


def test_langchain_structured_output_json_schema(json_server):
    owner = _chat_openai(json_server).with_structured_output(Owner, method="json_schema").invoke(PROMPT)
    assert isinstance(owner, Owner), owner


def test_langchain_structured_output_function_calling(bpe_server):
    owner = _chat_openai(bpe_server).with_structured_output(Owner, method="function_calling").invoke(PROMPT)
    assert isinstance(owner, Owner), owner


@pytest.mark.parametrize("tool_choice", ["required", "any", "GetWeather"])
def test_langchain_bind_tools(bpe_server, tool_choice):
    message = _chat_openai(bpe_server).bind_tools([GetWeather, Remember], tool_choice=tool_choice).invoke(PROMPT)
    assert message.tool_calls and not message.invalid_tool_calls, message
    for call in message.tool_calls:
        TOOL_MODELS[call["name"]].model_validate(call["args"])
    if tool_choice == "GetWeather":
        assert [c["name"] for c in message.tool_calls] == ["GetWeather"]


def test_langchain_bind_tools_streamed(bpe_server):
    llm = _chat_openai(bpe_server).bind_tools([GetWeather, Remember], tool_choice="required")
    chunks = list(llm.stream(PROMPT))
    assert len(chunks) > 1
    message = chunks[0]
    for chunk in chunks[1:]:
        message = message + chunk
    assert message.tool_calls and not message.invalid_tool_calls, message
    for call in message.tool_calls:
        TOOL_MODELS[call["name"]].model_validate(call["args"])


# ---------------------------------------------------------------- pydantic-ai


def _agent(server, output_type):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(server.model, provider=OpenAIProvider(openai_client=_async_client(server)))
    return Agent(model, output_type=output_type, retries=0, model_settings={"max_tokens": MAX_TOKENS})


def _one_model_response(result) -> None:
    """The output came from the first reply: no retry prompt was needed."""
    from pydantic_ai.messages import ModelResponse

    responses = [m for m in result.all_messages() if isinstance(m, ModelResponse)]
    assert len(responses) == 1, responses


def test_pydantic_ai_tool_output(bpe_server):
    result = _agent(bpe_server, Owner).run_sync(PROMPT)
    assert isinstance(result.output, Owner), result.output
    _one_model_response(result)


def test_pydantic_ai_native_output(json_server):
    from pydantic_ai import NativeOutput

    result = _agent(json_server, NativeOutput(Owner)).run_sync(PROMPT)
    assert isinstance(result.output, Owner), result.output
    _one_model_response(result)


def test_pydantic_ai_streamed_tool_output(bpe_server):
    agent = _agent(bpe_server, Owner)

    async def run() -> Owner:
        async with agent.run_stream(PROMPT) as result:
            return await result.get_output()

    assert isinstance(asyncio.run(run()), Owner)
