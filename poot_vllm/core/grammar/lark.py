"""Lark grammars (``guided_grammar`` in Lark syntax) -> poot's grammar AST.

outlines' CFG type and its ``dict`` output type send Lark grammars, and
vLLM's stock backends accept them, so poot reads them as well as GBNF.  This
is a parser of its own, not lark's: every error is a
:class:`~poot_vllm.core.errors.ConstraintSyntaxError` naming line:column, the
work is bounded like GBNF's (``max_grammar_bytes`` before parsing,
``max_grammar_nesting`` while parsing, ``max_grammar_cost`` after), and the
result is the same :class:`~poot_vllm.core.grammar.gbnf.Grammar` GBNF gives,
compiled and matched the same way.  The ``lark`` package is only the tests'
oracle.

**Which syntax** (:func:`grammar_syntax`, one rule): the first line that is
not blank and not a comment (``#`` or ``//``) decides.  ``name ::=`` (GBNF's
rule head, which every GBNF grammar starts with) means GBNF; ``name:``,
``NAME:`` (with optional ``?``/``!`` and ``.priority``) or a ``%`` directive
means Lark; anything else is refused naming both.  Lark never writes ``::=``
and GBNF never writes ``name:`` without ``::=``, so no grammar of one syntax is
read as the other.

**The language.**  A terminal stands for the strings its pattern matches
whole (``re.fullmatch`` for ``/regex/``, the exact text for ``"string"``);
the grammar's language is then the context-free language of the rules from
``start``.  It is the language lark's Earley parser accepts with
``lexer='dynamic_complete'``.  Lark's other lexers commit to the first match
of a terminal's regex, so for a few grammars they reject replies that are in
this language (``A: /a+/`` followed by ``"a"``).  Where a pattern's first
match is not any of its matches lark's lexers disagree among themselves:
lazy quantifiers (``*?``) are refused.

**``%ignore``** is honoured exactly as lark's Earley parser does: any number
of ignored terminals before every terminal of a rule and at the end of the
text (never inside a terminal).

Refused with a 400 (each names line:column): templates, ``%declare``,
``%override``, ``%extend``, imports other than ``common``; the regex flags
``x`` and ``l`` (``i``, ``s``, ``m``, ``u`` are supported), and ``i`` on a
regex with a negated class ``[^...]``; anchors, lookarounds and ``\b`` in
terminals; terminals that match the empty string (lark's Earley refuses them
too); recursive terminals and rules inside terminals (lark refuses them).
"""

from __future__ import annotations

import functools
import re
from ast import literal_eval
from dataclasses import dataclass

from poot_vllm.core.errors import ConstraintSyntaxError, LimitExceeded, PootError, UnsupportedConstruct
from poot_vllm.core.grammar.gbnf import (
    Alternation,
    CharClass,
    Grammar,
    Literal,
    Node,
    Repeat,
    Rule,
    RuleRef,
    Sequence,
    cycle_node,
    nullable,
    nullable_rules,
    parse_gbnf,
    references,
    validate,
)
from poot_vllm.core.limits import DEFAULT_LIMITS, Limits
from poot_vllm.core.regex import ast as rx
from poot_vllm.core.regex import charsets as cs
from poot_vllm.core.regex.escape import class_regex
from poot_vllm.core.regex.parser import parse_search

__all__ = ["grammar_syntax", "parse_grammar", "parse_lark", "COMMON_LARK"]

# ------------------------------------------------------------------ detection

_GBNF_HEAD = re.compile(r"[ \t]*[a-zA-Z0-9_-]+[ \t]*::=")
_LARK_HEAD = re.compile(
    r"[ \t]*(?:%(?:import|ignore|declare|override|extend)\b"
    r"|[?!]{0,2}_?[a-zA-Z][_a-zA-Z0-9]*[ \t]*(?:\.[ \t]*-?\d+[ \t]*)?(?:\{[^}\n]*\}[ \t]*)?:)"
)


def grammar_syntax(text: str) -> str:
    """``"gbnf"`` or ``"lark"``, by the first line that is not blank or a comment (module doc)."""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "//")):
            continue
        if _GBNF_HEAD.match(line):
            return "gbnf"
        if _LARK_HEAD.match(line):
            return "lark"
        break
    raise ConstraintSyntaxError(
        "the grammar is neither GBNF nor Lark: its first definition must be a GBNF rule 'root ::= ...' "
        "or a Lark rule 'start: ...' (or a Lark %import / %ignore line)")


def parse_grammar(text: str, limits: Limits = DEFAULT_LIMITS) -> Grammar:
    """A ``guided_grammar``, GBNF or Lark (:func:`grammar_syntax`), parsed and validated."""
    if not isinstance(text, str):
        raise ConstraintSyntaxError("guided_grammar must be a string")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.max_grammar_bytes:  # before reading a single line of it
        raise LimitExceeded("guided_grammar", "max_grammar_bytes", limits.max_grammar_bytes, "bytes", f"got {size}")
    if grammar_syntax(text) == "gbnf":
        return parse_gbnf(text, limits)
    return parse_lark(text, limits)


