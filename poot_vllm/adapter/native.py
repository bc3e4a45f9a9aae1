"""Register poot through vLLM's native seams, where vLLM carries ``patches/``.

A vLLM fork with ``patches/vllm-X.Y/0001`` has a structured-output backend
registry (``vllm.config.structured_outputs.register_structured_output_backend``);
with ``0002`` it has a request hook point
(``vllm.entrypoints.generate.base.protocol.register_structured_outputs_hook``);
with ``0003`` that module also takes a tool-choice hook (a backend that forces
``tool_choice`` itself: ``register_tool_choice_hook``, and the server's tool
parser, ``get_server_tool_call_parser``) and final-output hooks for whole
replies (``register_final_output_hook``); with ``0004`` it runs server-start
hooks (``register_server_start_hook``: the vocabulary and reasoning set-up,
once per API-server process) and sampling-params hooks
(``register_sampling_params_hook``: budget admission in the request handler,
so a refusal is a 400 before a streamed response starts).
Where they exist, poot registers through them and the runtime hooks for those
areas stay off (each hook's ``seam_present()`` says so); elsewhere poot falls
back to its runtime hooks.  Detection is by feature, never by version.

Registering is cheap (import paths, nothing compiled) and idempotent: vLLM
calls the plugin in every process, possibly several times.
"""

from __future__ import annotations

from typing import Any

BACKEND_NAME = "poot"
#: What the registry imports lazily, in the engine core / API server.
BACKEND_FACTORY = "poot_vllm.adapter.backend:PootBackend"
BACKEND_VALIDATOR = "poot_vllm.adapter.native:validate_request"


def backend_registry() -> Any | None:
    """``vllm.config.structured_outputs`` if it has the registry (patch 0001)."""
    try:
        from vllm.config import structured_outputs
    except ImportError:
        return None
    return structured_outputs if hasattr(structured_outputs, "register_structured_output_backend") else None


def request_hook_point() -> Any | None:
    """``vllm.entrypoints.generate.base.protocol`` if it has the hook point (patch 0002)."""
    try:
        from vllm.entrypoints.generate.base import protocol
    except ImportError:
        return None
    return protocol if hasattr(protocol, "register_structured_outputs_hook") else None


def tool_choice_hook_point() -> Any | None:
    """The request hook point's module if it takes tool-choice hooks (patch 0003)."""
    protocol = request_hook_point()
    has_seam = protocol is not None and hasattr(protocol, "register_tool_choice_hook") and hasattr(
        protocol, "get_server_tool_call_parser")
    return protocol if has_seam else None


def final_output_hook_point() -> Any | None:
    """The request hook point's module if it takes final-output hooks (patch 0003)."""
    protocol = request_hook_point()
    return protocol if protocol is not None and hasattr(protocol, "register_final_output_hook") else None


def server_start_hook_point() -> Any | None:
    """The request hook point's module if it runs server-start hooks (patch 0004)."""
    protocol = request_hook_point()
    return protocol if protocol is not None and hasattr(protocol, "register_server_start_hook") else None


def sampling_params_hook_point() -> Any | None:
    """The request hook point's module if it takes sampling-params hooks (patch 0004)."""
    protocol = request_hook_point()
    return protocol if protocol is not None and hasattr(protocol, "register_sampling_params_hook") else None


def validate_request(sampling_params: Any, model_config: Any, tokenizer: Any) -> None:
    """The registry's validator: poot's full check of a request (API server).

    vLLM has already run its generic checks and set ``_backend = "poot"``;
    a refusal raises ``VLLMValidationError`` (a 400 naming the parameter).
    The same checks as the runtime ``sampling_validation`` hook, budget
    admission included (the shortest conforming reply must fit ``max_tokens``).
    """
    from poot_vllm.adapter.validation import admit, admitted, record_from_validation, validate_for_poot, vocab_size

    validate_for_poot(sampling_params.structured_outputs, vocab_size(model_config))
    record_from_validation(model_config, tokenizer)
    if not admitted(sampling_params):  # the sampling-params hook (patch 0004) admits in the request handler
        admit(sampling_params)


def structured_outputs_hook(request: Any, structured_outputs: Any) -> Any:
    """The request hook: ``guided_*`` fields, tool forcing and poot's precedence.

    vLLM calls it only on servers whose backend is poot (it is registered
    with ``backend="poot"``), from ``extract_structured_outputs`` of chat and
    completion requests, with the params vLLM derived from the request.
    """
    from poot_vllm.adapter.requests import structured_outputs_for

    return structured_outputs_for(request, lambda _request: structured_outputs)


