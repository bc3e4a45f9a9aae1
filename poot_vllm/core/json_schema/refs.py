"""Local ``$ref`` resolution: ``#``, ``#/$defs/Name``, ``#/definitions/Name``.

Only JSON-pointer fragments into the schema document itself are resolved
(RFC 6901 escapes ``~0`` ``~1`` and percent-encoding are decoded).  Anything
else (another document, ``#anchor`` names, ``$id``-relative URIs) is refused,
because poot cannot fetch or index it exactly.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from poot_vllm.core.errors import ConstraintSyntaxError, UnsupportedConstruct


def _refusal(ref: str, where: str, reason: str) -> UnsupportedConstruct:
    where = where or "/$ref"
    err = UnsupportedConstruct(f"unsupported keyword '$ref' at {where}: {reason} (got {ref!r})")
    err.keyword = "$ref"  # type: ignore[attr-defined]
    err.pointer = where  # type: ignore[attr-defined]
    return err


def ref_to_pointer(ref: Any, where: str) -> str:
    """The JSON pointer (``""`` for the root) that a local ``$ref`` names."""
    if not isinstance(ref, str):
        raise ConstraintSyntaxError(f"'$ref' at {where} must be a string, got {type(ref).__name__}")
    if not ref.startswith("#"):
        raise _refusal(ref, where, "only local references ('#/$defs/Name') are supported; inline the external schema")
    fragment = unquote(ref[1:])
    if fragment and not fragment.startswith("/"):
        raise _refusal(ref, where, "anchor references are not supported; use a JSON pointer like '#/$defs/Name'")
    return fragment


def pointer_tokens(pointer: str) -> list[str]:
    """Split a JSON pointer into its unescaped reference tokens."""
    if not pointer:
        return []
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def resolve_pointer(root: Any, pointer: str, where: str) -> Any:
    """The value at ``pointer`` inside ``root``; refuses a pointer that names nothing."""
    node = root
    for token in pointer_tokens(pointer):
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise ConstraintSyntaxError(f"'$ref' at {where} points to '#{pointer}', which does not exist in the schema")
    return node


def _refs_in(node: Any, out: list[str]) -> None:
    """Every local ``$ref`` string in ``node``'s subtree (iterative: schemas may nest deeply)."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#"):
                out.append(unquote(ref[1:]))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def cyclic_targets(root: Any) -> tuple[str, ...]:
    """The pointers of the schemas that can reach themselves through ``$ref``
    (a tree node, a linked list, a JSON-like value union), sorted.

    An over-approximation is harmless (the compiler only keys its cache finer);
    references that name nothing are left for the compiler to report.
    """
    edges: dict[str, list[str]] = {}
    todo = [""]
    while todo:
        target = todo.pop()
        if target in edges:
            continue
        try:
            node = resolve_pointer(root, target, "")
        except ConstraintSyntaxError:
            edges[target] = []
            continue
        found: list[str] = []
        _refs_in(node, found)
        edges[target] = sorted(set(found))
        todo.extend(t for t in edges[target] if t not in edges)
    cyclic = []
    for start in edges:
        seen: set[str] = set()
        stack = list(edges[start])
        while stack:
            t = stack.pop()
            if t == start:
                cyclic.append(start)
                break
            if t in seen:
                continue
            seen.add(t)
            stack.extend(edges.get(t, ()))
    return tuple(sorted(cyclic))
