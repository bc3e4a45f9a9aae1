"""Refuse, at admission, a request whose shortest conforming reply cannot fit.

Where: ``ChatCompletionRequest.to_sampling_params`` /
``CompletionRequest.to_sampling_params`` run in the request handler, before
the engine is asked and before a streaming response starts (so the refusal is
a real 400 for ``stream: true`` too), and receive the effective ``max_tokens``
(vLLM's ``get_max_tokens``: the request's value or the server default, capped
at ``max_model_len`` minus the prompt length).  The check needs the model's
vocabulary, which a request object does not carry: it is recorded from the
API server's renderer when that is created (``BaseRenderer.__init__``) and,
as a fallback, from ``SamplingParams`` validation (which vLLM hands the
tokenizer; see ``sampling_validation``), which also runs the same check for
requests that do not come through the OpenAI request classes.

No vocabulary recorded yet, an unknown shortest reply, or budget masks turned
off (``POOT_BUDGET_MASKS=0``): the request is admitted.
"""

from __future__ import annotations

import logging
from typing import Any

from poot_vllm.hooks import Hook, wrap

logger = logging.getLogger("vllm.poot")

#: Applied when the first of these vLLM modules is imported (hooks/when_imported.py).
TRIGGERS = ("vllm.entrypoints.openai.chat_completion.protocol", "vllm.entrypoints.openai.completion.protocol")

HOOK = Hook(
    name="budget_admission",
    target="vllm.entrypoints.openai.{chat_completion,completion}.protocol.*Request.to_sampling_params, "
           "vllm.renderers.base.BaseRenderer.__init__",
    what="400 when the shortest conforming reply does not fit max_tokens (or the context left)",
    why="otherwise the reply is cut at max_tokens and does not parse",
    versions="0.32.x, 0.33.x (to_sampling_params); 0.32.x (renderer)",
    until="vLLM has a request hook point for structured-output plugins (patches/0002)",
)


def _max_tokens_field(request: Any) -> str:
    return "max_completion_tokens" if getattr(request, "max_completion_tokens", None) is not None else "max_tokens"


def admit(params: Any, field: str = "max_tokens") -> None:
    """Raise ``VLLMValidationError`` (400) if ``params`` (``SamplingParams``)
    constrain the reply to something longer than ``params.max_tokens``."""
    from poot_vllm.budget import SERVER_VOCABULARY, ReplyDoesNotFit, check_reply_fits
    from poot_vllm.errors import PootError
    from poot_vllm.hooks.sampling_validation import to_validation_error
    from poot_vllm.params import constraint_from_params
    from poot_vllm.settings import budget_masks_enabled, server_limits

    so = getattr(params, "structured_outputs", None)
    if so is None or params.max_tokens is None or getattr(params, "ignore_eos", False):
        return
    if not budget_masks_enabled():
        return
    vocab = SERVER_VOCABULARY.get()
    if vocab is None:
        return
    limits = server_limits()
    try:
        constraint = constraint_from_params(so, limits)
    except PootError:
        return  # refused by the constraint validation, with its own message
    try:
        check_reply_fits(constraint, params.max_tokens, vocab, limits, field=field)
    except ReplyDoesNotFit as exc:
        raise to_validation_error(exc, field) from None
    except PootError:
        return  # a constraint the validation refuses anyway


def record_from_validation(model_config: Any, tokenizer: Any) -> None:
    """Record the tokenizer vLLM's ``SamplingParams`` validation received."""
    from poot_vllm.budget import SERVER_VOCABULARY

    try:
        SERVER_VOCABULARY.record(tokenizer, int(model_config.get_vocab_size()))
    except Exception:
        logger.debug("poot: could not record the tokenizer for budget admission", exc_info=True)


def apply() -> None:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    from poot_vllm.hooks.state import poot_is_server_backend

    def make_to_sampling_params(orig):
        def to_sampling_params(self, max_tokens, *args, **kwargs):
            params = orig(self, max_tokens, *args, **kwargs)
            if poot_is_server_backend():
                admit(params, _max_tokens_field(self))
            return params

        return to_sampling_params

    for cls in (ChatCompletionRequest, CompletionRequest):
        wrap(cls, "to_sampling_params", make_to_sampling_params)

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

    wrap(BaseRenderer, "__init__", make_renderer_init)
