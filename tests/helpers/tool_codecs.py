"""Reference text of each tool-call format, for tests: encode calls the way the
model's chat template renders them, parse a reply back into calls, and scan an
unfinished reply (streaming).

Moved out of the wheel: the product forces each codec's envelope
(``poot_vllm.core.tool_calls.forcing``) and leaves reading replies to vLLM's
tool parsers.  Each :class:`TextCodec` wraps the product codec and encodes
calls as the model's template renders them: for hermes that is exactly the
envelope poot forces; Mistral and Llama 3 are forced without their
control-token markers (see the product codecs), which these parsers also read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from poot_vllm.core.tool_calls.codecs import CODECS, Codec


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text

    @classmethod
    def of(cls, name: str, arguments: object) -> "ToolCall":
        """A call whose arguments are given as a Python value (dumped like vLLM does)."""
        return cls(name, json.dumps(arguments, ensure_ascii=False))


def forced_spelling(arguments: object) -> str:
    """Arguments as JSON text the way poot forces them: ``<`` only as ``\\u003c`` (decodes the same)."""
    return json.dumps(arguments, ensure_ascii=False).replace("<", "\\u003c")


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


class TextCodec:
    """A product :class:`~poot_vllm.core.tool_calls.codecs.Codec` (its name and
    markers, read through) plus the reference encode / parse / scan of its text."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec

    def __getattr__(self, attr: str):
        return getattr(self.codec, attr)

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


class HermesText(TextCodec):
    """The Hermes envelope poot forces (:class:`~poot_vllm.core.tool_calls.codecs.HermesCodec`),
    as text; an argument may itself contain ``</tool_call>``."""

    _name = re.compile(r'"name"\s*:\s*("(?:[^"\\]|\\.)*")')
    _arguments = re.compile(r'"arguments"\s*:\s*')

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


class MistralText(TextCodec):
    """Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}]`` (also reads v11's ``[TOOL_CALLS]name[ARGS]{...}``)."""


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


class Llama3Text(TextCodec):
    """Llama 3.1+ JSON calls: ``<|python_tag|>{"name": ..., "parameters": {...}}`` (several joined by ``; ``)."""


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


TEXT_CODECS: dict[str, TextCodec] = {
    name: cls(CODECS[name]) for name, cls in (("hermes", HermesText), ("mistral", MistralText), ("llama3", Llama3Text))
}
HERMES_TEXT = TEXT_CODECS["hermes"]


# Realistically nested tool schemas (a customer with an address, an order with line items), as SDK users
# send them; the unit bounds tests and the e2e tests force calls to them.
ADDRESS = {"type": "object", "properties": {
    "street": {"type": "string", "maxLength": 32}, "city": {"type": "string", "maxLength": 16},
    "postal_code": {"type": "string", "pattern": "^[0-9]{5}$"},
    "country": {"type": "string", "enum": ["US", "DE", "FR", "JP"]}},
    "required": ["street", "city", "country"], "additionalProperties": False}
CUSTOMER = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 32}, "email": {"type": "string", "format": "email"},
    "address": ADDRESS, "vip": {"type": "boolean"}},
    "required": ["name", "address"], "additionalProperties": False}
ORDER = {"type": "object", "properties": {
    "customer_id": {"type": "string"},
    "items": {"type": "array", "minItems": 1, "items": {"type": "object", "properties": {
        "sku": {"type": "string", "maxLength": 16}, "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
        "note": {"type": "string"}}, "required": ["sku", "quantity"], "additionalProperties": False}},
    "shipping": ADDRESS, "express": {"type": "boolean"}},
    "required": ["customer_id", "items"], "additionalProperties": False}
NESTED = [("create_customer", CUSTOMER), ("create_order", ORDER)]
