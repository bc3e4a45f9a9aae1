"""Let vLLM's engine core build poot's backend and compile with request info.

``StructuredOutputManager.grammar_init`` hard-codes its list of backends and
raises for any other name.  When a request's ``_backend`` is ``poot`` and no
backend exists yet, we create :class:`poot_vllm.adapter.backend.PootBackend` first
(0.33 also latches ``backend_name``), then let the original schedule the
async compile.  ``_create_grammar`` is wrapped so poot compiles with what
only the request knows (its stop ids and ``max_tokens``, for budget-aware
masks); ``compile_grammar`` alone does not receive the request.
"""

from __future__ import annotations

from poot_vllm.adapter.patches import Hook, wrap

#: Applied when the first of these vLLM modules is imported (adapter/when_imported.py).
TRIGGERS = ("vllm.v1.structured_output",)

HOOK = Hook(
    name="engine_manager",
    target="vllm.v1.structured_output.StructuredOutputManager.grammar_init, ._create_grammar",
    what="create PootBackend for backend 'poot'; compile with the request's budget",
    why="the engine core's backend list is hard-coded",
    versions="0.32.x, 0.33.x",
    until="vLLM builds backends from a registry (patches/0001)",
    process="engine core",
    upstream="patches/vllm-0.33/0001-structured-output-backend-registry.patch",
)


def seam_present() -> bool:
    """patches/0001: the manager builds backends from the registry and compiles
    through ``StructuredOutputBackend.compile_grammar_for_request``."""
    try:
        from vllm.v1 import structured_output
        from vllm.v1.structured_output.backend_types import StructuredOutputBackend
    except ImportError:
        return False
    return hasattr(structured_output, "get_structured_output_backend") and hasattr(
        StructuredOutputBackend, "compile_grammar_for_request"
    )


def _request_backend(request) -> str | None:
    params = getattr(request, "sampling_params", None)
    so = getattr(params, "structured_outputs", None)
    return getattr(so, "_backend", None)


def apply() -> None:
    from vllm.v1.structured_output import StructuredOutputManager

    def make_grammar_init(orig):
        def grammar_init(self, request, *args, **kwargs):
            if (
                request.structured_output_request is not None
                and self.backend is None
                and _request_backend(request) == "poot"
            ):
                from poot_vllm.adapter.backend import PootBackend

                self.backend = PootBackend(
                    self.vllm_config,
                    tokenizer=self.tokenizer,
                    vocab_size=self.vllm_config.model_config.get_vocab_size(),
                )
                if hasattr(self, "backend_name"):  # vLLM 0.33 latches one backend per engine
                    self.backend_name = "poot"
            return orig(self, request, *args, **kwargs)

        return grammar_init

    def make_create_grammar(orig):
        def _create_grammar(self, request, *args, **kwargs):
            from poot_vllm.adapter.backend import PootBackend

            if isinstance(self.backend, PootBackend):
                try:
                    return self.backend.compile_for_request(request)
                except Exception:
                    import logging

                    logging.getLogger("vllm.poot").exception(
                        "poot: failed to compile the constraint of request %s", request.request_id
                    )
                    raise
            return orig(self, request, *args, **kwargs)

        return _create_grammar

    wrap(StructuredOutputManager, "grammar_init", make_grammar_init, expects=("self", "request"))
    wrap(StructuredOutputManager, "_create_grammar", make_create_grammar, expects=("self", "request"))
