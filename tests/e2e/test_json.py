"""guided_json and response_format json_schema in a real vllm serve (issue: JSON Schema).

Schemas keep strings and arrays bounded (maxLength, enums, maxItems) so that a
random model finishes well inside max_tokens; every reply must parse and
validate against the schema.
"""

from __future__ import annotations

import json
from typing import Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field

CHARACTER = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 1, "maximum": 120},
        "class": {"enum": ["mage", "rogue", "knight"]},
    },
    "required": ["name", "age", "class"],
}


class Stats(BaseModel):
    strength: int = Field(ge=0, le=20)
    lucky: bool


class Item(BaseModel):
    kind: Literal["sword", "shield", "potion"]
    weight: int = Field(ge=0, le=99)


class Hero(BaseModel):
    name: str = Field(max_length=6)
    stats: Stats
    items: list[Item] = Field(max_length=2)


def _check(text: str, schema: dict) -> dict:
    value = json.loads(text)
    jsonschema.validate(value, schema)
    return value


def test_guided_json_character_n4(client, server):
    r = client.chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "A character"}], max_tokens=120, n=4,
        extra_body={"guided_json": CHARACTER},
    )
    for c in r.choices:
        assert c.finish_reason == "stop", c
        value = _check(c.message.content, CHARACTER)
        # keys come in sorted order, only listed keys
        assert list(value) == sorted(value) == ["age", "class", "name"]


def test_response_format_json_schema_completions_and_chat(client, server):
    rf = {"type": "json_schema", "json_schema": {"name": "character", "strict": True, "schema": CHARACTER}}
    r = client.completions.create(model=server.model, prompt="JSON:", max_tokens=120, n=2,
                                  extra_body={"response_format": rf})
    for c in r.choices:
        _check(c.text, CHARACTER)
    r = client.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "x"}],
                                       max_tokens=120, response_format=rf)
    _check(r.choices[0].message.content, CHARACTER)


def test_pydantic_model_with_defs(client, server):
    schema = Hero.model_json_schema()
    assert "$defs" in schema
    r = client.chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "hero"}], max_tokens=200, n=2,
        response_format={"type": "json_schema", "json_schema": {"name": "Hero", "schema": schema}},
    )
    for c in r.choices:
        assert c.finish_reason == "stop"
        Hero.model_validate_json(c.message.content)
        _check(c.message.content, schema)


def test_openai_sdk_parse(client, server):
    """The OpenAI SDK's .parse(response_format=Model) sends a strict schema."""
    completion = client.beta.chat.completions.parse(
        model=server.model, messages=[{"role": "user", "content": "stats"}], max_tokens=100,
        response_format=Stats,
    )
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Stats)
    assert 0 <= parsed.strength <= 20


def test_streaming_guided_json(client, server):
    stream = client.chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "A character"}], max_tokens=120, stream=True,
        extra_body={"guided_json": CHARACTER},
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    _check(text, CHARACTER)


def test_guided_json_wins_over_response_format(client, server):
    r = client.chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "x"}], max_tokens=60,
        response_format={"type": "json_object"},
        extra_body={"guided_json": {"type": "integer", "minimum": 10, "maximum": 99}},
    )
    assert 10 <= json.loads(r.choices[0].message.content) <= 99


def test_response_format_text_is_unconstrained(client, server):
    r = client.chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "x"}], max_tokens=20,
        response_format={"type": "text"},
    )
    assert r.choices[0].finish_reason in ("length", "stop")


@pytest.mark.parametrize(
    "schema,needle",
    [
        ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "string"}], "uniqueItems": True}, "/uniqueItems"),
        ({"type": "object", "required": ["tag"], "properties": {"tag": {"type": "string", "not": {"format": "email"}}}},
         "/properties/tag/not"),
        ({"$ref": "https://example.com/schema.json"}, "$ref"),
        ({"type": "string", "description": "x" * 17000}, "max_schema_bytes"),
        # the refusal names where the bytes are
        ({"$defs": {"Big": {"type": "object", "properties": {f"k{i}": {"type": "integer", "minimum": i}
                                                             for i in range(700)}}}, "$ref": "#/$defs/Big"},
         "/$defs/Big/properties (700 entries)"),
    ],
)
def test_unenforceable_schema_is_400(server, schema, needle):
    import httpx

    for stream in (False, True):
        r = httpx.post(server.base_url + "/chat/completions", timeout=60, json={
            "model": server.model, "messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "stream": stream,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "response_format" and needle in err["message"], err
    assert server.healthy()


@pytest.mark.parametrize("max_length", [None, 40])
def test_a_new_schema_is_served_while_its_masks_build(client, server, max_length):
    """Free-text fields (the engine serves the first masks before the full index
    is built, core.lazy_masks; with ``maxLength`` a counted DFA, whose rows also
    depend on the string's counter) in a schema no request has compiled:
    choices with room to spare and choices whose max_tokens is tight (they
    wait for the full index) are decoded in one batch; every reply finishes
    inside its budget and validates (the length bound included)."""
    import uuid
    from concurrent.futures import ThreadPoolExecutor

    key = "n" + uuid.uuid4().hex[:6]
    text = {"type": "string"} if max_length is None else {"type": "string", "maxLength": max_length}
    schema = {"type": "object", "properties": {key: text, "tags": {"type": "array", "items": {
        "type": "string"}, "maxItems": 2}, "ok": {"type": "boolean"}}, "required": [key, "ok"]}

    def ask(max_tokens: int):
        return client.completions.create(model=server.model, prompt="A record", max_tokens=max_tokens, n=8,
                                          extra_body={"guided_json": schema})

    # the schema's byte-distance bound is 22 tokens: 64 is loose, 24 turns tight
    # mid-reply (the scheduler waits for the index), 20 is tight at compile time
    budgets = (64, 24, 20)
    with ThreadPoolExecutor(len(budgets)) as pool:
        replies = list(pool.map(ask, budgets))
    for r, budget in zip(replies, budgets):
        for c in r.choices:
            assert c.finish_reason == "stop", (budget, c)
            value = _check(c.text, schema)
            assert key in value
        assert r.usage.completion_tokens <= 8 * budget
