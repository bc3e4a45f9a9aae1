"""What makes a JSON schema's text large: the advice of a ``max_schema_bytes`` 400.

``max_schema_bytes`` bounds the schema's canonical text (sorted keys, no
spaces).  "got 23213 bytes" alone does not tell a client what to change, so
the refusal names where the bytes are -- the few largest subschemas (JSON
pointers), found by descending into any part that holds most of the text --
and how much of the text is annotations (``description``, ``title``,
``examples``, ...), which never change what poot lets the model write and are
the cheapest bytes to drop.
"""

from __future__ import annotations

import json
from typing import Any

from poot_vllm.core.json_schema.refs import SCHEMA_MAPS, escape_token

#: Keywords that only annotate and that a schema never needs: dropping them changes no reply
#: (``compiler.ANNOTATIONS`` less what references and drafts read: ``$defs``, ``$id``, anchors, ...).
DROPPABLE = frozenset({"description", "title", "examples", "example", "default", "$comment", "deprecated",
                         "readOnly", "writeOnly"})
#: A part holding more than this share of its parent's text is opened (its own parts named instead).
_DESCEND_SHARE = 0.6
#: Texts this many times over the limit are refused without being parsed (so nothing is named).
PARSE_FACTOR = 4


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8",
                                                                                                   "surrogatepass"))


def _annotation_bytes(value: Any) -> int:
    """Bytes of ``value``'s text that sit in annotation keywords (key, colon and value)."""
    total = 0
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, child in node.items():
                if key in SCHEMA_MAPS and isinstance(child, dict):
                    stack.extend(child.values())  # a property named "title" is not an annotation
                elif key in DROPPABLE:
                    total += _size(key) + 1 + _size(child) + 1
                else:
                    stack.append(child)
        elif isinstance(node, list):
            stack.extend(node)
    return total


def _children(node: Any, pointer: str) -> list[tuple[str, Any]]:
    if isinstance(node, dict):
        return [(f"{pointer}/{escape_token(str(k))}", v) for k, v in node.items()]
    if isinstance(node, list):
        return [(f"{pointer}/{i}", v) for i, v in enumerate(node)]
    return []


def largest_text_parts(schema: Any, top: int = 3) -> str:
    """Where ``schema``'s canonical text is (for a ``max_schema_bytes`` refusal):
    e.g. "largest parts: /definitions/Order 9120 bytes (39%), ...; 4210 bytes
    (18%) are annotations (description, title, examples): they do not change
    the reply"; empty where nothing is worth naming."""
    total = _size(schema)
    if not total:
        return ""
    pointer, node, size = "", schema, total
    while True:
        parts = sorted(((_size(v), p, v) for p, v in _children(node, pointer)), key=lambda t: -t[0])
        if not parts or parts[0][0] <= _DESCEND_SHARE * size or not isinstance(parts[0][2], (dict, list)) \
                or not parts[0][2]:
            break
        size, pointer, node = parts[0]
    out = []
    if parts and parts[0][0] * 20 < total:  # many small parts (600 properties): name their container
        out.append(f"largest part: {pointer or '/'} ({len(parts)} entries) {size} bytes ({100 * size // total}%)")
    elif parts:
        named = ", ".join(f"{p or '/'} {size} bytes ({100 * size // total}%)" for size, p, _ in parts[:top])
        out.append(f"largest parts: {named}")
    notes = _annotation_bytes(schema)
    if notes * 10 >= total:
        out.append(f"{notes} bytes ({100 * notes // total}%) are annotations (description, title, examples, ...), "
                   "which do not change the reply: dropping them is the cheapest cut")
    return "; ".join(out)
