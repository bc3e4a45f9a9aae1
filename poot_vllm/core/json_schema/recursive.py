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
* a lookaround a byte automaton cannot hold (:class:`_Converter`: one that
  sees into a recursive reference, a lookbehind);
* a schema text that holds a placeholder character itself;
* a grammar without a model (too many states; see rule_automata).
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import numpy as np

from poot_vllm.core.errors import EmptyLanguage, PootError
from poot_vllm.core.grammar.gbnf import (Alternation, ByteAutomaton, CharClass, Grammar, Literal, Node, Repeat, Rule,
                                         RuleRef, Sequence)
from poot_vllm.core.automata.build import POSITION_BYTES
from poot_vllm.core.automata.residues import marker_step
from poot_vllm.core.json_schema.placeholders import PLACEHOLDER_BASE, PLACEHOLDER_END, NeedsUnrolling
from poot_vllm.core.limits import DEFAULT_LIMITS, Limits
from poot_vllm.core.regex import ast
from poot_vllm.core.regex import charsets as cs

def schema_grammar(schema: "dict | bool | str", limits: Limits = DEFAULT_LIMITS, escaped: str = "",
                   free_form_rule: bool = False, value_rules: bool = False) -> "Grammar | None":
    """The grammar of a recursive schema, each cyclic ``$ref`` target one rule;
    None where the schema is not recursive or takes the unrolled DFA (see the
    module docstring; that path reports any refusal).

    With ``free_form_rule``, also of a schema that is not recursive but holds
    free-form values (``{}``, ``additionalProperties: true``, ``Any``): the
    free-form value is one more rule, any JSON value at any depth (what
    :func:`~poot_vllm.core.json_schema.compile_json_schema` serves where the
    DFA's copies of those values pass the automaton budget); None where the
    schema has none."""
    from poot_vllm.core.grammar.rule_automata import rule_automata
    from poot_vllm.core.json_schema.compiler import compile_schema_rules, parse_schema
    from poot_vllm.core.json_schema.refs import cyclic_targets
    from poot_vllm.core.regex.parser import parse

    try:
        root = parse_schema(schema, limits)
        if not free_form_rule and not value_rules and not cyclic_targets(root):
            return None
        if any(PLACEHOLDER_BASE <= ord(ch) <= PLACEHOLDER_END
               for ch in json.dumps(root, ensure_ascii=False)):
            return None
        top, compiler = compile_schema_rules(root, limits, escaped, free_form_rule, value_rules)
        if not compiler.rules:
            return None  # no free-form value and no recursion: a DFA or nothing
        trees = [parse(top)] + [parse(body) for _, body in compiler.rules.values()]
        if (free_form_rule or value_rules) and not _small_enough(trees, limits):
            return None
        names = {entry[0]: f"ref{k}" for k, entry in enumerate(compiler.rules.values())}
        convert = _Converter(names, limits)
        rules = [Rule("root", convert.node(trees[0]))]
        rules += [Rule(names[ph], convert.node(tree)) for (ph, _), tree in zip(compiler.rules.values(), trees[1:])]
        grammar = Grammar(tuple(rules), "root")
    except (NeedsUnrolling, PootError, RecursionError, _Empty):
        return None
    model = rule_automata(grammar)
    if model is None:
        return None
    if value_rules and int((model.first.sum(axis=1) >= 128).sum()) > VALUE_RULES_WIDE_STATES:
        return None  # poot's masks would not be precomputed: xgrammar's matcher, ~50 ms a step
    return grammar


#: The values-as-rules fallback serves a schema only where poot's per-state grammar masks will
#: be precomputed (rule_masks: at most PRECOMPUTE_VISITS_PER_NODE trie walks' worth): a
#: state that reads 128 or more distinct bytes (a string's body) walks most of the vocabulary's
#: trie, and a counted string (``maxLength: 191``) is a chain of such states in a rule model
#: (no counters there).  Past this many of them the schema stays the DFA path's 400, not a
#: grammar on xgrammar's matcher at ~50 ms a step at 128k tokens (Github_easy/o55159: 199
#: such states; the served o31176 and o65890: 1 and 14).
VALUE_RULES_WIDE_STATES = 32


