"""vLLM's ``StructuredOutputsParams`` (duck-typed) -> a poot :class:`Constraint`.

The engine receives only these params; this is the one place that reads
them, so the API-server validation and the engine compile agree.
"""

from __future__ import annotations

from typing import Any

from poot_vllm.core.constraints import (
    Constraint,
    Kind,
    choice_constraint,
    grammar_constraint,
    regex_constraint,
    schema_constraint,
)
from poot_vllm.core.errors import PootError
from poot_vllm.core.limits import DEFAULT_LIMITS, Limits

#: Prefix of a structural tag that carries poot's own tool-call constraint.
TOOL_CALL_TAG = "poot-tool-call:"


def whitespace_of(params: Any) -> str | None:
    """The separator regex a request asks for: ``whitespace_pattern``, or ``""`` for ``disable_any_whitespace``."""
    pattern = getattr(params, "whitespace_pattern", None)
    if pattern is not None:
        return pattern
    return "" if getattr(params, "disable_any_whitespace", False) else None


def _whitespace_field(params: Any) -> str:
    if getattr(params, "whitespace_pattern", None) is None:
        return "structured_outputs.disable_any_whitespace"
    return getattr(params, "_poot_whitespace_field", None) or "structured_outputs.whitespace_pattern"


def constraint_from_params(params: Any, limits: Limits = DEFAULT_LIMITS) -> Constraint:
    """The constraint the engine compiles for ``params`` (the API server checks the same one).

    ``whitespace_pattern`` / ``disable_any_whitespace`` replace the separator
    regex of a JSON schema (json_schema/whitespace.py); with any other
    constraint they are refused, never ignored.
    """
    whitespace = whitespace_of(params)
    if whitespace is not None:
        field = _whitespace_field(params)
        if params.json is None:
            raise PootError("applies to JSON schemas only (guided_json, response_format json_schema or "
                            "structured_outputs.json); remove it").with_field(field)
        from poot_vllm.core.json_schema import parse_schema
        from poot_vllm.core.json_schema.whitespace import with_whitespace

        try:
            schema = parse_schema(params.json, limits)
        except PootError as exc:
            raise exc.with_field(_field_of(params)) from None
        try:
            schema = with_whitespace(schema, whitespace)
        except PootError as exc:
            raise exc.with_field(field) from None
        try:
            return schema_constraint(schema, limits)
        except PootError as exc:
            raise exc.with_field(_field_of(params)) from None
    try:
        if params.json is not None:
            return schema_constraint(params.json, limits)
        if params.json_object:
            return Constraint(Kind.JSON_OBJECT, "")
        if params.regex is not None:
            return regex_constraint(params.regex, limits)
        if params.choice is not None:
            return choice_constraint(params.choice)
        if params.grammar is not None:
            return grammar_constraint(params.grammar, limits)
        tag = getattr(params, "structural_tag", None)
        if tag is not None:
            if isinstance(tag, str) and tag.startswith(TOOL_CALL_TAG):
                return Constraint(Kind.TOOL_CALL, tag[len(TOOL_CALL_TAG):])
            raise PootError(
                "structural tags are not supported by the poot backend; use tool_choice "
                "(poot forces tool calls itself), guided_json or response_format json_schema"
            )
    except PootError as exc:
        raise exc.with_field(_field_of(params))
    raise PootError("no constraint given").with_field("structured_outputs")


def _field_of(params: Any) -> str:
    for name in ("json", "regex", "choice", "grammar", "json_object", "structural_tag"):
        if getattr(params, name, None) is not None:
            return f"structured_outputs.{name}"
    return "structured_outputs"


def params_kwargs(constraint: Constraint) -> dict[str, Any]:
    """The ``StructuredOutputsParams`` field that carries a constraint to the engine."""
    import json

    kind = constraint.kind
    if kind is Kind.CHOICE:
        return {"choice": json.loads(constraint.spec)}
    if kind is Kind.REGEX:
        return {"regex": constraint.spec}
    if kind is Kind.GRAMMAR:
        return {"grammar": constraint.spec}
    if kind is Kind.JSON:
        return {"json": constraint.spec}
    if kind is Kind.JSON_OBJECT:
        return {"json_object": True}
    return {"structural_tag": TOOL_CALL_TAG + constraint.spec}
