"""Replies that complete: with budget-aware masks (the default), a constrained
reply from a random-weight model ends inside max_tokens with finish_reason
"stop" and parses, for unbounded strings and arrays; a max_tokens below the
shortest conforming reply is a 400 naming both numbers."""

from __future__ import annotations

import json
import re

import httpx
import jsonschema
import pytest

SCHEMAS = {
    "strings_and_arrays": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["name", "tags"], "additionalProperties": False,
    },
    "array_of_objects": {
        "type": "array",
        "items": {"type": "object", "properties": {"id": {"type": "integer"}, "note": {"type": "string"}},
                  "required": ["id", "note"], "additionalProperties": False},
    },
    "nested_arrays": {
        "type": "object",
        "properties": {"rows": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
                       "title": {"type": "string"}},
        "required": ["rows", "title"], "additionalProperties": False,
    },
}


def _post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.base_url + path, json={"model": server.model, **body}, timeout=300)


@pytest.mark.parametrize("max_tokens", [32, 64, 128])
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_replies_complete_within_max_tokens(server, name, max_tokens):
    schema = SCHEMAS[name]
    r = _post(server, "/completions", {"prompt": "JSON:", "max_tokens": max_tokens, "n": 8, "temperature": 1.0,
                                       "guided_json": schema})
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["choices"]) == 8
    for choice in body["choices"]:
        assert choice["finish_reason"] == "stop", choice
        jsonschema.validate(json.loads(choice["text"]), schema)
    assert body["usage"]["completion_tokens"] <= 8 * max_tokens


@pytest.mark.parametrize("max_tokens", [8, 32, 64])
def test_json_object_replies_complete(server, max_tokens):
    r = _post(server, "/chat/completions", {"messages": [{"role": "user", "content": "an object"}],
                                            "max_tokens": max_tokens, "n": 8, "temperature": 1.0,
                                            "response_format": {"type": "json_object"}})
    assert r.status_code == 200, r.text
    for choice in r.json()["choices"]:
        assert choice["finish_reason"] == "stop", choice
        assert isinstance(json.loads(choice["message"]["content"]), dict)


def test_context_limit_is_part_of_the_budget(server):
    """max_model_len 2048: a 2010-token prompt leaves 38 tokens, whatever max_tokens says."""
    schema = SCHEMAS["strings_and_arrays"]
    r = _post(server, "/completions", {"prompt": [100] * 2010, "max_tokens": 500, "n": 4, "temperature": 1.0,
                                       "guided_json": schema})
    assert r.status_code == 200, r.text
    for choice in r.json()["choices"]:
        assert choice["finish_reason"] == "stop", choice
        jsonschema.validate(json.loads(choice["text"]), schema)


@pytest.mark.parametrize("stream", [False, True])
def test_max_tokens_below_the_shortest_reply_is_400_naming_both(server, stream):
    pattern = "the quick brown fox jumps over the lazy dog"
    r = _post(server, "/completions", {"prompt": "x", "max_tokens": 3, "stream": stream, "guided_regex": pattern})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "max_tokens", err
    numbers = [int(n) for n in re.findall(r"\b(\d+) tokens\b", err["message"])]
    assert numbers and numbers[0] > 3, err["message"]
    assert "at most 3" in err["message"], err["message"]
    shortest = numbers[0]
    # The number is exact: one token less is refused, that many is a complete reply.
    assert _post(server, "/completions", {"prompt": "x", "max_tokens": shortest - 1,
                                          "guided_regex": pattern}).status_code == 400
    ok = _post(server, "/completions", {"prompt": "x", "max_tokens": shortest, "guided_regex": pattern})
    assert ok.status_code == 200, ok.text
    choice = ok.json()["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["text"] == pattern


def test_chat_max_completion_tokens_is_named(server):
    r = _post(server, "/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                            "max_completion_tokens": 2, "response_format": {
                                                "type": "json_schema", "json_schema": {
                                                    "name": "s", "schema": SCHEMAS["strings_and_arrays"]}}})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "max_completion_tokens" and "at most 2" in err["message"], err
    assert server.healthy()
