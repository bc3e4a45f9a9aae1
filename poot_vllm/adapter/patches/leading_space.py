"""A whole SentencePiece reply drops the one leading space of its first word.

What and why: ``adapter/reply_text.py`` (poot's contract, docs/safeguards.md
"Leading space").  This hook runs :func:`~poot_vllm.adapter.reply_text.adjust_outputs`
on the final output of non-streamed chat and completion requests.

A vLLM carrying ``patches/vllm-X.Y/0003`` passes each whole reply's final
output through registered final-output hooks (``register_final_output_hook``);
poot's hook there calls the same function (adapter/native.py), and this
runtime hook is skipped (:func:`seam_present`).
"""

from __future__ import annotations

import logging

from poot_vllm.adapter.patches import Hook, wrap
from poot_vllm.adapter.reply_text import adjust_outputs

logger = logging.getLogger("vllm.poot")

#: Applied when the first of these vLLM modules is imported (adapter/when_imported.py).
TRIGGERS = ("vllm.entrypoints.openai.chat_completion.serving", "vllm.entrypoints.openai.completion.serving")

HOOK = Hook(
    name="leading_space",
    target="vllm.entrypoints.openai.chat_completion.serving.OpenAIServingChat.chat_completion_full_generator, "
    "vllm.entrypoints.openai.completion.serving.OpenAIServingCompletion.request_output_to_completion_response",
    what="a non-streamed reply of a poot-constrained request whose first token is a SentencePiece word start "
    "('▁...') drops the one leading space from its text (streamed deltas, logprobs and token ids keep it)",
    why="SentencePiece's word marker makes the reply text start with a space the tokenizer's decode does not "
    "return; poot's contract is the decoded reply",
    versions="0.32.x, 0.33.x",
    until="vLLM lets a plugin adjust a whole reply's final output (patches/0003: final-output hook)",
    process="API server",
    upstream="patches/vllm-0.33/0003-tool-choice-and-final-output-hooks.patch (register_final_output_hook); "
    "vLLM's incremental detokenizer keeps the space by design",
)


def seam_present() -> bool:
    """patches/0003: chat and completion serving pass whole replies through final-output hooks."""
    from poot_vllm.adapter.native import final_output_hook_point

    if final_output_hook_point() is None:
        return False
    from vllm.entrypoints.openai.chat_completion import serving as chat
    from vllm.entrypoints.openai.completion import serving as completion

    return hasattr(chat, "apply_final_output_hooks") and hasattr(completion, "apply_final_output_hooks")


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
