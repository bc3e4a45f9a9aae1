"""Validate poot requests in ``SamplingParams._validate_structured_outputs``.

vLLM runs this in the API-server process for every request with structured
outputs.  For a backend name it does not know, it falls through to its
"auto" branch and silently hands the request to xgrammar.  When the server's
backend is ``poot`` we run poot's complete validation here instead (sizes,
parsing, the budgeted automaton build), raise ``VLLMValidationError`` (a 400
naming the parameter) on refusal, and set ``_backend = "poot"`` so the engine
core builds poot's backend.  Other backends are untouched.
"""

from __future__ import annotations

from poot_vllm.hooks import Hook, wrap

HOOK = Hook(
    name="sampling_validation",
    target="vllm.sampling_params.SamplingParams._validate_structured_outputs",
    what="for backend 'poot': poot's validation, then _backend = 'poot'",
    why="an unknown backend name is silently routed to xgrammar by the auto branch",
    versions="0.32.x, 0.33.x",
    until="vLLM validates through a backend registry (patches/0001)",
)


def to_validation_error(exc, default_param: str = "structured_outputs"):
    from vllm.exceptions import VLLMValidationError

    return VLLMValidationError(str(exc), parameter=getattr(exc, "field", None) or default_param)


def validate_for_poot(params) -> None:
    """Poot's validation of vLLM ``StructuredOutputsParams``; raises VLLMValidationError."""
    from poot_vllm.constraints import check
    from poot_vllm.errors import PootError
    from poot_vllm.params import constraint_from_params
    from poot_vllm.settings import server_limits

    try:
        check(constraint_from_params(params, server_limits()), server_limits())
    except PootError as exc:
        raise to_validation_error(exc) from None


def apply() -> None:
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams

    def make(orig):
        def _validate_structured_outputs(self, model_config, structured_outputs_config, tokenizer):
            params = self.structured_outputs
            if structured_outputs_config is None or params is None or structured_outputs_config.backend != "poot":
                return orig(self, model_config, structured_outputs_config, tokenizer)
            if getattr(model_config, "is_diffusion", False) or tokenizer is None:
                return orig(self, model_config, structured_outputs_config, tokenizer)  # raises vLLM's 400
            if params._backend not in (None, "poot"):
                raise VLLMValidationError(
                    f"Request-level structured output backend selection is not supported: the request "
                    f"asked for '{params._backend}' but this server runs 'poot'. Remove '_backend'.",
                    parameter="structured_outputs",
                )
            validate_for_poot(params)
            params._backend = "poot"
            params._backend_was_auto = False

        return _validate_structured_outputs

    wrap(SamplingParams, "_validate_structured_outputs", make)