#: The free-form fallback's bound: the rules' regex positions, each charged this many bytes of
#: ``max_automaton_bytes`` (twice what the DFA builder charges an NFA position: 8,192 positions
#: by default).  Past it the schema stays the DFA path's 400.  Why not larger: the rule model
#: builds in well under a second even at 16,384 positions, but a grammar of ~6,000 rule states
#: passes the per-state mask precomputation's bound at 128k tokens (rule_masks), and its masks
#: then come from xgrammar's matcher at ~50 ms a step inside strings.
FREE_FORM_RULE_POSITION_BYTES = 2 * POSITION_BYTES


def _small_enough(trees: "list[ast.Node]", limits: Limits) -> bool:
    """Whether a non-recursive schema's parsed rule bodies (free-form values as one rule) are
    cheap to model: no lookaround (embedding one checks its confinement by automaton products,
    seconds on a large schema) and at most ``max_automaton_bytes /
    FREE_FORM_RULE_POSITION_BYTES`` positions."""
    positions = 0
    for tree in trees:
        if ast.has_look(tree):
            return False
        positions += ast.position_count(tree)
        if positions * FREE_FORM_RULE_POSITION_BYTES > limits.max_automaton_bytes:
            return False
    return True


def regex_node(regex: str, limits: Limits = DEFAULT_LIMITS) -> Node:
    """A (non-recursive) schema regex as one grammar node, lookaheads embedded
    as byte automata: what a grammar that is built around schema regexes
    (a forced tool call with a recursive tool beside plain ones) holds for
    them.  Raises :class:`NeedsUnrolling` where the regex cannot be a node."""
    from poot_vllm.core.regex.parser import parse

    try:
        return _Converter({}, limits).node(parse(regex))
    except _Empty:
        raise NeedsUnrolling("a piece that matches nothing") from None


def renamed(grammar: Grammar, prefix: str) -> tuple[Rule, ...]:
    """``grammar``'s rules with every name (and call) prefixed, so that the
    rules of several schemas live in one grammar."""

    def node(n: Node) -> Node:
        if isinstance(n, RuleRef):
            return RuleRef(prefix + n.name)
        if isinstance(n, Sequence):
            return Sequence(tuple(node(i) for i in n.items))
        if isinstance(n, Alternation):
            return Alternation(tuple(node(o) for o in n.options))
        if isinstance(n, Repeat):
            return Repeat(node(n.item), n.min, n.max)
        return n  # Literal, CharClass, ByteAutomaton: no calls

    return tuple(Rule(prefix + r.name, node(r.body)) for r in grammar.rules)


class _Empty(Exception):
    """A piece that matches nothing (a lookahead no key can pass): the sequence
    holding it matches nothing either, and an alternation drops it."""


