"""Parser for poot's regex dialect: Python ``re`` syntax, minus what a DFA cannot do.

The grammar and its quirks follow CPython's ``re`` parser (``sre_parse``)
token for token, so a pattern poot accepts means what it means to
``re.fullmatch`` on str patterns (Unicode ``\\d \\w \\s``, ``.`` without
DOTALL), and a pattern ``re`` rejects is a :class:`ConstraintSyntaxError`.
Quirks kept on purpose: ``{`` that does not start a valid ``{m}``, ``{m,}``,
``{,n}`` or ``{m,n}`` is a literal; ``{,}`` means ``*``; ``]`` first in a class
is a literal; ``-`` first or last in a class is a literal; ``(?#...)``
comments are skipped.

Constructs that need more than a finite automaton, or that change the
meaning of the rest of the pattern, raise :class:`UnsupportedConstruct` naming
the construct and its position: backreferences, lookarounds, ``\\b \\B \\A
\\Z``, ``^``/``$`` anywhere but the ends, inline flags, atomic groups,
possessive quantifiers and conditionals.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field

from poot_vllm.core.errors import ConstraintSyntaxError, UnsupportedConstruct
from poot_vllm.core.regex import ast
from poot_vllm.core.regex import charsets as cs

#: Deeper group nesting is refused (keeps every tree walk far from Python's
#: recursion limit, on any thread).
MAX_NESTING = 100
#: ``re``'s bound on repetition counts (``_sre.MAXREPEAT``).
MAXREPEAT = 4294967295

_DIGITS = frozenset("0123456789")
_OCTDIGITS = frozenset("01234567")
_HEXDIGITS = frozenset("0123456789abcdefABCDEF")
_ASCIILETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_SPECIAL_CHARS = frozenset(".\\[{()*+?^$|")
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
_ANCHOR_ESCAPES = {
    "\\A": "\\A (start-of-string assertion)",
    "\\Z": "\\Z (end-of-string assertion)",
    "\\b": "\\b (word boundary)",
    "\\B": "\\B (non-word-boundary)",
}


def _category_set(escape: str) -> cs.CodepointSet | None:
    letter = escape[1:]
    if letter in ("d", "w", "s"):
        return cs.category(letter)
    if letter in ("D", "W", "S"):
        return cs.complement(cs.category(letter.lower()))
    return None


class _Tokens:
    """``re``'s tokenizer: a token is one character or a backslash and the next."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.index = 0
        self.next: str | None = None
        self._advance()

    def _advance(self) -> None:
        index = self.index
        if index >= len(self.text):
            self.next = None
            return
        char = self.text[index]
        if char == "\\":
            index += 1
            if index >= len(self.text):
                raise ConstraintSyntaxError(
                    f"bad escape (end of pattern) at position {len(self.text) - 1}: a trailing backslash escapes nothing; "
                    "write \\\\ for a literal backslash"
                )
            char += self.text[index]
        self.index = index + 1
        self.next = char

    def match(self, char: str) -> bool:
        if char == self.next:
            self._advance()
            return True
        return False

    def get(self) -> str | None:
        this = self.next
        self._advance()
        return this

    def getwhile(self, n: int, charset: frozenset[str]) -> str:
        result = ""
        for _ in range(n):
            c = self.next
            if c is None or c not in charset:
                break
            result += c
            self._advance()
        return result

    def getuntil(self, terminator: str, name: str) -> str:
        result = ""
        while True:
            c = self.next
            self._advance()
            if c is None:
                if not result:
                    raise self.error("missing " + name)
                raise self.error(f"missing {terminator}, unterminated name", len(result))
            if c == terminator:
                if not result:
                    raise self.error("missing " + name, 1)
                return result
            result += c

    def tell(self) -> int:
        return self.index - len(self.next or "")

    def seek(self, index: int) -> None:
        self.index = index
        self._advance()

    def error(self, msg: str, offset: int = 0) -> ConstraintSyntaxError:
        return ConstraintSyntaxError(f"invalid regex: {msg} at position {self.tell() - offset}")


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
    """Parse ``pattern`` into an :mod:`~poot_vllm.core.regex.ast` tree (anchors resolved)."""
    source = _Tokens(pattern)
    state = _State()
    branches = _parse_alternatives(source, state, nested=0)
    if source.next is not None:
        assert source.next == ")"
        raise source.error("unbalanced parenthesis")
    return ast.alt([_strip_end_anchors(branch) for branch in branches])


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


def _parse_alternatives(source: _Tokens, state: _State, nested: int) -> list[list[_Item]]:
    branches = [_parse_sequence(source, state, nested)]
    while source.match("|"):
        branches.append(_parse_sequence(source, state, nested))
    return branches


def _group_body(source: _Tokens, state: _State, nested: int, start: int) -> ast.Node:
    if nested > MAX_NESTING:
        raise _unsupported(f"groups nested more than {MAX_NESTING} deep", start, "flatten the pattern")
    branches = _parse_alternatives(source, state, nested)
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


def _parse_sequence(source: _Tokens, state: _State, nested: int) -> list[_Item]:
    items: list[_Item] = []
    while True:
        this = source.next
        if this is None or this in ("|", ")"):
            return items
        pos = source.tell()
        source.get()

        if this[0] == "\\":
            items.append(_Item(_escape(source, this, state, pos), pos))
        elif this not in _SPECIAL_CHARS:
            items.append(_Item(ast.chars(cs.single(ord(this))), pos))
        elif this == "[":
            items.append(_Item(ast.chars(_parse_class(source, pos)), pos))
        elif this in "*+?{":
            if not _parse_quantifier(source, items, this, pos):
                items.append(_Item(ast.chars(cs.single(ord("{"))), pos))
        elif this == ".":
            items.append(_Item(ast.chars(cs.DOT), pos))
        elif this == "(":
            node = _parse_group(source, state, nested, pos)
            if node is not None:
                items.append(_Item(node, pos))
        elif this == "^":
            items.append(_Item(ast.EPSILON, pos, anchor="^"))
        elif this == "$":
            items.append(_Item(ast.EPSILON, pos, anchor="$"))
        else:  # pragma: no cover - _SPECIAL_CHARS is exhausted above
            raise AssertionError(this)


