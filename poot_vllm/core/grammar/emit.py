"""poot's grammar AST -> the EBNF text xgrammar compiles, with the same language.

xgrammar's EBNF differs from GBNF in ways that matter (checked by experiment
with xgrammar 0.2.8): no ``.``; no empty alternatives (``""`` instead); a rule
name may not start with a digit; a rule must start at the beginning of a line;
character ranges that span the surrogates also match their (invalid UTF-8)
CESU encodings.  So the emitter writes one canonical form: every character
outside printable ASCII as ``\\uXXXX`` / ``\\UXXXXXXXX``, classes as explicit
surrogate-free ranges (negation already resolved by the parser), empty
sequences as ``""``, parentheses wherever precedence needs them, one rule per
line, and only the rules reachable from the root.
"""

from __future__ import annotations

from poot_vllm.core.grammar.gbnf import Alternation, CharClass, Grammar, Literal, Node, Repeat, RuleRef, Sequence, reachable_rules

_CLASS_SPECIAL = set("[]\\-^")
_LITERAL_SPECIAL = set('"\\')


def rule_name(name: str, root: str) -> str:
    """An xgrammar-safe, injective rename: the root keeps the name ``root``,
    every other rule becomes ``r_`` + name with ``_`` -> ``__`` and ``-`` -> ``_h``."""
    if name == root:
        return "root"
    return "r_" + name.replace("_", "__").replace("-", "_h")


def _char(cp: int, special: set[str]) -> str:
    c = chr(cp)
    if 0x20 <= cp < 0x7F and c not in special:
        return c
    if c in special:
        return "\\" + c
    return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"


def _literal(text: str) -> str:
    return '"' + "".join(_char(ord(c), _LITERAL_SPECIAL) for c in text) + '"'


def _char_class(node: CharClass) -> str:
    parts = []
    for lo, hi in node.ranges:
        parts.append(_char(lo, _CLASS_SPECIAL) if lo == hi
                     else _char(lo, _CLASS_SPECIAL) + "-" + _char(hi, _CLASS_SPECIAL))
    return "[" + "".join(parts) + "]"


def _node(node: Node, root: str) -> str:
    if isinstance(node, Literal):
        return _literal(node.text)
    if isinstance(node, CharClass):
        return _char_class(node)
    if isinstance(node, RuleRef):
        return rule_name(node.name, root)
    if isinstance(node, Alternation):
        return " | ".join(_node(o, root) for o in node.options)
    if isinstance(node, Sequence):
        return " ".join(_grouped(i, root) for i in node.items) if node.items else '""'
    # Repeat: the operand must be atomic for the postfix to bind to all of it.
    inner = _node(node.item, root)
    if not isinstance(node.item, (Literal, CharClass, RuleRef)):
        inner = f"({inner})"
    lo, hi = node.min, node.max
    if (lo, hi) == (0, None):
        op = "*"
    elif (lo, hi) == (1, None):
        op = "+"
    elif (lo, hi) == (0, 1):
        op = "?"
    elif hi is None:
        op = f"{{{lo},}}"
    elif hi == lo:
        op = f"{{{lo}}}"
    else:
        op = f"{{{lo},{hi}}}"
    return inner + op


def _grouped(node: Node, root: str) -> str:
    """``node`` as one element of a sequence."""
    text = _node(node, root)
    return f"({text})" if isinstance(node, Alternation) else text


def grammar_to_xgrammar_ebnf(grammar: Grammar) -> str:
    """The xgrammar EBNF text for ``grammar`` (entry rule ``root``)."""
    by_name = {r.name: r for r in grammar.rules}
    lines = [f"{rule_name(name, grammar.root)} ::= {_node(by_name[name].body, grammar.root)}"
             for name in reachable_rules(grammar)]
    return "\n".join(lines) + "\n"
