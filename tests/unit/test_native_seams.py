"""The fork path: patches/ apply, and poot registers through the native seams.

Against the installed (stock) vLLM: no seam is detected and poot uses its
runtime hooks.  Against a patched copy built by ``scripts/build-patched-vllm``
(imported in a subprocess, PYTHONPATH first, runtime hooks disabled): every
seam is detected, nothing is monkeypatched, and the behaviour a user sees
(config accepts ``poot``, 400s naming the field, ``guided_*`` mapping, the
engine building poot's backend with the request's budget) comes from vLLM's
own code calling poot.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import vllm  # a required test dependency: failing to import it fails these tests, never skips them

from poot_vllm.adapter.cli import installed_vllm_version

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
#: scripts/check-patches --release: the package index could not be reached (nothing checked).
EXIT_UNREACHABLE = 3
INSTALLED_MINOR = ".".join((installed_vllm_version() or "unknown").split(".")[:2])
#: Series for vLLM releases other than the installed one: checked against the release's
#: wheel from the package index (downloaded once per machine, cached).
OTHER_SERIES = sorted(d.name[len("vllm-"):] for d in (REPO / "patches").glob("vllm-*")
                      if d.name != f"vllm-{INSTALLED_MINOR}")


def _run(*cmd: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PY": sys.executable, **(env or {})})


def _installed_vllm_dir() -> Path:
    return Path(vllm.__file__).parent


def _series_for_installed() -> Path:
    series = REPO / "patches" / f"vllm-{INSTALLED_MINOR}"
    if not series.is_dir():
        have = sorted(d.name for d in (REPO / "patches").glob("vllm-*"))
        pytest.fail(f"no patch series for the installed vLLM {installed_vllm_version()} (have {have}): "
                    "install a supported vLLM (scripts/test does) or add patches/vllm-X.Y (patches/README.md)")
    return series


# --- the series --------------------------------------------------------------------------------


def test_every_series_has_numbered_patches_with_a_header():
    series = sorted((REPO / "patches").glob("vllm-*"))
    assert series, "patches/vllm-X.Y/ missing"
    for directory in series:
        patches = sorted(directory.glob("*.patch"))
        assert [p.name[:5] for p in patches] == [f"{i:04d}-" for i in range(1, len(patches) + 1)]
        for patch in patches:
            text = patch.read_text()
            header = text[: text.index("\ndiff --git ")]
            assert "Subject: [PATCH" in header and len(header.splitlines()) > 10, patch


def _added_lines(directory: Path) -> dict[str, list[str]]:
    """file -> the lines a series adds to it."""
    added: dict[str, list[str]] = {}
    for patch in sorted(directory.glob("*.patch")):
        current = None
        for line in patch.read_text().splitlines():
            if line.startswith("+++ b/"):
                current = line[6:]
            elif line.startswith("diff --git "):
                current = None
            elif current and line.startswith("+"):
                added.setdefault(current, []).append(line[1:])
    return added


def _added_definitions(directory: Path) -> dict[str, set[str]]:
    """file -> names of the functions and classes a series adds to it."""
    definitions = {path: {m.group(1) for line in lines if (m := re.match(r"\s*(?:async )?(?:def|class) (\w+)", line))}
                   for path, lines in _added_lines(directory).items()}
    return {path: names for path, names in definitions.items() if names}


#: Names poot's seam detection and registration use (adapter/native.py, each hook's
#: seam_present()), by the module that must define or import them.
DETECTED_NAMES = {
    "vllm/config/structured_outputs.py": ("register_structured_output_backend", "get_structured_output_backend"),
    "vllm/entrypoints/generate/base/protocol.py": (
        "register_structured_outputs_hook", "apply_structured_outputs_hooks", "get_structured_outputs_server_backend",
        "register_tool_choice_hook", "tool_choice_forced_by_backend", "get_server_tool_call_parser",
        "register_final_output_hook", "apply_final_output_hooks",
        "register_server_start_hook", "run_server_start_hooks", "register_sampling_params_hook",
        "apply_sampling_params_hooks"),
    "vllm/entrypoints/launchers/api_server/app_state.py": ("run_server_start_hooks",),
    "vllm/entrypoints/openai/chat_completion/protocol.py": ("apply_sampling_params_hooks",),
    "vllm/entrypoints/openai/completion/protocol.py": ("apply_sampling_params_hooks",),
    "vllm/parser/mistral.py": ("_first_arguments_chunk",),
    "vllm/parser/abstract_parser.py": ("tool_choice_forced_by_backend",),
    "vllm/entrypoints/openai/chat_completion/serving.py": ("apply_final_output_hooks",),
    "vllm/entrypoints/openai/completion/serving.py": ("apply_final_output_hooks",),
}


def test_every_series_adds_the_same_seams():
    """The series for each release carry the same change (context differs): same definitions added,
    and every name poot detects, in every series -- the release not installed here included."""
    series = sorted((REPO / "patches").glob("vllm-*"))
    definitions = {d.name: _added_definitions(d) for d in series}
    first = series[0].name
    for name, added in definitions.items():
        assert added == definitions[first], (name, first)
    for directory in series:
        added = _added_lines(directory)
        for path, names in DETECTED_NAMES.items():
            for name in names:
                assert any(re.search(rf"\b{name}\b", line) for line in added.get(path, ())), (
                    directory.name, path, name)


def test_series_applies_to_the_installed_vllm():
    _series_for_installed()
    result = _run(str(SCRIPTS / "check-patches"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK: the series applies cleanly" in result.stdout


@pytest.mark.parametrize("minor", OTHER_SERIES)
def test_series_applies_to_its_vllm_release(minor):
    """patches/vllm-X.Y against the vllm X.Y.* release itself (its wheel, fetched once)."""
    result = _run(str(SCRIPTS / "check-patches"), "--release", minor)
    if result.returncode == EXIT_UNREACHABLE:
        reason = [line for line in result.stderr.splitlines() if line.startswith("UNREACHABLE:")]
        pytest.skip(reason[-1] if reason else result.stderr[-500:])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"vLLM release: vllm-{minor}." in result.stdout
    assert "OK: the series applies cleanly" in result.stdout


#: pip settings under which the package index cannot be reached (connection refused at once).
OFFLINE_PIP = {"PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": "",
               "PIP_INDEX_URL": "http://127.0.0.1:9/simple"}


def test_release_check_without_the_index_says_nothing_was_checked(tmp_path):
    result = _run(str(SCRIPTS / "check-patches"), "--release", INSTALLED_MINOR,
                  env={**OFFLINE_PIP, "POOT_CACHE_DIR": str(tmp_path)})
    assert result.returncode == EXIT_UNREACHABLE, result.stdout + result.stderr
    assert "UNREACHABLE: cannot download vllm==" in result.stderr
    assert str(tmp_path / "wheels") in result.stderr  # where to put a wheel to check offline
    assert "OK:" not in result.stdout and "FAILED" not in result.stdout


def test_release_check_uses_a_cached_wheel_offline(tmp_path):
    """A wheel in the cache is used as is (no index needed); only the touched files are unpacked."""
    series = _series_for_installed()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    touched = {line[6:] for p in series.glob("*.patch") for line in p.read_text().splitlines()
               if line.startswith("+++ b/")}
    with zipfile.ZipFile(wheels / f"vllm-{INSTALLED_MINOR}.99-cp38-abi3-manylinux_2_28_x86_64.whl", "w") as whl:
        for rel in touched:
            whl.write(_installed_vllm_dir().parent / rel, rel)
    result = _run(str(SCRIPTS / "check-patches"), "--release", INSTALLED_MINOR,
                  env={**OFFLINE_PIP, "POOT_CACHE_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"vLLM release: vllm-{INSTALLED_MINOR}.99-" in result.stdout
    assert "OK: the series applies cleanly" in result.stdout


def test_check_patches_reports_a_moved_seam(tmp_path):
    """A vLLM whose code moved under a hunk fails the check (nothing is modified)."""
    series = _series_for_installed()
    fake = tmp_path / "vllm"
    touched = {line[6:] for p in series.glob("*.patch") for line in p.read_text().splitlines()
               if line.startswith("+++ b/")}
    for rel in touched:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(_installed_vllm_dir().parent / rel, tmp_path / rel)
    manager = tmp_path / "vllm/v1/structured_output/__init__.py"
    manager.write_text(manager.read_text().replace('if backend == "xgrammar":', 'if backend in ("xgrammar",):'))
    result = _run(str(SCRIPTS / "check-patches"), "--vllm", str(fake), "--series", str(series))
    assert result.returncode == 1
    assert "FAILED  0001-" in result.stdout and "ok      0002-" in result.stdout


# --- stock vLLM: runtime hooks -----------------------------------------------------------------


def test_stock_vllm_has_no_native_seam():
    from poot_vllm.adapter import native
    from poot_vllm.adapter.patches import (app_state, budget_admission, config_backend, engine_manager,
                                           leading_space, mistral_streaming, request_fields, sampling_validation,
                                           tool_responses)

    if native.backend_registry() is not None:
        pytest.skip("the installed vLLM carries patches/ (a fork): this test checks a stock vLLM")
    assert native.request_hook_point() is None
    assert native.tool_choice_hook_point() is None and native.final_output_hook_point() is None
    assert native.server_start_hook_point() is None and native.sampling_params_hook_point() is None
    for hook in (app_state, budget_admission, config_backend, engine_manager, request_fields, sampling_validation,
                 tool_responses, mistral_streaming, leading_space):
        assert hook.seam_present() is False, hook.__name__
    assert native.register() == {"backend registry": False, "request hook": False, "tool-choice hook": False,
                                 "final-output hook": False, "server-start hook": False,
                                 "sampling-params hook": False}


def test_describe_paths_names_the_path_and_each_hook():
    from poot_vllm.adapter.patches import describe_paths

    stock = describe_paths({"config_backend": "applied", "cli_flag": "applied"})
    assert stock.startswith("stock vLLM: runtime hooks")
    fork = describe_paths({"config_backend": "native seam", "cli_flag": "applied"})
    assert fork.startswith("patched vLLM: native seams + runtime hooks")
    assert "native seam: config_backend" in fork and "applied: cli_flag" in fork
    only = describe_paths({"config_backend": "native seam", "cli_flag": "disabled"})
    assert only.startswith("patched vLLM: native seams only") and "disabled: cli_flag" in only


# --- patched vLLM: native seams ----------------------------------------------------------------

_CHILD = textwrap.dedent(
    r"""
    import json, sys
    out = {}
    import vllm
    out["vllm_file"] = vllm.__file__

    from poot_vllm.adapter.patches import apply_all, HOOK_MODULES
    out["status"] = apply_all(eager=True)

    from vllm.config import StructuredOutputsConfig
    from vllm.config.structured_outputs import structured_output_backend_names, get_structured_output_backend
    out["names"] = list(structured_output_backend_names())
    out["config_backend"] = StructuredOutputsConfig(backend="poot").backend
    try:
        StructuredOutputsConfig(backend="no-such-backend")
    except Exception as exc:
        out["unknown_backend_error"] = str(exc)

    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.exceptions import VLLMValidationError
    out["sampling_patched"] = hasattr(SamplingParams._validate_structured_outputs, "__poot_original__")

    class ModelConfig:
        is_diffusion = False
        def get_vocab_size(self):
            return len(tokenizer)

    import os
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(os.environ["TINY_MODEL"])

    # patches/0004, server-start hook: the vocabulary and the reasoning marker before any request.
    from types import SimpleNamespace
    from vllm.entrypoints.generate.base import protocol
    from poot_vllm.adapter.server_state import reasoning_end_tokens
    from poot_vllm.core.budget import SERVER_VOCABULARY
    engine_config = SimpleNamespace(
        model_config=ModelConfig(),
        reasoning_config=SimpleNamespace(enabled=True, reasoning_end_token_ids=[7, 8, 9]))
    protocol.set_structured_outputs_server_backend("xgrammar")
    protocol.run_server_start_hooks(engine_config, tokenizer)
    out["start_xgrammar"] = {"reasoning_end": reasoning_end_tokens(), "vocab": SERVER_VOCABULARY.get() is not None}
    protocol.set_structured_outputs_server_backend("poot")
    protocol.run_server_start_hooks(engine_config, tokenizer)
    out["start_poot"] = {"reasoning_end": reasoning_end_tokens(), "vocab": SERVER_VOCABULARY.get() is not None}

    # patches/0004, sampling-params hook: admission in to_sampling_params (before a stream starts).
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest as Chat
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest as Completion

    def sampling(cls, server_backend, effective, **fields):
        protocol.set_structured_outputs_server_backend(server_backend)
        body = {"model": "m", "stream": True, **fields}
        body.setdefault("messages" if cls is Chat else "prompt",
                        [{"role": "user", "content": "hi"}] if cls is Chat else "hi")
        try:
            params = cls(**body).to_sampling_params(effective, {})
        except VLLMValidationError as exc:
            return {"error": str(exc), "param": exc.parameter}
        return {"thinking_token_budget": params.thinking_token_budget,
                "admitted": getattr(params.structured_outputs, "_poot_admitted", False)}

    out["sp_chat_too_small"] = sampling(Chat, "poot", 2, max_completion_tokens=2, guided_regex="[a-z]{40}")
    out["sp_completion_too_small"] = sampling(Completion, "poot", 2, max_tokens=2, guided_regex="[a-z]{40}")
    out["sp_fits"] = sampling(Chat, "poot", 100, guided_regex="[a-z]{40}")
    out["sp_fits_no_reasoning"] = sampling(Chat, "poot", 100, guided_regex="[a-z]{40}", include_reasoning=False)
    out["sp_xgrammar"] = sampling(Chat, "xgrammar", 2, guided_regex="[a-z]{40}")
    protocol.set_structured_outputs_server_backend("poot")

    def validate(max_tokens=16, **so):
        params = SamplingParams(max_tokens=max_tokens, structured_outputs=StructuredOutputsParams(**so))
        try:
            params._validate_structured_outputs(ModelConfig(), StructuredOutputsConfig(backend="poot"), tokenizer)
        except VLLMValidationError as exc:
            return {"error": str(exc), "param": exc.parameter}
        return {"backend": params.structured_outputs._backend}

    out["valid_regex"] = validate(regex="[a-c]{2}")
    out["bad_regex"] = validate(regex="(unclosed")
    out["budget_too_small"] = validate(regex="[a-z]{40}", max_tokens=2)
    out["budget_fits"] = validate(regex="[a-z]{40}", max_tokens=64)

    from vllm.entrypoints.generate.base import protocol
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest
    out["extract_patched"] = hasattr(ChatCompletionRequest.extract_structured_outputs, "__poot_original__")

    def extract(cls, server_backend, **fields):
        protocol.set_structured_outputs_server_backend(server_backend)
        body = {"model": "m", **fields}
        body.setdefault("messages" if cls is ChatCompletionRequest else "prompt",
                        [{"role": "user", "content": "hi"}] if cls is ChatCompletionRequest else "hi")
        try:
            so = cls(**body).extract_structured_outputs()
        except VLLMValidationError as exc:
            return {"error": str(exc), "param": exc.parameter}
        return {"regex": getattr(so, "regex", None), "choice": getattr(so, "choice", None), "none": so is None}

    out["chat_guided_regex"] = extract(ChatCompletionRequest, "poot", guided_regex="[0-9]{3}")
    out["completion_guided_choice"] = extract(CompletionRequest, "poot", guided_choice=["yes", "no"])
    out["chat_bad_guided_regex"] = extract(ChatCompletionRequest, "poot", guided_regex="(unclosed")
    out["other_server_backend"] = extract(ChatCompletionRequest, "xgrammar", guided_regex="[0-9]{3}")
    out["plain_request"] = extract(ChatCompletionRequest, "poot")
    from poot_vllm.adapter.server_state import poot_is_server_backend
    protocol.set_structured_outputs_server_backend("poot")
    out["poot_is_server_backend"] = poot_is_server_backend()

    # patches/0003, tool-choice hook: the tool parser vLLM recorded picks poot's codec; a
    # poot server builds no structural tag and reads forced calls in the parser's own format.
    from poot_vllm.adapter.tool_forcing import forcing_codec
    protocol.set_server_tool_call_parser("hermes")
    out["codec_from_vllm_record"] = getattr(forcing_codec(), "name", None)
    from vllm.parser.parser_manager import ParserManager
    parser_cls = ParserManager.get_parser(tool_parser_name="hermes", enable_auto_tools=True, tokenizer=tokenizer)
    TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    MARKUP = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'

    def arguments(text):
        try:
            return json.loads(text)
        except ValueError:
            return text  # not JSON: what the parser took for the arguments

    def tool_seams(server_backend, tool_choice):
        protocol.set_structured_outputs_server_backend(server_backend)
        request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                        tools=TOOLS, tool_choice=tool_choice)
        parser = parser_cls(tokenizer, request.tools)
        # As with VLLM_ENFORCE_STRICT_TOOL_CALLING=0: the parser would read required/named as bare JSON.
        parser._tool_parser.supports_required_and_named = True
        tagged = parser._apply_structural_tag(request).structured_outputs
        _, content, calls = parser.parse(MARKUP, request, enable_auto_tools=True)
        return {"backend_forces": protocol.backend_forces_tool_choice(),
                "forced": protocol.tool_choice_forced_by_backend(request),
                "structural_tag": getattr(tagged, "structural_tag", None) is not None,
                "calls": [[c.name, arguments(c.arguments)] for c in calls or []],
                "content": content}

    NAMED = {"type": "function", "function": {"name": "get_weather"}}
    out["tools_poot_named"] = tool_seams("poot", NAMED)
    out["tools_poot_required"] = tool_seams("poot", "required")
    out["tools_poot_auto"] = tool_seams("poot", "auto")
    out["tools_xgrammar_named"] = tool_seams("xgrammar", NAMED)
    import vllm.entrypoints.openai.chat_completion.serving as chat_serving
    import vllm.entrypoints.serve.utils.tool_calls_utils as tool_calls_utils
    out["finish_reason_seam"] = any(hasattr(m, "tool_choice_forced_by_backend")
                                    for m in (chat_serving, tool_calls_utils))

    # patches/0005: vLLM's Mistral parser streams arguments without the key's colon.
    from tests.unit.mistral_stream import SPLIT_AFTER_KEY, stream_mistral_call
    mistral_tokenizer = AutoTokenizer.from_pretrained(os.environ["TINY_MISTRAL"])
    out["mistral_split_after_key"] = stream_mistral_call(mistral_tokenizer, SPLIT_AFTER_KEY)

    # patches/0003, final-output hook: a whole reply poot constrained drops the word marker's space.
    from types import SimpleNamespace
    def final_text(server_backend, echo=False, **fields):
        protocol.set_structured_outputs_server_backend(server_backend)
        request = CompletionRequest(model="m", prompt="hi", echo=echo, **fields)
        ids = tokenizer.encode(" the cat", add_special_tokens=False)
        output = SimpleNamespace(outputs=[SimpleNamespace(text=" the cat", token_ids=ids)])
        return protocol.apply_final_output_hooks(request, output, tokenizer).outputs[0].text

    out["final_poot_constrained"] = final_text("poot", guided_regex=" the [a-z]+")
    out["final_poot_unconstrained"] = final_text("poot")
    out["final_poot_echo"] = final_text("poot", echo=True, guided_regex=" the [a-z]+")
    out["final_xgrammar"] = final_text("xgrammar", guided_regex=" the [a-z]+")
    protocol.set_structured_outputs_server_backend("poot")

    spec = get_structured_output_backend("poot")
    from vllm.config.structured_outputs import _resolve
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.v1.structured_output.backend_types import StructuredOutputBackend
    from poot_vllm.adapter.backend import PootBackend
    out["factory_is_poot_backend"] = _resolve(spec.factory) is PootBackend
    out["poot_overrides_compile_for_request"] = (
        PootBackend.compile_grammar_for_request is not StructuredOutputBackend.compile_grammar_for_request)
    out["manager_patched"] = hasattr(StructuredOutputManager.grammar_init, "__poot_original__")

    # The engine path: the manager builds poot's backend from the registry and
    # compiles through compile_grammar_for_request, which passes max_tokens.
    from types import SimpleNamespace
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions
    seen = {}
    class Recorder(PootBackend):
        def __init__(self, vllm_config, tokenizer, vocab_size):
            self.vllm_config = vllm_config
            seen["created"] = vocab_size
        def compile_grammar(self, request_type, grammar_spec, stop_token_ids=None, max_new_tokens=None):
            seen["compile"] = [request_type.name, grammar_spec, sorted(stop_token_ids or ()), max_new_tokens]
            return "grammar"
    from vllm.config.structured_outputs import register_structured_output_backend
    register_structured_output_backend("poot", Recorder, override=True)
    manager = StructuredOutputManager.__new__(StructuredOutputManager)
    manager.backend = None
    manager.backend_name = None
    manager.tokenizer = None
    manager._use_async_grammar_compilation = False
    manager.vllm_config = SimpleNamespace(
        model_config=SimpleNamespace(get_vocab_size=lambda: 321, max_model_len=2048))
    so_params = StructuredOutputsParams(regex="a+")
    so_params._backend = "poot"
    from poot_vllm.core.budget import engine_token_budget
    seen["expected_budget"] = engine_token_budget(17, 2048, 5)
    request = SimpleNamespace(
        request_id="r1",
        num_prompt_tokens=5,
        sampling_params=SimpleNamespace(structured_outputs=so_params, all_stop_token_ids={2}, max_tokens=17),
        structured_output_request=SimpleNamespace(
            structured_output_key=(StructuredOutputOptions.REGEX, "a+"), grammar=None),
    )
    manager.grammar_init(request)
    out["engine"] = seen
    out["engine_grammar"] = request.structured_output_request.grammar
    print("RESULT " + json.dumps(out, default=str))
    """
)


@pytest.fixture(scope="module")
def patched(tmp_path_factory, tiny_models_dir):
    """Results of the child script against a patched copy, runtime hooks disabled."""
    _series_for_installed()
    tiny_model = tiny_models_dir / "tiny-llama-spm"
    out_dir = tmp_path_factory.mktemp("patched-vllm")
    build = _run(str(SCRIPTS / "build-patched-vllm"), "--out", str(out_dir))
    assert build.returncode == 0, build.stderr
    assert build.stdout.strip().splitlines()[-1] == str(out_dir)
    assert f"export PYTHONPATH={out_dir}" in build.stderr
    child = _run(sys.executable, "-c", _CHILD, env={
        "PYTHONPATH": os.pathsep.join([str(out_dir), str(REPO)]),
        "POOT_DISABLE_HOOKS": "1",
        "TINY_MODEL": str(tiny_model),
        "TINY_MISTRAL": str(tiny_models_dir / "tiny-mistral-spm"),
    })
    lines = [line for line in child.stdout.splitlines() if line.startswith("RESULT ")]
    assert child.returncode == 0 and lines, child.stdout[-3000:] + child.stderr[-5000:]
    result = json.loads(lines[-1][len("RESULT "):])
    result["out_dir"] = str(out_dir)
    return result


def test_patched_copy_is_what_python_imports(patched):
    assert patched["vllm_file"] == str(Path(patched["out_dir"]) / "vllm" / "__init__.py")
    # the installed package is untouched
    installed = (_installed_vllm_dir() / "config" / "structured_outputs.py").read_text()
    assert "register_structured_output_backend" not in installed


def test_every_seam_is_detected_and_nothing_is_monkeypatched(patched):
    status = patched["status"]
    native = ("config_backend", "app_state", "sampling_validation", "engine_manager", "request_fields",
              "budget_admission", "tool_responses", "mistral_streaming", "leading_space")
    for name in native:
        assert status[name] == "native seam", status
    # no seam for these: with POOT_DISABLE_HOOKS=1 they are off
    assert all(state == "disabled" for name, state in status.items() if name not in native)
    assert not patched["sampling_patched"] and not patched["extract_patched"] and not patched["manager_patched"]


def test_config_accepts_poot_and_names_the_choices_for_unknown_backends(patched):
    assert patched["config_backend"] == "poot"
    assert "poot" in patched["names"] and "xgrammar" in patched["names"]
    error = patched["unknown_backend_error"]
    assert "no-such-backend" in error and "poot" in error and "xgrammar" in error


def test_sampling_validation_runs_poot_through_the_registry(patched):
    assert patched["valid_regex"] == {"backend": "poot"}
    assert patched["bad_regex"]["param"] == "structured_outputs"
    assert patched["bad_regex"]["error"]


def test_registry_validator_refuses_a_budget_no_conforming_reply_fits(patched):
    """40 letters cannot fit in 2 tokens: a 400 on max_tokens, natively."""
    assert patched["budget_too_small"]["param"] == "max_tokens", patched["budget_too_small"]
    assert patched["budget_fits"] == {"backend": "poot"}


def test_request_hook_maps_guided_fields_only_on_a_poot_server(patched):
    assert patched["chat_guided_regex"]["regex"] == "[0-9]{3}"
    assert json.loads(json.dumps(patched["completion_guided_choice"]["choice"])) == ["yes", "no"]
    assert patched["chat_bad_guided_regex"]["param"] == "guided_regex"
    assert patched["other_server_backend"]["none"] is True  # untouched: vLLM ignores guided_* there
    assert patched["plain_request"]["none"] is True
    assert patched["poot_is_server_backend"] is True


def test_engine_builds_poot_from_the_registry_with_the_request_budget(patched):
    assert patched["factory_is_poot_backend"] and patched["poot_overrides_compile_for_request"]
    assert patched["engine"]["created"] == 321
    budget = patched["engine"]["expected_budget"]
    assert budget is not None  # max_tokens reaches poot: budget-aware masks work natively
    assert patched["engine"]["compile"] == ["REGEX", "a+", [2], budget]
    assert patched["engine_grammar"] == "grammar"


def test_tool_choice_hook_reads_the_tool_parser_vllm_recorded(patched):
    """patches/0003: poot forces calls in the format of the parser vLLM recorded at start."""
    assert patched["codec_from_vllm_record"] == "hermes"
    assert patched["finish_reason_seam"]  # chat serving (0.32) / resolve_finish_reason (0.33) asks the hook


def test_forced_tool_calls_are_read_in_the_parsers_own_format(patched):
    """On a poot server vLLM builds no structural tag and reads poot's ``<tool_call>`` markup."""
    call = [["get_weather", {"city": "Paris"}]]
    for case in ("tools_poot_named", "tools_poot_required"):
        result = patched[case]
        assert result["backend_forces"] and result["forced"], (case, result)
        assert not result["structural_tag"], (case, result)
        assert result["calls"] == call and not result["content"], (case, result)
    auto = patched["tools_poot_auto"]
    assert auto["backend_forces"] and not auto["forced"] and not auto["structural_tag"], auto


