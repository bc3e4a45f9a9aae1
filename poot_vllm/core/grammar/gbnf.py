"""GBNF (llama.cpp grammar syntax): parser, validator and poot's grammar AST.

The API server calls :func:`parse_gbnf` before a request reaches the engine, so
everything a user can get wrong is refused here with a
:class:`~poot_vllm.core.errors.ConstraintSyntaxError` that names line:column; the
engine only ever compiles grammars this module accepted.  This module imports
neither xgrammar nor torch (the server validates without compiling).

The dialect (see docs/gbnf.md): rules ``name ::= body``; a rule continues until
the next line that starts with ``name ::=``; ``|``, sequences, ``( )``,
``"literals"``, ``[classes]``, ``.``, postfix ``* + ? {m} {m,} {m,n}``, ``#``
comments, entry rule ``root``.  Characters are Unicode code points, matched as
UTF-8; surrogate code points (which UTF-8 cannot encode) are never matched.

Classes are read by the regex front end's class parser
(:mod:`poot_vllm.core.regex.classes`, with GBNF's members and messages), and
the AST keeps them as resolved :mod:`~poot_vllm.core.regex.charsets` sets
(negation and ``.`` already applied), so the emitter and the cost model see
one canonical form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable, Union

from poot_vllm.core.errors import ConstraintSyntaxError, LimitExceeded
from poot_vllm.core.limits import DEFAULT_LIMITS, Limits
from poot_vllm.core.regex import charsets as cs
from poot_vllm.core.regex.classes import parse_class
from poot_vllm.core.regex.tokens import Tokens

# ----------------------------------------------------------------------- AST


@dataclass(frozen=True)
class Literal:
    """A fixed string (may be empty: matches the empty string)."""

    text: str


@dataclass(frozen=True)
class CharClass:
    """One code point from ``ranges``: sorted, disjoint, non-adjacent, inclusive,
    never empty and never containing a surrogate."""

    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class RuleRef:
    name: str


@dataclass(frozen=True)
class Sequence:
    items: tuple["Node", ...]


@dataclass(frozen=True)
class Alternation:
    options: tuple["Node", ...]


@dataclass(frozen=True)
class Repeat:
    """``item`` repeated ``min`` to ``max`` times (``max=None``: unbounded)."""

    item: "Node"
    min: int
    max: int | None


@dataclass(frozen=True)
class ByteAutomaton:
    """A byte-level DFA standing for a piece of a grammar (never parsed from
    GBNF text): what a JSON Schema rule embeds where its regex has a lookahead,
    which grammars cannot spell (json_schema.recursive).  ``edges[q]`` holds
    ``(lo, hi, target)`` byte ranges out of state ``q``; the start is state 0;
    every state lies on a path to an accepting one, and the language is never
    empty."""

    edges: tuple[tuple[tuple[int, int, int], ...], ...]
    accepting: tuple[bool, ...]


Node = Union[Literal, CharClass, RuleRef, Sequence, Alternation, Repeat, ByteAutomaton]


@dataclass(frozen=True)
class Rule:
    name: str
    body: Node
    line: int = 0  # 1-based source line of the definition (0: built in code)
    column: int = 0


@dataclass(frozen=True)
class Grammar:
    """A validated grammar: every reference defined, ``root`` present, every
    rule productive.  ``rules`` keeps source order; ``root`` names the entry."""

    rules: tuple[Rule, ...]
    root: str = "root"
    source: str | None = field(default=None, compare=False)

    def rule(self, name: str) -> Rule:
        for r in self.rules:
            if r.name == name:
                return r
        raise KeyError(name)


ANY_CHAR = CharClass(cs.ANY_CHAR)


# --------------------------------------------------------------------- lexing

_NAME_RE = re.compile(r"[a-zA-Z0-9_-]+")
_DEFINE_RE = re.compile(r"([a-zA-Z0-9_-]+)[ \t]*::=")
_SPACE_RE = re.compile(r"(?:[ \t\r\n]+|#[^\n]*)*")
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "]": "]", "[": "[", "-": "-", '"': '"'}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


class _Parser:
    """Recursive descent over the text; ``pos`` is an index into ``text``."""

    def __init__(self, text: str, limits: Limits) -> None:
        self.text = text
        self.pos = 0
        self.limits = limits
        self.depth = 0
        # First reference to each rule name, for "undefined rule" errors.
        self.refs: dict[str, int] = {}

    # -- positions and errors

    def where(self, pos: int) -> tuple[int, int]:
        line = self.text.count("\n", 0, pos) + 1
        col = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return line, col

    def error(self, message: str, pos: int | None = None) -> ConstraintSyntaxError:
        line, col = self.where(self.pos if pos is None else pos)
        return ConstraintSyntaxError(f"grammar error at line {line}:{col}: {message}")

    def skip_space(self) -> None:
        self.pos = _SPACE_RE.match(self.text, self.pos).end()

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def at_definition(self) -> bool:
        """A ``name ::=`` starts here (the next rule's head ends the current body)."""
        return _DEFINE_RE.match(self.text, self.pos) is not None

    def at_line_start(self, pos: int) -> bool:
        start = self.text.rfind("\n", 0, pos) + 1
        return self.text[start:pos].strip(" \t\r") == ""

    # -- grammar

    def parse(self) -> list[Rule]:
        rules: list[Rule] = []
        self.skip_space()
        while self.pos < len(self.text):
            m = _DEFINE_RE.match(self.text, self.pos)
            if m is None:
                found = self.text[self.pos:self.pos + 12].split("\n")[0]
                raise self.error(f"expected a rule definition 'name ::= ...', found {found!r}")
            if not self.at_line_start(self.pos):
                raise self.error(f"rule definition {m.group(1)!r} must start on its own line")
            start = self.pos
            self.pos = m.end()
            self.skip_space()
            body = self.parse_alternation()
            c = self.peek()
            if c == ")":
                raise self.error("unbalanced ')': no '(' to close")
            if c and not self.at_definition():
                raise self.error(f"unexpected {c!r}")
            line, col = self.where(start)
            rules.append(Rule(m.group(1), body, line, col))
        return rules

    def parse_alternation(self) -> Node:
        options = [self.parse_sequence()]
        while self.peek() == "|":
            self.pos += 1
            self.skip_space()
            options.append(self.parse_sequence())
        return options[0] if len(options) == 1 else Alternation(tuple(options))

    def parse_sequence(self) -> Node:
        items: list[Node] = []
        while True:
            c = self.peek()
            if c in ("", "|", ")") or self.at_definition():
                break
            item = self.parse_primary()
            self.skip_space()
            item = self.parse_postfix(item)
            items.append(item)
        if len(items) == 1:
            return items[0]
        return Sequence(tuple(items)) if items else Literal("")

    def parse_postfix(self, item: Node) -> Node:
        stacked = 0
        while True:
            c = self.peek()
            if c in ("*", "+", "?", "{"):
                # Stacked postfixes nest like parentheses; bound them the same way.
                stacked += 1
                if self.depth + stacked > self.limits.max_grammar_nesting:
                    raise LimitExceeded("grammar nesting (parentheses and stacked repetitions)",
                                        "max_grammar_nesting", self.limits.max_grammar_nesting, "levels")
            if c == "*":
                item = Repeat(item, 0, None)
            elif c == "+":
                item = Repeat(item, 1, None)
            elif c == "?":
                item = Repeat(item, 0, 1)
            elif c == "{":
                item = self.parse_braces(item)
                continue
            else:
                return item
            self.pos += 1
            self.skip_space()

    def parse_braces(self, item: Node) -> Node:
        start = self.pos
        m = re.compile(r"\{[ \t]*(\d*)[ \t]*(?:(,)[ \t]*(\d*)[ \t]*)?\}").match(self.text, self.pos)
        if m is None:
            raise self.error("malformed repetition: use {m}, {m,} or {m,n} with integers", start)
        lo_s, comma, hi_s = m.groups()
        if not lo_s:
            raise self.error("repetition needs a lower bound: write {0,n} instead of {,n}", start)
        lo = int(lo_s)
        hi: int | None = lo if comma is None else (int(hi_s) if hi_s else None)
        if hi is not None and hi < lo:
            raise self.error(f"repetition bounds out of order: {{{lo},{hi}}} has max < min", start)
        self.pos = m.end()
        self.skip_space()
        return Repeat(item, lo, hi)

    def parse_primary(self) -> Node:
        c = self.peek()
        start = self.pos
        if c == '"':
            return self.parse_literal()
        if c == "[":
            return self.parse_class()
        if c == ".":
            self.pos += 1
            return ANY_CHAR
        if c == "(":
            self.depth += 1
            if self.depth > self.limits.max_grammar_nesting:
                raise LimitExceeded("grammar nesting (parentheses and stacked repetitions)",
                                    "max_grammar_nesting", self.limits.max_grammar_nesting, "levels")
            self.pos += 1
            self.skip_space()
            body = self.parse_alternation()
            if self.peek() != ")":
                raise self.error("unbalanced '(': not closed before "
                                 + ("the next rule" if self.peek() else "the end of the grammar"), start)
            self.pos += 1
            self.depth -= 1
            return body
        m = _NAME_RE.match(self.text, self.pos)
        if m:
            self.pos = m.end()
            self.refs.setdefault(m.group(0), start)
            return RuleRef(m.group(0))
        if c in "*+?{":
            raise self.error(f"{c!r} must follow an element it repeats")
        raise self.error(f"unexpected {c!r}; expected a literal, [class], '.', '(' or rule name")

    def parse_char(self, closing: str) -> int:
        """One (possibly escaped) code point inside a literal or class."""
        c = self.text[self.pos]
        if c in "\r\n":
            what = "literal" if closing == '"' else "character class"
            raise self.error(f"line break inside a {what}: close it on the same line or write \\n")
        if c != "\\":
            self.pos += 1
            return ord(c)
        start = self.pos
        e = self.text[self.pos + 1:self.pos + 2]
        if e in _SIMPLE_ESCAPES:
            self.pos += 2
            return ord(_SIMPLE_ESCAPES[e])
        if e in _HEX_ESCAPES:
            n = _HEX_ESCAPES[e]
            digits = self.text[self.pos + 2:self.pos + 2 + n]
            if len(digits) != n or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"bad escape: \\{e} needs exactly {n} hex digits", start)
            cp = int(digits, 16)
            if cp > cs.MAX_CODEPOINT:
                raise self.error(f"bad escape: \\{e}{digits} is past U+10FFFF", start)
            if cs.SURROGATES[0] <= cp <= cs.SURROGATES[1]:
                raise self.error(f"bad escape: \\{e}{digits} is a surrogate, which UTF-8 cannot encode", start)
            self.pos += 2 + n
            return cp
        shown = e if e else "end of grammar"
        raise self.error(f"bad escape '\\{shown}': use \\n \\t \\r \\\\ \\\" \\[ \\] \\- \\xHH \\uHHHH or \\UHHHHHHHH", start)

    def parse_literal(self) -> Literal:
        start = self.pos
        self.pos += 1
        chars: list[str] = []
        while True:
            if self.pos >= len(self.text):
                raise self.error("unterminated literal: missing closing '\"'", start)
            if self.text[self.pos] == '"':
                self.pos += 1
                return Literal("".join(chars))
            cp = self.parse_char('"')
            if cs.SURROGATES[0] <= cp <= cs.SURROGATES[1]:  # a raw lone surrogate in a Python str
                raise self.error("literal contains a surrogate code point", start)
            chars.append(chr(cp))

    def parse_class(self) -> CharClass:
        """A ``[...]`` class, through the regex front end's class parser with GBNF's members."""
        start = self.pos
        source = Tokens(self.text, start + 1, error=lambda text, msg, pos: self.error(msg, pos), trailing_backslash=None)
        resolved = parse_class(source, _GbnfClasses(self), start)
        self.pos = source.tell()
        if not resolved:
            raise self.error("character class matches no character", start)
        return CharClass(resolved)


