"""Honour ``guided_*`` request fields on the OpenAI endpoints (API server).

vLLM removed ``guided_choice`` / ``guided_regex`` / ``guided_grammar`` /
``guided_json``; it keeps them in ``request.model_extra`` and ignores them
with a 200 -- an unconstrained reply for a client that asked for a
constraint.  We wrap ``extract_structured_outputs`` on the chat and completion
request classes: it runs in the request handler before the engine is asked
and before a streaming response starts, so a refusal is a real 400 for
``stream: true`` too.  The wrapper maps the fields with poot's precedence
(requests.py), runs poot's full validation, and returns the
``StructuredOutputsParams`` the engine sees.  Only active when the server's
backend is poot; where this process does not know the backend yet, the
``guided_*`` fields are still carried to vLLM's validation, never dropped.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from poot_vllm.hooks import Hook, wrap
from poot_vllm.requests import GUIDED_FIELDS

#: Applied when the first of these vLLM modules is imported (hooks/when_imported.py).
TRIGGERS = ("vllm.entrypoints.openai.chat_completion.protocol", "vllm.entrypoints.openai.completion.protocol")

HOOK = Hook(
    name="request_fields",
    target="vllm.entrypoints.openai.{chat_completion,completion}.protocol.*Request.extract_structured_outputs",
    what="map guided_* fields and response_format to one poot constraint, validate it, 400 on refusal",
    why="vLLM ignores guided_* fields with a 200 (unconstrained output)",
    versions="0.32.x, 0.33.x",
    until="vLLM has a request hook point for structured-output plugins (patches/0002)",
)

_CONSTRAINT_FIELDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


def seam_present() -> bool:
    """patches/0002: chat and completion requests run registered structured-outputs hooks."""
    from poot_vllm.native import request_hook_point

    if request_hook_point() is None:
        return False
    from vllm.entrypoints.openai.chat_completion import protocol as chat
    from vllm.entrypoints.openai.completion import protocol as completion

    return hasattr(chat, "apply_structured_outputs_hooks") and hasattr(completion, "apply_structured_outputs_hooks")


def response_format_dict(response_format: Any) -> dict | None:
    """vLLM's parsed ``response_format`` back to the OpenAI dict shape."""
    if response_format is None:
        return None
    kind = getattr(response_format, "type", None)
    if kind not in ("text", "json_object", "json_schema"):
        return None  # structural tags: left to vLLM / the backend check
    out: dict[str, Any] = {"type": kind}
    js = getattr(response_format, "json_schema", None)
    if js is not None:
        out["json_schema"] = {"name": getattr(js, "name", None), "schema": getattr(js, "json_schema", None)}
    return out


def _check_native(params: Any, limits) -> None:
    """poot's validation of a request's own ``structured_outputs`` (raises PootError naming the field)."""
    if params is None or not any(getattr(params, name, None) not in (None, False) for name in _CONSTRAINT_FIELDS):
        return
    from poot_vllm.constraints import check
    from poot_vllm.params import constraint_from_params

    check(constraint_from_params(params, limits), limits)


def structured_outputs_for(request: Any, original) -> Any:
    """The engine-bound ``StructuredOutputsParams`` for a request (poot server)."""
    from poot_vllm.constraints import check
    from poot_vllm.errors import PootError
    from poot_vllm.hooks.sampling_validation import to_validation_error
    from poot_vllm.params import params_kwargs
    from poot_vllm.requests import select_constraint
    from poot_vllm.settings import server_limits
    from poot_vllm.tool_forcing import tool_constraint_for

    limits = server_limits()
    field = "structured_outputs"
    try:
        selected = tool_constraint_for(request, limits)
        if selected is None:
            selected = select_constraint(
                request.model_extra or {}, response_format_dict(getattr(request, "response_format", None)), limits
            )
        if selected is None:
            native = original(request)
            _check_native(native, limits)  # vLLM's own structured_outputs (e.g. a structural tag): 400 before a stream starts
            return native
        constraint, field = selected
        check(constraint, limits)
    except PootError as exc:
        raise to_validation_error(exc.with_field(field), field) from None
    return _params_with(request, params_kwargs(constraint), field)


def _params_with(request: Any, kwargs: dict[str, Any], field: str) -> Any:
    """The request's own ``structured_outputs`` with its constraint replaced by ``kwargs``."""
    from vllm.sampling_params import StructuredOutputsParams

    base = getattr(request, "structured_outputs", None)
    if base is None:
        params = StructuredOutputsParams(**kwargs)
    else:
        cleared = {name: None for name in _CONSTRAINT_FIELDS}
        params = dataclasses.replace(base, **{**cleared, **kwargs})
    # Lets SamplingParams validation (which knows the vocabulary size and
    # checks the mask-work estimate) name the request field in its 400.
    params._poot_field = field
    return params


#: ``guided_*`` field -> the ``StructuredOutputsParams`` field that carries it.
_GUIDED_TO_PARAM = {"guided_choice": "choice", "guided_regex": "regex", "guided_grammar": "grammar", "guided_json": "json"}


def structured_outputs_unknown_backend(request: Any, original) -> Any:
    """``guided_*`` fields on a server whose backend this process does not know yet.

    Dropping them would answer 200 with unconstrained text.  The first one
    present (poot's precedence) becomes vLLM's own ``structured_outputs``
    field, unchecked here: ``SamplingParams`` validation, which knows the
    engine's real backend, then checks it (poot's full validation when that
    backend is poot, the other backend's own otherwise).
    """
    fields = request.model_extra or {}
    for field in GUIDED_FIELDS:
        if fields.get(field) is not None:
            return _params_with(request, {_GUIDED_TO_PARAM[field]: fields[field]}, field)
    return original(request)


def apply() -> None:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    from poot_vllm.hooks.state import server_backend

    def make(orig):
        def extract_structured_outputs(self, *args, **kwargs):
            backend = server_backend()
            if backend == "poot":
                return structured_outputs_for(self, lambda request: orig(request, *args, **kwargs))
            if backend is None:  # not known in this process yet: never drop a constraint
                return structured_outputs_unknown_backend(self, lambda request: orig(request, *args, **kwargs))
            return orig(self, *args, **kwargs)

        return extract_structured_outputs

    for cls in (ChatCompletionRequest, CompletionRequest):
        wrap(cls, "extract_structured_outputs", make)
