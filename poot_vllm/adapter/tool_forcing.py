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

import logging
import sys
from typing import Any

from poot_vllm.core.constraints import Constraint, Kind
from poot_vllm.core.errors import PootError
from poot_vllm.core.limits import Limits
from poot_vllm.core.tool_calls.codecs import Codec
from poot_vllm.core.tool_calls.forcing import tool_call_spec
from poot_vllm.core.tool_calls.selection import server_codec

FIELD = "tool_choice"

logger = logging.getLogger("vllm.poot")


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


def record_tool_parser(tool_parser_name: str | None, enable_auto_tools: bool, tokenizer: Any = None,
                       model_name: str | None = None) -> None:
    """Remember the codec of the server's ``--tool-call-parser`` (API server, at start).

    Forced calls must be in the format that parser reads back.  Recorded by
    the ``tool_responses`` hook on stock vLLM, from vLLM's own record on a
    fork with patches/0003 (:func:`sync_native_tool_parser`).
    """
    from poot_vllm.core.tool_calls.selection import codec_for_parser, read_chat_template, record_server_codec

    if not enable_auto_tools or not tool_parser_name:
        record_server_codec(None)
        return
    template = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
    if template is None and model_name:
        try:
            template = read_chat_template(model_name)
        except (OSError, ValueError):
            template = None
    try:  # which format vLLM's mistral parser reads depends on the vocabulary ([ARGS]: v11+)
        vocabulary = tokenizer.get_vocab() if tokenizer is not None else None
    except Exception:
        vocabulary = None
    codec = codec_for_parser(tool_parser_name, template, vocabulary)
    record_server_codec(codec)
    logger.info("poot: tool parser %r reads the %s tool-call format%s", tool_parser_name,
                codec.name if codec else "(unknown)",
                "; tool_choice required/named is forced by poot" if codec and codec.can_force else "")


#: The tool parser last read from vLLM's record (patches/0003); a sentinel until read once.
_UNREAD = object()
_native_tool_parser: object = _UNREAD


def sync_native_tool_parser() -> None:
    """On a vLLM with patches/0003, record the tool parser vLLM recorded, when it changed.

    vLLM records ``--tool-call-parser`` in ``init_app_state``, after poot
    registered, and calls nothing of poot's then; so poot reads the record
    where it needs the codec.  Reads only a loaded module (imports no vLLM):
    on stock vLLM, or before the API server is set up, there is nothing to read.
    """
    global _native_tool_parser
    protocol = sys.modules.get("vllm.entrypoints.generate.base.protocol")
    getter = getattr(protocol, "get_server_tool_call_parser", None)
    if getter is None:
        return
    name = getter()
    if name == _native_tool_parser:
        return
    _native_tool_parser = name
    record_tool_parser(name, enable_auto_tools=name is not None)


def forcing_codec(codec: Codec | None = None) -> Codec | None:
    if codec is None:
        sync_native_tool_parser()
        codec = server_codec()
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
