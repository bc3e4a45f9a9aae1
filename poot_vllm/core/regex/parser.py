"""poot's one regex front end: Python ``re`` syntax, minus what a DFA cannot do.

Two entry points, one grammar:

* :func:`parse` -- ``guided_regex`` and every regex poot generates:
  ``re.fullmatch`` semantics; ``^``/``\\A`` leading and ``$``/``\\Z`` ending a
  top-level alternative are no-ops and dropped, anchors anywhere else become
  :class:`~poot_vllm.core.regex.ast.Look` assertions;
* :func:`parse_search` -- JSON Schema ``pattern`` (``re.search``): ``^ $ \\A
  \\Z`` (without MULTILINE) are kept as :class:`~poot_vllm.core.regex.ast.Anchor`
  nodes wherever they stand, for :mod:`poot_vllm.core.json_schema.patterns`
  to resolve, and the caller chooses the sets of ``\\d \\w \\s``.

Flags are resolved here, as ``re`` resolves them: global ``(?aimsux)`` only
at the very start (Python 3.11+), scoped ``(?i-s:...)``; IGNORECASE folds
each literal and class exactly as ``re`` does
(:mod:`poot_vllm.core.regex.casefold`), DOTALL widens ``.``, MULTILINE
changes ``^``/``$``, VERBOSE skips whitespace and ``#`` comments outside
classes, ASCII narrows ``\\d \\w \\s`` and ``\\b`` and ASCII-only folding.
``\\b``, ``\\B``, ``\\A``, ``\\Z`` and anchors become lookarounds
(:mod:`poot_vllm.core.regex.ast`), which the automaton builder decides exactly.

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

Constructs that need more than a finite automaton raise
:class:`UnsupportedConstruct` naming the construct and its position:
backreferences, atomic groups, possessive quantifiers, conditionals, the
deprecated TEMPLATE flag, and an assertion that would read across the edge
of an enclosing lookaround (``^``, ``\\b`` or a lookbehind inside a
lookahead; ``$``, ``\\b`` or a lookahead inside a lookbehind).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Callable

from poot_vllm.core.errors import ConstraintSyntaxError, UnsupportedConstruct
from poot_vllm.core.regex import ast
from poot_vllm.core.regex import casefold
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
_SIMPLE_ESCAPES = {
    "\\a": 0x07,
    "\\f": 0x0C,
    "\\n": 0x0A,
    "\\r": 0x0D,
    "\\t": 0x09,
    "\\v": 0x0B,
    "\\\\": 0x5C,
}
# re's flag letters and bits (re._constants; TEMPLATE and DEBUG have no
# meaning poot needs: ``t`` is refused, DEBUG has no letter).
_I, _L, _M, _S, _U, _X, _A, _T = 2, 4, 8, 16, 32, 64, 256, 1
_FLAGS = {"i": _I, "L": _L, "m": _M, "s": _S, "x": _X, "a": _A, "t": _T, "u": _U}
_TYPE_FLAGS = _A | _L | _U
_GLOBAL_FLAGS = _T
_WHITESPACE = frozenset(" \t\n\r\v\f")
#: re's bound on widths (``getwidth``).
_MAXWIDTH = 1 << 64
_MAXCODE = (1 << 32) - 1

_ANY = ast.Chars(cs.ANY_CHAR)
#: ``\A``: nothing before; ``\Z``: nothing after.
_AT_START: ast.Node = ast.Look(behind=True, negated=True, body=_ANY)
_AT_END: ast.Node = ast.Look(behind=False, negated=True, body=_ANY)
#: ``$`` without MULTILINE: the end, or a newline that ends the text.
_DOLLAR: ast.Node = ast.Look(behind=False, negated=False, body=ast.concat([ast.repeat(ast.Chars(cs.single(10)), 0, 1), _AT_END]))
#: MULTILINE ``^``: not after a character other than a newline; ``$``: before a newline or the end.
_LINE_START: ast.Node = ast.Look(behind=True, negated=True, body=ast.Chars(cs.DOT))
_LINE_END: ast.Node = ast.alt([ast.Look(behind=False, negated=False, body=ast.Chars(cs.single(10))), _AT_END])
#: Which side of the text an assertion reads (lookbehinds read what came before, lookaheads what follows).
_NEEDS = {"^": "behind", "$": "ahead", "\\A": "behind", "\\Z": "ahead", "\\b": "both", "\\B": "both"}


def _word_boundary(word: cs.CodepointSet, negated: bool) -> ast.Node:
    """``\\b`` (``negated``: ``\\B``) as lookarounds on the word class ``word``.

    ``re`` (before 3.14) never matches ``\\b`` or ``\\B`` in the empty text, so
    ``\\B`` also needs a character on one side.
    """
    w = ast.Chars(word)
    before = ast.Look(True, False, w)
    not_before = ast.Look(True, True, w)
    after = ast.Look(False, False, w)
    not_after = ast.Look(False, True, w)
    if not negated:
        return ast.alt([ast.Concat((before, not_after)), ast.Concat((not_before, after))])
    nonempty = ast.alt([ast.Look(True, False, _ANY), ast.Look(False, False, _ANY)])
    return ast.alt([ast.Concat((before, after)), ast.Concat((not_before, not_after, nonempty))])


def python_categories(escape: str, negated: bool) -> cs.CodepointSet:
    """``re``'s own sets on str patterns (Unicode), whatever the context."""
    result = cs.category_escape(escape)
    assert result is not None, escape
    return result


