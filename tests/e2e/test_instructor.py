"""instructor, unchanged and on its defaults, against a real poot server.

instructor cannot be installed beside vLLM (every release pins ``jiter<0.15``
and ``rich<15``; vLLM's openai needs newer), so it runs where users run it: in
the app's own environment.  scripts/test builds ``.venv-clients`` from
tests/clients/requirements.txt; this file starts tests/clients/instructor_app.py
with that venv's Python and reads one JSON line per case.  instructor
validates each reply itself (it returns the Pydantic object or raises); the
object is validated again here, and exactly one HTTP request per case proves
no re-ask hid a failure.

Not here, on purpose: ``Mode.PARALLEL_TOOLS`` sends ``tool_choice: "auto"``
(the model may answer in prose; no backend forces a call) and ``Mode.JSON`` /
``MD_JSON`` put the schema only in the prompt (the server enforces JSON, not
the schema): both depend on the model following instructions, which a
random-weight model does not.  Nor ``create_iterable``: its wrapper's
``tasks`` field is optional, so ``{}`` is a valid reply, and instructor's
streamed reader (``IterableBase.tasks_from_chunks``) then yields ``{}`` as
one item, which fails validation whatever the server does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.server import REPO

sys.path.insert(0, str(REPO / "tests" / "clients"))
import instructor_app  # noqa: E402 - the app's models (it imports instructor only when run)



def _clients_python() -> Path:
    python = Path(os.environ.get("POOT_CLIENTS_PY", REPO / ".venv-clients" / "bin" / "python"))
    if not python.exists():
        pytest.fail(f"{python} missing: scripts/test creates the client venv (.venv-clients) with "
                    "tests/clients/requirements.txt; run it, or set POOT_CLIENTS_PY")
    return python


def _run_app(server, cases) -> dict[str, dict]:
    proc = subprocess.run([str(_clients_python()), str(REPO / "tests" / "clients" / "instructor_app.py"),
                           server.base_url, server.model, *cases],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {line["case"]: line for line in lines}


@pytest.fixture(scope="module", params=["bpe", "spm"])
def results(request):
    """Every case once per tokenizer family, in one run of the app."""
    server = request.getfixturevalue(f"{request.param}_server")
    return _run_app(server, instructor_app.CASES)


def _ok(results, case) -> dict:
    line = results[case]
    assert line["ok"], f"{case}: {line['error']}\n{line.get('traceback', '')}"
    # instructor re-asks on a validation error; one request means the first reply validated.
    assert line["requests"] == 1, f"{case}: {line['requests']} HTTP requests"
    return line["value"]


@pytest.mark.parametrize("case", instructor_app.CASES)
def test_instructor_returns_the_model(results, case):
    instructor_app.Owner.model_validate(_ok(results, case))