class _GbnfClasses:
    """:class:`~poot_vllm.core.regex.classes.ClassSyntax` of GBNF: a first ``]`` closes, members are
    single characters with GBNF's escapes (:meth:`_Parser.parse_char`, shared with literals)."""

    close_first = True

    def __init__(self, parser: _Parser) -> None:
        self.parser = parser

    def member(self, source: Tokens, token: str, pos: int, negated: bool) -> int:
        self.parser.pos = pos
        code = self.parser.parse_char("]")
        source.seek(self.parser.pos)
        return code

    def unterminated(self, source: Tokens, start: int) -> ConstraintSyntaxError:
        return self.parser.error("unterminated character class: missing closing ']'", start)

    def bad_range(self, source: Tokens, start: int, this: str, that: str, lo: object, hi: object) -> ConstraintSyntaxError:
        return self.parser.error(f"character class range out of order: U+{lo:04X} > U+{hi:04X}", start)


# ----------------------------------------------------------------- validation


def _walk(node: Node):
    yield node
    if isinstance(node, Sequence):
        for i in node.items:
            yield from _walk(i)
    elif isinstance(node, Alternation):
        for i in node.options:
            yield from _walk(i)
    elif isinstance(node, Repeat):
        yield from _walk(node.item)


def references(node: Node) -> set[str]:
    return {n.name for n in _walk(node) if isinstance(n, RuleRef)}