def _ascii_category(escape: str) -> cs.CodepointSet:
    """``\\d``-style sets under the ASCII flag, exactly as ``re``."""
    letter = escape[1]
    ascii_set = cs.ASCII_CATEGORIES[letter.lower()]
    return ascii_set if letter.islower() else cs.complement(ascii_set)


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
    anchor: str | None = None  # "^" (\A, ^) or "$" (\Z, $): no-ops at the ends of a full match
    at: bool = False  # an AT opcode for re (^ $ \A \Z \b \B): "nothing to repeat"
    repeated: bool = False
    width: tuple[int, int] = (1, 1)  # re's getwidth, for lookbehinds


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
    decide); under MULTILINE, ``^``/``$`` and ``\\b``, ``\\B`` and
    lookarounds are :class:`~poot_vllm.core.regex.ast.Look` nodes on the
    searched text.  ``categories`` gives the sets of ``\\d \\w \\s \\D \\W \\S``
    (the ASCII flag makes them ASCII, exactly).
    """
    parser = _Parser(pattern, search=True, categories=categories)
    return ast.alt([ast.concat([item.node for item in branch]) for branch in parser.parse()])


def _strip_end_anchors(items: list[_Item]) -> ast.Node:
    """A top-level branch: ``^``/``\\A`` leading it and ``$``/``\\Z`` ending it are no-ops under fullmatch.

    Anchors elsewhere stay as :class:`~poot_vllm.core.regex.ast.Look` nodes.
    """
    start = 0
    while start < len(items) and items[start].anchor == "^":
        start += 1
    end = len(items)
    while end > start and items[end - 1].anchor == "$":
        end -= 1
    return ast.concat([item.node for item in items[start:end]])


class _PythonClasses:
    """:class:`~poot_vllm.core.regex.classes.ClassSyntax` of ``re``: its escapes and messages."""

    close_first = False

    def __init__(self, categories: CategorySets) -> None:
        self.categories = categories
        self.ascii = False  # the ASCII flag is in force where the class stands
        #: Inside an odd number of negative lookarounds: a set's complement is what
        #: constrains the text, so ``categories`` is asked for the negated-context set.
        self.flip = False

    def member(self, source: Tokens, token: str, pos: int, negated: bool) -> int | cs.CodepointSet:
        if token[0] != "\\":
            return ord(token)
        if token == "\\b":
            return 0x08  # backspace inside a class, as in re
        if token in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[token]
        if token in _CATEGORY_ESCAPES:
            return _ascii_category(token) if self.ascii else self.categories(token, negated != self.flip)
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


def _combine_flags(flags: int, add: int, remove: int) -> int:
    """A scoped group's flags, as ``re._compiler._combine_flags``."""
    if add & _TYPE_FLAGS:
        flags &= ~_TYPE_FLAGS
    return (flags | add) & ~remove


