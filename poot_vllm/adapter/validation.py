"""poot's validation of a request in vLLM's terms (API server).

The one place that turns a request's ``StructuredOutputsParams`` into a
checked core constraint and a core refusal into vLLM's 400
(``VLLMValidationError`` naming the parameter), and that refuses at
admission a request whose shortest conforming reply cannot fit
``max_tokens``.  Used by the runtime patches (``patches/sampling_validation``,
``patches/budget_admission``) and by the native registry validator
(``native.validate_request``) alike, so both paths refuse the same requests
with the same messages.

Budget admission needs the model's vocabulary, which a request object does
not carry: it is recorded from the API server's renderer when that is
created and, as a fallback, from ``SamplingParams`` validation (which vLLM
hands the tokenizer).  No vocabulary recorded yet, an unknown shortest
reply, or budget masks turned off (``POOT_BUDGET_MASKS=0``): the request is
admitted.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("vllm.poot")


def to_validation_error(exc, default_param: str = "structured_outputs"):
    from vllm.exceptions import VLLMValidationError

    return VLLMValidationError(str(exc), parameter=getattr(exc, "field", None) or default_param)


def validate_for_poot(params, vocab_size: int | None = None) -> None:
    """Poot's validation of vLLM ``StructuredOutputsParams``; raises VLLMValidationError.

    With the model's ``vocab_size``, a DFA constraint whose estimated mask
    work passes ``max_mask_work`` is refused here too (a 400 instead of a
    failed request in the engine).  ``param`` is the request field the
    request hook recorded (``_poot_field``), else ``structured_outputs``.
    """
    from poot_vllm.adapter.params import constraint_from_params
    from poot_vllm.adapter.server_state import check_working
    from poot_vllm.core.constraints import check_mask_work, compile_automaton
    from poot_vllm.core.errors import PootError
    from poot_vllm.core.limits import server_limits

    limits = server_limits()
    field = getattr(params, "_poot_field", None) or "structured_outputs"
    try:
        check_working()  # a failed runtime patch: a 400 naming it, never a silently weaker constraint
        constraint = constraint_from_params(params, limits)
        # publish: the engine takes this DFA instead of building it again (core/handoff.py)
        automaton = compile_automaton(constraint, limits, publish=True)
        if vocab_size:
            check_mask_work(automaton, vocab_size, limits, constraint)
    except PootError as exc:
        raise to_validation_error(exc.with_field(field), field) from None


def vocab_size(model_config) -> int | None:
    """The model's vocabulary size (the bitmask width), or None for a config without one."""
    get = getattr(model_config, "get_vocab_size", None)
    if get is None:
        return None
    try:
        return int(get())
    except (TypeError, ValueError):  # a config without a vocabulary: skip the estimate
        return None


def max_tokens_field(request: Any) -> str:
    return "max_completion_tokens" if getattr(request, "max_completion_tokens", None) is not None else "max_tokens"


def admit(params: Any, field: str = "max_tokens", reasoning_first: bool | None = None) -> None:
    """Raise ``VLLMValidationError`` (400) if ``params`` (``SamplingParams``)
    constrain the reply to something longer than ``params.max_tokens``.

    ``reasoning_first``: whether, on a server with a reasoning parser, vLLM
    lets the model reason before the constraint starts (a chat request's
    ``include_reasoning``); only then is the reasoning capped so that the
    reply fits after it.  ``None`` (the checks that do not see the request):
    left as it is.  With ``include_reasoning: false`` vLLM constrains from
    the first token, and a forced end marker would break the reply."""
    from poot_vllm.adapter.params import constraint_from_params
    from poot_vllm.core.budget import SERVER_VOCABULARY, ReplyDoesNotFit, check_reply_fits
    from poot_vllm.core.errors import PootError
    from poot_vllm.core.limits import budget_masks_enabled, server_limits

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
    if reasoning_first:
        _leave_room_after_reasoning(params, constraint, vocab, limits)
    so._poot_admitted = True  # the engine-side validation need not check again


def admitted(params: Any) -> bool:
    """Whether :func:`admit` already checked these ``SamplingParams`` (in the request handler)."""
    so = getattr(params, "structured_outputs", None)
    return bool(getattr(so, "_poot_admitted", False))


def _leave_room_after_reasoning(params: Any, constraint: Any, vocab: Any, limits: Any) -> None:
    """On a server with a reasoning parser the constraint starts after the
    reasoning, and both share ``max_tokens``: cap the reasoning
    (``thinking_token_budget``, which makes vLLM force the end marker) so
    that the shortest conforming reply still fits after it."""
    from poot_vllm.adapter.server_state import reasoning_end_tokens
    from poot_vllm.core.budget import shortest_reply

    end = reasoning_end_tokens()
    if end is None or not hasattr(params, "thinking_token_budget"):
        return
    shortest = shortest_reply(constraint, vocab, limits)
    if shortest is None:
        return
    cap = max(int(params.max_tokens) - shortest - end, 0)
    asked = params.thinking_token_budget
    params.thinking_token_budget = cap if asked is None else min(int(asked), cap)


def record_from_validation(model_config: Any, tokenizer: Any) -> None:
    """Record the tokenizer vLLM's ``SamplingParams`` validation received."""
    from poot_vllm.core.budget import SERVER_VOCABULARY

    try:
        SERVER_VOCABULARY.record(tokenizer, int(model_config.get_vocab_size()))
    except Exception:
        logger.debug("poot: could not record the tokenizer for budget admission", exc_info=True)