def _productive(node: Node, ok: set[str]) -> bool:
    """Does ``node`` match some string, given the rules in ``ok`` do?"""
    if isinstance(node, RuleRef):
        return node.name in ok
    if isinstance(node, Sequence):
        return all(_productive(i, ok) for i in node.items)
    if isinstance(node, Alternation):
        return any(_productive(i, ok) for i in node.options)
    if isinstance(node, Repeat):
        return node.min == 0 or _productive(node.item, ok)
    return True  # literals, (never empty) classes and byte automata


def nullable(node: Node, null_rules: set[str]) -> bool:
    """Does ``node`` match the empty string, given the rules in ``null_rules`` do?"""
    if isinstance(node, Literal):
        return node.text == ""
    if isinstance(node, CharClass):
        return False
    if isinstance(node, ByteAutomaton):
        return node.accepting[0]
    if isinstance(node, RuleRef):
        return node.name in null_rules
    if isinstance(node, Sequence):
        return all(nullable(i, null_rules) for i in node.items)
    if isinstance(node, Alternation):
        return any(nullable(i, null_rules) for i in node.options)
    return node.min == 0 or nullable(node.item, null_rules)


def _fixpoint(rules: dict[str, Rule], pred) -> set[str]:
    done: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, rule in rules.items():
            if name not in done and pred(rule.body, done):
                done.add(name)
                changed = True
    return done


