"""Hostile-but-small requests through every field, against a real server, while /health is probed.

Catastrophic-backtracking inputs, tool floods and heavy-but-admissible schemas.

poot never runs a backtracking regex engine over user input: patterns and
values are matched on its own automata, linear in their length.  Each case
below is a classic ReDoS family with a near-miss value that costs Python's
``re`` about 2**40 steps (an 84-byte schema of this shape froze a live
server's ``/health`` for 18.5 s at 29 characters; each one more doubles it).
While the request is answered, a thread probes ``/health``.

The bounds are generous on purpose (this is a harness, not a timing test):
the failure they catch is exponential, hours rather than seconds.
"""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import jsonschema
import pytest

NEAR_MISS = "a" * 40 + "!"
#: A hostile request must be answered within this (the regression takes hours).
ANSWER_BOUND_S = 30.0
#: Every /health probe during it must answer within this (the regression froze it for the whole request).
HEALTH_BOUND_S = 5.0

STRING_REDOS = {"type": "string", "pattern": "^(a+)+$", "enum": [NEAR_MISS, "aaaa"]}
OBJECT_REDOS = {
    "type": "object",
    "properties": {"w": {"type": "string", "pattern": "^(\\w+\\s?)*$", "enum": ["hello world", "a " * 20 + "!"]},
                   "k": {"type": "string", "pattern": "^(a|aa)+$", "enum": ["aaa", NEAR_MISS]}},
    "required": ["k"],
    "additionalProperties": False,
}

#: (id, request fields, expected status, oracle for the reply text or None)
CASES = [
    ("regex-nested-plus", {"guided_regex": "(a+)+b"}, 200, lambda t: re.fullmatch("(a+)+b", t)),
    ("regex-alternation", {"guided_regex": "(a|a)*b"}, 200, lambda t: re.fullmatch("(a|a)*b", t)),
    ("regex-word-space", {"guided_regex": "(\\w+\\s?)*x"}, 200, lambda t: re.fullmatch("(\\w+\\s?)*x", t)),
    ("regex-dot-star-chain", {"guided_regex": "(.*a){12}"}, 200, lambda t: re.fullmatch("(.*a){12}", t)),
    ("json-enum-pattern", {"guided_json": STRING_REDOS}, 200, lambda t: json.loads(t) == "aaaa"),
    ("json-object-enum-pattern", {"guided_json": OBJECT_REDOS}, 200,
     lambda t: jsonschema.validate(json.loads(t), OBJECT_REDOS) is None),
    ("json-only-near-miss", {"guided_json": {"type": "string", "pattern": "^(a+)+$", "const": NEAR_MISS}}, 400, None),
    ("response-format-enum-pattern",
     {"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": STRING_REDOS}}}, 200,
     lambda t: json.loads(t) == "aaaa"),
    ("structured-outputs-enum-pattern", {"structured_outputs": {"json": STRING_REDOS}}, 200,
     lambda t: json.loads(t) == "aaaa"),
    ("grammar-nested-repetition", {"guided_grammar": 'root ::= ("a" | "a")* "b"'}, 200,
     lambda t: re.fullmatch("a*b", t)),
    ("choice-near-miss", {"guided_choice": [NEAR_MISS, "a" * 41]}, 200, lambda t: t in (NEAR_MISS, "a" * 41)),
]


class HealthProbe:
    """Probes ``/health`` in a thread until stopped; keeps the slowest answer."""

    def __init__(self, url: str) -> None:
        self.url = url + "/health"
        self.slowest = 0.0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=HEALTH_BOUND_S * 4) as http:
            while not self._stop.is_set():
                start = time.monotonic()
                try:
                    ok = http.get(self.url).status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.slowest = max(self.slowest, time.monotonic() - start)
                self.failures += not ok
                self._stop.wait(0.05)

    def __enter__(self) -> "HealthProbe":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def send_probed(server, path: str, body: dict) -> tuple[httpx.Response, float, HealthProbe]:
    with HealthProbe(server.url) as probe:
        start = time.monotonic()
        resp = httpx.post(server.base_url + path, json=body, timeout=ANSWER_BOUND_S * 4)
        elapsed = time.monotonic() - start
    return resp, elapsed, probe


