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

A :class:`~poot_vllm.core.grammar.gbnf.ByteAutomaton` (a JSON Schema's
lookahead piece) becomes right-linear rules, one per state at a character
boundary (``a0s3 ::= [a-z] a0s4 | ""``): xgrammar reads characters, the
automaton bytes, so each rule's classes are the characters whose UTF-8 bytes
lead from that state to another boundary state.
"""

from __future__ import annotations

import functools

from poot_vllm.core.grammar.gbnf import (Alternation, ByteAutomaton, CharClass, Grammar, Literal, Node, RuleRef,
                                         Sequence, reachable_rules)

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


def _node(node: Node, root: str, extra: list[str]) -> str:
    """``node``'s text; rules it needs beside it (byte automata) go to ``extra``."""
    if isinstance(node, ByteAutomaton):
        return _automaton_rules(node, f"a{len(extra)}s", extra)
    if isinstance(node, Literal):
        return _literal(node.text)
    if isinstance(node, CharClass):
        return _char_class(node)
    if isinstance(node, RuleRef):
        return rule_name(node.name, root)
    if isinstance(node, Alternation):
        return " | ".join(_node(o, root, extra) for o in node.options)
    if isinstance(node, Sequence):
        return " ".join(_grouped(i, root, extra) for i in node.items) if node.items else '""'
    # Repeat: the operand must be atomic for the postfix to bind to all of it.
    inner = _node(node.item, root, extra)
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


def _grouped(node: Node, root: str, extra: list[str]) -> str:
    """``node`` as one element of a sequence."""
    text = _node(node, root, extra)
    return f"({text})" if isinstance(node, Alternation) else text


def grammar_to_xgrammar_ebnf(grammar: Grammar) -> str:
    """The xgrammar EBNF text for ``grammar`` (entry rule ``root``)."""
    by_name = {r.name: r for r in grammar.rules}
    extra: list[str] = []
    lines = [f"{rule_name(name, grammar.root)} ::= {_node(by_name[name].body, grammar.root, extra)}"
             for name in reachable_rules(grammar)]
    return "\n".join(lines + extra) + "\n"


# UTF-8 lead bytes: (first, last, continuation bytes, the lead's payload mask)
_LEADS = ((0x00, 0x7F, 0, 0x7F), (0xC2, 0xDF, 1, 0x1F), (0xE0, 0xEF, 2, 0x0F), (0xF0, 0xF4, 3, 0x07))


def _automaton_rules(node: ByteAutomaton, prefix: str, extra: list[str]) -> str:
    """Append to ``extra`` one rule per character-boundary state of ``node``
    (named ``prefix`` + state: ``a<lines so far>s<state>``, apart from
    :func:`rule_name`'s ``root`` and ``r_*``); return the start rule's name."""
    @functools.cache
    def tails(q: int, k: int) -> tuple[tuple[int, int, int], ...]:
        """(lo, hi, state) over the values of ``k`` continuation bytes read from ``q``."""
        out: list[tuple[int, int, int]] = []
        for lo, hi, t in node.edges[q]:
            for b in range(max(lo, 0x80), min(hi, 0xBF) + 1):
                base = (b - 0x80) << (6 * (k - 1))
                for a, z, u in ((0, 0, t),) if k == 1 else tails(t, k - 1):
                    if out and out[-1][2] == u and out[-1][1] + 1 == base + a:  # runs stay one range
                        out[-1] = (out[-1][0], base + z, u)
                    else:
                        out.append((base + a, base + z, u))
        return tuple(out)

    names = {0: f"{prefix}0"}
    todo, lines = [0], []
    while todo:
        q = todo.pop()
        by_target: dict[int, list[tuple[int, int]]] = {}
        for lo, hi, t in node.edges[q]:
            for first, last, k, payload in _LEADS:
                for b in range(max(lo, first), min(hi, last) + 1):
                    base = (b & payload) << (6 * k)
                    moves = [(0, 0, t)] if k == 0 else tails(t, k)
                    for a, z, u in moves:
                        by_target.setdefault(u, []).append((base + a, base + z))
        options = []
        for u in sorted(by_target):
            if u not in names:
                names[u] = f"{prefix}{u}"
                todo.append(u)
            options.append(f"{_char_class(CharClass(_merged(by_target[u])))} {names[u]}")
        if node.accepting[q]:
            options.append('""')
        lines.append(f"{names[q]} ::= {' | '.join(options)}")
    extra.extend(sorted(lines))
    return names[0]


def _merged(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)
