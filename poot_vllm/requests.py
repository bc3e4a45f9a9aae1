"""Request fields -> the one constraint poot enforces (API-server side, vLLM-free).

Order of precedence, first present wins: ``guided_choice``, ``guided_regex``,
``guided_grammar``, ``guided_json``, then ``response_format``
(``json_schema``, ``json_object``; ``text`` is unconstrained), then vLLM's own
``structured_outputs``.  Tool-call forcing (tool_calls.py) wins over all of
them.  Every refusal is a :class:`PootError` whose ``field`` names the request
field, which the hook reports as the 400's ``param``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poot_vllm.constraints import Constraint, Kind, choice_constraint, schema_constraint
from poot_vllm.errors import LimitExceeded, PootError
from poot_vllm.limits import DEFAULT_LIMITS, Limits

GUIDED_FIELDS = ("guided_choice", "guided_regex", "guided_grammar", "guided_json")
#: Old guided-decoding options poot does not implement: refused, never ignored.
UNSUPPORTED_FIELDS = {
    "guided_whitespace_pattern": "poot bounds whitespace itself (at most one space between JSON tokens); remove the field",
}
BACKEND_FIELD = "guided_decoding_backend"


def _regex_constraint(value: Any, limits: Limits) -> Constraint:
    if not isinstance(value, str):
        raise PootError(f"must be a string (a regular expression), not {type(value).__name__}")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limits.max_regex_bytes:
        raise LimitExceeded("the regex", "max_regex_bytes", limits.max_regex_bytes, "bytes", f"it is {size} bytes")
    return Constraint(Kind.REGEX, value)


def _grammar_constraint(value: Any, limits: Limits) -> Constraint:
    if not isinstance(value, str) or not value.strip():
        raise PootError("must be a non-empty string holding a GBNF grammar with a 'root' rule")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limits.max_grammar_bytes:
        raise LimitExceeded("the grammar", "max_grammar_bytes", limits.max_grammar_bytes, "bytes", f"it is {size} bytes")
    return Constraint(Kind.GRAMMAR, value)


def _from_guided(field: str, value: Any, limits: Limits) -> Constraint:
    if field == "guided_choice":
        return choice_constraint(value)
    if field == "guided_regex":
        return _regex_constraint(value, limits)
    if field == "guided_grammar":
        return _grammar_constraint(value, limits)
    return schema_constraint(value, limits)


def constraint_from_response_format(response_format: Any, limits: Limits = DEFAULT_LIMITS) -> Constraint | None:
    """``response_format`` as a dict (or vLLM's pydantic model dumped to one)."""
    if response_format is None:
        return None
    if not isinstance(response_format, Mapping):
        raise PootError("must be an object such as {\"type\": \"json_object\"}").with_field("response_format")
    kind = response_format.get("type")
    try:
        if kind == "text":
            return None
        if kind == "json_object":
            return Constraint(Kind.JSON_OBJECT, "")
        if kind == "json_schema":
            json_schema = response_format.get("json_schema")
            if not isinstance(json_schema, Mapping):
                raise PootError("type json_schema needs \"json_schema\": {\"name\": ..., \"schema\": {...}}")
            # OpenAI's field is "schema"; vLLM's model aliases it as json_schema.
            schema = json_schema.get("schema", json_schema.get("json_schema"))
            if schema is None:
                raise PootError("json_schema.schema is missing")
            return schema_constraint(schema, limits)
    except PootError as exc:
        raise exc.with_field("response_format")
    raise PootError(
        f"type must be one of text, json_object, json_schema (got {kind!r})"
    ).with_field("response_format")


def constraint_from_fields(
    fields: Mapping[str, Any],
    response_format: Any = None,
    limits: Limits = DEFAULT_LIMITS,
) -> Constraint | None:
    """The constraint named by a request's guided_* fields or response_format.

    ``fields`` holds the request's extra fields (vLLM keeps unknown fields in
    ``model_extra``).  Returns None when the request asks for no constraint.
    """
    selected = select_constraint(fields, response_format, limits)
    return None if selected is None else selected[0]


def select_constraint(
    fields: Mapping[str, Any],
    response_format: Any = None,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[Constraint, str] | None:
    """Like :func:`constraint_from_fields`, also naming the field it came from."""
    backend = fields.get(BACKEND_FIELD)
    if backend is not None and backend != "poot":
        raise PootError(
            f"this server's structured-output backend is poot; per-request backend {backend!r} "
            "is not supported: remove the field"
        ).with_field(BACKEND_FIELD)
    for field, why in UNSUPPORTED_FIELDS.items():
        if fields.get(field) is not None:
            raise PootError(f"is not supported: {why}").with_field(field)
    for field in GUIDED_FIELDS:
        value = fields.get(field)
        if value is None:
            continue
        try:
            return _from_guided(field, value, limits), field
        except PootError as exc:
            raise exc.with_field(field)
    constraint = constraint_from_response_format(response_format, limits)
    return None if constraint is None else (constraint, "response_format")
