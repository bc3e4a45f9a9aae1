"""The complement of a JSON Schema as a union of positive schemas (``not``, overlapping ``oneOf``).

poot builds positive constructs only: a ``pattern``, a range, a set of
required keys.  ``not N`` is therefore compiled as ``anyOf`` over *pieces*:
positive schemas each of whose values fails ``N``, intersected with the
rest of the schema.  ``oneOf: [A, B]`` with branches that may overlap is
``anyOf: [A and not B, B and not A]``.

The pieces of ``not N`` come from each keyword ``N`` holds: a value fails
``N`` as soon as it fails one of them (a number below ``minimum``, a string
shorter than ``minLength`` or not matching ``pattern``, an object missing a
``required`` key or whose property ``k`` fails its schema, a value of a type
``N`` does not allow, a value outside ``enum``).  Where poot cannot write the
values failing a keyword (``format``, ``multipleOf``, ``items``, the
non-integer numbers that fail ``type: integer``, ...), that keyword gives no
piece: the union is then a *subset* of the complement (``exact`` is false).
That is a narrowing, never a violation: every piece lies outside ``N``, so
every value poot emits for ``not N`` satisfies it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable

from poot_vllm.core.automata.compilers import regex_escape
from poot_vllm.core.errors import PootError

#: The seven JSON Schema types; ``integer`` values are ``number`` values too.
ALL_TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")
#: At most this many pieces per negation (more: the first ones, a narrowing).
MAX_PIECES = 64
#: Properties are negated this deep (``not {properties: {a: {properties: ...}}}``).
MAX_DEPTH = 6
#: Merges and flattenings one compile's negations may do in all (~4-30 us each): past it the
#: schema is refused quickly (a ``dependentRequired`` of 1,600 pairs, hundreds of overlapping
#: ``oneOf`` branches) instead of being built slowly.
MAX_NEGATION_WORK = 100_000


class NegationTooLarge(Exception):
    """The complement needs more than :data:`MAX_NEGATION_WORK` steps to write (not a
    :class:`PootError`, so the ``except PootError`` around each step lets it through; the
    compiler turns it into a refusal naming the keyword)."""

#: Keywords that constrain nothing on their own (annotations are dropped before).
_NEUTRAL = frozenset(("$ref", "allOf", "$defs", "definitions", "if"))


class NotMultiple(tuple):
    """``(p, q)``: the integers that are no multiple of ``p`` (the step ``p/q``; ``q``
    0 for an integer step, which validators check with ``%``), as the value of
    ``multipleOf`` in a piece (the compiler builds it as a negated residue
    lookahead, automata/residues.py).  Made only here, never read from a
    user's schema (JSON has no tuples)."""


def _not_multiple(step: Any) -> "NotMultiple | None":
    """The piece value for the integers failing ``multipleOf: step`` (an integer is a
    multiple of ``p/q`` in lowest terms iff ``p`` divides it), or None where every
    integer passes (``p == 1``) or the step is not exact in binary (validators divide
    in floating point there)."""
    if not _is_number(step) or step <= 0:
        return None
    exact = Fraction(repr(step)) if isinstance(step, float) else Fraction(step)
    if exact != Fraction(step) or exact.numerator == 1:
        return None
    # a float step: validators divide in floating point (the compiler bounds the integers for it)
    return NotMultiple((exact.numerator, exact.denominator if isinstance(step, float) else 0))


@dataclass
class Negation:
    """Positive schemas whose values all fail the negated schema; ``exact``: they are all of them."""

    pieces: list[Any] = field(default_factory=list)
    exact: bool = True

    def add(self, other: "Negation") -> None:
        self.pieces += other.pieces
        self.exact = self.exact and other.exact


def not_pattern(pattern: str) -> str | None:
    """A pattern matching exactly the strings ``pattern`` does not match (``re.search`` semantics).

    ``re.search(P, s)`` holds iff ``[\\s\\S]*?(?:P)`` matches at the start of
    ``s``, so its negation is that, inside a negative lookahead at the start.
    ``None`` for a pattern opening with global flags (``(?i)``), which Python
    allows only at the very start.
    """
    if pattern.startswith("(?") and len(pattern) > 2 and pattern[2] in "aiLmsux-":
        head = pattern[2:pattern.find(")")] if ")" in pattern else ""
        if head and all(c in "aiLmsux" for c in head):
            return None
    return f"^(?![\\s\\S]*?(?:{pattern}))"