class _Parser:
    def __init__(self, pattern: str, search: bool, categories: CategorySets) -> None:
        self.source = Tokens(pattern)
        self.state = _State()
        self.search = search
        self.categories = categories
        self.classes = _PythonClasses(categories)
        self.global_flags = 0
        #: Enclosing lookarounds, innermost last ("ahead" / "behind") with their positions.
        self.looks: list[tuple[str, int]] = []

    def parse(self) -> list[list[_Item]]:
        branches = self._alternatives(nested=0, flags=None)
        if self.source.next is not None:
            assert self.source.next == ")"
            raise self.source.error("unbalanced parenthesis")
        if self.global_flags & _A and self.global_flags & _U:
            raise ConstraintSyntaxError("invalid regex: ASCII and UNICODE flags are incompatible")
        return branches

    def _alternatives(self, nested: int, flags: int | None) -> list[list[_Item]]:
        """``flags`` None: the top level, whose flags are the global ones (set by a leading ``(?i)``)."""
        branches = [self._sequence(nested, flags, first=flags is None)]
        while self.source.match("|"):
            branches.append(self._sequence(nested, flags, first=False))
        return branches

    def _group_body(self, nested: int, start: int, flags: int) -> tuple[ast.Node, tuple[int, int]]:
        source = self.source
        if nested > MAX_NESTING:
            raise _unsupported(f"groups nested more than {MAX_NESTING} deep", start, "flatten the pattern")
        branches = self._alternatives(nested, flags)
        if not source.match(")"):
            raise source.error("missing ), unterminated subpattern", source.tell() - start)
        return ast.alt([ast.concat([item.node for item in items]) for items in branches]), _branches_width(branches)

    def _sequence(self, nested: int, flags: int | None, first: bool) -> list[_Item]:
        source = self.source
        items: list[_Item] = []
        while True:
            here = self.global_flags if flags is None else flags
            this = source.next
            if this is None or this in ("|", ")"):
                return items
            pos = source.tell()
            source.get()

            if here & _X:
                if this in _WHITESPACE:
                    continue
                if this == "#":
                    while True:
                        this = source.get()
                        if this is None or this == "\n":
                            break
                    continue

            if this[0] == "\\":
                items.append(self._escape(this, pos, here))
            elif this not in _SPECIAL_CHARS:
                node = self._char(ord(this), here) if here & _I else ast.chars(cs.single(ord(this)))
                items.append(_Item(node, pos))
            elif this == "[":
                members: list[tuple] = []
                self.classes.ascii = bool(here & _A)
                cps = parse_class(source, self.classes, pos, members)
                if here & _I and _may_fold(members):
                    cps = casefold.folded(casefold.class_spelling(members), cps, bool(here & _A))
                items.append(_Item(ast.chars(cps), pos))
            elif this in "*+?{":
                if not self._quantifier(items, this, pos):
                    items.append(_Item(self._char(ord("{"), here), pos))
            elif this == ".":
                items.append(_Item(ast.chars(cs.ANY_CHAR if here & _S else cs.DOT), pos))
            elif this == "(":
                got = self._group(nested, pos, here, first=first and not items)
                if isinstance(got, _Item):
                    items.append(got)
            elif this in "^$":
                items.append(self._anchor(this, pos, here))
            else:  # pragma: no cover - _SPECIAL_CHARS is exhausted above
                raise AssertionError(this)

    def _char(self, code: int, flags: int) -> ast.Node:
        if flags & _I and cs.intersect(cs.single(code), casefold.cased_set()):
            return ast.chars(casefold.fold_literal(code, bool(flags & _A)))
        return ast.chars(cs.single(code))

    def _assertion(self, what: str, pos: int, needs: str = "", one_class: bool = True) -> None:
        """Refuse an assertion that would read across the edge of an enclosing lookaround.

        The one exception: an assertion on the single character before it
        (``^``, ``\\b``, ``(?<=\\w)``: ``one_class``) directly inside one
        lookahead, which the builder decides from the preceding position.
        """
        needs = needs or _NEEDS[what]
        if needs in ("behind", "both") and one_class and [kind for kind, _ in self.looks] == ["ahead"]:
            needs = "ahead" if needs == "both" else ""
        for kind, _ in self.looks:
            if kind == "ahead" and needs in ("behind", "both"):
                raise _unsupported(
                    f"{what} inside a lookahead", pos, "it would read the text before the lookahead; move it out of the lookahead"
                )
            if kind == "behind" and needs in ("ahead", "both"):
                raise _unsupported(
                    f"{what} inside a lookbehind", pos, "it would read the text after the lookbehind; move it out of the lookbehind"
                )

    def _anchor(self, kind: str, pos: int, flags: int) -> _Item:
        self._assertion(kind, pos)
        if self.search and not flags & _M:
            return _Item(ast.Anchor(kind), pos, anchor=kind, at=True, width=(0, 0))
        if kind == "^":
            node = _LINE_START if flags & _M else _AT_START
        else:
            node = _LINE_END if flags & _M else _DOLLAR
        return _Item(node, pos, anchor=kind, at=True, width=(0, 0))

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
        if not items or items[-1].at:
            raise source.error("nothing to repeat", source.tell() - pos)
        if items[-1].repeated:
            raise source.error("multiple repeat", source.tell() - pos)
        if source.match("+"):
            raise _unsupported(
                "possessive quantifier", source.tell() - 1, "drop the trailing + (it cannot change which whole replies match)"
            )
        source.match("?")  # lazy: same set of full matches
        last = items[-1]
        w_lo, w_hi = last.width
        width = (w_lo * lo, _MAXWIDTH if hi is None and w_hi else w_hi * (hi or 0))
        items[-1] = _Item(ast.repeat(last.node, lo, hi), last.pos, repeated=True, width=width)
        return True

    def _group(self, nested: int, start: int, flags: int, first: bool) -> "_Item | None":
        """After ``(``: a group's item, or None for a comment or global flags."""
        source, state = self.source, self.state
        name: str | None = None
        capture = True
        add = remove = 0
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
            elif char in "=!<":
                behind = char == "<"
                if behind:
                    char = source.get()
                    if char is None:
                        raise source.error("unexpected end of pattern")
                    if char not in "=!":
                        raise source.error("unknown extension ?<" + char, len(char) + 2)
                return self._lookaround(nested, start, flags, behind, char == "!")
            elif char == "(":
                raise _unsupported("conditional group (?(...)...)", start)
            elif char == ">":
                raise _unsupported("atomic group (?>...)", start)
            elif char in _FLAGS or char == "-":
                parsed = self._flags(char, start)
                if parsed is None:  # global flags
                    if not first:
                        raise source.error("global flags not at the start of the expression", source.tell() - start)
                    return None
                add, remove = parsed
                capture = False
            else:
                raise source.error("unknown extension ?" + char, len(char) + 1)
        inner = _combine_flags(flags, add, remove)
        if capture:
            if name is not None:
                if name in state.names:
                    raise source.error(f"redefinition of group name {name!r} as group {state.groups}", len(name) + 1)
                state.names[name] = state.groups
            gid = state.groups
            state.groups += 1
            state.open_groups.add(gid)
            node, width = self._group_body(nested + 1, start, inner)
            state.open_groups.discard(gid)
            return _Item(node, start, width=width)
        node, width = self._group_body(nested + 1, start, inner)
        return _Item(node, start, width=width)

    def _lookaround(self, nested: int, start: int, flags: int, behind: bool, negated: bool) -> _Item:
        kind = "behind" if behind else "ahead"
        name = ("negative " if negated else "") + ("lookbehind" if behind else "lookahead")
        spelled = "(?" + ("<" if behind else "") + ("!" if negated else "=") + "...)"
        if not behind:
            self._assertion(f"{name} {spelled}", start, kind)
        self.looks.append((kind, start))
        self.classes.flip ^= negated
        body, (lo, hi) = self._group_body(nested + 1, start, flags)
        self.classes.flip ^= negated
        self.looks.pop()
        if behind:
            self._assertion(f"{name} {spelled}", start, kind, one_class=isinstance(body, ast.Chars))
        if behind:
            if lo > _MAXCODE:
                raise ConstraintSyntaxError(f"invalid regex: looks too much behind (the {name} at position {start})")
            if lo != hi:
                raise ConstraintSyntaxError(
                    f"invalid regex: look-behind requires fixed-width pattern (the {name} {spelled} at position {start})"
                )
        return _Item(ast.Look(behind, negated, body), start, width=(0, 0))

    def _flags(self, char: str, start: int) -> "tuple[int, int] | None":
        """``(?aiLmsux-imsx:`` or ``(?aiLmsux)``, after its first letter, as ``re._parser._parse_flags``.

        None for global flags (``(?i)``), which are added to the pattern's
        flags; else the scoped group's added and removed flags.
        """
        source = self.source
        add = remove = 0
        if char != "-":
            while True:
                flag = _FLAGS[char]
                if char == "L":
                    raise source.error("bad inline flags: cannot use 'L' flag with a str pattern")
                if char == "t":
                    raise _unsupported("the TEMPLATE flag (?t)", start, "it is deprecated in Python; remove it")
                add |= flag
                if (flag & _TYPE_FLAGS) and (add & _TYPE_FLAGS) != flag:
                    raise source.error("bad inline flags: flags 'a', 'u' and 'L' are incompatible")
                char = source.get()
                if char is None:
                    raise source.error("missing -, : or )")
                if char in ")-:":
                    break
                if char not in _FLAGS:
                    raise source.error("unknown flag" if char.isalpha() else "missing -, : or )", len(char))
        if char == ")":
            self.global_flags |= add
            return None
        if add & _GLOBAL_FLAGS:  # pragma: no cover - t is refused above
            raise source.error("bad inline flags: cannot turn on global flag", 1)
        if char == "-":
            char = source.get()
            if char is None:
                raise source.error("missing flag")
            if char not in _FLAGS:
                raise source.error("unknown flag" if char.isalpha() else "missing flag", len(char))
            while True:
                flag = _FLAGS[char]
                if flag & _TYPE_FLAGS:
                    raise source.error("bad inline flags: cannot turn off flags 'a', 'u' and 'L'")
                remove |= flag
                char = source.get()
                if char is None:
                    raise source.error("missing :")
                if char == ":":
                    break
                if char not in _FLAGS:
                    raise source.error("unknown flag" if char.isalpha() else "missing :", len(char))
        assert char == ":"
        if remove & _GLOBAL_FLAGS:
            raise source.error("bad inline flags: cannot turn off global flag", 1)
        if add & remove:
            raise source.error("bad inline flags: flag turned on and off", 1)
        return add, remove

    def _escape(self, escape: str, pos: int, flags: int) -> _Item:
        """An escape outside a class."""
        source, state = self.source, self.state
        if escape in ("\\b", "\\B"):
            self._assertion(escape, pos)
            word = cs.ASCII_CATEGORIES["w"] if flags & _A else cs.category("w")
            return _Item(_word_boundary(word, escape == "\\B"), pos, at=True, width=(0, 0))
        if escape in ("\\A", "\\Z"):
            kind = "^" if escape == "\\A" else "$"
            self._assertion(escape, pos)
            if self.search:
                return _Item(ast.Anchor(kind), pos, anchor=kind, at=True, width=(0, 0))
            return _Item(_AT_START if kind == "^" else _AT_END, pos, anchor=kind, at=True, width=(0, 0))
        if escape in _CATEGORY_ESCAPES:
            cps = _ascii_category(escape) if flags & _A else self.categories(escape, self.classes.flip)
            return _Item(ast.chars(cps), pos)
        if escape in _SIMPLE_ESCAPES:
            return _Item(self._char(_SIMPLE_ESCAPES[escape], flags), pos)
        code = _code_escape(source, escape)
        if code is not None:
            return _Item(self._char(code, flags), pos)
        c = escape[1]
        if c == "0":
            escape += source.getwhile(2, _OCTDIGITS)
            return _Item(self._char(int(escape[1:], 8), flags), pos)
        if c in _DIGITS:
            # octal escape *or* group reference, decided like re does
            if source.next is not None and source.next in _DIGITS:
                escape += source.get()  # type: ignore[operator]
                if escape[1] in _OCTDIGITS and escape[2] in _OCTDIGITS and source.next is not None and source.next in _OCTDIGITS:
                    escape += source.get()  # type: ignore[operator]
                    code = int(escape[1:], 8)
                    if code > 0o377:
                        raise source.error(f"octal escape value {escape} outside of range 0-0o377", len(escape))
                    return _Item(self._char(code, flags), pos)
            group = int(escape[1:])
            if group < state.groups:
                if group in state.open_groups:
                    raise source.error("cannot refer to an open group", len(escape))
                raise _unsupported(f"backreference {escape}", pos, "a finite automaton cannot compare repeated text")
            raise source.error(f"invalid group reference {group}", len(escape) - 1)
        if c in _ASCIILETTERS:
            raise source.error("bad escape " + escape, len(escape))
        return _Item(self._char(ord(c), flags), pos)


def _branches_width(branches: list[list[_Item]]) -> tuple[int, int]:
    """``re``'s getwidth of an alternation of sequences."""
    lo, hi = _MAXWIDTH, 0
    for items in branches:
        a = sum(item.width[0] for item in items)
        b = sum(item.width[1] for item in items)
        lo, hi = min(lo, a), max(hi, b)
    return min(lo, _MAXWIDTH), min(hi, _MAXWIDTH)


def _may_fold(members: "list[tuple]") -> bool:
    """Whether IGNORECASE can change a class: ``re`` folds only when a literal or range member is cased."""
    cased = casefold.cased_set()
    for member in members:
        if member[0] == "lit" and cs.intersect(cs.single(member[1]), cased):
            return True
        if member[0] == "range" and (member[2] > 0xFFFF or cs.intersect(cs.normalize([(member[1], member[2])]), cased)):
            return True  # re folds every range reaching past the BMP
    return False


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