def nullable_rules(grammar: Grammar) -> set[str]:
    return _fixpoint({r.name: r for r in grammar.rules}, nullable)


def cycle_node(nodes: "Iterable[Hashable]", edges: "Callable[[Hashable], Iterable[Hashable]]") -> "Hashable | None":
    """A node on a cycle of the graph (``edges(n)``: n's successors; successors
    outside ``nodes`` are visited too), or None.  Iterative depth-first search:
    grammars can chain thousands of rules."""
    state: dict = {}  # 1 on the current path, 2 done
    for start in nodes:
        if state.get(start):
            continue
        state[start] = 1
        stack = [(start, iter(edges(start)))]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return nxt
            elif not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(edges(nxt))))
    return None


def reachable_rules(grammar: Grammar) -> list[str]:
    """Rule names reachable from the root, root first, then in source order."""
    by_name = {r.name: r for r in grammar.rules}
    seen, stack = {grammar.root}, [grammar.root]
    while stack:
        for ref in references(by_name[stack.pop()].body):
            if ref not in seen:
                seen.add(ref)
                stack.append(ref)
    return [grammar.root] + [r.name for r in grammar.rules if r.name in seen and r.name != grammar.root]


def class_cost(node: CharClass) -> int:
    """Cost units of one character-class position: ``max(1, first_bytes // 8)``,
    where ``first_bytes`` is the number of distinct UTF-8 first bytes of the
    class's characters (ASCII characters, plus the lead bytes of the rest)."""
    first: set[int] = set()
    for lo, hi in node.ranges:
        if lo < 0x80:
            first.update(range(lo, min(hi, 0x7F) + 1))
        if hi >= 0x80:
            lead_lo = chr(max(lo, 0x80)).encode("utf-8", "surrogatepass")[0]
            lead_hi = chr(hi).encode("utf-8", "surrogatepass")[0]
            first.update(range(lead_lo, lead_hi + 1))
    return max(1, len(first) // 8)


def grammar_cost(grammar: Grammar) -> int:
    """Work units the grammar costs to compile (the ``max_grammar_cost`` bound).

    Counted over rules reachable from the root, with counted repetitions
    expanded: each literal and rule reference is one unit (long literals one
    more per 32 characters), a class one unit per 8 first bytes it can start
    with (:func:`class_cost`: ``[0-9]`` 1, ``[a-z]`` 3, ``[^"]`` or ``.`` 22 --
    xgrammar's per-position mask work grows with the tokens a position
    allows: at 128k tokens ``[^"]{160}`` took ~10 s, ``[0-9]{1000}`` 0.07 s),
    ``x{m,n}`` costs ``x`` times
    ``m + 2*(n-m)`` (``m+1`` if unbounded), and each position in a sequence
    also pays for the run of nullable elements after it -- measured with
    xgrammar, compile time grows with exactly these counts (a sequence of
    ``k`` nullable elements is quadratic in ``k``).
    """
    null = nullable_rules(grammar)
    by_name = {r.name: r for r in grammar.rules}

    def cost(node: Node) -> int:
        if isinstance(node, Literal):
            return 1 + len(node.text) // 32
        if isinstance(node, CharClass):
            return class_cost(node)
        if isinstance(node, RuleRef):
            return 1
        if isinstance(node, ByteAutomaton):
            return sum(len(e) for e in node.edges)
        if isinstance(node, Alternation):
            return sum(cost(o) for o in node.options)
        if isinstance(node, Repeat):
            copies = node.min + 1 if node.max is None else node.min + 2 * (node.max - node.min)
            return cost(node.item) * max(copies, 1)
        total, run = 0, 0
        for item in reversed(node.items):  # run: nullable items starting here
            # A wide optional class weighs its class cost in the run (a run of
            # k optional [^"] is quadratic in k *and* wide: ~5 s at k=18).
            run = run + run_weight(item) if nullable(item, null) else 0
            total += cost(item) + run
        return total

    def run_weight(item: Node) -> int:
        while isinstance(item, Repeat):
            item = item.item
        return class_cost(item) if isinstance(item, CharClass) else 1

    return sum(cost(by_name[name].body) for name in reachable_rules(grammar))


def validate(grammar: Grammar, limits: Limits = DEFAULT_LIMITS, *, refs: dict[str, tuple[int, int]] | None = None) -> None:
    """Raise a :class:`PootError` unless ``grammar`` is usable (see module doc)."""
    by_name: dict[str, Rule] = {}
    for rule in grammar.rules:
        if rule.name in by_name:
            first = by_name[rule.name]
            raise ConstraintSyntaxError(
                f"grammar error at line {rule.line}:{rule.column}: rule {rule.name!r} is defined twice "
                f"(first at line {first.line}); merge the definitions with '|'")
        by_name[rule.name] = rule
    if grammar.root not in by_name:
        raise ConstraintSyntaxError(
            f"grammar error at line 1:1: the grammar has no {grammar.root!r} rule (the entry point); "
            f"add '{grammar.root} ::= ...'")
    for rule in grammar.rules:
        for ref in sorted(references(rule.body)):
            if ref not in by_name:
                line, col = (refs or {}).get(ref, (rule.line, rule.column))
                raise ConstraintSyntaxError(
                    f"grammar error at line {line}:{col}: undefined rule {ref!r} (used in {rule.name!r}); "
                    f"define it with '{ref} ::= ...'")
    productive = _fixpoint(by_name, _productive)
    for rule in grammar.rules:
        if rule.name not in productive:
            raise ConstraintSyntaxError(
                f"grammar error at line {rule.line}:{rule.column}: rule {rule.name!r} matches no string "
                f"(every alternative needs itself or another such rule); add a non-recursive alternative")
    cost = grammar_cost(grammar)
    if cost > limits.max_grammar_cost:
        raise LimitExceeded("grammar size after expanding repetitions", "max_grammar_cost",
                            limits.max_grammar_cost, "units",
                            f"this grammar costs {cost}; large {{m,n}} counts and long runs of optional items add up")


def parse_gbnf(text: str, limits: Limits = DEFAULT_LIMITS) -> Grammar:
    """Parse and validate a GBNF grammar; raise a :class:`PootError` if it is unusable."""
    if not isinstance(text, str):
        raise ConstraintSyntaxError("guided_grammar must be a string")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.max_grammar_bytes:
        raise LimitExceeded("guided_grammar", "max_grammar_bytes", limits.max_grammar_bytes, "bytes",
                            f"got {size}")
    parser = _Parser(text, limits)
    rules = parser.parse()
    refs = {name: parser.where(pos) for name, pos in parser.refs.items()}
    grammar = Grammar(tuple(rules), "root", text)
    validate(grammar, limits, refs=refs)
    return grammar
