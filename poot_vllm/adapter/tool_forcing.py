"""Tool-call forcing: ``tool_choice`` required / named -> one poot constraint.

Called first by the request hook (adapter/patches/request_fields.py), so forcing wins
over ``guided_*`` and ``response_format``.  ``auto`` / ``none`` / omitted
give None (no tool constraint; guided fields still apply).  Forcing needs the
server's tool parser to read a forcible format (ChatML/Hermes ``<tool_call>``,
see tool_calls/selection.py); other formats are left to vLLM and the
template.  Reads the request duck-typed (vLLM's pydantic models or dicts), so
it needs no vLLM import.
"""

from __future__ import annotations

from typing import Any

from poot_vllm.core.constraints import Constraint, Kind
from poot_vllm.core.errors import PootError
from poot_vllm.core.limits import Limits
from poot_vllm.core.tool_calls.codecs import Codec
from poot_vllm.core.tool_calls.forcing import tool_call_spec
from poot_vllm.core.tool_calls.selection import server_codec

FIELD = "tool_choice"


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def forced_tool_name(tool_choice: Any) -> str | None:
    """The tool a named ``tool_choice`` forces ({"type": "function", "function": {"name": ...}})."""
    function = _get(tool_choice, "function")
    return _get(function, "name") if function is not None else None


def _tools(request: Any) -> list[tuple[str, Any]]:
    out = []
    for tool in _get(request, "tools") or []:
        function = _get(tool, "function")
        if function is not None:
            out.append((_get(function, "name"), _get(function, "parameters")))
    return out


def requested_tools(request: Any) -> list[tuple[str, Any]] | None:
    """The (name, parameters) a request forces a call to, or None when it forces none.

    Raises :class:`PootError` (field ``tool_choice``) for a choice no reply can satisfy.
    """
    choice = _get(request, "tool_choice")
    if choice is None or choice in ("auto", "none"):
        return None
    tools = _tools(request)
    if choice == "required":
        if not tools:
            raise PootError("is \"required\" but the request has no tools; add tools or use tool_choice \"auto\"").with_field(FIELD)
        return tools
    if isinstance(choice, str):
        raise PootError(f"must be \"auto\", \"none\", \"required\" or a named function, not {choice!r}").with_field(FIELD)
    name = forced_tool_name(choice)
    if not name:
        raise PootError("a named tool_choice needs {\"type\": \"function\", \"function\": {\"name\": ...}}").with_field(FIELD)
    chosen = [t for t in tools if t[0] == name]
    if not chosen:
        known = ", ".join(repr(t[0]) for t in tools) or "none"
        raise PootError(f"names the function {name!r}, which is not in tools (tools: {known})").with_field(FIELD)
    return chosen[:1]


def forcing_codec(codec: Codec | None = None) -> Codec | None:
    codec = server_codec() if codec is None else codec
    return codec if codec is not None and codec.can_force else None


def tool_constraint_for(request: Any, limits: Limits, codec: Codec | None = None) -> tuple[Constraint, str] | None:
    """The forced-call constraint and the field it came from, or None when the request forces no call."""
    tools = requested_tools(request)
    codec = forcing_codec(codec)
    if tools is None or codec is None:
        return None
    # A named tool_choice forces exactly one call (as vLLM does), whatever
    # parallel_tool_calls says; "required" allows several unless it is false.
    parallel = _get(request, "tool_choice") == "required" and _get(request, "parallel_tool_calls") is not False
    try:
        spec = tool_call_spec(tools, parallel=parallel, codec=codec.name, limits=limits)
    except PootError as exc:
        raise exc.with_field("tools")
    # A compile refusal (schema keyword, size, automaton budget) is about the tools' schemas.
    return Constraint(Kind.TOOL_CALL, spec), "tools"


def forces_tool_call(request: Any) -> bool:
    """Whether poot forces this request's reply into tool calls (the response hook's test)."""
    from poot_vllm.adapter.server_state import poot_is_server_backend

    if not poot_is_server_backend() or forcing_codec() is None:
        return False
    try:
        return requested_tools(request) is not None
    except PootError:
        return False
