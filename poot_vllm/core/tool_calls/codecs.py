"""Tool-call codecs: each model family's own text format for function calls.

A codec turns calls into the exact text the model's chat template and its
vLLM tool parser use (:meth:`Codec.encode`), and that text back into calls
(:meth:`Codec.parse`); :meth:`Codec.scan` reads a reply that is still being
generated (streaming).  Arguments are always a JSON *text* (what OpenAI's
``tool_calls[].function.arguments`` carries).

Only the ChatML/Hermes codec can be forced (its calls are a regular language
poot builds from the tools' schemas, see ``forcing.py``); the Mistral and
Llama 3.1 codecs are parsed but their forced replies are left to the template.
vLLM-free.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text

    @classmethod
    def of(cls, name: str, arguments: object) -> "ToolCall":
        """A call whose arguments are given as a Python value (dumped like vLLM does)."""
        return cls(name, json.dumps(arguments, ensure_ascii=False))


@dataclass(frozen=True)
class ParsedReply:
    content: str | None  # text outside the calls (None when there is none)
    calls: list[ToolCall] = field(default_factory=list)


@dataclass(frozen=True)
class PartialCall:
    """One call as far as it has been generated."""

    name: str | None  # None until the whole name is known
    arguments: str  # the arguments' JSON text so far: never text that is not part of it
    complete: bool


@dataclass(frozen=True)
class Scan:
    content_end: int  # text[:content_end] is certainly content (a partial marker is held back)
    calls: list[PartialCall]


def _marker_overlap(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


def json_value_end(text: str, start: int = 0) -> int | None:
    """End index of the JSON object/array starting at ``text[start]``, or None if it is not closed yet.

    Only brackets outside strings count, so this finds where an arguments
    object ends while it is still streaming (no full parse per delta).
    """
    depth = 0
    in_string = escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


class Codec:
    #: poot's name for the format (``POOT_TOOL_CODEC`` values)
    name: str = ""
    #: vLLM ``--tool-call-parser`` that reads this format
    vllm_parser: str = ""
    #: whether poot can force calls in this format (a regular language)
    can_force: bool = False
    #: the text that starts the calls
    start_marker: str = ""

    def encode(self, calls: list[ToolCall]) -> str:
        raise NotImplementedError

    def parse(self, text: str) -> ParsedReply:
        raise NotImplementedError

    def scan(self, text: str) -> Scan:
        """A streaming view of an unfinished reply (default: calls appear once complete)."""
        start = text.find(self.start_marker)
        if start < 0:
            return Scan(len(text) - _marker_overlap(text, self.start_marker), [])
        parsed = self.parse(text)
        return Scan(start, [PartialCall(c.name, c.arguments, True) for c in parsed.calls])


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
    _name = re.compile(r'"name"\s*:\s*("(?:[^"\\]|\\.)*")')
    _arguments = re.compile(r'"arguments"\s*:\s*')

    def envelope_head(self, name: str) -> str:
        return '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": '

    def encode(self, calls: list[ToolCall]) -> str:
        return self.separator.join(
            f"{self.start_marker}\n{self.envelope_head(c.name)}{c.arguments}}}\n{self.end_marker}" for c in calls
        )

    def _regions(self, text: str):
        """Each call's JSON body as (body, closed) in order, reading JSON strings properly
        (an argument may itself contain the text ``</tool_call>``)."""
        pos = text.find(self.start_marker)
        while pos >= 0:
            i = pos + len(self.start_marker)
            while i < len(text) and text[i] in " \t\r\n":
                i += 1
            end = json_value_end(text, i) if i < len(text) and text[i] == "{" else None
            if end is None:
                yield text[i:], False
                return
            yield text[i:end], True
            rest = text[end:]
            closing = rest.lstrip(" \t\r\n")
            if not closing.startswith(self.end_marker):
                return
            pos = text.find(self.start_marker, end + len(rest) - len(closing) + len(self.end_marker))

    def parse(self, text: str) -> ParsedReply:
        start = text.find(self.start_marker)
        if start < 0:
            return ParsedReply(text or None)
        calls = []
        try:
            for body, closed in self._regions(text):
                if not closed:
                    break  # cut off (max_tokens): the complete calls before it still count
                obj = json.loads(body)
                args = obj["arguments"] if "arguments" in obj else obj.get("parameters", {})
                calls.append(ToolCall(str(obj["name"]), json.dumps(args, ensure_ascii=False)))
        except (ValueError, KeyError, TypeError, AttributeError):
            return ParsedReply(text)  # not a call after all: keep the text (like vLLM's parser)
        if not calls:
            return ParsedReply(text)
        return ParsedReply(text[:start] or None, calls)

    def scan(self, text: str) -> Scan:
        first = text.find(self.start_marker)
        if first < 0:
            return Scan(len(text) - _marker_overlap(text, self.start_marker), [])
        return Scan(first, [self._partial(body, closed) for body, closed in self._regions(text)])

    def _partial(self, body: str, complete: bool) -> PartialCall:
        name_match = self._name.search(body)
        try:
            name = json.loads(name_match.group(1)) if name_match else None
        except ValueError:
            name = None
        args_match = self._arguments.search(body)
        if name is None or args_match is None:
            return PartialCall(name, "", False)
        begin = args_match.end()
        if begin < len(body) and body[begin] in "{[":
            end = json_value_end(body, begin)
            return PartialCall(name, body[begin:end] if end else body[begin:], end is not None and complete)
        # A scalar: only known once the envelope has closed.
        if not complete:
            return PartialCall(name, "", False)
        value = body[begin:].rstrip()
        value = value[:-1].rstrip() if value.endswith("}") else value
        return PartialCall(name, value, True)


class MistralCodec(Codec):
    """Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}]`` (also reads v11's ``[TOOL_CALLS]name[ARGS]{...}``)."""

    name = "mistral"
    vllm_parser = "mistral"
    start_marker = "[TOOL_CALLS]"

    def encode(self, calls: list[ToolCall]) -> str:
        items = ", ".join(
            '{"name": ' + json.dumps(c.name, ensure_ascii=False) + ', "arguments": ' + c.arguments + "}" for c in calls
        )
        return f"{self.start_marker}[{items}]"

    def parse(self, text: str) -> ParsedReply:
        start = text.find(self.start_marker)
        if start < 0:
            return ParsedReply(text or None)
        decoder = json.JSONDecoder()
        rest = text[start:]
        calls: list[ToolCall] = []
        try:
            while rest:
                if not rest.startswith(self.start_marker):
                    raise ValueError("text after the calls")
                rest = rest[len(self.start_marker):].lstrip()
                if rest.startswith("["):
                    items, end = decoder.raw_decode(rest)
                    for item in items:
                        args = item.get("arguments", {})
                        calls.append(ToolCall(str(item["name"]), json.dumps(args, ensure_ascii=False)))
                else:  # v11+: name[ARGS]{...}
                    name, sep, after = rest.partition("[ARGS]")
                    if not sep:
                        raise ValueError("no [ARGS]")
                    after = after.lstrip()
                    args, end = decoder.raw_decode(after)
                    calls.append(ToolCall(name.strip(), json.dumps(args, ensure_ascii=False)))
                    rest = after
                rest = rest[end:].strip()
        except (ValueError, KeyError, TypeError, AttributeError):
            return ParsedReply(text)
        return ParsedReply(text[:start] or None, calls) if calls else ParsedReply(text)


class Llama3Codec(Codec):
    """Llama 3.1+ JSON calls: ``<|python_tag|>{"name": ..., "parameters": {...}}`` (several joined by ``; ``)."""

    name = "llama3"
    vllm_parser = "llama3_json"
    start_marker = "<|python_tag|>"

    def encode(self, calls: list[ToolCall]) -> str:
        return self.start_marker + "; ".join(
            '{"name": ' + json.dumps(c.name, ensure_ascii=False) + ', "parameters": ' + c.arguments + "}" for c in calls
        )

    def _call_start(self, text: str) -> int:
        start = text.find(self.start_marker)
        if start >= 0:
            return start
        stripped = text.lstrip()
        return len(text) - len(stripped) if stripped.startswith("{") else -1

    def parse(self, text: str) -> ParsedReply:
        start = self._call_start(text)
        if start < 0:
            return ParsedReply(text or None)
        rest = text[start:]
        if rest.startswith(self.start_marker):
            rest = rest[len(self.start_marker):]
        decoder = json.JSONDecoder()
        calls: list[ToolCall] = []
        try:
            rest = rest.strip()
            while rest:
                obj, end = decoder.raw_decode(rest)
                args = obj["parameters"] if "parameters" in obj else obj["arguments"]
                calls.append(ToolCall(str(obj["name"]), json.dumps(args, ensure_ascii=False)))
                rest = rest[end:].strip()
                if rest.startswith(";"):
                    rest = rest[1:].strip()
        except (ValueError, KeyError, TypeError, AttributeError):
            return ParsedReply(text)
        return ParsedReply(text[:start] or None, calls)

    def scan(self, text: str) -> Scan:
        start = self._call_start(text)
        if start < 0:
            return Scan(len(text) - _marker_overlap(text, self.start_marker), [])
        parsed = self.parse(text)
        return Scan(start, [PartialCall(c.name, c.arguments, True) for c in parsed.calls])


CODECS: dict[str, Codec] = {c.name: c for c in (HermesCodec(), MistralCodec(), Llama3Codec())}


def get_codec(name: str) -> Codec:
    try:
        return CODECS[name]
    except KeyError:
        raise ValueError(f"unknown tool-call codec {name!r}; known: {', '.join(CODECS)}") from None
