"""The hostile corpus (tests/data/hostile/corpus.jsonl) against a real server.

Every case is sent to /v1/chat/completions and /v1/completions (unless the
case names one), streaming and not.  A refused case must be an HTTP 400 in
vLLM's OpenAI error shape whose message names the field and says what to
change; an accepted one (``expect: 200``: exactly at a limit, or pathological
only for backtracking engines) must produce replies that conform.  After each
case the server is healthy and a valid constrained request is still correct.

Corpus entries: ``field`` (the request field), ``value`` or ``gen`` (a value
built here: oversized / exactly-at-limit inputs), ``why``, ``expect`` (400 or
200), ``needles`` (lower-case substrings the message must contain), ``param``
(expected ``error.param`` when not the field itself; null: vLLM's own
validation answers, any param), ``endpoints``, ``extra`` (other body fields),
``oracle`` (for accepted grammars: a Python regex the reply must match).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import jsonschema
import pytest

CORPUS = Path(__file__).resolve().parents[1] / "data" / "hostile" / "corpus.jsonl"
ENTRIES = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
PATHS = {"chat": "/chat/completions", "completions": "/completions"}


def build_value(entry: dict):
    """The case's value, generating the sized ones (``gen``)."""
    gen = entry.get("gen")
    if gen is None:
        return entry["value"]
    kind = gen["kind"]
    if kind == "pad":
        fill = gen["bytes"] - len((gen["head"] + gen["tail"]).encode())
        text = gen["head"] + gen["pad"] * fill + gen["tail"]
        assert len(text.encode()) == gen["bytes"]
        return [text] if gen.get("as_list") else text
    if kind == "choices":
        return [f"c{i}" for i in range(gen["count"])]
    if kind == "nest":
        schema: dict = {"type": "string", "enum": ["x", "y"]}
        for _ in range(gen["depth"]):
            schema = {"type": "object", "properties": {"a": schema}, "required": ["a"], "additionalProperties": False}
        return schema
    if kind == "schema_pad":
        # Canonical text (sorted keys, compact) of exactly gen["bytes"] bytes: what poot measures.
        schema = {"enum": ["yes", "no"], "type": "string", "description": ""}
        base = len(json.dumps(schema, sort_keys=True, separators=(",", ":")).encode())
        schema["description"] = "x" * (gen["bytes"] - base)
        return schema
    raise ValueError(kind)


def body_for(entry: dict, model: str, endpoint: str, stream: bool, max_tokens: int = 12) -> dict:
    body = {"model": model, "max_tokens": max_tokens, "stream": stream, **entry.get("extra", {})}
    body[entry["field"]] = build_value(entry)
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = "hi"
    return body


def post(server, endpoint: str, body: dict) -> httpx.Response:
    # Serialized here with ensure_ascii so lone surrogates travel as \\udXXX escapes.
    return httpx.post(server.base_url + PATHS[endpoint], content=json.dumps(body).encode(),
                      headers={"content-type": "application/json"}, timeout=120)


def reply_texts(resp: httpx.Response, endpoint: str, stream: bool) -> list[str]:
    if not stream:
        choices = resp.json()["choices"]
        return [c["message"]["content"] if endpoint == "chat" else c["text"] for c in choices]
    parts: dict[int, str] = {}
    for line in resp.text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        assert "error" not in event, event
        for c in event.get("choices", []):
            piece = (c.get("delta") or {}).get("content") if endpoint == "chat" else c.get("text")
            parts[c["index"]] = parts.get(c["index"], "") + (piece or "")
    return [parts[i] for i in sorted(parts)]


def conforms(entry: dict, value, text: str) -> bool:
    field = entry["field"]
    if field == "guided_regex":
        return re.fullmatch(value, text) is not None
    if field == "guided_choice":
        return text in value
    if field == "guided_grammar":
        return re.fullmatch(entry["oracle"], text) is not None
    if field == "guided_json":
        try:
            jsonschema.validate(json.loads(text), value)
        except (ValueError, jsonschema.ValidationError):
            return False
        return True
    raise AssertionError(f"no oracle for {field}")


def assert_refusal(entry: dict, resp: httpx.Response) -> None:
    assert resp.status_code == 400, (entry["why"], resp.status_code, resp.text[:400])
    err = resp.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"}, err
    assert err["code"] == 400, err
    param = entry.get("param", entry["field"])
    message = err["message"].lower()
    if param is not None:
        assert err["type"] == "BadRequestError", err
        assert err["param"] == param, err
    else:  # vLLM's own request validation answered ("Bad Request", param "body.<field>...")
        assert err["type"] in ("BadRequestError", "Bad Request"), err
        assert entry["field"] in (err["param"] or "") or entry["field"] in message, err
    for needle in entry.get("needles", []):
        assert needle.lower() in message, (needle, err["message"])


def valid_follow_up(client, server) -> None:
    r = client.completions.create(model=server.model, prompt="x", max_tokens=8,
                                  extra_body={"guided_regex": "(yes|no)[0-9]"})
    assert re.fullmatch("(yes|no)[0-9]", r.choices[0].text), r.choices[0].text


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("entry", ENTRIES, ids=[f"{i:02d}-{e['field']}" for i, e in enumerate(ENTRIES)])
def test_hostile_case(server, client, entry, stream):
    value = build_value(entry)
    for endpoint in entry.get("endpoints", ["chat", "completions"]):
        body = body_for(entry, server.model, endpoint, stream, max_tokens=120 if entry["expect"] == 200 else 8)
        if entry["expect"] == 200:
            body["n"] = 2
        resp = post(server, endpoint, body)
        if entry["expect"] == 400:
            assert_refusal(entry, resp)
            continue
        assert resp.status_code == 200, (entry["why"], resp.text[:400])
        texts = reply_texts(resp, endpoint, stream)
        assert len(texts) == 2
        for text in texts:
            assert conforms(entry, value, text), (entry["why"], text[:200])
    assert server.healthy()
    if stream:  # once per case (both variants ran by now): a valid request is still correct
        valid_follow_up(client, server)


def test_invalid_utf8_body_is_a_client_error(server, client):
    """Bytes that are not UTF-8 inside the JSON body: vLLM's request parser refuses them."""
    raw = b'{"model": "%s", "prompt": "hi", "max_tokens": 4, "guided_regex": "a\xff\xfeb"}' % server.model.encode()
    resp = httpx.post(server.base_url + "/completions", content=raw,
                      headers={"content-type": "application/json"}, timeout=60)
    assert 400 <= resp.status_code < 500, resp.text[:300]
    assert server.healthy()
    valid_follow_up(client, server)