# ---------------------------------------------------------- lark's common.lark

#: lark's ``common.lark`` (lark 1.2.2), definition for definition, except two
#: terminals lark writes with a lazy quantifier and a lookbehind, which this
#: parser refuses; they are written here with the same language
#: (``tests/unit/test_lark.py`` checks every terminal against lark itself):
#:
#: * ``ESCAPED_STRING: "\"" _STRING_ESC_INNER "\""`` where
#:   ``_STRING_ESC_INNER: /.*?/ /(?<!\\)(\\\\)*?/``: a quote, then characters
#:   other than newline up to the first quote not escaped by a backslash;
#: * ``C_COMMENT: "/*" /(.|\n)*?/ "*/"``: up to the first ``*/``.
COMMON_LARK = r"""
DIGIT: "0".."9"
HEXDIGIT: "a".."f"|"A".."F"|DIGIT

INT: DIGIT+
SIGNED_INT: ["+"|"-"] INT
DECIMAL: INT "." INT? | "." INT

_EXP: ("e"|"E") SIGNED_INT
FLOAT: INT _EXP | DECIMAL _EXP?
SIGNED_FLOAT: ["+"|"-"] FLOAT

NUMBER: FLOAT | INT
SIGNED_NUMBER: ["+"|"-"] NUMBER

ESCAPED_STRING: "\"" /([^"\\\n]|\\[^\n])*/ "\""

LCASE_LETTER: "a".."z"
UCASE_LETTER: "A".."Z"

LETTER: UCASE_LETTER | LCASE_LETTER
WORD: LETTER+

CNAME: ("_"|LETTER) ("_"|LETTER|DIGIT)*

WS_INLINE: (" "|/\t/)+
WS: /[ \t\f\r\n]/+

CR : /\r/
LF : /\n/
NEWLINE: (CR? LF)+

SH_COMMENT: /#[^\n]*/
CPP_COMMENT: /\/\/[^\n]*/
C_COMMENT: /\/\*[^*]*\*+([^\/*][^*]*\*+)*\//
SQL_COMMENT: /--[^\n]*/
"""

_IGNORE = "-ignore"  # internal rule names contain '-', which Lark names cannot
_ROOT = "-root"
_COMMON_PREFIX = "common-"

# ---------------------------------------------------------------------- lexing

_STRING_RE = re.compile(r'"(\\"|\\\\|[^"\n])*?"i?')  # lark's own STRING and REGEXP tokens
_REGEXP_RE = re.compile(r"/(?!/)(\\/|\\\\|[^/])*?/[imslux]*")
_NAME_RE = re.compile(r"_?[a-zA-Z][_a-zA-Z0-9]*")
_RULE_NAME_RE = re.compile(r"_?[a-z][_a-z0-9]*")
_TERM_NAME_RE = re.compile(r"_?[A-Z][_A-Z0-9]*")
_NUMBER_RE = re.compile(r"[+-]?\d+")
_INLINE_SPACE_RE = re.compile(r"(?:[ \t]+|//[^\n]*|#[^\n]*|\\[ ]*\r?\n)*")
_BLANK_RE = re.compile(r"(?:\s+|//[^\n]*|#[^\n]*)*")
_MAX_COUNT = 1 << 20  # past any useful count; max_grammar_cost refuses far smaller ones


def _fix_escaping(s: str) -> str:
    """lark's ``_fix_escaping`` (load_grammar.py), so literals mean what they mean to lark.

    Raises ``ValueError``/``SyntaxError`` on bad escapes (the caller words the 400).
    """
    w = ""
    i = iter(s)
    for n in i:
        w += n
        if n == "\\":
            try:
                n2 = next(i)
            except StopIteration:
                raise ValueError("a literal may not end with a lone backslash") from None
            if n2 == "\\":
                w += "\\\\"
            elif n2 not in "Uuxnftr":
                w += "\\"
            w += n2
    w = w.replace('\\"', '"').replace("'", "\\'")
    return literal_eval("u'''%s'''" % w)


@dataclass
class _Def:
    """One rule or terminal definition as written."""

    name: str
    body: Node
    line: int
    column: int
    terminal: bool


