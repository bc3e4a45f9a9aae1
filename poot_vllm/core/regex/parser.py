"""poot's one regex front end: Python ``re`` syntax, minus what a DFA cannot do.

Two entry points, one grammar:

* :func:`parse` -- ``guided_regex`` and every regex poot generates:
  ``re.fullmatch`` semantics, so ``^``/``$`` are allowed only at the ends of
  a top-level alternative (where they are no-ops) and are resolved away;
* :func:`parse_search` -- JSON Schema ``pattern`` (``re.search``): anchors
  (``^ $ \\A \\Z``) are kept as :class:`~poot_vllm.core.regex.ast.Anchor`
  nodes wherever they stand, for :mod:`poot_vllm.core.json_schema.patterns`
  to resolve, and the caller chooses the sets of ``\\d \\w \\s``.

Classes ``[...]`` go through :mod:`poot_vllm.core.regex.classes`, which GBNF
classes share, and every set is a :mod:`~poot_vllm.core.regex.charsets` set.

**Why a hand-written parser rather than CPython's ``re._parser``.**  The
grammar and its quirks follow CPython's parser token for token (the tests
compare against ``re`` itself), so using ``re._parser`` behind an adapter was
the obvious alternative.  It was evaluated and not taken:

* refusals must name the construct *and its position* (``backreference \\1
  at position 3``); ``re._parser``'s tree carries no positions, so recovering
  them needs a second scan of the pattern that tokenizes classes, escapes and
  groups -- a parser again;
* it is private and has changed shape between the versions poot supports
  (``sre_parse`` on 3.10, ``re._parser`` from 3.11 with new opcodes for
  possessive quantifiers and atomic groups; 3.14 adds ``\\z``), and only the
  installed version could be tested;
* it recurses per group level (``RecursionError`` well inside the 4 KiB
  ``max_regex_bytes``), and warns (``FutureWarning``, "possible nested set")
  on user text, where silencing warnings is not thread-safe on vLLM's
  compile threads; both need a pre-scan of the pattern anyway;
* GBNF classes are not Python syntax, and JSON Schema patterns need their
  ``\\d``-style sets chosen per context; both fit as parameters of this
  parser, not of ``re._parser``.

So ``re`` stays the oracle (the property tests), and this parser is the one
implementation.  Syntax errors are :class:`ConstraintSyntaxError` with
``re``'s message and position.  Quirks kept on purpose: ``{`` that does not
start a valid ``{m}``, ``{m,}``, ``{,n}`` or ``{m,n}`` is a literal; ``{,}``
means ``*``; ``]`` first in a class is a literal; ``-`` first or last in a
class is a literal; ``(?#...)`` comments are skipped.

Constructs that need more than a finite automaton, or that change the
meaning of the rest of the pattern, raise :class:`UnsupportedConstruct` naming
the construct and its position: backreferences, lookarounds, ``\\b \\B``
(and ``\\A \\Z`` under full-match), ``^``/``$`` anywhere but the ends (under
full-match), inline flags, atomic groups, possessive quantifiers and
conditionals.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Callable

from poot_vllm.core.errors import ConstraintSyntaxError, UnsupportedConstruct
from poot_vllm.core.regex import ast
from poot_vllm.core.regex import charsets as cs
from poot_vllm.core.regex.classes import parse_class
from poot_vllm.core.regex.tokens import Tokens

#: Deeper group nesting is refused (keeps every tree walk far from Python's
#: recursion limit, on any thread).
MAX_NESTING = 100
#: ``re``'s bound on repetition counts (``_sre.MAXREPEAT``).
MAXREPEAT = 4294967295

#: ``\\d``-style escape (``"\\d"`` ... ``"\\S"``) and whether it stands in a
#: negated class -> its code points.
CategorySets = Callable[[str, bool], cs.CodepointSet]

_DIGITS = frozenset("0123456789")
_OCTDIGITS = frozenset("01234567")
_HEXDIGITS = frozenset("0123456789abcdefABCDEF")
_ASCIILETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_SPECIAL_CHARS = frozenset(".\\[{()*+?^$|")
_CATEGORY_ESCAPES = frozenset(("\\d", "\\w", "\\s", "\\D", "\\W", "\\S"))
_FLAG_CHARS = frozenset("aiLmsuxt-")
_SIMPLE_ESCAPES = {
    "\\a": 0x07,
    "\\f": 0x0C,
    "\\n": 0x0A,
    "\\r": 0x0D,
    "\\t": 0x09,
    "\\v": 0x0B,
    "\\\\": 0x5C,
}
_BOUNDARY_ESCAPES = {
    "\\b": "\\b (word boundary)",
    "\\B": "\\B (non-word-boundary)",
}
_STRING_ANCHORS = {
    "\\A": ("^", "\\A (start-of-string assertion)"),
    "\\Z": ("$", "\\Z (end-of-string assertion)"),
}
_LOOKAROUND_HINT = "lookaround assertions are not supported; match the text itself instead"


def python_categories(escape: str, negated: bool) -> cs.CodepointSet:
    """``re``'s own sets on str patterns (Unicode), whatever the context."""
    result = cs.category_escape(escape)
    assert result is not None, escape
    return result