class _Converter:
    """A rule's regex tree as a grammar node: a placeholder character is a call
    of its rule, and a lookahead becomes part of an embedded byte automaton.

    Grammars have no lookarounds, so a lookahead (``(?="[a-z]+")`` before a
    ``patternProperties`` key, ``(?=[^"]{0,40}")`` before a string with both
    ``pattern`` and ``maxLength``) is compiled, with the items after it in its
    sequence, into one byte DFA (:class:`ByteAutomaton`).  That DFA judges the
    lookahead on the piece alone, so the piece must reach as far as the
    lookahead can see: it is extended item by item until no string the
    lookahead's body matches can run past the piece's end (checked on automata:
    ``rest . any+`` and the body share no string).  A lookahead that would see
    into a call, a lookbehind, or a lookaround inside a lookaround: the schema
    takes the unrolled DFA (:class:`NeedsUnrolling`)."""

    def __init__(self, names: dict[str, str], limits: Limits) -> None:
        self.names = names
        self.limits = limits
        self._looks: dict[int, tuple[Any, bool]] = {}
        self._calls: dict[int, tuple[Any, bool]] = {}
        #: lookahead body DFAs, by id of the Look (held, so the id stays its own)
        self._bodies: dict[int, tuple[Any, Any]] = {}

    def _call(self, node: Any) -> "str | None":
        if isinstance(node, ast.Chars) and len(node.ranges) == 1 and node.ranges[0][0] == node.ranges[0][1]:
            return self.names.get(chr(node.ranges[0][0]))
        return None

    def has_look(self, node: Any) -> bool:
        return self._has(node, self._looks, lambda n: isinstance(n, ast.Look))

    def has_call(self, node: Any) -> bool:
        return self._has(node, self._calls, lambda n: self._call(n) is not None)

    def _has(self, node: Any, memo: "dict[int, tuple[Any, bool]]", leaf: Any) -> bool:
        # keyed by id (trees share subtrees; hashing one is a walk), holding the
        # node so that its id is not reused while the memo lives
        entry = memo.get(id(node))
        found = None if entry is None else entry[1]
        if found is None:
            if leaf(node):
                found = True
            elif isinstance(node, (ast.Concat, ast.Alt)):
                found = any(self._has(i, memo, leaf) for i in node.items)
            elif isinstance(node, ast.Repeat):
                found = self._has(node.item, memo, leaf)
            else:
                found = False
            memo[id(node)] = (node, found)
        return found

    def node(self, node: Any) -> Node:
        if isinstance(node, ast.Chars):
            name = self._call(node)
            if name is not None:
                return RuleRef(name)
            if not node.ranges:
                raise _Empty
            return CharClass(tuple(node.ranges))
        if isinstance(node, ast.Concat):
            return self._sequence(node.items)
        if isinstance(node, ast.Alt):
            options = []
            for item in node.items:
                try:
                    options.append(self.node(item))
                except _Empty:
                    pass
            if not options:
                raise _Empty
            return Alternation(tuple(options))
        if isinstance(node, ast.Repeat):
            try:
                return Repeat(self.node(node.item), node.min, node.max)
            except _Empty:
                if node.min:
                    raise
                return Literal("")
        raise NeedsUnrolling("a lookaround outside a sequence")

    def _sequence(self, items: "tuple[Any, ...]") -> Node:
        if not items:
            return Literal("")
        out: list[Node] = []
        k = 0
        while k < len(items):
            if not (self.has_look(items[k]) and not self.has_call(items[k])):
                out.append(self.node(items[k]))
                k += 1
                continue
            j = k + 1
            confined: set[int] = set()  # looks already confined stay so: a longer piece ends later
            while not self._confined(items[k:j], confined):
                if j == len(items) or self.has_call(items[j]):
                    raise NeedsUnrolling("a lookahead that sees into a recursive reference")
                j += 1
            out.append(self._automaton(ast.concat(items[k:j])))
            k = j
        return out[0] if len(out) == 1 else Sequence(tuple(out))

    def _confined(self, items: "tuple[Any, ...]", confined: "set[int]") -> bool:
        """Whether every lookaround in ``items`` sees only text the items match.

        ``confined`` holds the ids of lookarounds (with their position) found
        confined in a shorter piece from the same start: text that runs past a
        longer piece's end runs past the shorter one's too (``R . x . any+`` is
        within ``R . any+``), so they are not checked again."""
        for n, (look, rest) in enumerate(_looks_with_rest(list(items), [])):
            key = hash((id(look), n))
            if key in confined:
                continue
            if look.behind or self.has_look(look.body):
                raise NeedsUnrolling("a lookbehind, or a lookaround inside a lookaround")
            if self._runs_past(self._body_dfa(look), ast.concat([_without_looks(r) for r in rest])):
                return False
            confined.add(key)
        return True

    def _runs_past(self, body: Any, rest: Any) -> bool:
        """Whether the lookahead body (a DFA; None: empty) matches a string that
        goes on past some text ``rest`` matches: ``body`` and ``rest . any+``
        share a string.  The pieces ``rest`` stands for are often whole objects
        while bodies are short, so instead of ``rest``'s DFA this walks the pairs
        (body state, ``rest``'s NFA items) along the body's strings only: the
        moment ``rest`` may have ended and the body reads one more byte, it has
        (the body's DFA is trimmed, so it can still accept)."""
        from poot_vllm.core.automata.build import POSITION_BYTES, Budget, _ByteNFA

        if body is None:
            return False
        budget = Budget(self.limits.max_automaton_bytes)
        nfa = _ByteNFA(rest, budget)
        if nfa.dynamic:  # (no lookarounds are left in rest; kept exact all the same)
            past_end = ast.concat([rest, ast.repeat(ast.Chars(cs.ANY_CHAR), 1, None)])
            return _intersect(self._dfa(past_end), body)
        classes = nfa.byte_to_class
        start = (body.start, nfa.start_items)
        seen = {start}
        todo = [start]
        while todo:
            q, items = todo.pop()
            row = body.transitions[q]
            live = np.flatnonzero(row >= 0)
            if not len(live):
                continue
            if nfa.final in items:
                return True
            stepped: dict[int, frozenset[int]] = {}
            for c, target in set(zip(classes[live].tolist(), row[live].tolist())):
                after = stepped.get(c)
                if after is None:
                    after = stepped[c] = nfa.step(items, c)
                if after and (target, after) not in seen:
                    budget.charge(POSITION_BYTES + 4 * len(after), "checking where a lookahead's text ends")
                    seen.add((target, after))
                    todo.append((target, after))
        return False

    def _body_dfa(self, look: Any) -> Any:
        entry = self._bodies.get(id(look))
        if entry is None:
            if isinstance(look.body, ast.Chars) and marker_step(look.body.ranges) is not None:
                raise NeedsUnrolling("a multipleOf residue (automata/residues.py)")
            entry = self._bodies[id(look)] = (look, self._dfa(look.body))
        return entry[1]

    def _dfa(self, tree: Any) -> Any:
        from poot_vllm.core.automata.build import Budget, regex_tree_to_dfa

        try:
            return regex_tree_to_dfa(tree, Budget(self.limits.max_automaton_bytes), counted=False)
        except EmptyLanguage:
            return None

    def _automaton(self, tree: Any) -> ByteAutomaton:
        dfa = self._dfa(tree)
        if dfa is None or not dfa.accepting.any():
            raise _Empty
        order = [dfa.start] + [q for q in range(dfa.n_states) if q != dfa.start]  # the start becomes state 0
        number = {q: i for i, q in enumerate(order)}
        edges = []
        for q in order:
            row = dfa.transitions[q].tolist()
            runs: list[tuple[int, int, int]] = []
            for b, t in enumerate(row):
                if t < 0:
                    continue
                if runs and runs[-1][1] == b - 1 and runs[-1][2] == number[t]:
                    runs[-1] = (runs[-1][0], b, runs[-1][2])
                else:
                    runs.append((b, b, number[t]))
            edges.append(tuple(runs))
        return ByteAutomaton(tuple(edges), tuple(bool(dfa.accepting[q]) for q in order))


