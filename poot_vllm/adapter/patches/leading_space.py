"""A whole SentencePiece reply drops the one leading space of its first word.

SentencePiece models mark a word start with ``▁`` (a space), so a reply's
first word-initial token carries a space: ``guided_regex: " the [a-z]+"``
makes the model emit ``▁the`` ... (bytes ``b" the..."``), and poot's
constraint is checked on exactly those bytes.  The tokenizer's own ``decode``
of the reply drops that single leading space (SentencePiece strips the
space it adds at the start of a text); vLLM detokenizes the reply after the
prompt and keeps it.  poot's contract (docs/safeguards.md, "Leading space"):

* a whole (non-streamed) chat or completion reply of a request poot
  constrained, from a tokenizer with SentencePiece word markers, whose first
  generated token starts with ``▁``: its text drops exactly one leading space
  -- ``" the cat"`` is returned as ``"the cat"``, what ``tokenizer.decode``
  gives;
* streamed deltas keep the space (the first delta is ``" the"``), and so do
  logprob bytes and token ids: they are the tokens, not the text.

Not applied to ``echo`` completions (the reply then continues the prompt's
text, where the space separates two words), to byte-level BPE tokenizers
(their first token's space is the model's choice, not a marker), to requests
poot did not constrain, or to servers on another backend.
"""

from __future__ import annotations

import logging
from typing import Any

from poot_vllm.adapter.patches import Hook, wrap

logger = logging.getLogger("vllm.poot")

#: Applied when the first of these vLLM modules is imported (adapter/when_imported.py).
TRIGGERS = ("vllm.entrypoints.openai.chat_completion.serving", "vllm.entrypoints.openai.completion.serving")

#: SentencePiece's word-start marker (U+2581), as ``tokenizers`` spells it in pieces.
SPM_SPACE = "\u2581"

HOOK = Hook(
    name="leading_space",
    target="vllm.entrypoints.openai.chat_completion.serving.OpenAIServingChat.chat_completion_full_generator, "
    "vllm.entrypoints.openai.completion.serving.OpenAIServingCompletion.request_output_to_completion_response",
    what="a non-streamed reply of a poot-constrained request whose first token is a SentencePiece word start "
    "('▁...') drops the one leading space from its text (streamed deltas, logprobs and token ids keep it)",
    why="SentencePiece's word marker makes the reply text start with a space the tokenizer's decode does not "
    "return; poot's contract is the decoded reply",
    versions="0.32.x, 0.33.x",
    until="vLLM detokenizes a whole reply the way the tokenizer decodes it (or poot drops the contract)",
    process="API server",
    upstream="none: vLLM's incremental detokenizer keeps the space by design",
)


def drop_leading_space(text: str, first_piece: str | None) -> str:
    """``text`` without the one leading space its first token's ``▁`` put there, else unchanged."""
    if first_piece and first_piece.startswith(SPM_SPACE) and text.startswith(" "):
        return text[1:]
    return text


def poot_constrained(request: Any) -> bool:
    """Whether poot constrains this OpenAI request (the server's backend is poot and a constraint is set)."""
    from poot_vllm.adapter.requests import GUIDED_FIELDS, response_format_dict
    from poot_vllm.adapter.server_state import poot_is_server_backend
    from poot_vllm.adapter.tool_forcing import forces_tool_call

    if not poot_is_server_backend():
        return False
    extra = getattr(request, "model_extra", None) or {}
    if any(extra.get(f) is not None for f in GUIDED_FIELDS):
        return True
    response_format = response_format_dict(getattr(request, "response_format", None))
    if response_format and response_format.get("type") not in (None, "text"):
        return True
    params = getattr(request, "structured_outputs", None)
    if params is not None and any(getattr(params, f, None) is not None
                                  for f in ("json", "regex", "choice", "grammar", "json_object", "structural_tag")):
        return True
    try:
        return bool(forces_tool_call(request))
    except Exception:  # noqa: BLE001 - a malformed tools list was refused earlier; never fail the reply here
        return False


def _first_piece(tokenizer: Any, token_ids: Any) -> str | None:
    if tokenizer is None or not token_ids:
        return None
    try:
        pieces = tokenizer.convert_ids_to_tokens([int(token_ids[0])])
    except Exception:  # noqa: BLE001 - no piece: leave the text as vLLM made it
        return None
    return pieces[0] if pieces and isinstance(pieces[0], str) else None


def adjust_outputs(result: Any, request: Any, tokenizer: Any) -> Any:
    """``result`` (a ``RequestOutput``) with each output's text adjusted by :func:`drop_leading_space`."""
    outputs = getattr(result, "outputs", None)
    if not outputs or getattr(request, "echo", False) or not poot_constrained(request):
        return result
    for output in outputs:
        text = getattr(output, "text", None)
        if isinstance(text, str):  # this request's own final output: adjusted in place
            output.text = drop_leading_space(text, _first_piece(tokenizer, getattr(output, "token_ids", None)))
    return result


def _wrap_chat() -> None:
    from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat

    def make(orig):
        async def chat_completion_full_generator(self, request, result_generator, *args, **kwargs):
            # after result_generator: request_id, model_name, conversation, tokenizer, ...
            tokenizer = kwargs.get("tokenizer", args[3] if len(args) > 3 else None)

            async def adjusted():
                async for res in result_generator:
                    yield adjust_outputs(res, request, tokenizer) if getattr(res, "finished", True) else res

            return await orig(self, request, adjusted(), *args, **kwargs)

        return chat_completion_full_generator

    wrap(OpenAIServingChat, "chat_completion_full_generator", make,
         expects=("self", "request", "result_generator", "request_id", "model_name", "conversation", "tokenizer"))


def _wrap_completion() -> None:
    from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion

    def make(orig):
        def request_output_to_completion_response(self, final_res_batch, request, *args, **kwargs):
            # after request: request_id, created_time, model_name, tokenizer, ...
            tokenizer = kwargs.get("tokenizer", args[3] if len(args) > 3 else None)
            batch = [adjust_outputs(res, request, tokenizer) for res in final_res_batch]
            return orig(self, batch, request, *args, **kwargs)

        return request_output_to_completion_response

    wrap(OpenAIServingCompletion, "request_output_to_completion_response", make,
         expects=("self", "final_res_batch", "request", "request_id", "created_time", "model_name", "tokenizer"))


def apply() -> None:
    _wrap_chat()
    _wrap_completion()