def _unsupported(what: str, pos: int, hint: str = "") -> UnsupportedConstruct:
    msg = f"regex construct not supported: {what} at position {pos}"
    if hint:
        msg += f"; {hint}"
    return UnsupportedConstruct(msg)


@dataclass
class _Item:
    """One element of a sequence, as ``re``'s parser sees it for quantifiers."""

    node: ast.Node
    pos: int
    anchor: str | None = None  # "^" or "$"
    repeated: bool = False


@dataclass
class _State:
    groups: int = 1  # like re: group 0 is the whole match
    open_groups: set[int] = field(default_factory=set)
    names: dict[str, int] = field(default_factory=dict)


def parse(pattern: str) -> ast.Node:
    """``pattern`` as an :mod:`~poot_vllm.core.regex.ast` tree with ``re.fullmatch`` semantics (anchors resolved)."""
    parser = _Parser(pattern, search=False, categories=python_categories)
    return ast.alt([_strip_end_anchors(branch) for branch in parser.parse()])


def parse_search(pattern: str, categories: CategorySets = python_categories) -> ast.Node:
    """``pattern`` as a tree for ``re.search``: anchors kept as :class:`~poot_vllm.core.regex.ast.Anchor` nodes.

    ``^``/``\\A`` become ``Anchor("^")`` and ``$``/``\\Z`` ``Anchor("$")``
    wherever they stand (``$`` before a trailing newline is the caller's to
    decide).  ``categories`` gives the sets of ``\\d \\w \\s \\D \\W \\S``.
    """
    parser = _Parser(pattern, search=True, categories=categories)
    return ast.alt([ast.concat([item.node for item in branch]) for branch in parser.parse()])


def _strip_end_anchors(items: list[_Item]) -> ast.Node:
    """A top-level branch: ``^`` may lead it and ``$`` may end it (both no-ops under fullmatch)."""
    start = 0
    while start < len(items) and items[start].anchor == "^":
        start += 1
    end = len(items)
    while end > start and items[end - 1].anchor == "$":
        end -= 1
    for item in items[start:end]:
        if item.anchor is not None:
            where = "the start" if item.anchor == "^" else "the end"
            raise _unsupported(
                f"{item.anchor} anchor not at {where} of the pattern",
                item.pos,
                "poot matches whole replies, so ^ and $ are only allowed at the ends",
            )
    return ast.concat([item.node for item in items[start:end]])


