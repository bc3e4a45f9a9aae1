"""Translate a JSON Schema ``pattern`` into a regex over raw JSON string content.

jsonschema checks ``pattern`` with Python's ``re.search(pattern, value)`` on
the *decoded* string: unanchored unless the pattern says ``^``/``$``.  poot
emits the *raw* JSON text, so every character class of the pattern becomes
the set of JSON spellings of those characters (``"`` -> ``\\"``, newline ->
``\\n``, ...), and unanchored ends are padded with "any JSON string
characters".

The pattern is read by poot's one regex front end
(:func:`poot_vllm.core.regex.parser.parse_search`: Python ``re`` syntax, the
same parser as ``guided_regex``, with anchors kept), so the same constructs
are accepted, and refused with the same messages and positions: literals,
escapes, classes, ``.``, groups, alternation, greedy/lazy quantifiers, and
``^``/``$``/``\\A``/``\\Z`` where they can only match at the ends (anchors
inside a repeated group are refused here).

Where Python's meaning is wider than what poot spells, poot narrows (never
widens): ``\\d``/``\\w``/``\\s`` outside negated classes mean their ASCII
members (:func:`json_categories`), ``$`` does not match before a trailing
newline, characters that can be written raw are never written as ``\\uXXXX``.
"""

from __future__ import annotations

from dataclasses import dataclass

from poot_vllm.core.errors import ConstraintSyntaxError, UnsupportedConstruct
from poot_vllm.core.json_schema.strings import NOT_RAW, escaped_set, json_char, json_char_regex
from poot_vllm.core.regex import ast
from poot_vllm.core.regex import charsets as cs
from poot_vllm.core.regex.parser import parse_search

_ASCII = ((0, 0x7F),)


class PatternError(Exception):
    """The pattern is outside the supported subset (``unsupported``) or invalid."""

    def __init__(self, message: str, unsupported: bool = True) -> None:
        super().__init__(message)
        self.unsupported = unsupported


def json_categories(escape: str, negated: bool) -> cs.CodepointSet:
    """The sets poot gives ``\\d \\w \\s \\D \\W \\S`` in a pattern: never wider than Python's.

    Where the set is matched directly (``negated=False``) it is a subset of
    Python's Unicode set; inside a negated class a superset, so that the
    class's complement is again a subset.  ``\\d``, ``\\w``, ``\\s`` narrow
    to ASCII and ``\\W`` to ASCII non-word characters (the full Unicode
    sets would spell hundreds of ranges into the schema's regex); ``\\D``
    and ``\\S`` are exact.
    """
    letter = escape[1]
    lower = letter.lower()
    ascii_set = cs.ASCII_CATEGORIES[lower]
    if letter == lower:
        return cs.category(lower) if negated else ascii_set
    if lower == "w":
        return cs.complement(ascii_set) if negated else cs.subtract(_ASCII, ascii_set)
    return cs.complement(cs.category(lower))


def _parse(pattern: str) -> ast.Node:
    try:
        return parse_search(pattern, json_categories)
    except UnsupportedConstruct as exc:
        raise PatternError(str(exc)) from None
    except ConstraintSyntaxError as exc:
        raise PatternError(str(exc).removeprefix("invalid regex: "), unsupported=False) from None


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


def _translate(node: ast.Node, size_check, escaped: str = "") -> Variants:
    if isinstance(node, ast.Chars):
        rx = json_char_regex(node.ranges, escaped)
        # One regex atom only when every character is written raw: an escape
        # such as \\" is two atoms, and "\\"*" would repeat just the quote.
        atomic = not cs.intersect(node.ranges, cs.union(NOT_RAW, escaped_set(escaped)))
        return {} if rx is None else {(False, False): _Piece(rx, 1, 1, atomic)}
    if isinstance(node, ast.Anchor):
        return {(node.kind == "^", node.kind == "$"): _Piece("", 0, 0)}
    if isinstance(node, ast.Concat):
        acc: Variants = {(False, False): _Piece("", 0, 0)}
        for item in node.items:
            acc = _concat(acc, _translate(item, size_check, escaped))
            for p in acc.values():
                size_check(len(p.regex))
        return acc
    if isinstance(node, ast.Alt):
        acc = {}
        for branch in node.items:
            acc = _union(acc, _translate(branch, size_check, escaped))
        return acc
    sub = _translate(node.item, size_check, escaped)
    lo, hi = node.min, node.max
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


def translate_pattern(pattern: str, size_check=lambda n: None, escaped: str = "") -> TranslatedPattern:
    """Regex for JSON string contents whose decoded value ``re.search``-matches ``pattern``.

    Characters in ``escaped`` are spelled only as ``\\u`` escapes
    (:func:`~poot_vllm.core.json_schema.strings.json_char`).

    Raises :class:`PatternError` outside the supported subset; an empty
    result (the pattern can match nothing poot can spell) is a PatternError too.
    """
    variants = _translate(_parse(pattern), size_check, escaped)
    any_run = f"{json_char(escaped)}*"
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