def _listed_values(flat: dict) -> list[Any] | None:
    """The values ``enum`` and ``const`` allow together; None when neither is given."""
    if "enum" not in flat and "const" not in flat:
        return None
    values = flat["enum"] if isinstance(flat.get("enum"), list) else []
    if "const" in flat:
        values = [flat["const"]] if "enum" not in flat else [v for v in values if v == flat["const"]]
    return values


def _json_types(v: Any) -> set[str]:
    """The JSON Schema types a Python value from ``json.loads`` has."""
    if isinstance(v, bool):
        return {"boolean"}
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return {"integer", "number"}
    if isinstance(v, float):
        return {"number"}
    return {str: {"string"}, type(None): {"null"}, dict: {"object"}, list: {"array"}}.get(type(v), set())


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _not_values(values: list[Any]) -> Negation:
    """Every JSON value not among ``values`` (objects and arrays other than listed ones are left out)."""
    neg = Negation()
    strings = sorted({v for v in values if isinstance(v, str)})
    numbers = sorted({Fraction(v) for v in values if _is_number(v)})
    bools = {v for v in values if isinstance(v, bool)}
    if strings:
        neg.pieces.append({"type": "string", "pattern": "^(?!(?:" + "|".join(map(regex_escape, strings)) + ")\\Z)"})
    else:
        neg.pieces.append({"type": "string"})
    if numbers:
        # The open intervals between the listed numbers (as exclusive bounds).
        def num(f: Fraction) -> int | float:
            return int(f) if f.denominator == 1 else float(f)
        bounds = [num(f) for f in numbers]  # exact: JSON numbers are ints or binary fractions
        neg.pieces.append({"type": "number", "exclusiveMaximum": bounds[0]})
        for lo, hi in zip(bounds, bounds[1:]):
            neg.pieces.append({"type": "number", "exclusiveMinimum": lo, "exclusiveMaximum": hi})
        neg.pieces.append({"type": "number", "exclusiveMinimum": bounds[-1]})
    else:
        neg.pieces.append({"type": "number"})
    if len(bools) == 1:
        neg.pieces.append({"const": not next(iter(bools))})
    elif not bools:
        neg.pieces.append({"type": "boolean"})
    if None not in values:
        neg.pieces.append({"type": "null"})
    for kind, pytype in (("object", dict), ("array", list)):
        if any(isinstance(v, pytype) for v in values):
            neg.exact = False  # "an object other than these" has no positive form here
        else:
            neg.pieces.append({"type": kind})
    return neg


