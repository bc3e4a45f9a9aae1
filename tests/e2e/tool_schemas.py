"""The two tools the codec e2e tests force (Llama 3 and Mistral formats): an enum, a bounded integer,
a short optional string, a boolean -- every call's arguments are validated against these."""

from __future__ import annotations

import json
from typing import Any, Callable

import jsonschema

FORECAST = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Oslo", "Zürich"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "note": {"type": "string", "maxLength": 8},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
CLOCK = {
    "type": "object",
    "properties": {"zone": {"enum": ["UTC", "CET"]}, "h24": {"type": "boolean"}},
    "required": ["zone", "h24"],
    "additionalProperties": False,
}
SCHEMAS = {"get_forecast": FORECAST, "get_clock": CLOCK}
TOOLS = [{"type": "function", "function": {"name": n, "description": n, "parameters": s}} for n, s in SCHEMAS.items()]


def check_calls(calls: Any) -> list[str]:
    """Each call names one of these tools and its arguments validate against that tool's
    schema; the names, in order."""
    names = []
    for call in calls:
        assert call.function.name in SCHEMAS, call
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
        names.append(call.function.name)
    return names


def assert_every_choice_calls_tools(reply: Any, n: int, check: Callable[[Any], list[str]] = check_calls) -> None:
    """``tool_choice: "required"``: each of the ``n`` choices ends in tool calls, with no
    text beside them, and ``check`` accepts the calls."""
    assert len(reply.choices) == n, reply
    for choice in reply.choices:
        assert choice.finish_reason == "tool_calls", choice
        assert choice.message.tool_calls and not choice.message.content, choice
        check(choice.message.tool_calls)
