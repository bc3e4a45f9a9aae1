"""Tool calls in each model family's own format: codecs, forcing, selection.

* ``codecs``: ChatML/Hermes ``<tool_call>``, Mistral ``[TOOL_CALLS]``, Llama
  3.1 ``<|python_tag|>``: names, markers and the envelope poot forces;
* ``forcing``: ``tool_choice`` required/named as a regular language
  (``compile_tool_call_constraint``, used by ``constraints.compile_automaton``);
* ``selection``: which codec a model (or this server) uses.

vLLM-free; the vLLM side is ``poot_vllm/adapter/tool_forcing.py`` and
``poot_vllm/adapter/patches/tool_responses.py``; replies are read back by
vLLM's tool parsers (the tests' reference encoders and parsers are in
``tests/helpers/``).  See docs/tools.md.
"""

from poot_vllm.core.tool_calls.codecs import CODECS, Codec, HermesCodec, get_codec
from poot_vllm.core.tool_calls.forcing import compile_tool_call_constraint, tool_call_regex, tool_call_spec
from poot_vllm.core.tool_calls.selection import codec_for, codec_for_model_dir, codec_for_parser, server_codec

__all__ = [
    "CODECS", "Codec", "HermesCodec", "get_codec",
    "compile_tool_call_constraint", "tool_call_regex", "tool_call_spec",
    "codec_for", "codec_for_model_dir", "codec_for_parser", "server_codec",
]