def _parse_quantifier(source: _Tokens, items: list[_Item], this: str, pos: int) -> bool:
    """Apply ``* + ? {..}`` to the last item; False when ``{`` is a plain literal."""
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


def _parse_group(source: _Tokens, state: _State, nested: int, start: int) -> ast.Node | None:
    """After ``(``: a group's node, or None for a comment."""
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
            raise _unsupported(f"{kind} (?{char}...)", start)
        elif char == "<":
            char = source.get()
            if char is None:
                raise source.error("unexpected end of pattern")
            if char not in "=!":
                raise source.error("unknown extension ?<" + char, len(char) + 2)
            kind = "lookbehind" if char == "=" else "negative lookbehind"
            raise _unsupported(f"{kind} (?<{char}...)", start)
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
        node = _group_body(source, state, nested + 1, start)
        state.open_groups.discard(gid)
        return node
    return _group_body(source, state, nested + 1, start)


def _check_group_name(source: _Tokens, name: str, offset: int) -> None:
    if not name.isidentifier():
        raise source.error(f"bad character in group name {name!r}", len(name) + offset)


def _code_escape(source: _Tokens, escape: str) -> int | None:
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


def _escape(source: _Tokens, escape: str, state: _State, pos: int) -> ast.Node:
    """An escape outside a class."""
    if escape in _ANCHOR_ESCAPES:
        raise _unsupported(_ANCHOR_ESCAPES[escape], pos)
    category = _category_set(escape)
    if category is not None:
        return ast.chars(category)
    if escape in _SIMPLE_ESCAPES:
        return ast.chars(cs.single(_SIMPLE_ESCAPES[escape]))
    code = _code_escape(source, escape)
    if code is not None:
        return ast.chars(cs.single(code))
    c = escape[1]
    if c == "0":
        escape += source.getwhile(2, _OCTDIGITS)
        return ast.chars(cs.single(int(escape[1:], 8)))
    if c in _DIGITS:
        # octal escape *or* group reference, decided like re does
        if source.next is not None and source.next in _DIGITS:
            escape += source.get()  # type: ignore[operator]
            if escape[1] in _OCTDIGITS and escape[2] in _OCTDIGITS and source.next is not None and source.next in _OCTDIGITS:
                escape += source.get()  # type: ignore[operator]
                code = int(escape[1:], 8)
                if code > 0o377:
                    raise source.error(f"octal escape value {escape} outside of range 0-0o377", len(escape))
                return ast.chars(cs.single(code))
        group = int(escape[1:])
        if group < state.groups:
            if group in state.open_groups:
                raise source.error("cannot refer to an open group", len(escape))
            raise _unsupported(f"backreference {escape}", pos, "a finite automaton cannot compare repeated text")
        raise source.error(f"invalid group reference {group}", len(escape) - 1)
    if c in _ASCIILETTERS:
        raise source.error("bad escape " + escape, len(escape))
    return ast.chars(cs.single(ord(c)))


def _class_escape(source: _Tokens, escape: str) -> int | cs.CodepointSet:
    """An escape inside ``[...]``: a code point, or a set for ``\\d`` and friends."""
    if escape == "\\b":
        return 0x08  # backspace inside a class, as in re
    if escape in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[escape]
    category = _category_set(escape)
    if category is not None:
        return category
    code = _code_escape(source, escape)
    if code is not None:
        return code
    c = escape[1]
    if c in _OCTDIGITS:
        escape += source.getwhile(2, _OCTDIGITS)
        code = int(escape[1:], 8)
        if code > 0o377:
            raise source.error(f"octal escape value {escape} outside of range 0-0o377", len(escape))
        return code
    if c in _DIGITS or c in _ASCIILETTERS:
        raise source.error("bad escape " + escape, len(escape))
    return ord(c)


def _parse_class(source: _Tokens, here: int) -> cs.CodepointSet:
    """After ``[``: the class's code point set (negation applied)."""
    negate = source.match("^")
    ranges: list[tuple[int, int]] = []
    nonempty = False
    while True:
        this = source.get()
        if this is None:
            raise source.error("unterminated character set", source.tell() - here)
        if this == "]" and nonempty:
            break
        code1 = _class_escape(source, this) if this[0] == "\\" else ord(this)
        nonempty = True
        if source.match("-"):
            that = source.get()
            if that is None:
                raise source.error("unterminated character set", source.tell() - here)
            if that == "]":
                _add(ranges, code1)
                ranges.append((ord("-"), ord("-")))
                break
            code2 = _class_escape(source, that) if that[0] == "\\" else ord(that)
            if not isinstance(code1, int) or not isinstance(code2, int) or code2 < code1:
                raise source.error(f"bad character range {this}-{that}", len(this) + 1 + len(that))
            ranges.append((code1, code2))
        else:
            _add(ranges, code1)
    result = cs.normalize(ranges)
    return cs.complement(result) if negate else result


def _add(ranges: list[tuple[int, int]], code: int | cs.CodepointSet) -> None:
    if isinstance(code, int):
        ranges.append((code, code))
    else:
        ranges.extend(code)
