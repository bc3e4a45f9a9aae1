"""Refuse, at admission, a request whose shortest conforming reply cannot fit.

Where: ``ChatCompletionRequest.to_sampling_params`` /
``CompletionRequest.to_sampling_params`` run in the request handler, before
the engine is asked and before a streaming response starts (so the refusal is
a real 400 for ``stream: true`` too), and receive the effective ``max_tokens``
(vLLM's ``get_max_tokens``: the request's value or the server default, capped
at ``max_model_len`` minus the prompt length).  The check itself is
:func:`poot_vllm.adapter.validation.admit`; this patch also records the model's
vocabulary from the API server's renderer (``BaseRenderer.__init__``).
"""

from __future__ import annotations

from poot_vllm.adapter.patches import Hook, wrap

#: Applied when the first of these vLLM modules is imported (adapter/when_imported.py).
TRIGGERS = ("vllm.entrypoints.openai.chat_completion.protocol", "vllm.entrypoints.openai.completion.protocol")

HOOK = Hook(
    name="budget_admission",
    target="vllm.entrypoints.openai.{chat_completion,completion}.protocol.*Request.to_sampling_params, "
           "vllm.renderers.base.BaseRenderer.__init__",
    what="400 when the shortest conforming reply does not fit max_tokens (or the context left)",
    why="otherwise the reply is cut at max_tokens and does not parse",
    versions="0.32.x, 0.33.x (to_sampling_params); 0.32.x (renderer)",
    until="vLLM runs sampling-params and server-start hooks for structured-output plugins (patches/0004)",
    process="API server",
    upstream="patches/vllm-0.33/0004-server-start-and-sampling-params-hooks.patch (admission in to_sampling_params; "
    "the vocabulary from init_app_state)",
)


def seam_present() -> bool:
    """patches/0004: ``to_sampling_params`` runs the sampling-params hooks and
    ``init_app_state`` the server-start hooks (poot records the vocabulary there)."""
    from poot_vllm.adapter.native import sampling_params_hook_point, server_start_hook_point

    return sampling_params_hook_point() is not None and server_start_hook_point() is not None


def apply() -> None:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    from poot_vllm.adapter.server_state import poot_is_server_backend
    from poot_vllm.adapter.requests import refuse_dropped_fields
    from poot_vllm.adapter.validation import admit, max_tokens_field, record_from_validation

    def make_to_sampling_params(orig):
        def to_sampling_params(self, max_tokens, *args, **kwargs):
            if poot_is_server_backend():
                refuse_dropped_fields(self)
            params = orig(self, max_tokens, *args, **kwargs)
            if poot_is_server_backend():
                admit(params, max_tokens_field(self), reasoning_first=getattr(self, "include_reasoning", True))
            return params

        return to_sampling_params

    for cls in (ChatCompletionRequest, CompletionRequest):
        wrap(cls, "to_sampling_params", make_to_sampling_params, expects=("self", "max_tokens"))

    try:
        from vllm.renderers.base import BaseRenderer
    except ImportError:  # vLLM without renderers: validation records the tokenizer
        return

    def make_renderer_init(orig):
        def __init__(self, config, tokenizer, *args, **kwargs):
            orig(self, config, tokenizer, *args, **kwargs)
            if tokenizer is not None and poot_is_server_backend():
                record_from_validation(config.model_config, tokenizer)

        return __init__

    wrap(BaseRenderer, "__init__", make_renderer_init, expects=("self", "config", "tokenizer"))