class _PythonClasses:
    """:class:`~poot_vllm.core.regex.classes.ClassSyntax` of ``re``: its escapes and messages."""

    close_first = False

    def __init__(self, categories: CategorySets) -> None:
        self.categories = categories

    def member(self, source: Tokens, token: str, pos: int, negated: bool) -> int | cs.CodepointSet:
        if token[0] != "\\":
            return ord(token)
        if token == "\\b":
            return 0x08  # backspace inside a class, as in re
        if token in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[token]
        if token in _CATEGORY_ESCAPES:
            return self.categories(token, negated)
        code = _code_escape(source, token)
        if code is not None:
            return code
        c = token[1]
        if c in _OCTDIGITS:
            token += source.getwhile(2, _OCTDIGITS)
            code = int(token[1:], 8)
            if code > 0o377:
                raise source.error(f"octal escape value {token} outside of range 0-0o377", len(token))
            return code
        if c in _DIGITS or c in _ASCIILETTERS:
            raise source.error("bad escape " + token, len(token))
        return ord(c)

    def unterminated(self, source: Tokens, start: int) -> ConstraintSyntaxError:
        return source.error_at("unterminated character set", start)

    def bad_range(self, source: Tokens, start: int, this: str, that: str, lo: object, hi: object) -> ConstraintSyntaxError:
        return source.error(f"bad character range {this}-{that}", len(this) + 1 + len(that))


