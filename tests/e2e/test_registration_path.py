"""The server uses the registration path this run expects (docs/fork.md).

CI runs the e2e suite twice: against stock vLLM with poot's runtime hooks,
and against a patched copy (``scripts/build-patched-vllm``) with
``POOT_DISABLE_HOOKS=1``.  Each poot process logs once which path it uses;
this checks the engine core's line, so a fork run that silently fell back to
runtime hooks (or a stock run that found seams) fails here.
"""

from __future__ import annotations

import re

import pytest


def _expected_path() -> str:
    from poot_vllm.adapter import native
    from poot_vllm.adapter.patches import hooks_disabled

    # The tests and the server import the same vLLM (same PYTHONPATH).
    if native.backend_registry() is None:
        if hooks_disabled():
            pytest.skip("stock vLLM with POOT_DISABLE_HOOKS=1 has no poot backend: unset POOT_DISABLE_HOOKS, "
                        "or run against a patched vLLM (scripts/test-fork)")
        return "stock vLLM: runtime hooks"
    return "patched vLLM: native seams only" if hooks_disabled() else "patched vLLM: native seams + runtime hooks"


def test_engine_core_logs_the_expected_path(server):
    if server.log_path is None:
        pytest.skip("POOT_E2E_URL given: the server's log is not readable here; unset POOT_E2E_URL to run this")
    expected = _expected_path()
    lines = [line for line in server.log_path.read_text(errors="replace").splitlines() if "poot-vllm: " in line]
    engine = [line for line in lines if re.search(r"EngineCore", line)]
    assert engine, "no 'poot-vllm:' line from the engine core:\n" + "\n".join(lines[:5])
    assert all(expected in line for line in engine), (expected, engine)
