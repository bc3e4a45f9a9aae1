"""One automaton build per constraint: the engine takes the API server's (core/handoff.py).

The API server builds each constraint's DFA to check it (a too-large one is
a 400 there); the engine core, another process, then needs the same DFA.  It
takes it from the server's private hand-off directory instead of building
it again.  Seen from outside: the reply still conforms, and the engine's log
says once that it takes its automata from the API server.
"""

from __future__ import annotations

import json
import time
import uuid

import jsonschema

#: Logged by the engine core on its first automaton taken (core/handoff.py).
ENGINE_TAKES = "the engine takes its automata from the API server's checks"


def engine_took_automata(server, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        text = server.log_path.read_text(errors="replace") if server.log_path else ""
        if ENGINE_TAKES in text:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def test_the_engine_uses_the_api_servers_automaton(client, server):
    # A schema no other test sends (a fresh property name), with a counted 4000-character field.
    name = "note_" + uuid.uuid4().hex[:8]
    schema = {"type": "object", "properties": {name: {"type": "string", "maxLength": 4000},
                                               "n": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": [name, "n"], "additionalProperties": False}
    resp = client.chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "hi"}], max_tokens=120, n=2,
        extra_body={"guided_json": schema})
    for choice in resp.choices:
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), schema)
    if server.log_path is not None:  # a server this session started: its log is ours to read
        assert engine_took_automata(server), server.log_tail(80)