class _Parser:
    def __init__(self, pattern: str, search: bool, categories: CategorySets) -> None:
        self.source = Tokens(pattern)
        self.state = _State()
        self.search = search
        self.categories = categories
        self.classes = _PythonClasses(categories)

    def parse(self) -> list[list[_Item]]:
        branches = self._alternatives(nested=0)
        if self.source.next is not None:
            assert self.source.next == ")"
            raise self.source.error("unbalanced parenthesis")
        return branches

    def _alternatives(self, nested: int) -> list[list[_Item]]:
        branches = [self._sequence(nested)]
        while self.source.match("|"):
            branches.append(self._sequence(nested))
        return branches

    def _group_body(self, nested: int, start: int) -> ast.Node:
        source = self.source
        if nested > MAX_NESTING:
            raise _unsupported(f"groups nested more than {MAX_NESTING} deep", start, "flatten the pattern")
        branches = self._alternatives(nested)
        if not self.search:
            for items in branches:
                for item in items:
                    if item.anchor is not None:
                        raise _unsupported(
                            f"{item.anchor} anchor inside a group",
                            item.pos,
                            "poot matches whole replies, so ^ and $ are only allowed at the ends of the pattern",
                        )
        if not source.match(")"):
            raise source.error("missing ), unterminated subpattern", source.tell() - start)
        return ast.alt([ast.concat([item.node for item in items]) for items in branches])

    def _sequence(self, nested: int) -> list[_Item]:
        source = self.source
        items: list[_Item] = []
        while True:
            this = source.next
            if this is None or this in ("|", ")"):
                return items
            pos = source.tell()
            source.get()

            if this[0] == "\\":
                items.append(self._escape(this, pos))
            elif this not in _SPECIAL_CHARS:
                items.append(_Item(ast.chars(cs.single(ord(this))), pos))
            elif this == "[":
                items.append(_Item(ast.chars(parse_class(source, self.classes, pos)), pos))
            elif this in "*+?{":
                if not self._quantifier(items, this, pos):
                    items.append(_Item(ast.chars(cs.single(ord("{"))), pos))
            elif this == ".":
                items.append(_Item(ast.chars(cs.DOT), pos))
            elif this == "(":
                node = self._group(nested, pos)
                if node is not None:
                    items.append(_Item(node, pos))
            elif this in "^$":
                items.append(self._anchor(this, pos))
            else:  # pragma: no cover - _SPECIAL_CHARS is exhausted above
                raise AssertionError(this)

    def _anchor(self, kind: str, pos: int) -> _Item:
        node = ast.Anchor(kind) if self.search else ast.EPSILON
        return _Item(node, pos, anchor=kind)

    def _quantifier(self, items: list[_Item], this: str, pos: int) -> bool:
        """Apply ``* + ? {..}`` to the last item; False when ``{`` is a plain literal."""
        source = self.source
        here = source.tell()
        lo: int
        hi: int | None
        if this == "?":
            lo, hi = 0, 1
        elif this == "*":
            lo, hi = 0, None
        elif this == "+":
            lo, hi = 1, None
        else:
            if source.next == "}":
                return False
            lo_text = hi_text = ""
            while source.next is not None and source.next in _DIGITS:
                lo_text += source.get()  # type: ignore[operator]
            if source.match(","):
                while source.next is not None and source.next in _DIGITS:
                    hi_text += source.get()  # type: ignore[operator]
            else:
                hi_text = lo_text
            if not source.match("}"):
                source.seek(here)
                return False
            lo, hi = 0, None
            if lo_text:
                lo = int(lo_text)
                if lo >= MAXREPEAT:
                    raise source.error("the repetition number is too large", source.tell() - pos)
            if hi_text:
                hi = int(hi_text)
                if hi >= MAXREPEAT:
                    raise source.error("the repetition number is too large", source.tell() - pos)
                if hi < lo:
                    raise source.error("min repeat greater than max repeat", source.tell() - here)
        if not items or items[-1].anchor is not None:
            raise source.error("nothing to repeat", source.tell() - pos)
        if items[-1].repeated:
            raise source.error("multiple repeat", source.tell() - pos)
        if source.match("+"):
            raise _unsupported(
                "possessive quantifier", source.tell() - 1, "drop the trailing + (it cannot change which whole replies match)"
            )
        source.match("?")  # lazy: same set of full matches
        last = items[-1]
        items[-1] = _Item(ast.repeat(last.node, lo, hi), last.pos, repeated=True)
        return True

    def _group(self, nested: int, start: int) -> ast.Node | None:
        """After ``(``: a group's node, or None for a comment."""
        source, state = self.source, self.state
        name: str | None = None
        capture = True
        if source.match("?"):
            char = source.get()
            if char is None:
                raise source.error("unexpected end of pattern")
            if char == "P":
                if source.match("<"):
                    name = source.getuntil(">", "group name")
                    _check_group_name(source, name, 1)
                elif source.match("="):
                    ref = source.getuntil(")", "group name")
                    _check_group_name(source, ref, 1)
                    gid = state.names.get(ref)
                    if gid is None:
                        raise source.error(f"unknown group name {ref!r}", len(ref) + 1)
                    if gid in state.open_groups:
                        raise source.error("cannot refer to an open group", len(ref) + 1)
                    raise _unsupported(f"backreference (?P={ref})", start, "a finite automaton cannot compare repeated text")
                else:
                    char = source.get()
                    if char is None:
                        raise source.error("unexpected end of pattern")
                    raise source.error("unknown extension ?P" + char, len(char) + 2)
            elif char == ":":
                capture = False
            elif char == "#":
                while True:
                    if source.next is None:
                        raise source.error("missing ), unterminated comment", source.tell() - start)
                    if source.get() == ")":
                        return None
            elif char in "=!":
                kind = "lookahead" if char == "=" else "negative lookahead"
                raise _unsupported(f"{kind} (?{char}...)", start, _LOOKAROUND_HINT)
            elif char == "<":
                char = source.get()
                if char is None:
                    raise source.error("unexpected end of pattern")
                if char not in "=!":
                    raise source.error("unknown extension ?<" + char, len(char) + 2)
                kind = "lookbehind" if char == "=" else "negative lookbehind"
                raise _unsupported(f"{kind} (?<{char}...)", start, _LOOKAROUND_HINT)
            elif char == "(":
                raise _unsupported("conditional group (?(...)...)", start)
            elif char == ">":
                raise _unsupported("atomic group (?>...)", start)
            elif char in _FLAG_CHARS:
                raise _unsupported(
                    "inline flags (?" + char + "...)", start, "poot's regex dialect has no flags (case-insensitivity, DOTALL, ...)"
                )
            else:
                raise source.error("unknown extension ?" + char, len(char) + 1)
        if capture:
            if name is not None:
                if name in state.names:
                    raise source.error(f"redefinition of group name {name!r} as group {state.groups}", len(name) + 1)
                state.names[name] = state.groups
            gid = state.groups
            state.groups += 1
            state.open_groups.add(gid)
            node = self._group_body(nested + 1, start)
            state.open_groups.discard(gid)
            return node
        return self._group_body(nested + 1, start)

    def _escape(self, escape: str, pos: int) -> _Item:
        """An escape outside a class."""
        source, state = self.source, self.state
        if escape in _BOUNDARY_ESCAPES:
            raise _unsupported(_BOUNDARY_ESCAPES[escape], pos)
        if escape in _STRING_ANCHORS:
            kind, what = _STRING_ANCHORS[escape]
            if not self.search:
                raise _unsupported(what, pos)
            return self._anchor(kind, pos)
        if escape in _CATEGORY_ESCAPES:
            return _Item(ast.chars(self.categories(escape, False)), pos)
        if escape in _SIMPLE_ESCAPES:
            return _Item(ast.chars(cs.single(_SIMPLE_ESCAPES[escape])), pos)
        code = _code_escape(source, escape)
        if code is not None:
            return _Item(ast.chars(cs.single(code)), pos)
        c = escape[1]
        if c == "0":
            escape += source.getwhile(2, _OCTDIGITS)
            return _Item(ast.chars(cs.single(int(escape[1:], 8))), pos)
        if c in _DIGITS:
            # octal escape *or* group reference, decided like re does
            if source.next is not None and source.next in _DIGITS:
                escape += source.get()  # type: ignore[operator]
                if escape[1] in _OCTDIGITS and escape[2] in _OCTDIGITS and source.next is not None and source.next in _OCTDIGITS:
                    escape += source.get()  # type: ignore[operator]
                    code = int(escape[1:], 8)
                    if code > 0o377:
                        raise source.error(f"octal escape value {escape} outside of range 0-0o377", len(escape))
                    return _Item(ast.chars(cs.single(code)), pos)
            group = int(escape[1:])
            if group < state.groups:
                if group in state.open_groups:
                    raise source.error("cannot refer to an open group", len(escape))
                raise _unsupported(f"backreference {escape}", pos, "a finite automaton cannot compare repeated text")
            raise source.error(f"invalid group reference {group}", len(escape) - 1)
        if c in _ASCIILETTERS:
            raise source.error("bad escape " + escape, len(escape))
        return _Item(ast.chars(cs.single(ord(c))), pos)


