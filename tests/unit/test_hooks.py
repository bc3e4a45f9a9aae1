"""Each runtime hook against the real installed vLLM seam: a moved seam fails here."""

from __future__ import annotations

import inspect

import pydantic
import pytest
import vllm  # noqa: F401  -- a required test dependency: an import failure fails these tests, never skips them

from poot_vllm.adapter.patches import HOOK_MODULES, all_hooks, apply_all, original  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def hooks_applied():
    status = apply_all(eager=True)
    assert set(status) == set(HOOK_MODULES)
    return status


def test_entry_point_in_vllm_plugin_group():
    from importlib.metadata import entry_points

    from vllm.plugins import DEFAULT_PLUGINS_GROUP

    eps = {e.name: e.value for e in entry_points(group=DEFAULT_PLUGINS_GROUP)}
    assert eps.get("poot") == "poot_vllm.adapter.plugin:register"


def test_register_is_idempotent():
    from vllm.sampling_params import SamplingParams

    from poot_vllm.adapter.plugin import register

    before = SamplingParams._validate_structured_outputs
    register()
    register()
    assert SamplingParams._validate_structured_outputs is before


def test_every_hook_documents_itself():
    for hook in all_hooks():
        assert hook.what and hook.why and hook.versions and hook.until and hook.process and hook.upstream, hook


def test_config_accepts_poot_and_still_rejects_unknown():
    from vllm.config import StructuredOutputsConfig

    assert StructuredOutputsConfig(backend="poot").backend == "poot"
    from typing import get_args

    kept = get_args(StructuredOutputsConfig.__poot_original_backend__)
    assert "xgrammar" in kept and "poot" not in kept  # the original Literal, kept
    with pytest.raises(pydantic.ValidationError, match="no-such-backend") as refused:
        StructuredOutputsConfig(backend="no-such-backend")
    assert "'poot'" in str(refused.value) and "'xgrammar'" in str(refused.value)  # the choices, poot among them


def _serve_parser():
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())


@pytest.mark.parametrize(
    "argv",
    [
        ["--model", "m", "--guided-decoding-backend", "poot"],
        ["--model", "m", "--structured-outputs-config.backend", "poot"],
        ["--model", "m", "--structured-outputs-config", '{"backend": "poot"}'],
        ["--model", "m", "--guided-decoding-backend", "poot", "--structured-outputs-config.backend", "poot"],
    ],
)
def test_cli_forms_select_poot(argv):
    from poot_vllm.adapter.server_state import server_backend

    args = _serve_parser().parse_args(argv)
    assert args.structured_outputs_config.backend == "poot"
    assert server_backend() == "poot"


def test_cli_conflicting_backends_is_an_error():
    with pytest.raises(SystemExit):
        _serve_parser().parse_args(
            ["--model", "m", "--guided-decoding-backend", "poot", "--structured-outputs-config.backend", "xgrammar"]
        )


class _ModelConfig:
    is_diffusion = False


def _validate(params):
    from vllm.config import StructuredOutputsConfig
    from vllm.sampling_params import SamplingParams

    sp = SamplingParams(structured_outputs=params)
    sp._validate_structured_outputs(_ModelConfig(), StructuredOutputsConfig(backend="poot"), tokenizer=object())
    return sp


def test_sampling_validation_sets_backend_poot():
    from vllm.sampling_params import StructuredOutputsParams

    sp = _validate(StructuredOutputsParams(regex="[a-c]{2}"))
    assert sp.structured_outputs._backend == "poot"


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"regex": "(a)\\1"}, "backreference"),
        ({"regex": "a" * 5000}, "max_regex_bytes"),
        ({"choice": []}, "non-empty"),
        ({"structural_tag": '{"type": "structural_tag"}'}, "structural tags"),
    ],
)
def test_sampling_validation_refuses_with_400_error(kwargs, needle):
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import StructuredOutputsParams

    with pytest.raises(VLLMValidationError) as e:
        _validate(StructuredOutputsParams(**kwargs))
    assert needle in str(e.value)
    assert e.value.parameter.startswith("structured_outputs")


def test_sampling_validation_leaves_other_backends_alone():
    from vllm.sampling_params import SamplingParams

    fn = SamplingParams._validate_structured_outputs
    assert original(fn) is not fn
    assert list(inspect.signature(original(fn)).parameters) == [
        "self", "model_config", "structured_outputs_config", "tokenizer"]


