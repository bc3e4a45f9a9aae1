"""Assemble OpenAI-style streaming deltas from a reply as it is generated (a
test reference: vLLM's tool parsers do this in the server).

:class:`ToolCallStream` is fed the text deltas of one choice and returns
what to send: new content, then for each call first its id and name, then
its arguments in pieces.  Concatenating every argument piece of a call gives
exactly the call's arguments JSON text; markup never reaches ``content``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from tests.helpers.tool_codecs import TextCodec


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


@dataclass(frozen=True)
class CallDelta:
    index: int
    id: str | None = None  # set (with name) on a call's first delta
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True)
class StreamDelta:
    content: str = ""
    calls: list[CallDelta] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.calls)


class ToolCallStream:
    def __init__(self, codec: TextCodec) -> None:
        self.codec = codec
        self.text = ""
        self._content_sent = 0
        self._names_sent: list[str] = []
        self._args_sent: list[str] = []
        self._calls_started = False

    def feed(self, delta_text: str) -> StreamDelta:
        self.text += delta_text
        return self._diff(self.codec.scan(self.text), final=False)

    def finish(self) -> StreamDelta:
        """The rest at the end of the reply (held-back text that was not a call after all)."""
        parsed = self.codec.parse(self.text)
        if not parsed.calls:
            # Everything that was not a call is content, including a partial marker.
            out = StreamDelta(content=self.text[self._content_sent:]) if not self._names_sent else StreamDelta()
            self._content_sent = len(self.text)
            return out
        return self._diff(self.codec.scan(self.text), final=True)

    def _diff(self, scan, final: bool) -> StreamDelta:
        content = ""
        if scan.content_end > self._content_sent:
            content = self.text[self._content_sent:scan.content_end]
            self._content_sent = scan.content_end
        deltas: list[CallDelta] = []
        for i, call in enumerate(scan.calls):
            if call.name is None:
                break  # later calls wait for this one's name (indexes stay in order)
            if i == len(self._names_sent):
                self._names_sent.append(call.name)
                self._args_sent.append("")
                deltas.append(CallDelta(index=i, id=new_call_id(), name=call.name))
            sent = self._args_sent[i]
            if len(call.arguments) > len(sent) and call.arguments.startswith(sent):
                piece = call.arguments[len(sent):]
                self._args_sent[i] = call.arguments
                if deltas and deltas[-1].index == i and not deltas[-1].arguments:
                    deltas[-1] = CallDelta(i, deltas[-1].id, deltas[-1].name, piece)
                else:
                    deltas.append(CallDelta(index=i, arguments=piece))
        return StreamDelta(content, deltas)


def assemble(deltas: list[StreamDelta]) -> tuple[str, list[tuple[str, str, str]]]:
    """Join deltas like an OpenAI client does: (content, [(id, name, arguments)])."""
    content = "".join(d.content for d in deltas)
    calls: dict[int, list[str]] = {}
    for d in deltas:
        for c in d.calls:
            entry = calls.setdefault(c.index, ["", "", ""])
            entry[0] = c.id or entry[0]
            entry[1] = c.name or entry[1]
            entry[2] += c.arguments
    return content, [tuple(calls[i]) for i in sorted(calls)]  # type: ignore[misc]
