"""Request fields -> the one constraint poot enforces (API server).

Order of precedence, first present wins: ``guided_choice``, ``guided_regex``,
``guided_grammar``, ``guided_json``, then ``response_format``
(``json_schema``, ``json_object``; ``text`` is unconstrained), then vLLM's own
``structured_outputs``.  Tool-call forcing (tool_calls.py) wins over all of
them.  Every refusal is a :class:`PootError` whose ``field`` names the request
field, which the hook reports as the 400's ``param``.

``guided_whitespace_pattern`` and ``structured_outputs.whitespace_pattern`` /
``disable_any_whitespace`` replace a JSON schema's separator regex inside the
constraint itself (:func:`apply_whitespace`), so the API server checks what
the engine compiles; with any other constraint they are a 400, never ignored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
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

GUIDED_FIELDS = ("guided_choice", "guided_regex", "guided_grammar", "guided_json")
#: Old guided-decoding options poot does not implement: refused, never ignored.
UNSUPPORTED_FIELDS: dict[str, str] = {}
BACKEND_FIELD = "guided_decoding_backend"
#: The old name of ``structured_outputs.whitespace_pattern`` (json_schema/whitespace.py).
WHITESPACE_FIELD = "guided_whitespace_pattern"


def apply_whitespace(constraint: Constraint | None, pattern: str | None, field: str, limits: Limits) -> Constraint | None:
    """``constraint`` with its JSON separators replaced by ``pattern`` (None: unchanged).

    Only a JSON schema has separators to replace; with any other constraint
    (or none) the pattern is refused naming ``field``, never ignored.
    """
    if pattern is None:
        return constraint
    if constraint is None or constraint.kind is not Kind.JSON:
        raise PootError("applies to JSON schemas only (guided_json, response_format json_schema or "
                        "structured_outputs.json); remove it").with_field(field)
    import json

    from poot_vllm.core.json_schema.whitespace import with_whitespace

    try:
        schema = with_whitespace(json.loads(constraint.spec), pattern)
    except PootError as exc:
        raise exc.with_field(field) from None
    return schema_constraint(schema, limits)


def _from_guided(field: str, value: Any, limits: Limits) -> Constraint:
    if field == "guided_choice":
        return choice_constraint(value)
    if field == "guided_regex":
        return regex_constraint(value, limits)
    if field == "guided_grammar":
        return grammar_constraint(value, limits)
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
    selected: tuple[Constraint, str] | None = None
    for field in GUIDED_FIELDS:
        value = fields.get(field)
        if value is None:
            continue
        try:
            selected = _from_guided(field, value, limits), field
        except PootError as exc:
            raise exc.with_field(field)
        break
    if selected is None:
        constraint = constraint_from_response_format(response_format, limits)
        selected = None if constraint is None else (constraint, "response_format")
    pattern = fields.get(WHITESPACE_FIELD)
    if pattern is not None:
        constraint = apply_whitespace(None if selected is None else selected[0], pattern, WHITESPACE_FIELD, limits)
        assert constraint is not None and selected is not None
        selected = constraint, selected[1]
    return selected


# -- vLLM request objects -> the StructuredOutputsParams the engine receives ------------------
#: ``StructuredOutputsParams`` fields that carry a constraint (one at most is set).
_CONSTRAINT_FIELDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


def response_format_dict(response_format: Any) -> dict | None:
    """vLLM's parsed ``response_format`` back to the OpenAI dict shape."""
    if response_format is None:
        return None
    kind = getattr(response_format, "type", None)
    if kind not in ("text", "json_object", "json_schema"):
        return None  # structural tags: left to vLLM / the backend check
    out: dict[str, Any] = {"type": kind}
    js = getattr(response_format, "json_schema", None)
    if js is not None:
        out["json_schema"] = {"name": getattr(js, "name", None), "schema": getattr(js, "json_schema", None)}
    return out


def _check_native(params: Any, limits) -> None:
    """poot's validation of a request's own ``structured_outputs`` (raises PootError naming the field)."""
    if params is None or not any(getattr(params, name, None) not in (None, False) for name in _CONSTRAINT_FIELDS):
        return
    from poot_vllm.adapter.params import constraint_from_params
    from poot_vllm.core.constraints import check

    check(constraint_from_params(params, limits), limits)


