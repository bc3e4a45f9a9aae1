"""A request's ``whitespace_pattern``: the separator whitespace of the emitted JSON.

poot writes at most one optional space after ``,`` and ``:`` (``WS``).  vLLM's
``structured_outputs.whitespace_pattern`` (and the older
``guided_whitespace_pattern``) replaces that separator regex when it is a
*bounded* regex over JSON whitespace (space, tab, newline, carriage return):
``[ ]?``, ``[\\n ]{0,2}``, ``""`` (compact JSON).  An unbounded pattern such as
``\\s*`` is refused: it would let the model emit whitespace without end.

The pattern travels inside the schema's canonical text as the root keyword
:data:`WHITESPACE_KEY` (an unknown keyword to every validator), so the API
server's check and the engine's compile see the same constraint and caches
keep the two apart.
"""

from __future__ import annotations

from typing import Any

from poot_vllm.core.errors import ConstraintSyntaxError, PootError, UnsupportedConstruct
from poot_vllm.core.regex import ast

#: Root keyword carrying the separator regex in a schema's canonical text.
WHITESPACE_KEY = "x-poot-whitespace"
#: JSON's insignificant whitespace (RFC 8259): space, tab, line feed, carriage return.
JSON_WHITESPACE = frozenset((0x20, 0x09, 0x0A, 0x0D))
#: The longest separator a pattern may allow (characters).
MAX_WHITESPACE = 16


def check_whitespace_pattern(pattern: Any) -> str:
    """``pattern`` if it is a bounded regex over JSON whitespace of at most :data:`MAX_WHITESPACE` characters."""
    from poot_vllm.core.regex.parser import parse

    if not isinstance(pattern, str):
        raise ConstraintSyntaxError(f"must be a string (a regex), got {type(pattern).__name__}")
    if len(pattern) > 256:
        raise UnsupportedConstruct("is longer than 256 characters; a separator regex is short, e.g. [ ]? or [\\n ]{0,2}")
    tree = parse(pattern)
    longest = _check(tree)
    if longest > MAX_WHITESPACE:
        raise UnsupportedConstruct(
            f"allows {longest} whitespace characters between tokens; poot allows at most {MAX_WHITESPACE}, e.g. [\\n ]{{0,{MAX_WHITESPACE}}}")
    return pattern


def _check(node: ast.Node) -> int:
    """The longest match of ``node``; raises on non-whitespace characters or unbounded repetition."""
    if isinstance(node, ast.Chars):
        for lo, hi in node.ranges:
            bad = [cp for cp in range(lo, min(hi, lo + 64) + 1) if cp not in JSON_WHITESPACE]
            if bad:
                raise UnsupportedConstruct(
                    f"matches {chr(bad[0])!r}, which is not JSON whitespace (only space, \\t, \\n, \\r may separate tokens)")
        return 1
    if isinstance(node, ast.Concat):
        return sum(_check(item) for item in node.items)
    if isinstance(node, ast.Alt):
        return max((_check(item) for item in node.items), default=0)
    if isinstance(node, ast.Repeat):
        if node.max is None:
            raise UnsupportedConstruct(
                "is unbounded (e.g. \\s* or +), which would let the model emit whitespace without end; "
                "bound it, e.g. [ ]? or [\\n ]{0,2}")
        return _check(node.item) * node.max
    raise PootError("is not a plain regex")  # an anchor: parse() does not leave one


def with_whitespace(schema: Any, pattern: str) -> Any:
    """``schema`` (parsed) carrying ``pattern`` as its separator regex (checked first)."""
    check_whitespace_pattern(pattern)
    if schema is True:
        schema = {}
    if not isinstance(schema, dict):
        return schema  # false (refused when compiled) or not a schema (refused by the parser)
    return {**schema, WHITESPACE_KEY: pattern}
