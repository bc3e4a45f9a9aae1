"""Tool-call codecs: what poot needs to know about each model family's format.

A codec names a tool-call text format: poot's name for it (``POOT_TOOL_CODEC``),
the vLLM ``--tool-call-parser`` that reads it, the marker its calls start
with, and whether poot can force it.  Only the ChatML/Hermes format can be
forced (its calls are a regular language poot builds from the tools'
schemas, ``forcing.py``), so only :class:`HermesCodec` carries the exact
envelope: markers, separator and the text before the arguments.  Reading
replies back is the job of vLLM's tool parser; the reference encoders and
parsers the tests check against live in ``tests/helpers/tool_codecs.py``.
vLLM-free.
"""

from __future__ import annotations

import json


class Codec:
    #: poot's name for the format (``POOT_TOOL_CODEC`` values)
    name: str = ""
    #: vLLM ``--tool-call-parser`` that reads this format
    vllm_parser: str = ""
    #: whether poot can force calls in this format (a regular language)
    can_force: bool = False
    #: the text that starts the calls
    start_marker: str = ""


class HermesCodec(Codec):
    """ChatML / Hermes / Qwen: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``.

    The envelope puts ``name`` first and ``arguments`` last: vLLM's hermes
    streaming parser reads the name first and streams the arguments up to
    the envelope's closing brace.  Several calls are separated by a newline,
    as the Hermes/Qwen templates render them.
    """

    name = "hermes"
    vllm_parser = "hermes"
    can_force = True
    start_marker = "<tool_call>"
    end_marker = "</tool_call>"
    separator = "\n"
    #: Characters never written raw inside the arguments' strings (only as
    #: ``\\u00XX``): both markers start with ``<``, so neither the text of a
    #: marker nor a token holding one can appear inside the arguments, where
    #: vLLM's hermes parser would cut the call (it finds the markers by text).
    escaped_in_arguments = "<"

    def envelope_head(self, name: str) -> str:
        """The call's text up to its arguments (after ``start_marker`` and a newline)."""
        return '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": '


class MistralCodec(Codec):
    """Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}]`` (v11: ``[TOOL_CALLS]name[ARGS]{...}``)."""

    name = "mistral"
    vllm_parser = "mistral"
    start_marker = "[TOOL_CALLS]"


class Llama3Codec(Codec):
    """Llama 3.1+ JSON calls: ``<|python_tag|>{"name": ..., "parameters": {...}}`` (several joined by ``; ``)."""

    name = "llama3"
    vllm_parser = "llama3_json"
    start_marker = "<|python_tag|>"


CODECS: dict[str, Codec] = {c.name: c for c in (HermesCodec(), MistralCodec(), Llama3Codec())}


def get_codec(name: str) -> Codec:
    try:
        return CODECS[name]
    except KeyError:
        raise ValueError(f"unknown tool-call codec {name!r}; known: {', '.join(CODECS)}") from None