@pytest.mark.parametrize("case_id,fields,status,oracle", CASES, ids=[c[0] for c in CASES])
def test_backtracking_inputs_are_answered_quickly(server, case_id, fields, status, oracle):
    body = {"model": server.model, "prompt": "x", "max_tokens": 60, "n": 2, **fields}
    resp, elapsed, probe = send_probed(server, "/completions", body)
    assert resp.status_code == status, (case_id, resp.text[:400])
    assert elapsed < ANSWER_BOUND_S, (case_id, elapsed)
    assert probe.failures == 0 and probe.slowest < HEALTH_BOUND_S, (case_id, probe.slowest, probe.failures)
    if status == 400:
        err = resp.json()["error"]
        assert err["param"] in fields or err["param"].split(".")[0] in fields, err
        assert "enum" in err["message"] or "const" in err["message"], err
        return
    for choice in resp.json()["choices"]:
        assert choice["finish_reason"] == "stop", choice
        assert oracle(choice["text"]), (case_id, choice["text"][:200])
    assert server.healthy()


def test_backtracking_pattern_in_a_forced_tool_call(bpe_server):
    """A tool's parameters go through the same compiler: the same families, a forced call."""
    schema = {"type": "object", "properties": {"code": STRING_REDOS}, "required": ["code"],
              "additionalProperties": False}
    body = {"model": bpe_server.model, "messages": [{"role": "user", "content": "go"}], "max_tokens": 80,
            "tools": [{"type": "function", "function": {"name": "lookup", "parameters": schema}}],
            "tool_choice": "required"}
    resp, elapsed, probe = send_probed(bpe_server, "/chat/completions", body)
    assert resp.status_code == 200, resp.text[:400]
    assert elapsed < ANSWER_BOUND_S and probe.failures == 0 and probe.slowest < HEALTH_BOUND_S
    calls = resp.json()["choices"][0]["message"]["tool_calls"]
    assert calls and all(json.loads(c["function"]["arguments"]) == {"code": "aaaa"} for c in calls), calls


def test_tool_flood_is_refused_fast(bpe_server):
    """400 small tools with a forced call: a 400 at once, the loop stays free.

    On the tiny model the tools' text alone passes the 2,048-token context,
    which vLLM refuses; poot's own bound on the forced-call regex (checked as
    each tool is added) is covered by tests/unit/test_tool_forcing_bounds.py.
    Either way the refusal must be fast and must not stall /health.
    """
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": {
        "type": "object", "properties": {"q": {"type": "string", "maxLength": 20}, "k": {"type": "integer"}},
        "required": ["q"], "additionalProperties": False}}} for i in range(400)]
    body = {"model": bpe_server.model, "messages": [{"role": "user", "content": "go"}], "max_tokens": 40,
            "tools": tools, "tool_choice": "required"}
    resp, elapsed, probe = send_probed(bpe_server, "/chat/completions", body)
    assert resp.status_code == 400, resp.text[:400]
    assert elapsed < ANSWER_BOUND_S and probe.failures == 0 and probe.slowest < HEALTH_BOUND_S, (elapsed, probe.slowest)


def test_heavy_admissible_schemas_keep_health_answering(server):
    """Distinct schemas near the mask-work bound, several at once: each served, /health answers meanwhile."""
    import concurrent.futures

    def schema(i: int) -> dict:
        return {"type": "object", "description": f"variant {i}",
                "properties": {"note": {"type": "string", "maxLength": 40}, "n": {"type": "integer"}},
                "required": ["note", "n"], "additionalProperties": False}

    def one(i: int) -> httpx.Response:
        body = {"model": server.model, "prompt": "x", "max_tokens": 80, "guided_json": schema(i)}
        return httpx.post(server.base_url + "/completions", json=body, timeout=ANSWER_BOUND_S * 4)

    with HealthProbe(server.url) as probe, concurrent.futures.ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(one, range(8)))
    assert probe.failures == 0 and probe.slowest < HEALTH_BOUND_S, probe.slowest
    for i, resp in enumerate(responses):
        assert resp.status_code == 200, resp.text[:300]
        for choice in resp.json()["choices"]:
            jsonschema.validate(json.loads(choice["text"]), schema(i))

