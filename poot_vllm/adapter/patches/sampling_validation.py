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

from poot_vllm.adapter.patches import Hook, wrap

#: Applied when the first of these vLLM modules is imported (adapter/when_imported.py).
TRIGGERS = ("vllm.sampling_params",)

HOOK = Hook(
    name="sampling_validation",
    target="vllm.sampling_params.SamplingParams._validate_structured_outputs",
    what="for backend 'poot': poot's validation, then _backend = 'poot'",
    why="an unknown backend name is silently routed to xgrammar by the auto branch",
    versions="0.32.x, 0.33.x",
    until="vLLM validates through a backend registry (patches/0001)",
    process="API server",
    upstream="patches/vllm-0.33/0001-structured-output-backend-registry.patch",
)


def seam_present() -> bool:
    """patches/0001: ``_validate_structured_outputs`` calls the registered validator."""
    import vllm.sampling_params as sp

    return hasattr(sp, "get_structured_output_backend")


def apply() -> None:
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams

    from poot_vllm.adapter.validation import admit, admitted, record_from_validation, validate_for_poot, vocab_size

    def make(orig):
        def _validate_structured_outputs(self, model_config, structured_outputs_config, tokenizer, *args, **kwargs):
            params = self.structured_outputs
            if structured_outputs_config is not None:
                # The engine's own config: the authoritative backend for this process's request hooks.
                from poot_vllm.adapter.server_state import record_server_backend

                record_server_backend(structured_outputs_config.backend, from_config=True)
            if structured_outputs_config is None or params is None or structured_outputs_config.backend != "poot":
                return orig(self, model_config, structured_outputs_config, tokenizer, *args, **kwargs)
            if getattr(model_config, "is_diffusion", False) or tokenizer is None:
                return orig(self, model_config, structured_outputs_config, tokenizer, *args, **kwargs)  # raises vLLM's 400
            if params._backend not in (None, "poot"):
                raise VLLMValidationError(
                    f"Request-level structured output backend selection is not supported: the request "
                    f"asked for '{params._backend}' but this server runs 'poot'. Remove '_backend'.",
                    parameter="structured_outputs",
                )
            validate_for_poot(params, vocab_size(model_config))
            params._backend = "poot"
            params._backend_was_auto = False
            # Budget admission (budget_admission.py): vLLM hands us the tokenizer here.
            record_from_validation(model_config, tokenizer)
            if not admitted(self):  # budget_admission.py admitted it in the request handler
                admit(self)

        return _validate_structured_outputs

    wrap(SamplingParams, "_validate_structured_outputs", make,
         expects=("self", "model_config", "structured_outputs_config", "tokenizer"))
