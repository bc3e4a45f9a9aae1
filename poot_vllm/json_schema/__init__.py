"""JSON Schema -> poot regex, exactly (refusing what cannot be enforced).

See docs/json-schema.md for the supported subset, the refusals and every
departure from JSON Schema (all of them narrowings: poot may emit fewer of
the valid documents, never an invalid one).
"""

from __future__ import annotations

from poot_vllm.json_schema.compiler import FREE_FORM_DEPTH, MAX_SCHEMA_DEPTH, parse_schema
from poot_vllm.json_schema.compiler import schema_to_regex as _schema_to_regex
from poot_vllm.limits import DEFAULT_LIMITS, Limits


def schema_to_regex(schema: dict | bool | str, limits: Limits = DEFAULT_LIMITS) -> str:
    """The regex (poot syntax) whose matches are JSON texts valid for ``schema``.

    ``schema`` is a parsed schema or its JSON text (text over
    ``limits.max_schema_bytes`` raises ``LimitExceeded`` before parsing;
    non-JSON text raises ``ConstraintSyntaxError``).  Keywords poot cannot
    enforce exactly raise ``UnsupportedConstruct`` naming the keyword and its
    JSON pointer; a regex longer than ``limits.max_schema_regex_bytes`` raises
    ``LimitExceeded`` while it is being built.
    """
    return _schema_to_regex(schema, limits)


__all__ = ["schema_to_regex", "parse_schema", "FREE_FORM_DEPTH", "MAX_SCHEMA_DEPTH"]
