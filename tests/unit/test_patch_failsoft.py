"""A vLLM whose seams moved: vLLM still imports and runs, poot logs and refuses.

Each case runs in a subprocess against a fake ``vllm`` package tree written
to a temporary folder (first on ``PYTHONPATH``), so the real vLLM in this
process is untouched.  The fake tree has the modules poot's hooks trigger on,
with the patched callables renamed or reshaped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FAKE_VLLM = {
    "vllm/__init__.py": '__version__ = "0.99.0"\n',
    # the validation seam renamed
    "vllm/sampling_params.py": textwrap.dedent("""
        class SamplingParams:
            def _check_structured_outputs(self, model_config, config, tokenizer):
                return "vllm's own check ran"
    """),
    # the request seam reshaped: a new leading parameter
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/openai/__init__.py": "",
    "vllm/entrypoints/openai/chat_completion/__init__.py": "",
    "vllm/entrypoints/openai/chat_completion/protocol.py": textwrap.dedent("""
        class ChatCompletionRequest:
            model_extra = {}
            def extract_structured_outputs(context, self):
                return None
            def to_sampling_params(self, max_tokens, default_sampling_params=None):
                return "vllm's sampling params"
    """),
    "vllm/entrypoints/openai/completion/__init__.py": "",
    "vllm/entrypoints/openai/completion/protocol.py": textwrap.dedent("""
        class CompletionRequest:
            model_extra = {}
            def extract_structured_outputs(self):
                return None
            def to_sampling_params(self, max_tokens, default_sampling_params=None):
                return "vllm's sampling params"
    """),
}

CHILD = textwrap.dedent("""
    import json, logging, sys
    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    logging.getLogger("vllm.poot").addHandler(Keep())
    from poot_vllm.adapter.plugin import register
    register()                              # vLLM calls the plugin first ...
    import vllm.sampling_params             # ... then imports the modules poot patches
    import vllm.entrypoints.openai.chat_completion.protocol as chat
    import vllm.entrypoints.openai.completion.protocol as completion
    from poot_vllm.adapter.patches import hook_status
    from poot_vllm.adapter.server_state import check_working
    from poot_vllm.core.errors import PootError
    out = {"status": hook_status(), "logs": records}
    out["vllm_still_works"] = vllm.sampling_params.SamplingParams()._check_structured_outputs(None, None, None)
    try:
        check_working()
        out["refusal"] = None
    except PootError as exc:
        out["refusal"] = str(exc)
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def moved_seams(tmp_path_factory):
    root = tmp_path_factory.mktemp("fake-vllm")
    for rel, text in FAKE_VLLM.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{REPO}", POOT_DISABLE_HOOKS="")
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_vllm_still_imports_and_runs(moved_seams):
    assert moved_seams["vllm_still_works"] == "vllm's own check ran"


def test_each_moved_seam_is_a_failed_patch_and_the_rest_apply(moved_seams):
    status = moved_seams["status"]
    assert status["sampling_validation"] == "failed", status
    assert status["request_fields"] == "failed", status  # reshaped: (context, self)
    assert status["budget_admission"] == "applied", status  # its seams kept their shape


def test_the_log_names_the_vllm_version_and_the_seam(moved_seams):
    errors = [m for m in moved_seams["logs"] if "could not patch" in m]
    assert any("0.99.0" in m and "_validate_structured_outputs" in m for m in errors), errors
    assert any("extract_structured_outputs" in m and "poot expects (self" in m for m in errors), errors
    warnings = [m for m in moved_seams["logs"] if "was checked against vLLM" in m]
    assert warnings, moved_seams["logs"]


def test_poot_refuses_loudly_instead_of_serving_unconstrained(moved_seams):
    refusal = moved_seams["refusal"]
    assert refusal and "0.99.0" in refusal and "sampling_validation" in refusal and "request_fields" in refusal


def test_bad_setting_stops_the_plugin_at_start(monkeypatch):
    from poot_vllm.adapter.plugin import register
    from poot_vllm.core import limits

    monkeypatch.setenv("POOT_MAX_REGEX_BYTES", "4k")
    with pytest.raises(ValueError, match="POOT_MAX_REGEX_BYTES must be an integer, got '4k'"):
        register()
    monkeypatch.setenv("POOT_MAX_REGEX_BYTES", "0")
    with pytest.raises(ValueError, match="positive"):
        register()
    monkeypatch.delenv("POOT_MAX_REGEX_BYTES")
    monkeypatch.setenv("POOT_BUDGET_MASKS", "maybe")
    with pytest.raises(ValueError, match="POOT_BUDGET_MASKS"):
        register()
    monkeypatch.delenv("POOT_BUDGET_MASKS")
    limits.server_limits.cache_clear()


def test_wrappers_pass_through_arguments_vllm_adds_later():
    """A wrapper takes *args/**kwargs after the parameters it reads, and hands them on."""
    from poot_vllm.adapter.patches import SeamChanged, original, wrap

    class Seam:
        def method(self, a, b, new_in_next_vllm=None):
            return (a, b, new_in_next_vllm)

    def make(orig):
        def method(self, a, *args, **kwargs):
            return orig(self, a, *args, **kwargs)
        return method

    assert wrap(Seam, "method", make, expects=("self", "a"))
    assert Seam().method(1, 2, new_in_next_vllm=3) == (1, 2, 3)
    assert original(Seam.method).__name__ == "method"

    class Reshaped:
        def method(self, b, a):
            return None

    with pytest.raises(SeamChanged, match=r"takes \(self, b, a\), poot expects \(self, a, \.\.\.\)"):
        wrap(Reshaped, "method", make, expects=("self", "a"))
    with pytest.raises(SeamChanged, match="does not exist"):
        wrap(Reshaped, "gone", make, expects=("self",))


@pytest.mark.parametrize("value, default, on", [
    (None, True, True), ("", True, True), (None, False, False), ("", False, False),
    ("0", True, False), ("false", True, False), ("False", True, False), ("off", True, False),
    ("1", False, True), ("on", False, True), ("yes", False, True),
])
def test_every_switch_reads_one_spelling(monkeypatch, value, default, on):
    # POOT_DISABLE_HOOKS=off used to disable the hooks (its off-list lacked "off"); one helper now
    from poot_vllm.adapter.patches import hooks_disabled
    from poot_vllm.core import faults, handoff
    from poot_vllm.core.limits import budget_masks_enabled, env_switch

    from poot_vllm.core.matchers.pushdown import _own_masks

    for name in ("POOT_BUDGET_MASKS", "POOT_HANDOFF", "POOT_DISABLE_HOOKS", "POOT_TEST_FAULTS", "POOT_GRAMMAR_MASKS"):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("POOT_HANDOFF_DIR", "handoff-dir-name")
    assert env_switch("POOT_BUDGET_MASKS", default) is on
    if default:  # the switches that default to on
        assert budget_masks_enabled() is on and handoff.enabled() is on and _own_masks() is on
    else:
        assert hooks_disabled() is on and faults.enabled() is on
