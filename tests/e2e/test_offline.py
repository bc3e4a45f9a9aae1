"""Offline ``LLM(...)`` with ``structured_outputs_config={"backend": "poot"}``: constrained, never dropped.

No API server and no CLI parser here.  ``LLM`` builds its config before vLLM
loads plugins, so the script calls ``poot_vllm.register()`` first (README,
"Offline use"); the config names the backend and
``SamplingParams.structured_outputs`` carries the constraint.  Runs in a subprocess (a whole engine in this test process
would outlive the test).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.e2e.server import REPO

CHILD = textwrap.dedent("""
    import json, sys
    import poot_vllm
    poot_vllm.register()
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    llm = LLM(model=sys.argv[1], structured_outputs_config={"backend": "poot"},
              kv_cache_memory_bytes=64 * 1024 * 1024, max_model_len=1024, seed=0)
    out = {}
    params = SamplingParams(max_tokens=24, n=3, structured_outputs=StructuredOutputsParams(regex="(yes|no)-[0-9]{3}"))
    out["regex"] = [c.text for c in llm.generate(["Answer:"], params)[0].outputs]
    params = SamplingParams(max_tokens=40, structured_outputs=StructuredOutputsParams(
        json={"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}},
              "required": ["n"], "additionalProperties": False}))
    out["json"] = llm.generate(["JSON:"], params)[0].outputs[0].text
    try:
        llm.generate(["x"], SamplingParams(max_tokens=4, structured_outputs=StructuredOutputsParams(regex="(a")))
        out["bad_regex"] = None
    except Exception as exc:
        out["bad_regex"] = f"{type(exc).__name__}: {exc}"
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def offline_result():
    model = Path(os.environ.get("POOT_MODELS_DIR", REPO / ".models")) / "tiny-llama-spm"
    env = dict(os.environ, VLLM_HOST_IP="127.0.0.1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", CHILD, str(model)], capture_output=True, text=True,
                          env=env, timeout=600, cwd=REPO)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_offline_regex_is_enforced_for_every_choice(offline_result):
    assert len(offline_result["regex"]) == 3
    for text in offline_result["regex"]:
        assert re.fullmatch("(yes|no)-[0-9]{3}", text), text


def test_offline_json_schema_is_enforced(offline_result):
    value = json.loads(offline_result["json"])
    assert set(value) == {"n"} and 1 <= value["n"] <= 9


def test_offline_invalid_regex_is_refused_not_ignored(offline_result):
    refusal = offline_result["bad_regex"]
    assert refusal is not None and "regex" in refusal.lower(), refusal