def _looks_with_rest(items: list, rest: list) -> "Iterator[tuple[ast.Look, list]]":
    """Each lookaround in the sequence ``items`` (followed by ``rest``), with what
    may follow it up to the sequence's end (a superset: a repeat may go on)."""
    for i, item in enumerate(items):
        after = items[i + 1:] + rest
        if isinstance(item, ast.Look):
            yield item, after
        elif isinstance(item, ast.Concat):
            yield from _looks_with_rest(list(item.items), after)
        elif isinstance(item, ast.Alt):
            for option in item.items:
                yield from _looks_with_rest([option], after)
        elif isinstance(item, ast.Repeat):
            yield from _looks_with_rest([item.item], [ast.repeat(item.item, 0, None)] + after)


def _without_looks(node: Any) -> Any:
    """``node`` with every lookaround dropped (it matches a superset)."""
    if isinstance(node, ast.Look):
        return ast.EPSILON
    if isinstance(node, ast.Concat):
        return ast.concat([_without_looks(i) for i in node.items])
    if isinstance(node, ast.Alt):
        return ast.alt([_without_looks(i) for i in node.items])
    if isinstance(node, ast.Repeat):
        return ast.repeat(_without_looks(node.item), node.min, node.max)
    return node


def _intersect(a: Any, b: Any) -> bool:
    """Whether two DFAs (None: empty) accept a common string (product search)."""
    if a is None or b is None:
        return False
    ta, tb = a.transitions, b.transitions
    seen = {(a.start, b.start)}
    todo = [(a.start, b.start)]
    while todo:
        p, q = todo.pop()
        if a.accepting[p] and b.accepting[q]:
            return True
        both = (ta[p] >= 0) & (tb[q] >= 0)
        for pair in set(zip(ta[p][both].tolist(), tb[q][both].tolist())):
            if pair not in seen:
                seen.add(pair)
                todo.append(pair)
    return False