def structured_outputs_for(request: Any, original) -> Any:
    """The engine-bound ``StructuredOutputsParams`` for a request (poot server)."""
    from poot_vllm.adapter.params import params_kwargs
    from poot_vllm.adapter.server_state import check_working
    from poot_vllm.adapter.tool_forcing import tool_constraint_for
    from poot_vllm.adapter.validation import to_validation_error
    from poot_vllm.core.constraints import check
    from poot_vllm.core.errors import PootError
    from poot_vllm.core.limits import server_limits

    from poot_vllm.adapter.params import whitespace_of

    limits = server_limits()
    field = "structured_outputs"
    extra = request.model_extra or {}
    base = getattr(request, "structured_outputs", None)
    try:
        selected = tool_constraint_for(request, limits)
        if selected is not None or any((request.model_extra or {}).get(f) is not None for f in GUIDED_FIELDS) \
                or getattr(request, "response_format", None) is not None:
            check_working()  # a failed runtime patch: a 400 naming it, never an unconstrained reply
        if selected is None:
            selected = select_constraint(
                request.model_extra or {}, response_format_dict(getattr(request, "response_format", None)), limits
            )
        if selected is None:
            native = original(request)
            _check_native(native, limits)  # vLLM's own structured_outputs (e.g. a structural tag): 400 before a stream starts
            return native
        constraint, field = selected
        # The separators a request asks for (select_constraint already applied guided_whitespace_pattern,
        # except to a forced tool call): applied to the constraint itself, or a 400 naming the field.
        ws_field, pattern = None, None
        if extra.get(WHITESPACE_FIELD) is not None and field not in GUIDED_FIELDS + ("response_format",):
            ws_field, pattern = WHITESPACE_FIELD, extra[WHITESPACE_FIELD]
        elif extra.get(WHITESPACE_FIELD) is None and base is not None and whitespace_of(base) is not None:
            ws_field = ("structured_outputs.whitespace_pattern" if getattr(base, "whitespace_pattern", None) is not None
                        else "structured_outputs.disable_any_whitespace")
            pattern = whitespace_of(base)
        if ws_field is not None:
            try:
                constraint = apply_whitespace(constraint, pattern, ws_field, limits)  # type: ignore[assignment]
            except PootError as exc:
                field = exc.field or ws_field
                raise
        check(constraint, limits)
    except PootError as exc:
        raise to_validation_error(exc.with_field(field), field) from None
    return _params_with(request, params_kwargs(constraint), field)


def _params_with(request: Any, kwargs: dict[str, Any], field: str) -> Any:
    """The request's own ``structured_outputs`` with its constraint replaced by ``kwargs``."""
    from vllm.sampling_params import StructuredOutputsParams

    base = getattr(request, "structured_outputs", None)
    if base is None:
        params = StructuredOutputsParams(**kwargs)
    else:
        # The constraint carries the separators (apply_whitespace): the engine must not apply them again.
        cleared = {**{name: None for name in _CONSTRAINT_FIELDS}, "whitespace_pattern": None, "disable_any_whitespace": False}
        params = dataclasses.replace(base, **{**cleared, **kwargs})
    # Lets SamplingParams validation (which knows the vocabulary size and
    # checks the mask-work estimate) name the request field in its 400.
    params._poot_field = field
    return params


#: ``guided_*`` field -> the ``StructuredOutputsParams`` field that carries it.
_GUIDED_TO_PARAM = {"guided_choice": "choice", "guided_regex": "regex", "guided_grammar": "grammar", "guided_json": "json"}


def structured_outputs_unknown_backend(request: Any, original) -> Any:
    """``guided_*`` fields on a server whose backend this process does not know yet.

    Dropping them would answer 200 with unconstrained text.  The first one
    present (poot's precedence) becomes vLLM's own ``structured_outputs``
    field, unchecked here: ``SamplingParams`` validation, which knows the
    engine's real backend, then checks it (poot's full validation when that
    backend is poot, the other backend's own otherwise).
    """
    fields = request.model_extra or {}
    for field in GUIDED_FIELDS:
        if fields.get(field) is not None:
            params = _params_with(request, {_GUIDED_TO_PARAM[field]: fields[field]}, field)
            if fields.get(WHITESPACE_FIELD) is not None:
                params.whitespace_pattern = fields[WHITESPACE_FIELD]
                params._poot_whitespace_field = WHITESPACE_FIELD  # a refusal names the field the client sent
            return params
    return original(request)


def refuse_dropped_fields(request: Any) -> None:
    """400 for ``guided_*`` fields that the failed ``request_fields`` patch would drop.

    vLLM ignores those fields; only the ``request_fields`` patch turns them
    into a constraint.  If it could not be applied in this process, a request
    carrying them must not get an unconstrained reply.
    """
    from poot_vllm.adapter.server_state import check_working
    from poot_vllm.adapter.validation import to_validation_error
    from poot_vllm.core.errors import PootError

    extra = getattr(request, "model_extra", None) or {}
    present = [f for f in GUIDED_FIELDS + (WHITESPACE_FIELD,) if extra.get(f) is not None]
    if not present:
        return
    try:
        check_working(("request_fields",))
    except PootError as exc:
        raise to_validation_error(exc.with_field(present[0]), present[0]) from None
