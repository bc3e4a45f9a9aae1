"""Structured outputs on a reasoning model: free reasoning, conforming content.

The server is the tiny Qwen2 model whose chat template opens ``<think>\\n``
(``tiny-qwen2-bpe-think``) with vLLM's ``qwen3`` reasoning parser.  vLLM applies
the structured-output constraint only after the reasoning ends (the
``</think>`` token); before that the random model writes noise, which the
parser returns as ``reasoning``.  A random model almost never writes
``</think>`` by itself, so these tests end the reasoning the two ways a user
can: vLLM's ``thinking_token_budget`` (forces ``</think>`` after that many
reasoning tokens), or ``enable_thinking: false`` (the template closes the
block in the prompt, and the constraint applies from the first token).
The reasoning is free, stop token included: a random model ends about one
reply in a few hundred inside its 8 reasoning tokens (seen in a CI dry run:
``content`` None).  The tests that need content send ``min_tokens`` equal to
the reasoning budget, so the stop token cannot come before ``</think>``.
See docs/reasoning.md.
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Oslo", "Zürich"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "note": {"type": "string", "maxLength": 10},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "forecast", "schema": SCHEMA}}
MESSAGES = [{"role": "user", "content": "Plan a trip."}]
THINKING_TOKENS = 8


def _chat(server, stream: bool, **body) -> dict:
    """One chat completion as ``{"content", "reasoning", "finish_reason", "status"}``;
    a streamed reply is assembled from its deltas."""
    payload = {"model": server.model, "messages": MESSAGES, "stream": stream, **body}
    url = server.base_url + "/chat/completions"
    if not stream:
        r = httpx.post(url, json=payload, timeout=180)
        if r.status_code != 200:
            return {"status": r.status_code, "error": r.json()["error"]}
        choice = r.json()["choices"][0]
        message = choice["message"]
        return {"status": 200, "content": message.get("content"), "finish_reason": choice["finish_reason"],
                "reasoning": message.get("reasoning") or message.get("reasoning_content")}
    content, reasoning, finish = "", "", None
    with httpx.stream("POST", url, json=payload, timeout=180) as r:
        if r.status_code != 200:
            return {"status": r.status_code, "error": json.loads(r.read())["error"]}
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[len("data: "):]).get("choices", []):
                delta = choice.get("delta", {})
                content += delta.get("content") or ""
                reasoning += delta.get("reasoning") or delta.get("reasoning_content") or ""
                finish = choice.get("finish_reason") or finish
    return {"status": 200, "content": content or None, "reasoning": reasoning or None, "finish_reason": finish}


def _conforms(text: str | None) -> bool:
    try:
        jsonschema.validate(json.loads(text or ""), SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
@pytest.mark.parametrize("field", ["response_format", "guided_json"])
def test_content_conforms_after_free_reasoning(think_server, stream, field):
    constraint = {"response_format": RESPONSE_FORMAT} if field == "response_format" else {"guided_json": SCHEMA}
    reply = _chat(think_server, stream, max_tokens=120, thinking_token_budget=THINKING_TOKENS,
                  min_tokens=THINKING_TOKENS, **constraint)
    assert reply["status"] == 200, reply
    assert reply["finish_reason"] == "stop", reply
    assert _conforms(reply["content"]), reply
    # The reasoning was not constrained: noise from the random model, not the schema's JSON.
    assert reply["reasoning"] and not _conforms(reply["reasoning"]), reply


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_thinking_off_constrains_from_the_first_token(think_server, stream):
    reply = _chat(think_server, stream, max_tokens=120, response_format=RESPONSE_FORMAT,
                  chat_template_kwargs={"enable_thinking": False})
    assert reply["status"] == 200, reply
    assert reply["finish_reason"] == "stop", reply
    assert _conforms(reply["content"]), reply
    assert not reply["reasoning"], reply


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_reply_fits_when_reasoning_and_reply_share_max_tokens(think_server, stream):
    """The reasoning's tokens count against ``max_tokens`` too: poot charges them to the
    reply's budget when the constraint starts, so the reply still finishes in time."""
    refused = _chat(think_server, False, max_tokens=1, response_format=RESPONSE_FORMAT)
    shortest = int(refused["error"]["message"].split("allows is ")[1].split()[0])
    # THINKING_TOKENS of reasoning, the end marker, and just room for the shortest reply.
    reply = _chat(think_server, stream, max_tokens=THINKING_TOKENS + 1 + shortest + 1,
                  response_format=RESPONSE_FORMAT, thinking_token_budget=THINKING_TOKENS,
                  min_tokens=THINKING_TOKENS)
    assert reply["finish_reason"] == "stop" and _conforms(reply["content"]), reply


def test_reasoning_is_capped_so_that_the_reply_fits(think_server):
    """Without a thinking budget the random model would think until ``max_tokens``; poot
    caps the reasoning (vLLM's ``thinking_token_budget``) so the shortest reply fits after it."""
    reply = _chat(think_server, False, max_tokens=40, response_format=RESPONSE_FORMAT)
    assert reply["finish_reason"] == "stop" and _conforms(reply["content"]), reply
    assert reply["reasoning"], reply


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_admission_still_refuses_what_cannot_fit(think_server, stream):
    """The constrained reply alone must fit ``max_tokens``, reasoning or not."""
    reply = _chat(think_server, stream, max_tokens=3, response_format=RESPONSE_FORMAT,
                  thinking_token_budget=THINKING_TOKENS)
    assert reply["status"] == 400, reply
    assert reply["error"]["param"] == "max_tokens", reply
    assert "shortest reply" in reply["error"]["message"], reply
    assert think_server.healthy()