def tool_choice_hook(request: Any) -> bool:
    """The tool-choice hook: whether poot forces this request's tool calls (patch 0003).

    vLLM then reads the reply with the tool parser's own extraction (poot
    forces the parser's format, not vLLM's JSON) and reports ``tool_calls``.
    vLLM calls it while building a response: it must answer, never raise.
    """
    from poot_vllm.adapter.tool_forcing import forces_tool_call

    try:
        return forces_tool_call(request)
    except Exception:  # noqa: BLE001 - a malformed request was refused earlier; never fail the reply here
        return False


def final_output_hook(request: Any, output: Any, tokenizer: Any) -> Any:
    """The final-output hook: a whole SentencePiece reply drops its one leading space (patch 0003)."""
    from poot_vllm.adapter.reply_text import adjust_outputs

    return adjust_outputs(output, request, tokenizer)


def server_start_hook(vllm_config: Any, tokenizer: Any) -> None:
    """The server-start hook (patch 0004): record the vocabulary for budget
    admission and the reasoning end marker's length, in each API-server process."""
    from poot_vllm.adapter.server_state import record_reasoning_config
    from poot_vllm.adapter.validation import record_from_validation

    record_reasoning_config(getattr(vllm_config, "reasoning_config", None))
    model_config = getattr(vllm_config, "model_config", None)
    if tokenizer is not None and model_config is not None:
        record_from_validation(model_config, tokenizer)


def sampling_params_hook(request: Any, sampling_params: Any) -> Any:
    """The sampling-params hook (patch 0004): budget admission in the request handler.

    A 400 before the engine is asked and before a streamed response starts,
    with the request's own ``max_tokens`` field named, and the reasoning
    capped so that the shortest conforming reply fits after it
    (``include_reasoning``: see :func:`~poot_vllm.adapter.validation.admit`).
    """
    from poot_vllm.adapter.validation import admit, max_tokens_field

    admit(sampling_params, max_tokens_field(request), reasoning_first=getattr(request, "include_reasoning", True))
    return sampling_params


def server_backend() -> str | None:
    """The structured-output backend the API server recorded (patch 0002), if any."""
    protocol = request_hook_point()
    getter = getattr(protocol, "get_structured_outputs_server_backend", None)
    return getter() if getter is not None else None


def register() -> dict[str, bool]:
    """Register through every native seam present; returns seam -> registered."""
    registered = {"backend registry": False, "request hook": False, "tool-choice hook": False,
                  "final-output hook": False, "server-start hook": False, "sampling-params hook": False}
    registry = backend_registry()
    if registry is not None:
        registry.register_structured_output_backend(BACKEND_NAME, BACKEND_FACTORY, BACKEND_VALIDATOR)
        registered["backend registry"] = True
    # The request hook point lives in an API-server module: register when that
    # module is imported, so worker processes never import it for poot's sake.
    from poot_vllm.adapter.when_imported import when_imported

    when_imported(REQUEST_HOOK_MODULE, _register_request_hooks)
    registered.update(_request_hooks_registered)
    return registered


REQUEST_HOOK_MODULE = "vllm.entrypoints.generate.base.protocol"
#: What the request hook point's module took from poot in this process (patches 0002, 0003).
_request_hooks_registered: dict[str, bool] = {}


def _register_request_hooks(protocol: Any) -> None:
    """Register each hook the module has a seam for, once per process.

    vLLM drops repeated registrations of the same hook too; the record here is
    what :func:`register` reports.  Each hook is registered with
    ``backend="poot"``: vLLM runs it only on servers whose backend is poot.
    """
    seams = (
        ("request hook", "register_structured_outputs_hook", structured_outputs_hook),
        ("tool-choice hook", "register_tool_choice_hook", tool_choice_hook),
        ("final-output hook", "register_final_output_hook", final_output_hook),
        ("server-start hook", "register_server_start_hook", server_start_hook),
        ("sampling-params hook", "register_sampling_params_hook", sampling_params_hook),
    )
    for seam, register_name, hook in seams:
        register_hook = getattr(protocol, register_name, None)
        if register_hook is not None and not _request_hooks_registered.get(seam):
            register_hook(hook, backend=BACKEND_NAME)
            _request_hooks_registered[seam] = True
