"""Speculative decoding (vLLM's ngram proposer, which runs on CPU) with poot, and
engine-core faults that must end only their own request.

One server, started here with
``--speculative-config '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}'``,
``POOT_TEST_FAULTS=1`` (test-only fault injection, see poot_vllm/core/faults.py) and
a small ``POOT_MAX_MASK_WORK`` (so the mask-work refusal is reachable with the
tiny model's 3k-token vocabulary).  Prompts repeat the text the constraint
forces, so the ngram proposer drafts tokens the grammar must validate
(``validate_tokens``), fill masks for (accept + ``rollback``) and sometimes
reject; replies must still conform and the engine must survive.
"""

from __future__ import annotations

import json
import re
import urllib.request

import httpx
import jsonschema
import pytest

from tests.e2e.conftest import _models_dir
from tests.e2e.server import TEST_SERVER_ARGS, external_server, start_server

SPEC_CONFIG = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
MASK_WORK = 400_000  # ~130 wide states of a 3k vocabulary


@pytest.fixture(scope="module")
def spec_server(request):
    if external_server() is not None:
        pytest.skip("POOT_E2E_URL given: this test starts its own server (speculative config, fault "
                    "injection); unset POOT_E2E_URL to run it")
    model = _models_dir() / "tiny-llama-spm"
    log_dir = request.config.rootpath / ".e2e-logs"
    log_dir.mkdir(exist_ok=True)
    server = start_server(model, log_dir, [*TEST_SERVER_ARGS, "--speculative-config", json.dumps(SPEC_CONFIG)],
                          env={"POOT_TEST_FAULTS": "1", "POOT_MAX_MASK_WORK": str(MASK_WORK)})
    try:
        yield server
    finally:
        server.stop()


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.base_url + path, json={"model": server.model, **body}, timeout=120)


def texts_of(resp: httpx.Response) -> list[str]:
    return [c["text"] for c in resp.json()["choices"]]


