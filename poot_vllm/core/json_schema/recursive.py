"""Recursive JSON Schemas as grammars: exact at every depth.

A schema whose ``$ref`` targets reach themselves (a ``TreeNode`` model, a
JSON-like ``Value`` union, a linked list) has no regular language.  The DFA
path unrolls such a schema a few levels (``RECURSION_DEPTHS``), exact up to
that depth and a narrowing below it.  Here instead each cyclic target is
compiled **once**, as a grammar rule: the schema compiler runs in *rules mode*
(``SchemaCompiler(rules=True)``), where a reference to a cyclic target becomes
a placeholder character (one per target, from Unicode's Supplementary Private
Use Area-B) in the regex text, and the texts become rules of one grammar:
every placeholder a call of its rule.  The grammar runs on poot's pushdown
masks with budgets (docs/gbnf.md, docs/budget.md): exact at any depth, and
the reply still finishes inside ``max_tokens``.

Rules mode steps back to the unrolled DFA (:class:`NeedsUnrolling`, never a
refusal of its own) when a placeholder could not stand for its rule:

* a recursive reference inside a negation (``not``, the differences of an
  overlapping ``oneOf``): the rule would have to be negated;
* a recursive reference in a value poot checks on an automaton (an ``enum``
  filtered by the other keywords, ``uniqueItems`` on a tuple);
* lookarounds in the regex (grammars have none);
* a schema text that holds a placeholder character itself;
* a grammar without a model (too many states; see rule_automata).
"""

from __future__ import annotations

import json
from typing import Any

from poot_vllm.core.errors import PootError
from poot_vllm.core.grammar.gbnf import (Alternation, CharClass, Grammar, Literal, Node, Repeat, Rule, RuleRef,
                                         Sequence)
from poot_vllm.core.json_schema.placeholders import PLACEHOLDER_BASE, PLACEHOLDER_END, NeedsUnrolling
from poot_vllm.core.limits import DEFAULT_LIMITS, Limits
from poot_vllm.core.regex import ast

def schema_grammar(schema: "dict | bool | str", limits: Limits = DEFAULT_LIMITS, escaped: str = "") -> "Grammar | None":
    """The grammar of a recursive schema, each cyclic ``$ref`` target one rule;
    None where the schema is not recursive or takes the unrolled DFA (see the
    module docstring; that path reports any refusal)."""
    from poot_vllm.core.grammar.rule_automata import rule_automata
    from poot_vllm.core.json_schema.compiler import compile_schema_rules, parse_schema
    from poot_vllm.core.json_schema.refs import cyclic_targets
    from poot_vllm.core.regex.parser import parse

    try:
        root = parse_schema(schema, limits)
        if not cyclic_targets(root):
            return None
        if any(PLACEHOLDER_BASE <= ord(ch) <= PLACEHOLDER_END
               for ch in json.dumps(root, ensure_ascii=False)):
            return None
        top, compiler = compile_schema_rules(root, limits, escaped)
        names = {entry[0]: f"ref{k}" for k, entry in enumerate(compiler.rules.values())}
        rules = [Rule("root", _node(parse(top), names))]
        rules += [Rule(names[ph], _node(parse(body), names)) for ph, body in compiler.rules.values()]
        grammar = Grammar(tuple(rules), "root")
    except (NeedsUnrolling, PootError, RecursionError):
        return None
    if rule_automata(grammar) is None:
        return None
    return grammar


def _node(node: Any, names: dict[str, str]) -> Node:
    """A regex tree as a grammar node; a placeholder character is a call of its rule."""
    if isinstance(node, ast.Chars):
        if len(node.ranges) == 1 and node.ranges[0][0] == node.ranges[0][1]:
            name = names.get(chr(node.ranges[0][0]))
            if name is not None:
                return RuleRef(name)
        if not node.ranges:
            raise NeedsUnrolling("an empty character class")
        return CharClass(tuple(node.ranges))
    if isinstance(node, ast.Concat):
        if not node.items:
            return Literal("")
        return Sequence(tuple(_node(i, names) for i in node.items))
    if isinstance(node, ast.Alt):
        if not node.items:
            raise NeedsUnrolling("a branch that matches nothing")
        return Alternation(tuple(_node(i, names) for i in node.items))
    if isinstance(node, ast.Repeat):
        return Repeat(_node(node.item, names), node.min, node.max)
    raise NeedsUnrolling("a lookaround in the schema's regex")  # ast.Look: grammars have none