class _LarkParser:
    """Recursive descent over one Lark grammar text (``pos`` indexes ``text``)."""

    def __init__(self, text: str, limits: Limits) -> None:
        self.text = text
        self.limits = limits
        self.pos = 0
        self.depth = 0
        self.defs: dict[str, _Def] = {}
        self.ignores: list[Node] = []
        self.ignore_positions: list[int] = []
        self.imports: dict[str, tuple[str, int]] = {}  # local name -> (common name, position)
        self.anon: dict[tuple, str] = {}  # anonymous terminals used by rules
        self.anon_defs: list[_Def] = []
        self.refs: dict[str, int] = {}  # first use of each name, for "undefined" errors
        self.used_from_rules: dict[str, int] = {}  # terminals rules (or %ignore) use directly

    # -- positions and errors

    def where(self, pos: int) -> tuple[int, int]:
        line = self.text.count("\n", 0, pos) + 1
        col = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return line, col

    def error(self, message: str, pos: int | None = None, cls: type = ConstraintSyntaxError) -> PootError:
        line, col = self.where(self.pos if pos is None else pos)
        return cls(f"Lark grammar error at line {line}:{col}: {message}")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip_inline(self) -> None:
        """Spaces, comments and backslash line continuations; never a line break."""
        self.pos = _INLINE_SPACE_RE.match(self.text, self.pos).end()

    def at_statement_end(self) -> bool:
        """At a line break (that is not followed by a ``|`` continuation) or the end."""
        self.skip_inline()
        c = self.peek()
        if c == "":
            return True
        if c not in "\r\n":
            return False
        after = _BLANK_RE.match(self.text, self.pos).end()
        if after < len(self.text) and self.text[after] == "|":
            self.pos = after  # a line starting with '|' continues the definition
            return False
        return True

    # -- statements

    def parse(self) -> None:
        while True:
            self.pos = _BLANK_RE.match(self.text, self.pos).end()
            if self.pos >= len(self.text):
                return
            if self.peek() == "%":
                self.parse_directive()
            else:
                self.parse_definition()
            if not self.at_statement_end():
                c = self.peek()
                if c == ")":
                    raise self.error("unbalanced ')': no '(' to close")
                if c == "]":
                    raise self.error("unbalanced ']': no '[' to close")
                if c == ":":
                    raise self.error("unexpected ':'; each definition starts on its own line")
                raise self.error(f"unexpected {c!r}")

    def parse_definition(self) -> None:
        start = self.pos
        m = re.compile(r"[?!]{1,2}").match(self.text, self.pos)  # ?rule / !rule: tree shape only
        if m:
            self.pos = m.end()
        name_pos = self.pos
        m = _NAME_RE.match(self.text, self.pos)
        if m is None:
            found = self.text[self.pos:self.pos + 12].split("\n")[0]
            raise self.error(f"expected a rule 'name: ...', a terminal 'NAME: ...' or a %directive, found {found!r}")
        name = m.group(0)
        terminal = _TERM_NAME_RE.fullmatch(name) is not None
        if not terminal and _RULE_NAME_RE.fullmatch(name) is None:
            raise self.error(f"name {name!r} mixes cases: rules are lowercase, terminals UPPERCASE", name_pos)
        if terminal and self.text[start:name_pos]:
            raise self.error(f"'?' and '!' apply to rules, not to the terminal {name!r}", start)
        self.pos = m.end()
        self.skip_inline()
        if self.peek() == "{":
            raise self.error(f"templates ({name}{{...}}) are not supported; write the rule out for each use",
                             self.pos, UnsupportedConstruct)
        if self.peek() == ".":  # priority: picks among parses, never changes the language
            self.pos += 1
            self.skip_inline()
            n = _NUMBER_RE.match(self.text, self.pos)
            if n is None:
                raise self.error("a priority after '.' must be an integer, e.g. 'name.2: ...'")
            self.pos = n.end()
            self.skip_inline()
        if self.peek() != ":":
            raise self.error(f"expected ':' after {name!r} (Lark rules are 'name: ...')")
        self.pos += 1
        body = self.parse_expansions(terminal)
        if terminal and body == Literal(""):
            raise self.error(f"terminal {name!r} is empty; terminals must match some text "
                             "(make its uses optional instead)", name_pos)
        line, col = self.where(name_pos)
        if name in self.defs:
            first = self.defs[name]
            kind = "terminal" if terminal else "rule"
            raise self.error(f"{kind} {name!r} is defined twice (first at line {first.line}); "
                             f"merge the definitions with '|'", name_pos)
        if name in self.imports:
            raise self.error(f"{name!r} is both imported and defined; rename one", name_pos)
        self.defs[name] = _Def(name, body, line, col, terminal)

    def parse_directive(self) -> None:
        start = self.pos
        m = re.compile(r"%([a-z]*)").match(self.text, self.pos)
        word = m.group(1)
        self.pos = m.end()
        if word == "ignore":
            body = self.parse_expansions(True)
            self.ignores.append(body)
            self.ignore_positions.append(start)
            return
        if word == "import":
            self.parse_import()
            return
        if word in ("declare", "override", "extend"):
            raise self.error(f"%{word} is not supported; write the definitions out in this grammar", start,
                             UnsupportedConstruct)
        raise self.error(f"unknown directive %{word}; Lark has %import and %ignore", start)

    def parse_import(self) -> None:
        self.skip_inline()
        path_pos = self.pos
        m = re.compile(r"(\.?)([a-zA-Z_][a-zA-Z0-9_]*(?:\.[a-zA-Z_][a-zA-Z0-9_]*)*)").match(self.text, self.pos)
        if m is None:
            raise self.error("expected a module after %import, e.g. '%import common.WS'")
        self.pos = m.end()
        parts = m.group(2).split(".")
        if m.group(1) or parts[0] != "common":
            raise self.error(f"only lark's 'common' module can be imported ('%import common.WS'), "
                             f"not {m.group(0)!r}; define the other names in the grammar", path_pos,
                             UnsupportedConstruct)
        self.skip_inline()
        names: list[tuple[str, str, int]] = []  # (common name, local name, position)
        if len(parts) == 2:
            local = parts[1]
            if self.text.startswith("->", self.pos):
                self.pos += 2
                self.skip_inline()
                a = _NAME_RE.match(self.text, self.pos)
                if a is None:
                    raise self.error("expected a name after '->'")
                local = a.group(0)
                self.pos = a.end()
            names.append((parts[1], local, path_pos))
        elif len(parts) == 1 and self.peek() == "(":
            self.pos += 1
            while True:
                self.skip_inline()
                a = _NAME_RE.match(self.text, self.pos)
                if a is None:
                    raise self.error("expected a name in '%import common (NAME, ...)'")
                names.append((a.group(0), a.group(0), self.pos))
                self.pos = a.end()
                self.skip_inline()
                if self.peek() == ",":
                    self.pos += 1
                    continue
                if self.peek() == ")":
                    self.pos += 1
                    break
                raise self.error("expected ',' or ')' in '%import common (NAME, ...)'")
        else:
            raise self.error("write '%import common.NAME' or '%import common (NAME, ...)'", path_pos)
        for name, local, pos in names:
            if name not in _common_defs():
                raise self.error(f"lark's common.lark has no terminal {name!r}; it has "
                                 + ", ".join(sorted(n for n in _common_defs() if not n.startswith("_"))), pos)
            if _TERM_NAME_RE.fullmatch(local) is None:
                raise self.error(f"a terminal must keep an UPPERCASE name, not {local!r}", pos)
            if local in self.imports or local in self.defs:
                raise self.error(f"{local!r} is imported or defined twice", pos)
            self.imports[local] = (name, pos)

    # -- expressions

    def parse_expansions(self, terminal: bool) -> Node:
        options = [self.parse_alias(terminal)]
        while True:
            if self.at_statement_end():
                break
            if self.peek() != "|":
                break
            self.pos += 1
            options.append(self.parse_alias(terminal))
        return options[0] if len(options) == 1 else Alternation(tuple(options))

    def parse_alias(self, terminal: bool) -> Node:
        node = self.parse_expansion(terminal)
        self.skip_inline()
        if self.text.startswith("->", self.pos):  # names the tree node; the language is unchanged
            if terminal:
                raise self.error("an alias (->) names a rule's tree node; terminals cannot have one")
            self.pos += 2
            self.skip_inline()
            m = _NAME_RE.match(self.text, self.pos)
            if m is None or _RULE_NAME_RE.fullmatch(m.group(0)) is None:
                raise self.error("expected a lowercase name after '->' (an alias names a tree node)")
            self.pos = m.end()
        return node

    def parse_expansion(self, terminal: bool) -> Node:
        items: list[Node] = []
        while True:
            if self.at_statement_end():
                break
            c = self.peek()
            if c in "|)]" or self.text.startswith("->", self.pos):
                break
            items.append(self.parse_expr(terminal))
        if len(items) == 1:
            return items[0]
        return Sequence(tuple(items)) if items else Literal("")

    def parse_expr(self, terminal: bool) -> Node:
        atom = self.parse_atom(terminal)
        self.skip_inline()
        c = self.peek()
        op_pos = self.pos
        if c and (c in "*+" or (c == "?" and not re.match(r"[a-z_]", self.text[self.pos + 1:self.pos + 2]))):
            self.pos += 1
            atom = Repeat(atom, 0 if c != "+" else 1, 1 if c == "?" else None)
        elif c == "~":
            self.pos += 1
            self.skip_inline()
            lo = self.parse_count()
            hi = lo
            self.skip_inline()
            if self.text.startswith("..", self.pos):
                self.pos += 2
                self.skip_inline()
                hi = self.parse_count()
            if hi < lo:
                raise self.error(f"repetition bounds out of order: ~{lo}..{hi} has max < min", op_pos)
            atom = Repeat(atom, lo, hi)
        else:
            return atom
        self.skip_inline()
        if self.peek() in ("*", "+", "?", "~") and self.peek():
            raise self.error("one repetition operator per element; group it first: (x*)+", self.pos)
        return atom

    def parse_count(self) -> int:
        m = re.compile(r"\d+").match(self.text, self.pos)
        if m is None:
            raise self.error("'~' needs a count: x ~ n or x ~ n..m")
        if len(m.group(0)) > 7 or int(m.group(0)) > _MAX_COUNT:
            line, col = self.where(self.pos)
            raise LimitExceeded(f"the repetition count at line {line}:{col}", "max_grammar_cost",
                                self.limits.max_grammar_cost, "units", f"~{m.group(0)[:12]}...")
        self.pos = m.end()
        return int(m.group(0))

    def enter(self) -> None:
        self.depth += 1
        if self.depth > self.limits.max_grammar_nesting:
            raise LimitExceeded("grammar nesting (parentheses and brackets)", "max_grammar_nesting",
                                self.limits.max_grammar_nesting, "levels")

    def parse_atom(self, terminal: bool) -> Node:
        start = self.pos
        c = self.peek()
        if c and c in "([":
            close = ")" if c == "(" else "]"
            self.enter()
            self.pos += 1
            body = self.parse_expansions(terminal)
            self.skip_inline()
            if self.peek() != close:
                what = "the end of the grammar" if not self.peek() else (
                    "the end of the line" if self.peek() in "\r\n" else repr(self.peek()))
                raise self.error(f"unbalanced {c!r}: not closed before {what} "
                                 "(a group must close on its line)", start)
            self.pos += 1
            self.depth -= 1
            return body if c == "(" else Repeat(body, 0, 1)
        if c == '"':
            node = self.parse_string(terminal)
        elif c == "/":
            node = self.parse_regexp()
        else:
            m = _NAME_RE.match(self.text, self.pos)
            if m is None:
                if c and c in "*+?~":
                    raise self.error(f"{c!r} must follow an element it repeats")
                raise self.error(f"unexpected {c!r}; expected a \"string\", /regex/, name, '(' or '['")
            name = m.group(0)
            self.pos = m.end()
            if self.peek() == "{":
                raise self.error(f"templates ({name}{{...}}) are not supported; write the rule out for each use",
                                 start, UnsupportedConstruct)
            if _TERM_NAME_RE.fullmatch(name):
                self.refs.setdefault(name, start)
                if not terminal:
                    self.used_from_rules.setdefault(name, start)
                return RuleRef(name)
            if _RULE_NAME_RE.fullmatch(name) is None:
                raise self.error(f"name {name!r} mixes cases: rules are lowercase, terminals UPPERCASE", start)
            if terminal:
                raise self.error(f"a terminal cannot use the rule {name!r} (terminals are regular: "
                                 "only strings, /regex/ and other terminals)", start)
            self.refs.setdefault(name, start)
            return RuleRef(name)
        if terminal:
            return node
        return self.anonymous(node, start)

    def anonymous(self, node: Node, pos: int) -> Node:
        """A string / regex / range in a rule: an anonymous terminal (where %ignore may precede it)."""
        key = (node,)
        name = self.anon.get(key)
        if name is None:
            name = f"-anon{len(self.anon)}"
            self.anon[key] = name
            line, col = self.where(pos)
            self.anon_defs.append(_Def(name, node, line, col, True))
            self.used_from_rules[name] = pos
        return RuleRef(name)

    def parse_string(self, terminal: bool) -> Node:
        start = self.pos
        m = _STRING_RE.match(self.text, self.pos)
        if m is None:
            rest = self.text[self.pos:].split("\n", 1)[0]
            raise self.error("unterminated string: missing closing '\"' on this line" if '"' not in rest[1:]
                             else "bad string literal", start)
        self.pos = m.end()
        text, icase = self.string_value(m.group(0), start)
        self.skip_inline()
        if self.text.startswith("..", self.pos):  # "a".."z"
            self.pos += 2
            self.skip_inline()
            hi_pos = self.pos
            m2 = _STRING_RE.match(self.text, self.pos)
            if m2 is None:
                raise self.error("a range is \"a\"..\"z\": expected a string after '..'")
            self.pos = m2.end()
            hi, icase2 = self.string_value(m2.group(0), hi_pos)
            if len(text) != 1 or len(hi) != 1:
                raise self.error("a range's ends must be single characters, e.g. \"a\"..\"z\"", start)
            if icase or icase2:
                raise self.error("the i flag is not supported on a range; write both cases: \"a\"..\"z\"|\"A\"..\"Z\"",
                                 start, UnsupportedConstruct)
            lo_cp, hi_cp = ord(text), ord(hi)
            if lo_cp > hi_cp:
                raise self.error(f"range out of order: U+{lo_cp:04X} > U+{hi_cp:04X}", start)
            ranges = cs.normalize([(lo_cp, hi_cp)])
            if not ranges:
                raise self.error("range matches no character (surrogates cannot be encoded as UTF-8)", start)
            return CharClass(ranges)
        if text == "":
            raise self.error('empty strings are not allowed in Lark (""); make the element optional instead: [x] or x?',
                             start)
        if any(cs.SURROGATES[0] <= ord(c) <= cs.SURROGATES[1] for c in text):
            raise self.error("string contains a surrogate code point, which UTF-8 cannot encode", start)
        if not icase:
            return Literal(text)
        return _items_node([_fold_node(rx.Chars(cs.single(ord(c)))) for c in text])

    def string_value(self, token: str, pos: int) -> tuple[str, bool]:
        icase = token.endswith("i") and not token.endswith('"')
        body = token[1:-2] if icase else token[1:-1]
        try:
            return _fix_escaping(body).replace("\\\\", "\\"), icase
        except (ValueError, SyntaxError) as exc:
            raise self.error(f"bad escape in string {token!r}: {exc.args[0] if exc.args else exc}", pos) from None

    def parse_regexp(self) -> Node:
        start = self.pos
        m = _REGEXP_RE.match(self.text, self.pos)
        if m is None:
            raise self.error("unterminated regex: missing closing '/'", start)
        self.pos = m.end()
        token = m.group(0)
        close = token.rfind("/")
        flags, body = token[close + 1:], token[1:close]
        if "\n" in body:
            raise self.error("line break inside a /regex/ (lark allows one only with the x flag, "
                             "which poot does not support); write \\n", start)
        try:
            pattern = _fix_escaping(body)
        except (ValueError, SyntaxError) as exc:
            raise self.error(f"bad escape in regex {token!r}: {exc.args[0] if exc.args else exc}", start) from None
        return _regex_node(pattern, flags, lambda msg, cls=UnsupportedConstruct: self.error(
            f"in {_excerpt(token)}: {msg}", start, cls), self.limits)