def _check_group_name(source: Tokens, name: str, offset: int) -> None:
    if not name.isidentifier():
        raise source.error(f"bad character in group name {name!r}", len(name) + offset)


def _code_escape(source: Tokens, escape: str) -> int | None:
    """The hex/unicode/named escapes shared by both contexts; None if not one."""
    c = escape[1:2]
    if c == "x":
        escape += source.getwhile(2, _HEXDIGITS)
        if len(escape) != 4:
            raise source.error("incomplete escape " + escape, len(escape))
        return int(escape[2:], 16)
    if c == "u":
        escape += source.getwhile(4, _HEXDIGITS)
        if len(escape) != 6:
            raise source.error("incomplete escape " + escape, len(escape))
        return int(escape[2:], 16)
    if c == "U":
        escape += source.getwhile(8, _HEXDIGITS)
        if len(escape) != 10:
            raise source.error("incomplete escape " + escape, len(escape))
        code = int(escape[2:], 16)
        if code > cs.MAX_CODEPOINT:
            raise source.error("bad escape " + escape, len(escape))
        return code
    if c == "N":
        if not source.match("{"):
            raise source.error("missing {")
        charname = source.getuntil("}", "character name")
        try:
            return ord(unicodedata.lookup(charname))
        except (KeyError, TypeError):
            raise source.error(f"undefined character name {charname!r}", len(charname) + len("\\N{}")) from None
    return None
