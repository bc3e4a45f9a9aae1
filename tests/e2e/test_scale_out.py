"""vLLM's scale-out API server (``--api-server-count 2``) keeps every poot guarantee.

With N API-server processes, vLLM parses the command line in the parent and
serves from N children that never see the parser.  Before poot learned the
backend from each process's engine config (``adapter/patches/app_state.py``), every
child answered ``guided_regex`` with unconstrained text and accepted an
invalid regex with a 200.  Requests here go to the shared port, where the
kernel spreads connections over both children; each test sends enough
separate requests that both serve some.
"""

from __future__ import annotations

import json
import re

import httpx
import jsonschema
import pytest

from tests.e2e.conftest import _server
from tests.e2e.test_hostile import reply_texts

#: Separate connections per check: with 2 children, the chance that one child
#: never gets a request is 2 * 2**-12.
ROUNDS = 12


@pytest.fixture(scope="module")
def scale_out_server(request):
    yield from _server(request, "tiny-llama-spm", "sentencepiece", ("--api-server-count", "2"))


def _post(server, path: str, body: dict, headers: dict | None = None) -> httpx.Response:
    # A fresh connection per request, so the kernel's SO_REUSEPORT balancing spreads them.
    with httpx.Client(timeout=120) as http:
        return http.post(server.base_url + path, json=body, headers=headers)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_guided_regex_is_enforced_by_every_api_server(scale_out_server, stream):
    pattern = "(yes|no)-[0-9]{3}"
    for i in range(ROUNDS):
        endpoint = "chat" if i % 2 else "completions"
        body = {"model": scale_out_server.model, "max_tokens": 30, "stream": stream, "guided_regex": pattern}
        if endpoint == "chat":
            body["messages"] = [{"role": "user", "content": "hi"}]
            path = "/chat/completions"
        else:
            body["prompt"] = "hi"
            path = "/completions"
        resp = _post(scale_out_server, path, body)
        assert resp.status_code == 200, resp.text[:300]
        for text in reply_texts(resp, endpoint, stream):
            assert re.fullmatch(pattern, text), (i, text[:120])


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_invalid_regex_is_a_400_from_every_api_server(scale_out_server, stream):
    for i in range(ROUNDS):
        body = {"model": scale_out_server.model, "prompt": "hi", "max_tokens": 5, "stream": stream,
                "guided_regex": "(a"}
        resp = _post(scale_out_server, "/completions", body)
        assert resp.status_code == 400, (i, resp.text[:300])
        assert resp.json()["error"]["param"] == "guided_regex"


def test_schema_and_backtracking_input_on_every_api_server(scale_out_server):
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a+)+$",
                                                        "enum": ["a" * 40 + "!", "aaaa"]},
                                               "n": {"type": "integer", "minimum": 1, "maximum": 9}},
              "required": ["code", "n"], "additionalProperties": False}
    for i in range(ROUNDS // 2):
        body = {"model": scale_out_server.model, "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 60,
                "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}
        resp = _post(scale_out_server, "/chat/completions", body)
        assert resp.status_code == 200, resp.text[:300]
        value = json.loads(resp.json()["choices"][0]["message"]["content"])
        jsonschema.validate(value, schema)
    assert scale_out_server.healthy()


#: Eight free-form fields: a grammar with the free-form value as one rule (the DFA passes the
#: budget), compiled by each API server's check and again by the engine.
FREE_FORM = {"type": "object", "required": ["id"], "additionalProperties": False,
             "properties": {"id": {"type": "string", "maxLength": 12}, **{f"f{i}": {} for i in range(8)}}}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_free_form_grammar_on_every_api_server(scale_out_server, stream):
    for _ in range(ROUNDS // 2):
        body = {"model": scale_out_server.model, "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 200, "n": 2, "stream": stream,
                "response_format": {"type": "json_schema", "json_schema": {"name": "f", "schema": FREE_FORM}}}
        resp = _post(scale_out_server, "/chat/completions", body)
        assert resp.status_code == 200, resp.text[:300]
        texts = reply_texts(resp, "chat", stream)
        assert len(texts) == 2
        for text in texts:
            jsonschema.validate(json.loads(text), FREE_FORM)
    assert scale_out_server.healthy()


@pytest.fixture(scope="module")
def data_parallel_server(request):
    """Two engine cores behind one API server (vLLM's --data-parallel-size, CPU build).  Two engines
    compiling their models on a 2-core box took just over 240 s once when the box was busy: more time
    to start (a healthy server is still required).  Compiled, not eager: the eager warm-up request
    (tests/e2e/server.py) would reach only one of the two engines."""
    yield from _server(request, "tiny-llama-spm", "sentencepiece", ("--data-parallel-size", "2"), timeout=480.0,
                       eager=False)


def test_data_parallel_engines_each_enforce_and_refuse(data_parallel_server):
    """Requests go to each engine core (vLLM's X-data-parallel-rank header); each builds poot's backend."""
    pattern = "(yes|no)-[0-9]{3}"
    for i in range(ROUNDS // 2):
        body = {"model": data_parallel_server.model, "prompt": f"hi {i}", "max_tokens": 30, "n": 2,
                "guided_regex": pattern}
        resp = _post(data_parallel_server, "/completions", body, headers={"X-data-parallel-rank": str(i % 2)})
        assert resp.status_code == 200, resp.text[:300]
        for choice in resp.json()["choices"]:
            assert re.fullmatch(pattern, choice["text"]), choice["text"][:120]
    resp = _post(data_parallel_server, "/completions", {"model": data_parallel_server.model, "prompt": "hi",
                                                        "max_tokens": 5, "guided_regex": "(a"})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "guided_regex", resp.text[:300]
    log = data_parallel_server.log_path.read_text(errors="replace") if data_parallel_server.log_path else ""
    # both engine cores built poot's backend (one line each)
    assert log.count("poot backend ready") >= 2, log[-2000:]


def test_the_engine_takes_the_automata_the_api_servers_checked(scale_out_server):
    """The hand-off directory is made before the children are spawned, so all of them share it."""
    from tests.e2e.test_handoff import engine_took_automata

    pattern = "(left|right)-[0-9]{2}"
    for i in range(4):
        resp = _post(scale_out_server, "/completions", {"model": scale_out_server.model, "prompt": f"go {i}",
                                                        "max_tokens": 20, "guided_regex": pattern})
        assert resp.status_code == 200, resp.text[:300]
        assert re.fullmatch(pattern, resp.json()["choices"][0]["text"])
    assert engine_took_automata(scale_out_server), scale_out_server.log_tail(80)
