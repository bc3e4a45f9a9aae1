"""The two tools the codec e2e tests force (Llama 3 and Mistral formats): an enum, a bounded integer,
a short optional string, a boolean -- every call's arguments are validated against these."""

from __future__ import annotations

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
