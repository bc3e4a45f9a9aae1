"""The text of a whole reply poot constrained: SentencePiece's one leading space.

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

:func:`adjust_outputs` applies it to a finished ``RequestOutput``; vLLM calls
it through the runtime hook ``adapter/patches/leading_space.py`` on stock
vLLM, and through its final-output hook on a fork carrying
``patches/vllm-X.Y/0003`` (``adapter/native.py``).
"""

from __future__ import annotations

from typing import Any

#: SentencePiece's word-start marker (U+2581), as ``tokenizers`` spells it in pieces.
SPM_SPACE = "\u2581"


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