def test_tool_choice_hook_is_inactive_on_other_backends(patched):
    """On an xgrammar server: vLLM's own structural tag, and a named reply read as bare JSON arguments."""
    other = patched["tools_xgrammar_named"]
    assert not other["backend_forces"] and not other["forced"], other
    assert other["structural_tag"], other
    assert other["calls"][0][0] == "get_weather" and other["calls"][0][1].startswith("<tool_call>"), other


def test_final_output_hook_drops_the_leading_space_of_constrained_whole_replies(patched):
    assert patched["final_poot_constrained"] == "the cat"
    # unconstrained, echoed (the space separates the prompt's last word), or another backend: untouched
    assert patched["final_poot_unconstrained"] == " the cat"
    assert patched["final_poot_echo"] == " the cat"
    assert patched["final_xgrammar"] == " the cat"


def test_server_start_hook_records_vocabulary_and_reasoning_marker_on_poot_servers(patched):
    """patches/0004: budget admission knows the vocabulary before the first request, and the
    reasoning end marker's length (3 tokens here) to keep room for the reply after reasoning."""
    assert patched["start_xgrammar"] == {"reasoning_end": None, "vocab": False}
    assert patched["start_poot"] == {"reasoning_end": 3, "vocab": True}


def test_sampling_params_hook_refuses_what_cannot_fit_before_a_stream_starts(patched):
    """patches/0004: ``to_sampling_params`` of a ``stream: true`` request is the 400, naming the
    field the client sent; on another backend poot does nothing."""
    assert patched["sp_chat_too_small"]["param"] == "max_completion_tokens", patched["sp_chat_too_small"]
    assert "max_completion_tokens" in patched["sp_chat_too_small"]["error"]
    assert patched["sp_completion_too_small"]["param"] == "max_tokens", patched["sp_completion_too_small"]
    assert patched["sp_xgrammar"] == {"thinking_token_budget": None, "admitted": False}


def test_sampling_params_hook_caps_reasoning_so_the_reply_fits(patched):
    """40 letters and a 3-token end marker in 100 tokens: the reasoning may take at most what is left;
    with ``include_reasoning: false`` the constraint starts at once, and nothing is capped."""
    fits = patched["sp_fits"]
    assert fits["admitted"] and fits["thinking_token_budget"] is not None
    assert 0 < fits["thinking_token_budget"] <= 100 - 3 - 1, fits
    assert patched["sp_fits_no_reasoning"] == {"thinking_token_budget": None, "admitted": True}


def test_mistral_parser_streams_arguments_without_the_keys_colon(patched):
    """patches/0005: a delta that ends right after ``"arguments"`` no longer starts the
    streamed arguments with ``:`` (the same deltas show the artefact on stock vLLM, test_hooks.py)."""
    result = patched["mistral_split_after_key"]
    assert result["name"] == "get_weather", result
    assert json.loads(result["arguments"]) == {"city": "Paris"}, result
    assert result["recorded"] == [result["arguments"]], result
