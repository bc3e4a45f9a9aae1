"""The forced tool-call reply as a regular language (ChatML/Hermes codec).

``tool_choice: "required"`` or a named tool is a regular language over the
codec's envelope: ``<tool_call>\\n{"name": "<name>", "arguments": <args>}\\n</tool_call>``,
where ``<args>`` is the tool's ``parameters`` schema compiled by poot's JSON
Schema compiler (an empty or missing schema gives exactly ``{}``), the name
one of the allowed tools, and the whole repeated with the codec's separator
when parallel calls are allowed.  The request carries a small JSON payload
(:func:`tool_call_spec`); the engine rebuilds the regex from it
(:func:`compile_tool_call_constraint`).  poot generates this regex, so the
user regex size limit does not apply; ``max_schema_regex_bytes`` bounds it
and ``max_automaton_bytes`` bounds the DFA build.
"""

from __future__ import annotations

import json
from typing import Any

from poot_vllm.core.automata.compilers import regex_escape, regex_to_dfa
from poot_vllm.core.errors import ConstraintSyntaxError, LimitExceeded, PootError
from poot_vllm.core.limits import DEFAULT_LIMITS, Limits
from poot_vllm.core.tool_calls.codecs import HermesCodec, get_codec
from poot_vllm.core.json_schema import canonical_schema_text, schema_to_regex

SPEC_VERSION = 1
#: Keywords that describe a schema without constraining it.
_ANNOTATIONS = frozenset({"title", "description", "$schema", "$id", "$comment", "examples", "default"})


def is_empty_parameters(schema: Any) -> bool:
    """A tool without arguments: no schema, ``{}``, or an object schema with no properties and nothing else.

    These get exactly ``{}``: a valid value for each of them, and a reply
    that ends (a free-form object would let a model ramble until max_tokens).
    """
    if schema is None or schema == {}:
        return True
    if not isinstance(schema, dict):
        return False
    rest = {k: v for k, v in schema.items() if k not in _ANNOTATIONS}
    return rest.get("type", "object") == "object" and not rest.get("properties") and set(rest) <= {"type", "properties"}


def tool_call_spec(tools: list[tuple[str, Any]], *, parallel: bool, codec: str = "hermes",
                   limits: Limits = DEFAULT_LIMITS) -> str:
    """The canonical payload for ``Constraint(Kind.TOOL_CALL, spec)``.

    ``tools`` are the allowed (name, parameters schema) pairs.  Each schema is
    size-checked and canonicalised like a ``guided_json`` schema.
    """
    if not tools:
        raise PootError("no tool to call; give at least one tool in tools")
    entries = []
    for name, parameters in tools:
        if not isinstance(name, str) or not name:
            raise PootError("every tool needs a non-empty function name")
        schema = None if is_empty_parameters(parameters) else json.loads(canonical_schema_text(parameters, limits))
        entries.append({"name": name, "parameters": schema})
    payload = {"v": SPEC_VERSION, "codec": codec, "parallel": bool(parallel), "tools": entries}
    return json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _parse_spec(spec: str) -> dict:
    try:
        payload = json.loads(spec)
    except (ValueError, RecursionError) as exc:
        raise ConstraintSyntaxError(f"the tool-call constraint is not valid JSON: {exc}") from None
    if not isinstance(payload, dict) or payload.get("v") != SPEC_VERSION or not payload.get("tools"):
        raise ConstraintSyntaxError("the tool-call constraint is not a poot tool-call payload")
    return payload


def arguments_regex(parameters: Any, limits: Limits) -> str:

    if parameters is None:
        return regex_escape("{}")
    return schema_to_regex(parameters, limits)


def tool_call_regex(spec: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """The poot regex of every reply the payload allows (see the module docstring)."""
    payload = _parse_spec(spec)
    codec = get_codec(payload.get("codec", "hermes"))
    if not isinstance(codec, HermesCodec):
        raise PootError(f"tool calls in the {codec.name} format cannot be forced by poot")
    # The call regex appears twice when parallel calls are allowed; the bound
    # is checked as each tool's part is built, so a flood of tools stops at
    # the first one that passes it instead of after compiling them all.
    copies = 2 if payload.get("parallel") else 1
    alternatives = []
    total = 0
    for i, tool in enumerate(payload["tools"]):
        try:
            args = arguments_regex(tool.get("parameters"), limits)
        except PootError as exc:
            exc.message = f"tool {tool['name']!r}: {exc.message}"  # which tool's schema, for the 400
            raise
        alternatives.append(
            regex_escape(f"{codec.start_marker}\n{codec.envelope_head(tool['name'])}")
            + args
            + regex_escape(f"}}\n{codec.end_marker}")
        )
        total += len(alternatives[-1].encode("utf-8", "surrogatepass")) + 1
        if copies * total > limits.max_schema_regex_bytes:
            raise LimitExceeded("the tool-call constraint built from the tools' schemas", "max_schema_regex_bytes",
                                limits.max_schema_regex_bytes, "bytes",
                                f"it passed the limit at tool {i + 1} of {len(payload['tools'])} "
                                f"({tool['name']!r}); offer fewer or smaller tools")
    call = "(?:" + "|".join(alternatives) + ")"
    return call + ("(?:" + regex_escape(codec.separator) + call + ")*" if payload.get("parallel") else "")


def compile_tool_call_constraint(spec: str, limits: Limits = DEFAULT_LIMITS):
    """The DFA of ``Constraint(Kind.TOOL_CALL, spec)`` (called by ``constraints.compile_automaton``)."""
    return regex_to_dfa(tool_call_regex(spec, limits), limits)
