"""Drive vLLM's Mistral tool parser through a streamed forced call, delta by delta.

Shared by the stock-hook test (tests/unit/test_hooks.py) and the patched-vLLM
child (tests/unit/test_native_seams.py): the same deltas, whichever code fixes
vLLM's leading-``:`` artefact.
"""

from __future__ import annotations

#: A forced call whose key ``"arguments"`` ends one delta and whose ``:{`` starts the next:
#: the split that made vLLM 0.32/0.33 stream the arguments as ``:{...}``.
SPLIT_AFTER_KEY = ('[TOOL_CALLS]', '[{"name": "get_weather", "arguments"', ':{"city": ', '"Paris"}}]')
#: The same call with the colon in the key's delta (always streamed right).
SPLIT_AFTER_COLON = ('[TOOL_CALLS]', '[{"name": "get_weather", "arguments":', ' {"city": ', '"Paris"}}]')
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def stream_mistral_call(tokenizer, deltas) -> dict:
    """Feed ``deltas`` to a fresh ``MistralParser``; what a client would assemble.

    Returns ``{"name", "arguments", "recorded"}``: the streamed name, the
    concatenated streamed arguments, and the parser's own record of them
    (``streamed_args_for_tool``, which vLLM compares with the final arguments).
    """
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.mistral import MistralParser

    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                    tools=TOOLS, tool_choice="required")
    parser = MistralParser(tokenizer, request.tools)
    previous_text, previous_ids = "", []
    name, arguments = None, ""
    for delta in deltas:
        ids = tokenizer.encode(delta, add_special_tokens=False)
        message = parser.extract_tool_calls_streaming(
            previous_text, previous_text + delta, delta, previous_ids, previous_ids + ids, ids, request)
        previous_text, previous_ids = previous_text + delta, previous_ids + ids
        for call in getattr(message, "tool_calls", None) or ():
            if call.function and call.function.name:
                name = call.function.name
            arguments += (call.function.arguments or "") if call.function else ""
    return {"name": name, "arguments": arguments, "recorded": list(parser.streamed_args_for_tool)}