def test_engine_manager_seams_exist_with_expected_shape():
    from vllm.v1.structured_output import StructuredOutputManager

    for name, params in (("grammar_init", ["self", "request"]), ("_create_grammar", ["self", "request"])):
        fn = getattr(StructuredOutputManager, name)
        assert original(fn) is not fn, name
        assert list(inspect.signature(original(fn)).parameters) == params


@pytest.fixture
def poot_server(monkeypatch):
    monkeypatch.setenv("POOT_SERVER_BACKEND", "poot")


def _chat(**extra):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], **extra)


def test_request_guided_fields_precedence(poot_server):
    so = _chat(guided_regex="a+", guided_json={"type": "integer"}).extract_structured_outputs()
    assert so.regex == "a+" and so.json is None
    so = _chat(guided_choice=["x"], guided_regex="a+").extract_structured_outputs()
    assert so.choice == ["x"] and so.regex is None
    so = _chat(guided_json={"type": "integer"},
               response_format={"type": "json_object"}).extract_structured_outputs()
    assert so.json is not None and not so.json_object


def test_request_response_format_mapping(poot_server):
    so = _chat(response_format={"type": "json_object"}).extract_structured_outputs()
    assert so.json_object is True
    assert _chat(response_format={"type": "text"}).extract_structured_outputs() is None


def test_completion_request_guided_fields(poot_server):
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    so = CompletionRequest(model="m", prompt="x", guided_choice=["a", "b"]).extract_structured_outputs()
    assert so.choice == ["a", "b"]


def test_request_refusal_names_the_field(poot_server):
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError) as e:
        _chat(guided_regex="(?<=a)b").extract_structured_outputs()
    assert e.value.parameter == "guided_regex"


def test_request_hook_inactive_for_other_backends(monkeypatch):
    monkeypatch.setenv("POOT_SERVER_BACKEND", "xgrammar")
    assert _chat(guided_regex="a+").extract_structured_outputs() is None


@pytest.fixture
def unknown_backend(monkeypatch):
    """A process that has not learned the server's backend (no CLI parse, no init_app_state yet)."""
    from poot_vllm.adapter import server_state as state

    monkeypatch.delenv("POOT_SERVER_BACKEND", raising=False)
    monkeypatch.setattr(state, "_server_backend", None)


def test_init_app_state_records_the_engines_backend(unknown_backend):
    """Every API-server process (scale-out children too) learns the backend from its VllmConfig."""
    import asyncio
    from types import SimpleNamespace

    from vllm.entrypoints.launchers.api_server import app_state, entry

    from poot_vllm.adapter.server_state import server_backend

    assert original(app_state.init_app_state) is not app_state.init_app_state
    assert entry.init_app_state is app_state.init_app_state  # the name vLLM's server calls
    assert list(inspect.signature(original(app_state.init_app_state)).parameters)[:3] == [
        "engine_client", "state", "args"]
    client = SimpleNamespace(vllm_config=SimpleNamespace(
        structured_outputs_config=SimpleNamespace(backend="poot")))
    with pytest.raises(AttributeError):  # the fake args stop vLLM's own set-up right after the record
        asyncio.run(app_state.init_app_state(client, SimpleNamespace(), SimpleNamespace()))
    assert server_backend() == "poot"


def test_unknown_backend_still_carries_guided_fields(unknown_backend):
    """Never unconstrained: the field travels to the validation that knows the engine's backend."""
    from vllm.config import StructuredOutputsConfig
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams

    so = _chat(guided_regex="[0-9]+", response_format={"type": "json_object"}).extract_structured_outputs()
    assert so.regex == "[0-9]+" and not so.json_object and so._poot_field == "guided_regex"
    bad = _chat(guided_regex="(a").extract_structured_outputs()
    sp = SamplingParams(structured_outputs=bad)
    with pytest.raises(VLLMValidationError) as e:
        sp._validate_structured_outputs(_ModelConfig(), StructuredOutputsConfig(backend="poot"), tokenizer=object())
    assert e.value.parameter == "guided_regex"
    from poot_vllm.adapter.server_state import server_backend

    assert server_backend() == "poot"  # learned from the engine's config on the way


