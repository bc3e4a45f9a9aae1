"""Tool-call codecs: what poot needs to know about each model family's format.

A codec names a tool-call text format: poot's name for it (``POOT_TOOL_CODEC``),
the vLLM ``--tool-call-parser`` that reads it, the marker its calls start
with, and the exact envelope poot forces (``forcing.py`` builds the regular
language ``prefix call (separator call)* suffix`` from the tools' schemas,
each call being ``call_head(name) arguments call_tail``).  Each envelope is
the text that family's vLLM parser reads back, streaming and not, with the
call's name before its arguments (the streaming parsers send the name first).
Reading replies back is the job of vLLM's tool parser; the reference
encoders and parsers the tests check against live in
``tests/helpers/tool_codecs.py``.  vLLM-free.

Special tokens never appear in a forced call (poot's vocabulary never lets a
model emit a control token as content), so each envelope is plain text that
ordinary tokens spell: Mistral's forced calls are the bare JSON array vLLM's
mistral parser reads for required/named calls (no ``[TOOL_CALLS]`` control
token), Llama 3's the bare JSON objects its parser reads (no
``<|python_tag|>``, which Llama 3.1 uses for its built-in tools only).
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
    #: the text that starts the calls in the model's chat template
    start_marker: str = ""
    #: the forced reply: ``prefix call (separator call)* suffix``
    prefix: str = ""
    separator: str = ""
    suffix: str = ""
    #: Characters never written raw inside the arguments' strings (only as
    #: ``\\u00XX``): those that would let a string spell text the parser
    #: looks for by text (a marker), and so cut the call.
    escaped_in_arguments: str = ""
    #: Texts a tool name may not contain (they would end the call for the parser).
    reserved: tuple[str, ...] = ()

    def call_head(self, name: str) -> str:
        """One call's text up to its arguments."""
        raise NotImplementedError(f"poot does not force the {self.name} format")

    #: One call's text after its arguments.
    call_tail: str = ""


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
    # Both markers start with "<", so neither the text of a marker nor a token
    # holding one can appear inside the arguments, where vLLM's hermes parser
    # would cut the call (it finds the markers by text).
    escaped_in_arguments = "<"
    reserved = (start_marker, end_marker)
    call_tail = "}\n" + end_marker

    def envelope_head(self, name: str) -> str:
        """The call's text up to its arguments (after ``start_marker`` and a newline)."""
        return '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": '

    def call_head(self, name: str) -> str:
        return self.start_marker + "\n" + self.envelope_head(name)


class MistralCodec(Codec):
    """Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}]`` (v11: ``[TOOL_CALLS]name[ARGS]{...}``).

    Forced: the bare array ``[{"name": ..., "arguments":{...}}, ...]`` that
    vLLM's mistral parser reads for required/named calls (it reads the
    ``[TOOL_CALLS]`` marker by text, so ``_`` is only ever escaped in the
    arguments' strings: they cannot spell it; no space before the arguments,
    as the parser's streaming path expects).
    """

    name = "mistral"
    vllm_parser = "mistral"
    can_force = True
    start_marker = "[TOOL_CALLS]"
    prefix = "["
    separator = ", "
    suffix = "]"
    escaped_in_arguments = "_"
    reserved = (start_marker,)
    call_tail = "}"

    def call_head(self, name: str) -> str:
        return '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments":'


class MistralV11Codec(Codec):
    """Mistral v11+ tokenizers (``[ARGS]`` in the vocabulary): ``[TOOL_CALLS]name[ARGS]{...}``.

    vLLM's mistral parser picks its path by the vocabulary: without ``[ARGS]``
    it reads the bare array :class:`MistralCodec` forces; with ``[ARGS]`` it
    reads only calls that start with the ``[TOOL_CALLS]`` control token, and a
    bare array comes back as content.  poot never lets a model write a control
    token as content, so it does not force this format: required / named are
    left to vLLM (as for a model without tool markers).
    """

    name = "mistral_v11"
    vllm_parser = "mistral"
    can_force = False
    start_marker = "[TOOL_CALLS]"
    args_marker = "[ARGS]"


class Llama3Codec(Codec):
    """Llama 3.1+ JSON calls: ``<|python_tag|>{"name": ..., "parameters": {...}}`` (several joined by ``; ``).

    Forced: ``{"name": ..., "parameters": {...}}`` joined by ``; `` (what the
    Llama 3.1 template asks for custom tools, and what vLLM's ``llama3_json``
    parser reads; it decodes the JSON, so nothing needs escaping).
    """

    name = "llama3"
    vllm_parser = "llama3_json"
    can_force = True
    start_marker = "<|python_tag|>"
    separator = "; "
    call_tail = "}"

    def call_head(self, name: str) -> str:
        return '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "parameters": '


CODECS: dict[str, Codec] = {c.name: c for c in (HermesCodec(), MistralCodec(), MistralV11Codec(), Llama3Codec())}


def get_codec(name: str) -> Codec:
    try:
        return CODECS[name]
    except KeyError:
        raise ValueError(f"unknown tool-call codec {name!r}; known: {', '.join(CODECS)}") from None
