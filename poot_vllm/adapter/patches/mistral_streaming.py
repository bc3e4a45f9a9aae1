"""Streamed Mistral (pre-v11) tool calls: arguments never start with the key's ``:``.

vLLM's Mistral parser streams ``[TOOL_CALLS][{"name": "f", "arguments": {...}}]``
by feeding each delta to ijson in pieces.  When a delta ends right after the
key ``"arguments"`` (its closing quote and the ``:`` in two tokens: the
random tiny model does that in about 1 call in 5, a real model can), ijson
reports the key, the parser waits for the value's ``{``, and hands on the
next delta's ``:{`` whole as the arguments' first chunk: the client's
arguments read ``:{"city": ...}`` and do not parse.  Its first-chunk clean-up
strips only whitespace.  Non-streamed replies are parsed whole and are exact.

This hook drops that colon (and the whitespace after it) from the first
chunk of a call's streamed arguments, and from the parser's own record of
what it streamed (``streamed_args_for_tool``, ``prev_tool_call_arr``: the
serving layer compares them with the final arguments to send what is
missing).  Arguments are JSON and never start with ``:``, so nothing else
changes.  Only on servers whose backend is poot: a forced call must parse.

A vLLM carrying ``patches/vllm-X.Y/0005`` has the fix in the parser
(``_first_arguments_chunk``): this hook is then skipped (:func:`seam_present`).
"""

from __future__ import annotations

from poot_vllm.adapter.patches import Hook, wrap

PARSER_MODULE = "vllm.parser.mistral"

#: Applied when the first of these vLLM modules is imported (adapter/when_imported.py).
TRIGGERS = (PARSER_MODULE,)

HOOK = Hook(
    name="mistral_streaming",
    target=f"{PARSER_MODULE}.MistralParser._extract_tool_calls_streaming_pre_v11_tokenizer",
    what="a streamed call's first arguments chunk (and the parser's record of it) drops a leading ':'",
    why="when a delta ends right after '\"arguments\"', vLLM streams the arguments as ':{...}', "
    "which no client can parse",
    versions="0.32.x, 0.33.x",
    until="vLLM's Mistral parser strips the key's colon itself (patches/0005)",
    process="API server",
    upstream="patches/vllm-0.33/0005-mistral-streamed-arguments-colon.patch",
)


def seam_present() -> bool:
    """patches/0005: the parser cleans the first arguments chunk itself."""
    import importlib

    return hasattr(importlib.import_module(PARSER_MODULE), "_first_arguments_chunk")


def drop_key_colon(parser, message) -> None:
    """Remove the ``:`` the parser put at the start of a call's streamed arguments.

    ``streamed_args_for_tool[i]`` is everything streamed for call ``i`` so far,
    this delta included: if it starts with ``:``, this delta carries the
    arguments' first chunk, which starts with that same colon.
    """
    for call in getattr(message, "tool_calls", None) or ():
        function = call.function
        index = call.index
        if function is None or not function.arguments or not 0 <= index < len(parser.streamed_args_for_tool):
            continue
        streamed = parser.streamed_args_for_tool[index]
        if not streamed.startswith(":") or not function.arguments.lstrip().startswith(":"):
            continue
        fixed = streamed[1:].lstrip()
        parser.streamed_args_for_tool[index] = fixed
        record = parser.prev_tool_call_arr[index] if index < len(parser.prev_tool_call_arr) else None
        if isinstance(record, dict) and record.get("arguments") == streamed:
            record["arguments"] = fixed
        function.arguments = function.arguments.lstrip()[1:].lstrip()


def apply() -> None:
    import importlib

    from poot_vllm.adapter.server_state import poot_is_server_backend

    mistral = importlib.import_module(PARSER_MODULE)

    def make(orig):
        def _extract_tool_calls_streaming_pre_v11_tokenizer(self, delta_text, delta_token_ids, *args, **kwargs):
            message = orig(self, delta_text, delta_token_ids, *args, **kwargs)
            if message is not None and poot_is_server_backend():
                drop_key_colon(self, message)
            return message

        return _extract_tool_calls_streaming_pre_v11_tokenizer

    wrap(mistral.MistralParser, "_extract_tool_calls_streaming_pre_v11_tokenizer", make,
         expects=("self", "delta_text", "delta_token_ids"))