def test_register_defers_hooks_until_their_module_is_imported():
    """register() in a worker imports no API-server module; the hook applies on import."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import sys, json
        import vllm.engine.arg_utils, vllm.sampling_params
        before = set(sys.modules)
        from poot_vllm.adapter.plugin import register
        register()
        from poot_vllm.adapter.patches import hook_status
        status = hook_status()
        new = sorted(m for m in set(sys.modules) - before if m.startswith("vllm."))
        from vllm.entrypoints.openai.completion.protocol import CompletionRequest
        print(json.dumps({"new": new, "before": status["request_fields"], "after": hook_status()["request_fields"],
                          "patched": hasattr(CompletionRequest.extract_structured_outputs, "__poot_original__")}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    import json

    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["new"] == [], result["new"]
    assert (result["before"], result["after"], result["patched"]) == ("deferred", "applied", True)


def test_vocab_size_reads_the_model_config():
    """The mask-work estimate needs the vocabulary size; a config without one skips it."""
    from types import SimpleNamespace

    from poot_vllm.adapter.validation import vocab_size

    assert vocab_size(SimpleNamespace(get_vocab_size=lambda: 321)) == 321
    assert vocab_size(SimpleNamespace()) is None
    assert vocab_size(SimpleNamespace(get_vocab_size=lambda: None)) is None


def test_tool_and_leading_space_hooks_wrap_their_seams(hooks_applied):
    """Stock vLLM: the tool_responses and leading_space hooks are on the seams their HOOKs name."""
    from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
    from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion
    from vllm.parser.abstract_parser import DelegatingParser
    from vllm.parser.parser_manager import ParserManager

    if "native seam" in (hooks_applied["tool_responses"], hooks_applied["leading_space"]):
        pytest.skip("the installed vLLM carries patches/0003: these areas use its native seams")
    seams = ((ParserManager, "get_parser"), (DelegatingParser, "_apply_structural_tag"), (DelegatingParser, "parse"),
             (DelegatingParser, "parse_delta"), (OpenAIServingChat, "chat_completion_full_generator"),
             (OpenAIServingCompletion, "request_output_to_completion_response"))
    for owner, name in seams:
        fn = getattr(owner, name)
        assert original(fn) is not fn, f"{owner.__name__}.{name}"


def test_tool_parser_records_the_codec_poot_forces(hooks_applied, monkeypatch):
    """The server's --tool-call-parser decides the format poot forces tool calls in."""
    from vllm.parser.parser_manager import ParserManager

    from poot_vllm.core.tool_calls import selection

    if hooks_applied["tool_responses"] == "native seam":
        pytest.skip("the installed vLLM carries patches/0003: vLLM records the tool parser itself")
    monkeypatch.delenv(selection.OVERRIDE_ENV, raising=False)
    monkeypatch.setattr(selection, "_server_codec", None)
    ParserManager.get_parser(tool_parser_name="hermes", enable_auto_tools=True)
    assert selection.server_codec().name == "hermes"
    ParserManager.get_parser(tool_parser_name="hermes", enable_auto_tools=False)
    assert selection.server_codec() is None  # no auto tool choice: no parser reads calls back


@pytest.fixture(scope="module")
def mistral_tokenizer(tiny_models_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_models_dir / "tiny-mistral-spm")


@pytest.mark.parametrize("backend", ["poot", "xgrammar"])
def test_streamed_mistral_arguments_parse_when_a_delta_ends_after_the_key(
        hooks_applied, mistral_tokenizer, monkeypatch, backend):
    """vLLM's Mistral parser streams ``:{...}`` when ``"arguments"`` and ``:`` come in two deltas;
    on a poot server (the mistral_streaming hook) the client gets JSON, and the parser's record
    of what it streamed matches; another backend's server is left as vLLM made it."""
    import json

    from tests.unit.mistral_stream import SPLIT_AFTER_COLON, SPLIT_AFTER_KEY, stream_mistral_call

    if hooks_applied["mistral_streaming"] == "native seam":
        pytest.skip("the installed vLLM carries patches/0005: its parser strips the colon itself")
    monkeypatch.setenv("POOT_SERVER_BACKEND", backend)
    clean = stream_mistral_call(mistral_tokenizer, SPLIT_AFTER_COLON)
    assert clean["name"] == "get_weather" and json.loads(clean["arguments"]) == {"city": "Paris"}, clean
    split = stream_mistral_call(mistral_tokenizer, SPLIT_AFTER_KEY)
    assert split["name"] == "get_weather", split
    if backend == "poot":
        assert json.loads(split["arguments"]) == {"city": "Paris"}, split
        assert split["recorded"] == [split["arguments"]], split
    else:  # vLLM's own behaviour, unchanged: the artefact the hook exists for
        assert split["arguments"].startswith(":"), split
