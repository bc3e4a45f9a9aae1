"""Bad or oversized constraints are HTTP 400s in vLLM's OpenAI error shape,
for streaming and non-streaming requests, and the server stays healthy."""

from __future__ import annotations

import re

import httpx
import pytest

CASES = [
    # (field, value, substrings the message must contain)
    ("guided_regex", "a" * 4097, ["max_regex_bytes", "4096"]),
    ("guided_regex", "(a|b)*a(a|b){17}", ["max_automaton_bytes", "'(a|b)*a(a|b){17}'", "smaller counts"]),
    ("guided_regex", "(a)\\1", ["backreference"]),
    ("guided_regex", "(?>a)", ["atomic group"]),
    ("guided_regex", "[a-", ["guided_regex"]),
    ("guided_regex", 42, ["string"]),
    ("guided_choice", [], ["non-empty"]),
    ("guided_choice", ["a", 3], ["string"]),
    ("guided_choice", "yes", ["list"]),
]


def _post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, timeout=60)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("field,value,needles", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_constraint_is_400(server, field, value, needles, stream):
    for path, body in (
        ("/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/completions", {"prompt": "hi"}),
    ):
        r = _post(server, path, {"model": server.model, "max_tokens": 8, "stream": stream, field: value, **body})
        assert r.status_code == 400, (path, r.status_code, r.text[:500])
        err = r.json()["error"]
        assert err["code"] == 400 and err["type"] == "BadRequestError", err
        assert err["param"] == field, err
        for needle in needles:
            assert needle.lower() in err["message"].lower(), err["message"]
    assert server.healthy()


def test_budget_refusal_is_a_400_and_small_variant_works(server):
    r = _post(server, "/completions", {"model": server.model, "prompt": "x", "max_tokens": 8,
                                       "guided_regex": "(a|b)*a(a|b){17}"})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "guided_regex", r.text
    r = _post(server, "/completions", {"model": server.model, "prompt": "x", "max_tokens": 30,
                                       "guided_regex": "(a|b)*a(a|b){3}"})
    assert r.status_code == 200, r.text
    assert re.fullmatch("(a|b)*a(a|b){3}", r.json()["choices"][0]["text"])


def test_valid_request_right_after_refusals(client, server):
    for _ in range(3):
        _post(server, "/completions", {"model": server.model, "prompt": "x", "guided_regex": "(?<=a)b"})
    r = client.completions.create(model=server.model, prompt="x", max_tokens=10, extra_body={"guided_choice": ["ok"]})
    assert r.choices[0].text == "ok"
    assert server.healthy()


def test_other_backend_per_request_is_refused(server):
    r = _post(server, "/completions", {"model": server.model, "prompt": "x", "guided_regex": "a",
                                       "guided_decoding_backend": "xgrammar"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "guided_decoding_backend"