class Negator:
    """Negates schemas of one document.

    ``flatten``: the compiler's ``$ref``/``allOf`` inliner (schema -> merged
    schema); ``merge``: its intersection of two schemas; ``disjoint``: whether
    two schemas provably share no value; ``constraining``: the keywords of a
    schema that constrain values; ``work``: a one-element step counter shared by
    one compile's negations (:data:`MAX_NEGATION_WORK`).  Each callback may raise
    :class:`PootError`, which makes the negation give no piece for that part
    (inexact).
    """

    def __init__(self, flatten: Callable[[Any], Any], merge: Callable[[Any, Any], Any],
                 disjoint: Callable[[Any, Any], bool], constraining: Callable[[dict], list[str]],
                 work: list[int] | None = None):
        self.flatten = flatten
        self.merge = merge
        self.disjoint = disjoint
        self.constraining = constraining
        self.work = work if work is not None else [0]  # shared by every negation of one compile

    def _step(self) -> None:
        self.work[0] += 1
        if self.work[0] > MAX_NEGATION_WORK:
            raise NegationTooLarge(f"writing the values that fail it takes more than {MAX_NEGATION_WORK} schema "
                                   "merges (many overlapping oneOf branches, dependencies or anyOf in a 'not')")

    def negate(self, schema: Any, depth: int = 0, context: Any = True) -> Negation:
        """Positive schemas whose union is the complement of ``schema`` (a subset if not ``exact``),
        each intersected with ``context`` (the rest of the schema holding ``not``): pieces that
        clash with it are dropped early, so the intersections of several negations stay few."""
        if depth > MAX_DEPTH:
            return Negation(exact=False)
        try:
            self._step()
            flat = self.flatten(schema)
        except PootError:
            return Negation(exact=False)
        if flat is True or flat == {}:
            return Negation()
        if flat is False:
            return self._within(context, Negation([True]))
        if not isinstance(flat, dict):
            return Negation(exact=False)
        neg = Negation()
        within = Negation()  # pieces already intersected with the context
        # A value fails the schema when it fails any one of its keywords.
        if "not" in flat:
            neg.pieces.append(flat["not"])
        if "anyOf" in flat:
            within.add(self._none_of(flat["anyOf"], depth, context))
        if "oneOf" in flat:
            branches = flat["oneOf"]
            pairwise = isinstance(branches, list) and all(
                self._safe_disjoint(a, b) for i, a in enumerate(branches) for b in branches[i + 1:])
            sub = self._none_of(branches, depth, context)
            # Values matching two branches fail oneOf too; poot writes only those matching none.
            within.add(Negation(sub.pieces, sub.exact and pairwise))
        values = _listed_values(flat)
        if values is not None:
            neg.add(_not_values(values))
        neg.add(self._not_type(flat))
        neg.add(self._not_keywords(flat, depth))
        neg = self._within(context, neg)
        neg.add(within)
        if len(neg.pieces) > MAX_PIECES:
            neg = Negation(neg.pieces[:MAX_PIECES], False)
        return neg

    def empty(self, schema: Any, depth: int = 0) -> bool:
        """Whether ``schema`` obviously matches no value (no type left, no enum value of its
        types, a required property that is obviously empty); ``False`` when unsure."""
        if schema is False:
            return True
        if not isinstance(schema, dict) or depth > MAX_DEPTH:
            return False
        try:
            self._step()
            flat = self.flatten(schema)
        except PootError:
            return False
        if flat is False:
            return True
        if not isinstance(flat, dict):
            return False
        types = flat.get("type")
        if isinstance(types, str):
            types = [types]
        if types == []:
            return True
        values = _listed_values(flat)
        if values is not None:
            if isinstance(types, list):
                values = [v for v in values if _json_types(v) & set(types)]
            if not values:
                return True
        props = flat.get("properties", {})
        required = flat.get("required", [])
        if isinstance(props, dict) and isinstance(required, list):
            return any(self.empty(props[k], depth + 1) for k in required if isinstance(k, str) and k in props)
        return False

    def _within(self, context: Any, neg: Negation) -> Negation:
        """The pieces intersected with ``context``, those obviously empty dropped."""
        out = Negation(exact=neg.exact)
        for piece in neg.pieces:
            try:
                self._step()
                merged = self.merge(context, piece)
            except PootError:
                out.exact = False  # no positive form for this intersection: left out
                continue
            if not self.empty(merged):
                out.pieces.append(merged)
        return out

    def _safe_disjoint(self, a: Any, b: Any) -> bool:
        try:
            return self.disjoint(a, b)
        except PootError:
            return False

    def _none_of(self, branches: Any, depth: int, context: Any = True) -> Negation:
        """Values (within ``context``) matching no branch: the intersections of one piece of each
        branch's negation."""
        if not isinstance(branches, list):
            return Negation(exact=False)
        acc = Negation([context])
        for branch in branches:
            sub = self.negate(branch, depth + 1)
            pieces = []
            for a in acc.pieces:
                for b in sub.pieces:
                    try:
                        self._step()
                        pieces.append(self.merge(a, b))
                    except PootError:
                        acc.exact = False  # this combination has no positive form here
            pieces = [p for p in pieces if not self.empty(p)]  # most combinations clash on a type
            acc = Negation(pieces[:MAX_PIECES],
                           acc.exact and sub.exact and len(pieces) <= MAX_PIECES)
        return acc

    @staticmethod
    def _not_type(flat: dict) -> Negation:
        if "type" not in flat:
            return Negation()
        declared = flat["type"] if isinstance(flat["type"], list) else [flat["type"]]
        if not all(t in ALL_TYPES for t in declared):
            return Negation(exact=False)
        types = set(declared) | ({"integer"} if "number" in declared else set())
        others = [t for t in ALL_TYPES if t not in types]
        exact = True
        if "integer" in types and "number" not in types:
            others.remove("number")  # the non-integer numbers: no positive keyword for them
            exact = False
        return Negation([{"type": others}] if others else [], exact)

    def _not_keywords(self, flat: dict, depth: int) -> Negation:
        neg = Negation()
        pieces = neg.pieces
        # strings
        if isinstance(flat.get("minLength"), int) and flat["minLength"] > 0:
            pieces.append({"type": "string", "maxLength": flat["minLength"] - 1})
        if isinstance(flat.get("maxLength"), int):
            pieces.append({"type": "string", "minLength": flat["maxLength"] + 1})
        if "pattern" in flat:
            patterns = [flat["pattern"]] if isinstance(flat["pattern"], str) else list(flat["pattern"])
            for p in patterns:
                q = not_pattern(p) if isinstance(p, str) else None
                if q is None:
                    neg.exact = False
                else:
                    pieces.append({"type": "string", "pattern": q})
        # numbers (draft-04 boolean exclusives turn minimum/maximum exclusive)
        lo_excl, hi_excl = flat.get("exclusiveMinimum"), flat.get("exclusiveMaximum")
        if _is_number(flat.get("minimum")):
            key = "maximum" if lo_excl is True else "exclusiveMaximum"
            pieces.append({"type": "number", key: flat["minimum"]})
        if _is_number(lo_excl):
            pieces.append({"type": "number", "maximum": lo_excl})
        if _is_number(flat.get("maximum")):
            key = "minimum" if hi_excl is True else "exclusiveMinimum"
            pieces.append({"type": "number", key: flat["maximum"]})
        if _is_number(hi_excl):
            pieces.append({"type": "number", "minimum": hi_excl})
        # Integers that are no multiple of the step (a negated residue lookahead); the
        # non-integer numbers that fail it have no positive schema here (a narrowing).
        if "multipleOf" in flat:
            piece = _not_multiple(flat["multipleOf"])
            if piece is not None:
                pieces.append({"type": "integer", "multipleOf": piece})
            neg.exact = False
        # arrays
        if isinstance(flat.get("minItems"), int) and flat["minItems"] > 0:
            pieces.append({"type": "array", "maxItems": flat["minItems"] - 1})
        if isinstance(flat.get("maxItems"), int):
            pieces.append({"type": "array", "minItems": flat["maxItems"] + 1})
        # objects
        if isinstance(flat.get("minProperties"), int) and flat["minProperties"] > 0:
            pieces.append({"type": "object", "maxProperties": flat["minProperties"] - 1})
        if isinstance(flat.get("maxProperties"), int):
            pieces.append({"type": "object", "minProperties": flat["maxProperties"] + 1})
        required = flat.get("required", [])
        if isinstance(required, list):
            for key in dict.fromkeys(k for k in required if isinstance(k, str)):
                pieces.append({"type": "object", "properties": {key: False}})
        props = flat.get("properties", {})
        if isinstance(props, dict):
            for key, sub in props.items():
                inner = self.negate(sub, depth + 1)
                neg.exact = neg.exact and inner.exact
                pieces.extend({"type": "object", "required": [key], "properties": {key: p}} for p in inner.pieces)
        # Keywords whose failing values poot cannot write as a positive schema.
        handled = {"type", "enum", "const", "not", "anyOf", "oneOf", "minLength", "maxLength", "pattern",
                   "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems",
                   "minProperties", "maxProperties", "required", "properties"}
        if any(k not in handled and k not in _NEUTRAL and not _trivially_true(k, flat[k]) for k in self.constraining(flat)):
            neg.exact = False
        return neg


def _trivially_true(keyword: str, value: Any) -> bool:
    """A keyword that allows everything (``additionalProperties: true``, ``items: {}``, ...)."""
    if keyword in ("additionalProperties", "items", "additionalItems", "unevaluatedProperties",
                   "unevaluatedItems", "propertyNames"):
        return value is True or value == {}
    if keyword in ("uniqueItems",):
        return value is False
    if keyword in ("patternProperties", "dependentRequired", "dependentSchemas", "dependencies"):
        return value == {}
    return False
