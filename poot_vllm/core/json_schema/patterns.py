"""Translate a JSON Schema ``pattern`` into a regex over raw JSON string content.

jsonschema checks ``pattern`` with Python's ``re.search(pattern, value)`` on
the *decoded* string: unanchored unless the pattern says ``^``/``$``.  poot
emits the *raw* JSON text, so every character class of the pattern becomes
the set of JSON spellings of those characters (``"`` -> ``\\"``, newline ->
``\\n``, ...), and unanchored ends are padded with "any JSON string
characters".

Only the regular subset is accepted: literals, escapes, classes, ``.``,
groups, alternation, greedy/lazy quantifiers, and ``^``/``$``/``\\A``/``\\Z``
where they can only match at the ends.  Everything else (lookarounds,
backreferences, ``\\b``, inline flags, possessive quantifiers) is refused.

Where Python's meaning is wider than what poot spells, poot narrows (never
widens): ``\\d``/``\\w``/``\\s`` outside negated classes mean their ASCII
members, ``$`` does not match before a trailing newline, characters that can
be written raw are never written as ``\\uXXXX``.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from poot_vllm.core.json_schema import charsets as cs

_INF = None  # an unbounded count


class PatternError(Exception):
    """The pattern is outside the supported subset (``unsupported``) or invalid."""

    def __init__(self, message: str, unsupported: bool = True) -> None:
        super().__init__(message)
        self.unsupported = unsupported


# AST: ("set", ranges) | ("seq", [node]) | ("alt", [node]) | ("rep", node, min, max|None)
#      | ("bol",) | ("eol",)

_ASCII_DIGIT: cs.Ranges = [(0x30, 0x39)]
_ASCII_WORD: cs.Ranges = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
_ASCII_SPACE: cs.Ranges = [(0x09, 0x0D), (0x20, 0x20)]


def _class_escape(letter: str, over: bool) -> cs.Ranges:
    """The set for \\d \\D \\w \\W \\s \\S.

    ``over=False`` gives a subset of Python's set (used where the set is
    matched directly), ``over=True`` a superset (used inside a negated class,
    whose complement must then be a subset).
    """
    if letter == "d":
        return cs.unicode_digits() if over else _ASCII_DIGIT
    if letter == "D":
        return cs.complement(cs.unicode_digits())
    if letter == "w":
        return cs.unicode_word() if over else _ASCII_WORD
    if letter == "W":
        return cs.complement(_ASCII_WORD) if over else cs.subtract([(0, 0x7F)], _ASCII_WORD)
    if letter == "s":
        return cs.unicode_space() if over else _ASCII_SPACE
    return cs.complement(cs.unicode_space())  # "S"


_SIMPLE_ESCAPES = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "a": 0x07}


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.text[i] if i < len(self.text) else ""

    def take(self) -> str:
        c = self.peek()
        if not c:
            raise PatternError("unexpected end of pattern", unsupported=False)
        self.pos += 1
        return c

    def parse(self):
        node = self.alt()
        if self.pos != len(self.text):
            raise PatternError(f"unbalanced ')' at offset {self.pos}", unsupported=False)
        return node

    def alt(self):
        branches = [self.seq()]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.seq())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def seq(self):
        items = []
        while self.peek() and self.peek() not in "|)":
            items.append(self.quantified())
        return ("seq", items)

    def quantified(self):
        atom = self.atom()
        repeated = False
        while True:
            c = self.peek()
            if c in ("*", "+", "?"):
                self.pos += 1
                lo, hi = {"*": (0, _INF), "+": (1, _INF), "?": (0, 1)}[c]
            elif c == "{" and self._brace_quantifier() is not None:
                lo, hi = self._brace_quantifier()  # type: ignore[misc]
                self.pos = self.text.index("}", self.pos) + 1
            else:
                return atom
            if repeated:
                raise PatternError("multiple repeat", unsupported=False)
            repeated = True
            if self.peek() == "?":  # lazy: same set of matches under search()
                self.pos += 1
            elif self.peek() == "+":
                raise PatternError("possessive quantifiers are not supported")
            atom = ("rep", atom, lo, hi)

    def _brace_quantifier(self):
        end = self.text.find("}", self.pos)
        if end < 0:
            return None
        body = self.text[self.pos + 1 : end]
        lo_s, comma, hi_s = body.partition(",")
        if not (lo_s.isdigit() or lo_s == "") or not (hi_s.isdigit() or hi_s == "") or not body or not all(c in "0123456789," for c in body):
            return None
        if not comma:
            if not lo_s:
                return None
            return int(lo_s), int(lo_s)
        lo = int(lo_s) if lo_s else 0
        hi = int(hi_s) if hi_s else _INF
        if hi is not None and hi < lo:
            raise PatternError("quantifier {m,n} with n < m", unsupported=False)
        return lo, hi

    def atom(self):
        c = self.take()
        if c == "(":
            return self.group()
        if c == "[":
            return ("set", self.char_class())
        if c == ".":
            return ("set", cs.complement([(0x0A, 0x0A)]))
        if c == "^":
            return ("bol",)
        if c == "$":
            return ("eol",)
        if c == "\\":
            return self.escape()
        if c in "*+?":
            raise PatternError("nothing to repeat", unsupported=False)
        return ("set", [(ord(c), ord(c))])

    def group(self):
        if self.peek() == "?":
            self.pos += 1
            kind = self.take()
            if kind == ":":
                pass
            elif kind == "P" and self.peek() == "<":
                end = self.text.find(">", self.pos)
                if end < 0:
                    raise PatternError("unterminated group name", unsupported=False)
                self.pos = end + 1
            elif kind == "#":
                end = self.text.find(")", self.pos)
                if end < 0:
                    raise PatternError("unterminated comment", unsupported=False)
                self.pos = end + 1
                return ("seq", [])
            elif kind in "=!" or (kind == "<" and self.peek() in "=!"):
                raise PatternError("lookaround assertions are not supported")
            elif kind == "P" and self.peek() == "=":
                raise PatternError("backreferences are not supported")
            elif kind == ">":
                raise PatternError("atomic groups are not supported")
            elif kind == "(":
                raise PatternError("conditional groups are not supported")
            else:
                raise PatternError("inline flags like (?i) are not supported")
        node = self.alt()
        if self.take() != ")":
            raise PatternError("missing ')'", unsupported=False)
        return node

    def code_point_escape(self, letter: str) -> int | None:
        """\\xHH \\uXXXX \\UXXXXXXXX \\N{name} \\0oo and the one-letter escapes."""
        if letter in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[letter]
        width = {"x": 2, "u": 4, "U": 8}.get(letter)
        if width:
            digits = self.text[self.pos : self.pos + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise PatternError(f"bad \\{letter} escape", unsupported=False)
            self.pos += width
            cp = int(digits, 16)
            if cp > cs.MAX_CP:
                raise PatternError("escape beyond U+10FFFF", unsupported=False)
            return cp
        if letter == "N":
            end = self.text.find("}", self.pos)
            if self.peek() != "{" or end < 0:
                raise PatternError("bad \\N escape", unsupported=False)
            name = self.text[self.pos + 1 : end]
            self.pos = end + 1
            try:
                return ord(unicodedata.lookup(name))
            except KeyError as exc:
                raise PatternError(f"unknown character name {name!r}", unsupported=False) from exc
        if letter == "0":
            digits = ""
            while len(digits) < 2 and self.peek() in tuple("01234567") and self.peek():
                digits += self.take()
            return int(digits or "0", 8)
        return None

    def escape(self):
        letter = self.take()
        if letter in "dDwWsS":
            return ("set", _class_escape(letter, over=False))
        if letter == "A":
            return ("bol",)
        if letter == "Z":
            return ("eol",)
        if letter in "bB":
            raise PatternError("word boundaries (\\b, \\B) are not supported")
        if letter in "123456789":
            raise PatternError("backreferences are not supported")
        cp = self.code_point_escape(letter)
        if cp is not None:
            return ("set", [(cp, cp)])
        if letter.isascii() and letter.isalnum():
            raise PatternError(f"bad escape \\{letter}", unsupported=False)
        return ("set", [(ord(letter), ord(letter))])

    def class_item(self) -> tuple[cs.Ranges, int | None]:
        """One class member: (its set, its code point if it is a single literal)."""
        c = self.take()
        if c != "\\":
            return [(ord(c), ord(c))], ord(c)
        letter = self.take()
        if letter in "dDwWsS":
            return _class_escape(letter, over=self._negated), None
        if letter == "b":
            return [(8, 8)], 8
        if letter in "123456789":
            raise PatternError("backreferences are not supported")
        cp = self.code_point_escape(letter)
        if cp is not None:
            return [(cp, cp)], cp
        if letter.isascii() and letter.isalnum():
            raise PatternError(f"bad escape \\{letter} in a class", unsupported=False)
        return [(ord(letter), ord(letter))], ord(letter)

    def char_class(self) -> cs.Ranges:
        self._negated = self.peek() == "^"
        if self._negated:
            self.pos += 1
        members: cs.Ranges = []
        first = True
        while True:
            if not self.peek():
                raise PatternError("unterminated character class", unsupported=False)
            if self.peek() == "]" and not first:
                self.pos += 1
                break
            first = False
            item, lo = self.class_item()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                item_hi, hi = self.class_item()
                if lo is None or hi is None:
                    raise PatternError("bad character range", unsupported=False)
                if hi < lo:
                    raise PatternError("bad character range (end before start)", unsupported=False)
                members.append((lo, hi))
            else:
                members.extend(item)
        members = cs.normalize(members)
        return cs.complement(members) if self._negated else members

    _negated = False


@dataclass
class _Piece:
    regex: str
    min_len: int
    max_len: int | None
    atomic: bool = False  # one char or one class: needs no group before a quantifier


Variants = dict[tuple[bool, bool], _Piece]


def _alt_pieces(a: _Piece, b: _Piece) -> _Piece:
    if a.regex == b.regex:
        return a
    mx = None if a.max_len is None or b.max_len is None else max(a.max_len, b.max_len)
    return _Piece(f"(?:{a.regex}|{b.regex})", min(a.min_len, b.min_len), mx)


def _union(a: Variants, b: Variants) -> Variants:
    out = dict(a)
    for key, piece in b.items():
        out[key] = _alt_pieces(out[key], piece) if key in out else piece
    return out


def _concat(a: Variants, b: Variants) -> Variants:
    out: Variants = {}
    for (sa, ea), pa in a.items():
        for (sb, eb), pb in b.items():
            # An end anchor followed by text, or text followed by a start
            # anchor, only matches if that text is empty: keep just the
            # combinations where it must be (dropping others only narrows).
            if ea and pb.max_len != 0:
                continue
            if sb and pa.max_len != 0:
                continue
            mx = None if pa.max_len is None or pb.max_len is None else pa.max_len + pb.max_len
            piece = _Piece(pa.regex + pb.regex, pa.min_len + pb.min_len, mx)
            key = (sa or sb, ea or eb)
            out[key] = _alt_pieces(out[key], piece) if key in out else piece
    return out


def _translate(node, size_check) -> Variants:
    kind = node[0]
    if kind == "set":
        rx = cs.json_char_regex(node[1])
        atomic = rx is not None and not rx.startswith("(?:")
        return {} if rx is None else {(False, False): _Piece(rx, 1, 1, atomic)}
    if kind == "bol":
        return {(True, False): _Piece("", 0, 0)}
    if kind == "eol":
        return {(False, True): _Piece("", 0, 0)}
    if kind == "seq":
        acc: Variants = {(False, False): _Piece("", 0, 0)}
        for item in node[1]:
            acc = _concat(acc, _translate(item, size_check))
            for p in acc.values():
                size_check(len(p.regex))
        return acc
    if kind == "alt":
        acc = {}
        for branch in node[1]:
            acc = _union(acc, _translate(branch, size_check))
        return acc
    # rep
    _, inner, lo, hi = node
    sub = _translate(inner, size_check)
    if any(key != (False, False) for key in sub):
        raise PatternError("anchors (^, $) inside a repeated group are not supported")
    if (False, False) not in sub:
        return {(False, False): _Piece("", 0, 0)} if lo == 0 else {}
    p = sub[(False, False)]
    if p.regex == "":
        return {(False, False): p}
    quant = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((lo, hi))
    if quant is None:
        quant = f"{{{lo}}}" if lo == hi else f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}"
    mx = None if hi is None or p.max_len is None else p.max_len * hi
    body = p.regex if p.atomic else f"(?:{p.regex})"
    return {(False, False): _Piece(body + quant, p.min_len * lo, mx)}


@dataclass(frozen=True)
class TranslatedPattern:
    """Regex over raw JSON string content (no quotes) and its length range in characters."""

    regex: str
    min_len: int
    max_len: int | None


def translate_pattern(pattern: str, size_check=lambda n: None) -> TranslatedPattern:
    """Regex for JSON string contents whose decoded value ``re.search``-matches ``pattern``.

    Raises :class:`PatternError` outside the supported subset; an empty
    result (the pattern can match nothing poot can spell) is a PatternError too.
    """
    variants = _translate(_Parser(pattern).parse(), size_check)
    any_run = f"{cs.JSON_CHAR}*"
    alts: list[str] = []
    min_len, max_len = None, 0
    for (start, end), piece in variants.items():
        if not start and not end and piece.regex == "":
            parts = [any_run]
        else:
            parts = ([] if start else [any_run]) + [piece.regex] + ([] if end else [any_run])
        alts.append("".join(parts))
        min_len = piece.min_len if min_len is None else min(min_len, piece.min_len)
        if not (start and end) or piece.max_len is None or max_len is None:
            max_len = None
        else:
            max_len = max(max_len, piece.max_len)
    if not alts:
        raise PatternError("the pattern matches no string poot can emit")
    regex = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
    size_check(len(regex))
    return TranslatedPattern(regex, min_len or 0, max_len)