# ---------------------------------------------------------------- regex terms


def _excerpt(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _scan_regex(pattern: str):
    """Yield ``(index, token)`` outside classes: each unescaped character, each
    escape (``"\\x"``, two characters), and ``"["`` / ``"[^"`` for a class
    start (the class itself skipped)."""
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            yield i, pattern[i:i + 2]  # an escape: one atom, never a quantifier or a dot
            i += 2
            continue
        if c == "[":
            yield i, "[^" if pattern.startswith("[^", i) else "["
            j = i + 2 if pattern.startswith("[^", i) else i + 1
            if j < n and pattern[j] == "]":
                j += 1  # ']' first in a class is itself
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
            continue
        yield i, c
        i += 1


_BRACE_QUANT = re.compile(r"\{(\d*)(,?)(\d*)\}")


def _lazy_quantifier(pattern: str) -> int | None:
    """Index of the first lazy (or possessive) quantifier suffix, else None."""
    prev_quant = False
    prev = ""
    skip_to = -1
    for i, c in _scan_regex(pattern):
        if i < skip_to:
            continue
        if prev_quant and c in "?+":
            return i
        if c in "*+":
            prev_quant = True
        elif c == "?":
            prev_quant = prev != "("
        elif c == "{":
            m = _BRACE_QUANT.match(pattern, i)
            if m and (m.group(1) or (m.group(2) and m.group(3)) or m.group(0) == "{,}"):
                skip_to = m.end()
                prev_quant = True
                prev = "}"
                continue
            prev_quant = False
        else:
            prev_quant = False
        prev = c
    return None


@functools.lru_cache(maxsize=1)
def _cased_text() -> str:
    """Every code point that case-insensitive matching may pair with another one."""
    out = []
    for cp in range(cs.MAX_CODEPOINT + 1):
        if cs.SURROGATES[0] <= cp <= cs.SURROGATES[1]:
            continue
        ch = chr(cp)
        if ch.lower() != ch or ch.upper() != ch or ch.casefold() != ch:
            out.append(ch)
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def _fold(ranges: cs.CodepointSet) -> cs.CodepointSet:
    """``ranges`` under ``re.IGNORECASE``: exactly the code points Python's ``re``
    matches with the class (``re`` itself decides, over every cased code point)."""
    found = re.compile(class_regex(ranges), re.IGNORECASE).findall(_cased_text())
    return cs.union(ranges, cs.normalize([(ord(c), ord(c)) for c in found]))


def _fold_node(node: rx.Node) -> rx.Node:
    if isinstance(node, rx.Chars):
        return rx.Chars(_fold(node.ranges))
    if isinstance(node, rx.Concat):
        return rx.Concat(tuple(_fold_node(i) for i in node.items))
    if isinstance(node, rx.Alt):
        return rx.Alt(tuple(_fold_node(i) for i in node.items))
    if isinstance(node, rx.Repeat):
        return rx.Repeat(_fold_node(node.item), node.min, node.max)
    return node


def _items_node(items: list) -> Node:
    """Regex nodes in sequence as one grammar node (runs of single characters as a Literal)."""
    out: list[Node] = []
    run: list[str] = []
    for item in items:
        if isinstance(item, rx.Chars) and len(item.ranges) == 1 and item.ranges[0][0] == item.ranges[0][1]:
            run.append(chr(item.ranges[0][0]))
            continue
        if run:
            out.append(Literal("".join(run)))
            run = []
        out.append(item if not isinstance(item, rx.Chars) else CharClass(item.ranges))
    if run:
        out.append(Literal("".join(run)))
    if len(out) == 1:
        return out[0]
    return Sequence(tuple(out)) if out else Literal("")


def _regex_node(pattern: str, flags: str, error, limits: Limits) -> Node:
    """A terminal's ``/pattern/flags`` as a grammar node with the same (fullmatch) language."""
    for flag in flags:
        if flag in "xl":
            raise error(f"the {flag!r} flag is not supported; "
                        + ("write the pattern without layout whitespace or comments" if flag == "x"
                           else "locale-dependent matching cannot be enforced exactly"))
    lazy = _lazy_quantifier(pattern)
    if lazy is not None:
        raise error(f"lazy or possessive quantifier at position {lazy}: lark's lexer stops such a terminal at "
                    "its first match, not at every match, so its language is not the pattern's; "
                    "write it greedy (e.g. [^\"]* instead of .*?)")
    if "i" in flags and any(tok == "[^" for _, tok in _scan_regex(pattern)):
        raise error("a negated class [^...] under the i flag is not supported; list the characters it allows")
    if "s" in flags:  # '.' also matches a newline: spell it as the class it then is
        pattern = "".join(r"[\x00-\U0010ffff]" if c == "." else pattern[i]
                          for i, c in _expand_scan(pattern))
    try:
        tree = parse_search(pattern)
    except LimitExceeded:
        raise
    except PootError as exc:
        raise error(exc.message, type(exc)) from None
    if "i" in flags:
        tree = _fold_node(tree)
    return _convert(tree, error, limits)


def _expand_scan(pattern: str):
    """``(i, c)`` for every character index, with ``c`` = ``"."`` only for an unescaped dot outside a class."""
    dots = {i for i, c in _scan_regex(pattern) if c == "."}
    for i in range(len(pattern)):
        yield i, ("." if i in dots else "")


def _convert(tree, error, limits: Limits) -> Node:
    """Regex AST -> grammar AST, depth-bounded by ``max_grammar_nesting``."""

    def conv(node, depth: int) -> Node:
        if depth > limits.max_grammar_nesting:
            raise LimitExceeded("grammar nesting (groups inside a /regex/ terminal)", "max_grammar_nesting",
                                limits.max_grammar_nesting, "levels")
        if isinstance(node, rx.Anchor):
            raise error("anchors (^ $ \\A \\Z) cannot be enforced inside a terminal, which matches in the "
                        "middle of the text; remove them")
        if isinstance(node, rx.Chars):
            return CharClass(node.ranges)
        if isinstance(node, rx.Concat):
            if any(isinstance(i, rx.Anchor) for i in node.items):
                conv(next(i for i in node.items if isinstance(i, rx.Anchor)), depth)
            if all(isinstance(i, rx.Chars) for i in node.items):
                return _items_node(list(node.items))
            return Sequence(tuple(conv(i, depth + 1) for i in node.items)) if node.items else Literal("")
        if isinstance(node, rx.Alt):
            if not node.items:
                raise error("the regex matches no string")
            options = tuple(conv(i, depth + 1) for i in node.items)
            return options[0] if len(options) == 1 else Alternation(options)
        if isinstance(node, rx.Repeat):
            return Repeat(conv(node.item, depth + 1), node.min, node.max)
        if type(node).__name__ == "Look":
            raise error("lookarounds ((?=...) (?!...) (?<=...) (?<!...)) and word boundaries (\\b \\B) cannot be "
                        "enforced inside a terminal: "
                        "they look at text outside it; remove them")
        raise error(f"the regex construct {type(node).__name__} cannot be enforced inside a terminal")

    if isinstance(tree, rx.Alt) and not tree.items:
        raise error("the regex matches no string")
    return conv(tree, 0)


# ------------------------------------------------------------------- assembly


@functools.lru_cache(maxsize=1)
def _common_defs() -> dict[str, _Def]:
    parser = _LarkParser(COMMON_LARK, Limits(max_grammar_bytes=1 << 20))
    parser.parse()
    assert not parser.anon_defs and not parser.ignores
    return parser.defs


def _import_common(name: str, local: str, out: dict[str, Rule]) -> None:
    """Add common terminal ``name`` as ``local`` and its dependencies (namespaced) to ``out``."""
    common = _common_defs()

    def rename(node: Node) -> Node:
        return _replace_refs(node, lambda r: RuleRef(_COMMON_PREFIX + r.name))

    out[local] = Rule(local, rename(common[name].body))
    stack = sorted(references(common[name].body))
    while stack:
        dep = stack.pop()
        if _COMMON_PREFIX + dep in out:
            continue
        out[_COMMON_PREFIX + dep] = Rule(_COMMON_PREFIX + dep, rename(common[dep].body))
        stack.extend(sorted(references(common[dep].body)))


def _replace_refs(node: Node, replace) -> Node:
    """``node`` with each rule reference ``r`` replaced by ``replace(r)``."""
    if isinstance(node, RuleRef):
        return replace(node)
    if isinstance(node, Sequence):
        return Sequence(tuple(_replace_refs(i, replace) for i in node.items))
    if isinstance(node, Alternation):
        return Alternation(tuple(_replace_refs(i, replace) for i in node.options))
    if isinstance(node, Repeat):
        return Repeat(_replace_refs(node.item, replace), node.min, node.max)
    return node


def _with_ignore(node: Node, terminals: set[str]) -> Node:
    """``node`` with any number of ignored terminals allowed before each terminal it uses."""
    return _replace_refs(node, lambda r: Sequence((Repeat(RuleRef(_IGNORE), 0, None), r)) if r.name in terminals else r)


def parse_lark(text: str, limits: Limits = DEFAULT_LIMITS) -> Grammar:
    """Parse and validate a Lark grammar (entry rule ``start``); raise a :class:`PootError` if unusable."""
    if not isinstance(text, str):
        raise ConstraintSyntaxError("guided_grammar must be a string")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.max_grammar_bytes:
        raise LimitExceeded("guided_grammar", "max_grammar_bytes", limits.max_grammar_bytes, "bytes", f"got {size}")
    p = _LarkParser(text, limits)
    p.parse()

    # Names: every use defined (or imported), imports resolved.
    terminal_rules: dict[str, Rule] = {}
    for local, (name, _pos) in p.imports.items():
        _import_common(name, local, terminal_rules)
    for name, pos in p.refs.items():
        if name in p.defs or name in p.imports:
            continue
        if _TERM_NAME_RE.fullmatch(name):
            hint = f"; it is in lark's common.lark: add '%import common.{name}'" if name in _common_defs() else \
                f"; define it with '{name}: ...'"
            raise p.error(f"undefined terminal {name!r}{hint}", pos)
        raise p.error(f"undefined rule {name!r}; define it with '{name}: ...'", pos)
    if "start" not in p.defs or p.defs["start"].terminal:
        raise ConstraintSyntaxError("Lark grammar error at line 1:1: the grammar has no 'start' rule "
                                    "(the entry point); add 'start: ...'")
    for d in list(p.defs.values()) + p.anon_defs:
        if d.terminal:
            terminal_rules[d.name] = Rule(d.name, d.body, d.line, d.column)

    # Terminals are regular: no recursion (lark refuses it too).
    _refuse_terminal_recursion(terminal_rules, p)

    # Terminals a rule or %ignore uses may not match the empty string (lark's Earley refuses them).
    null = nullable_rules(Grammar(tuple(terminal_rules.values()), root=next(iter(terminal_rules), "")))
    ignore_nodes = list(p.ignores)
    for name in list(p.used_from_rules):
        if name in null:
            shown = "a string or /regex/" if name.startswith("-") else f"terminal {name!r}"
            line, col = p.where(p.used_from_rules[name])
            raise UnsupportedConstruct(
                f"Lark grammar error at line {line}:{col}: {shown} matches the empty string; "
                "lark's Earley parser refuses zero-width terminals: make it match at least one character "
                "and mark its use optional (x? or [x])")
    for i, node in enumerate(ignore_nodes):
        if nullable(node, null):
            line, col = p.where(p.ignore_positions[i])
            raise UnsupportedConstruct(f"Lark grammar error at line {line}:{col}: the %ignore terminal matches "
                                       "the empty string; make it match at least one character")

    rules: list[Rule] = []
    names_of_terminals = set(terminal_rules)
    root = "start"
    if ignore_nodes:
        rules.append(Rule(_ROOT, Sequence((RuleRef("start"), Repeat(RuleRef(_IGNORE), 0, None)))))
        root = _ROOT
    anon = {d.name: d.body for d in p.anon_defs}
    for d in p.defs.values():
        if not d.terminal:
            if ignore_nodes:
                body = _with_ignore(d.body, names_of_terminals)
            else:  # nothing can come between tokens: a string or /regex/ in a rule is just its text
                body = _replace_refs(d.body, lambda r: anon.get(r.name, r))
            rules.append(Rule(d.name, body, d.line, d.column))
    rules.extend(r for r in terminal_rules.values() if ignore_nodes or r.name not in anon)
    if ignore_nodes:
        rules.append(Rule(_IGNORE, ignore_nodes[0] if len(ignore_nodes) == 1 else Alternation(tuple(ignore_nodes))))
    grammar = Grammar(tuple(rules), root, text)
    try:
        validate(grammar, limits)
    except ConstraintSyntaxError as exc:  # GBNF words ("root ::=") must not reach a Lark user
        raise ConstraintSyntaxError("Lark " + exc.message.replace("::=", ":")) from None
    return grammar


def _refuse_terminal_recursion(terminal_rules: dict[str, Rule], p: _LarkParser) -> None:
    def uses(name: str) -> list[str]:
        return sorted(r for r in references(terminal_rules[name].body) if r in terminal_rules)

    name = cycle_node(terminal_rules, uses)
    if name is not None:
        rule = terminal_rules[name]
        raise ConstraintSyntaxError(
            f"Lark grammar error at line {rule.line}:{rule.column}: recursion in terminal {name!r} "
            "(terminals are regular; recursion is allowed only in rules, lowercase names)")
