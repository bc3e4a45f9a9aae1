"""Grammars without recursion are regular: serve them as DFAs.

A GBNF or Lark grammar whose rules never reach themselves (directly or
through other rules) describes a regular language: inlining every rule gives
a regex tree with the same language.  Such a grammar then runs on poot's DFA
path instead of xgrammar's pushdown matcher, and gets what DFAs have and
general grammars do not (docs/gbnf.md, docs/budget.md):

* budget-aware masks: the reply finishes inside ``max_tokens`` (a pushdown
  reply can be cut), and admission knows the shortest reply exactly, so a
  ``max_tokens`` it cannot fit is a 400;
* per-step masks that are a row copy (the DFA's precomputed token rows).

Only when it is cheap and bounded.  Inlining copies a rule at each use, so a
grammar whose rules are used many times (a DAG) can expand exponentially; the
expanded size is counted per rule *before* anything is built and the grammar
stays pushdown past :data:`MAX_INLINED_POSITIONS`.  The DFA build itself is
bounded by ``max_automaton_bytes``; a grammar over it stays pushdown too.
Nothing is ever refused here: the pushdown matcher serves every grammar the
parser accepted, as before.
"""

from __future__ import annotations

from poot_vllm.core.automata.build import Budget, regex_tree_to_dfa
from poot_vllm.core.automata.dfa import DFA
from poot_vllm.core.errors import LimitExceeded
from poot_vllm.core.grammar.gbnf import (Alternation, ByteAutomaton, CharClass, Grammar, Literal, Node, Repeat,
                                         RuleRef, Sequence, _walk, reachable_rules, references)
from poot_vllm.core.limits import DEFAULT_LIMITS, Limits
from poot_vllm.core.regex import ast

#: The most character positions the inlined regex tree may hold (each use of
#: a rule counts its positions again; a counted repeat counts its item once,
#: as the counted DFA build does).  A grammar above it stays pushdown.
MAX_INLINED_POSITIONS = 20_000


def dependency_order(grammar: Grammar) -> "list[str] | None":
    """The rules reachable from the root, each after the rules it uses, or None
    if one of them reaches itself (the grammar is recursive).  Iterative (Kahn's
    algorithm): a 16 KiB grammar can chain thousands of rules."""
    by_name = {r.name: r for r in grammar.rules}
    uses = {name: references(by_name[name].body) for name in reachable_rules(grammar)}
    used_by: dict[str, list[str]] = {name: [] for name in uses}
    pending = {name: len(refs) for name, refs in uses.items()}
    for name, refs in uses.items():
        for ref in refs:
            used_by[ref].append(name)
    ready = sorted(name for name, n in pending.items() if n == 0)
    order: list[str] = []
    while ready:
        name = ready.pop()
        order.append(name)
        for user in used_by[name]:
            pending[user] -= 1
            if pending[user] == 0:
                ready.append(user)
    return order if len(order) == len(uses) else None


def _positions(node: Node, rule_size: dict[str, int]) -> int:
    if isinstance(node, Literal):
        return len(node.text)
    if isinstance(node, CharClass):
        return 1
    if isinstance(node, RuleRef):
        return rule_size[node.name]
    if isinstance(node, (Sequence, Alternation)):
        items = node.items if isinstance(node, Sequence) else node.options
        return sum(_positions(i, rule_size) for i in items)
    return _positions(node.item, rule_size)


def regular_tree(grammar: Grammar) -> "ast.Node | None":
    """The regex tree of a non-recursive grammar, or None (recursive, or larger
    inlined than :data:`MAX_INLINED_POSITIONS`)."""
    order = dependency_order(grammar)
    if order is None:
        return None
    if any(isinstance(n, ByteAutomaton) for r in grammar.rules for n in _walk(r.body)):
        return None  # embedded byte automata (json_schema.recursive) have no regex tree; stay pushdown
    by_name = {r.name: r for r in grammar.rules}
    size: dict[str, int] = {}  # per rule, memoized: a DAG is counted in linear time
    for name in order:
        size[name] = _positions(by_name[name].body, size)
        if size[name] > MAX_INLINED_POSITIONS:
            return None
    trees: dict[str, ast.Node] = {}
    for name in order:  # each rule's tree once; uses share the object
        trees[name] = _tree(by_name[name].body, trees)
    return trees[grammar.root]


def _tree(node: Node, trees: dict[str, ast.Node]) -> ast.Node:
    if isinstance(node, Literal):
        return ast.literal_text(node.text)
    if isinstance(node, CharClass):
        return ast.chars(node.ranges)
    if isinstance(node, RuleRef):
        return trees[node.name]
    if isinstance(node, Sequence):
        return ast.concat([_tree(i, trees) for i in node.items])
    if isinstance(node, Alternation):
        return ast.alt([_tree(o, trees) for o in node.options])
    assert isinstance(node, Repeat)
    return ast.repeat(_tree(node.item, trees), node.min, node.max)


def regular_dfa(grammar: Grammar, limits: Limits = DEFAULT_LIMITS) -> "DFA | None":
    """The DFA of a non-recursive grammar's language (whole replies, UTF-8
    bytes), or None where the grammar stays on the pushdown matcher."""
    tree = regular_tree(grammar)
    if tree is None:
        return None
    try:
        return regex_tree_to_dfa(tree, Budget(limits.max_automaton_bytes))
    except LimitExceeded:
        return None  # the pushdown matcher serves it, as it did every grammar before