def draft_tokens(server) -> float:
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
        metrics = r.read().decode()
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("vllm:spec_decode_num_draft_tokens_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


REPEAT = "abc-123 abc-123 abc-123 abc-123 abc-123 abc-123 abc-123 "
SCHEMA = {"type": "object", "properties": {"k": {"type": "string", "enum": ["abc", "abd"]}, "v": {"type": "integer"}},
          "required": ["k", "v"], "additionalProperties": False}
CASES = [
    # (extra body, oracle); the prompts repeat what the constraint forces
    ({"guided_regex": "(abc-123 ){2,6}(abd|abc)"}, lambda t: re.fullmatch("(abc-123 ){2,6}(abd|abc)", t)),
    ({"guided_choice": ["abc-123 abc-123", "abc-123 abd-124", "abc"]},
     lambda t: t in ("abc-123 abc-123", "abc-123 abd-124", "abc")),
    # Without recursion a grammar is a DFA; with recursion it runs on poot's own pushdown masks
    # (RuleMatcher), whose rollback the drafts exercise, with budget masks.
    ({"guided_grammar": 'root ::= ("abc-123 "){1,3} ("abc" | "abd")'}, lambda t: re.fullmatch("(abc-123 ){1,3}(abc|abd)", t)),
    ({"guided_grammar": 'root ::= "abc-123 " root | "abc" | "(" root ")"'},
     lambda t: re.fullmatch(r"(?:abc-123 |\()*abc\)*", t) and t.count("(") == t.count(")")),
    ({"guided_json": SCHEMA}, lambda t: _valid_json(t, SCHEMA)),
]


def _valid_json(text: str, schema: dict) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def test_constrained_replies_conform_under_speculation(spec_server):
    before = draft_tokens(spec_server)
    for extra, oracle in CASES:
        prompt = REPEAT if "guided_json" not in extra else '{"k": "abc", "v": 12} ' * 6
        for stream in (False, True):
            body = {"prompt": prompt, "max_tokens": 96, "n": 2, "temperature": 0.8, **extra}
            if not stream:
                r = post(spec_server, "/completions", body)
                assert r.status_code == 200, r.text[:300]
                texts = texts_of(r)
                finish = [c["finish_reason"] for c in r.json()["choices"]]
                assert finish == ["stop", "stop"], (extra, finish, texts)
            else:
                r = post(spec_server, "/completions", {**body, "stream": True})
                assert r.status_code == 200, r.text[:300]
                parts: dict[int, str] = {}
                for line in r.text.splitlines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        event = json.loads(line[6:])
                        assert "error" not in event, event
                        for c in event["choices"]:
                            parts[c["index"]] = parts.get(c["index"], "") + c["text"]
                texts = [parts[i] for i in sorted(parts)]
            assert len(texts) == 2
            for text in texts:
                assert oracle(text), (extra, text)
    assert draft_tokens(spec_server) > before, "the ngram proposer never drafted: the test proves nothing"
    assert spec_server.healthy()


@pytest.mark.parametrize("op", ["compile", "fill", "accept"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_engine_fault_ends_only_that_request(spec_server, op, stream):
    """A constraint that passes API validation but fails inside the engine core
    (forced with POOT_TEST_FAULTS) ends that request with an error -- never an
    unconstrained reply -- and the engine keeps serving."""
    pattern = f"(poot-test-fault:{op})?[a-z]{{1,8}}"
    body = {"prompt": "hello", "max_tokens": 16, "guided_regex": pattern, "stream": stream}
    r = post(spec_server, "/completions", body)
    if not stream:
        assert r.status_code >= 500 or r.status_code == 400, (r.status_code, r.text[:300])
        assert "error" in r.json()
    else:
        # Headers went out before the engine failed: the error arrives as an event.
        events = [json.loads(line[6:]) for line in r.text.splitlines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
        assert any("error" in e for e in events), r.text[:500]
        delivered = "".join(c.get("text", "") for e in events for c in e.get("choices", []))
        assert re.fullmatch("[a-z]{0,8}", delivered), delivered  # nothing unconstrained leaked
    assert spec_server.healthy()
    ok = post(spec_server, "/completions", {"prompt": REPEAT, "max_tokens": 40, "guided_regex": "(abc-123 ){1,3}"})
    assert ok.status_code == 200 and re.fullmatch("(abc-123 ){1,3}", texts_of(ok)[0]), ok.text[:300]


def test_mask_work_limit_is_a_400_before_the_engine(spec_server):
    r = post(spec_server, "/completions", {"prompt": "x", "max_tokens": 8, "guided_regex": "[^\"]{200}"})
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == "guided_regex" and "max_mask_work" in err["message"], err
    r = post(spec_server, "/completions", {"prompt": "x", "max_tokens": 8, "guided_json": {
        # minLength 40 keeps the strings expanded (a counted string costs a few states however long)
        "type": "object", "properties": {f"p{i}": {"type": "string", "minLength": 40, "maxLength": 60} for i in range(3)},
        "required": ["p0", "p1", "p2"], "additionalProperties": False}})
    assert r.json()["error"]["param"] == "guided_json", r.text[:300]
    assert r.status_code == 400 and "max_mask_work" in r.json()["error"]["message"], r.text[:300]
    assert spec_server.healthy()
    ok = post(spec_server, "/completions", {"prompt": "x", "max_tokens": 12, "guided_regex": "[a-z]{3,9}"})
    assert ok.status_code == 200 and re.fullmatch("[a-z]{3,9}", texts_of(ok)[0])


def test_mask_work_hard_stop_in_the_engine_fails_only_that_request(spec_server):
    """A constraint whose API-side estimate passes but whose real mask work does
    not: the tiny model's tokens are mostly lower-case words, so ``[a-z ]``
    states cost ~3x the estimate.  The engine stops the build at the limit and
    fails only that request (a real engine-side compile error, no test hook)."""
    pattern = "[a-z ]{250}"
    r = post(spec_server, "/completions", {"prompt": "x", "max_tokens": 8, "guided_regex": pattern})
    assert r.status_code >= 500, (r.status_code, r.text[:300])  # never an unconstrained 200
    assert "error" in r.json()
    assert spec_server.healthy()
    assert "max_mask_work" in spec_server.log_tail(400)  # the reason is in the server log
    ok = post(spec_server, "/completions", {"prompt": "x", "max_tokens": 12, "guided_regex": "[a-z]{3,9}"})
    assert ok.status_code == 200 and re.fullmatch("[a-z]{3,9}", texts_of(ok)[0])
