"""Compile a JSON Schema into one regex over the reply's JSON text.

The guarantee: every string the regex matches parses as JSON and validates
against the schema (checked with ``jsonschema`` in the tests).  poot may
*narrow* (emit fewer of the valid documents: sorted keys, only listed keys,
at most one space between tokens, ...) but never widens; a keyword it cannot
enforce exactly is refused with :class:`UnsupportedConstruct`, naming the
keyword and its JSON pointer.  docs/json-schema.md lists every choice.

The regex text is bounded by ``limits.max_schema_regex_bytes`` *while* it is
built: every fragment is measured as it is made, so a schema whose regex
would blow up (e.g. nested ``$ref`` fan-out) stops at the first fragment
that passes the bound.
"""

from __future__ import annotations

import functools
import json
import math
from fractions import Fraction
from typing import Any, Iterable

from poot_vllm.core.automata.residues import MAX_RESIDUE, RESIDUE_BASE, residue_lookahead, schema_allows_residues
from poot_vllm.core.errors import ConstraintSyntaxError, LimitExceeded, PootError, UnsupportedConstruct
from poot_vllm.core.json_schema import decimals
from poot_vllm.core.json_schema.formats import (ANY_STRING_FORMATS, BYTE_COUNTED_FORMATS, ESCAPE_DEPENDENT, FORMATS,
                                                format_regex)
from poot_vllm.core.json_schema import maps
from poot_vllm.core.json_schema.negation import NegationTooLarge, Negator, NotMultiple
from poot_vllm.core.json_schema.placeholders import NeedsUnrolling, rule_placeholder
from poot_vllm.core.json_schema.patterns import (PatternError, patterns_disjoint, strings_missing_pattern,
                                                 translate_pattern)
from poot_vllm.core.json_schema.ranges import integer_range_regex
from poot_vllm.core.json_schema.refs import cyclic_targets, escape_token, local_refs, ref_to_pointer, resolve_pointer
from poot_vllm.core.json_schema.whitespace import WHITESPACE_KEY, check_whitespace_pattern
from poot_vllm.core.json_schema.text_size import PARSE_FACTOR, largest_text_parts
from poot_vllm.core.json_schema.strings import (JSON_CHAR, NOT_RAW, check_escaped, escaped_set, json_char,
                                                json_char_regex, spell_escaped)
from poot_vllm.core.regex import charsets as cs
from poot_vllm.core.limits import Limits
from poot_vllm.core.regex.escape import escape_text

#: Between tokens poot allows exactly one optional space, after ',' and ':' only.
WS = " ?"
COLON = ":" + WS
COMMA = "," + WS
STRING = f'"{JSON_CHAR}*"'
#: Numbers: fixed point, at most 15 significant digits (finite doubles; see decimals.py).
NUMBER = decimals.NUMBER
#: Integers: at most INTEGER_DIGITS digits unless a bound asks for more.
INTEGER = f"(?:0|-?[1-9][0-9]{{0,{decimals.INTEGER_DIGITS - 1}}})"
#: Free-form values (``{}``, ``true``, untyped containers) nest at most this
#: many containers deep.  Each level quadruples the regex (depth 2 is ~5 KB,
#: depth 3 ~20 KB, a large share of the automaton budget per occurrence).
FREE_FORM_DEPTH = 2
#: The free-form depths tried, deepest first: a schema whose automaton passes a
#: budget with free-form values 2 containers deep (each such value costs ~660
#: DFA states, ~40% of the default automaton budget) is served with them 1
#: container deep (scalars inside) rather than refused; the same schema always
#: gets the same depth under the same limits.
FREE_FORM_DEPTHS = (2, 1)
#: The "keyword" that budget refusals name for a free-form value (``{}``, ``true``, ``additionalProperties: true``).
FREE_FORM_PART = "a free-form value"
#: Optional object members that may be the first one emitted (see _member_list).
FIRST_KEY_WINDOW = 8
#: Schema nesting (including inlined ``$ref``) deeper than this is refused.
MAX_SCHEMA_DEPTH = 64
#: A recursive ``$ref`` (a tree, a linked list, a JSON-like value union) is
#: unrolled: each schema on a reference cycle may be entered at most this many
#: times on one path from the root (so a ``TreeNode`` nests this many levels).
#: Deeper values are left out (a narrowing).  Unrolling keeps the constraint a
#: DFA, so every reply still finishes inside ``max_tokens`` and the per-step
#: masks stay precomputed; if the automaton passes a budget, compile_schema's
#: callers retry with fewer levels (``RECURSION_DEPTHS``).
RECURSION_DEPTH = 4
#: The unrolling depths tried, deepest first, until the automaton fits its budgets.
RECURSION_DEPTHS = (4, 3, 2, 1)
#: The key of the free-form value's rule in rules mode (no JSON pointer looks like it).
FREE_FORM_RULE = "<any JSON value>"
#: The key prefix of a string value's rule in rules mode (then its regex).
STRING_RULE = "<string value> "

ANNOTATIONS = frozenset(
    """title description examples example default $schema $id id $comment deprecated readOnly
    writeOnly contentMediaType contentEncoding contentSchema $anchor $dynamicAnchor $recursiveAnchor $vocabulary
    $defs definitions""".split()
)
OBJECT_KW = frozenset("properties patternProperties required additionalProperties minProperties maxProperties".split())
ARRAY_KW = frozenset("items prefixItems additionalItems minItems maxItems uniqueItems contains minContains maxContains".split())
STRING_KW = frozenset("minLength maxLength pattern format".split())
NUMBER_KW = frozenset("minimum maximum exclusiveMinimum exclusiveMaximum multipleOf".split())
COMBINATORS = frozenset("$ref allOf anyOf oneOf not enum const type".split())
#: Conditionals, compiled as the combinators they abbreviate (SchemaCompiler._conditionals).
CONDITIONALS = frozenset("if then else dependentRequired dependentSchemas dependencies".split())
#: At most this many branches when two ``anyOf`` meet in ``allOf`` (each pair is a branch).
MAX_ANYOF_PRODUCT = 64
#: Keywords that constrain values but that poot cannot enforce exactly, and why.
REFUSED_ANY_TYPE = {
    "$dynamicRef": "a dynamic reference is served where its target cannot depend on the path that reached it: "
                   "a target in this document that is no '$dynamicAnchor', or a '$dynamicAnchor' name that "
                   "the root resource declares or that one subschema alone declares; several resources "
                   "declare this one (or it names another document): declare it at the root, or use '$ref'",
    "$recursiveRef": "a recursive reference (2019-09) is served where its target cannot depend on the path that "
                     "reached it: its resource has no '$recursiveAnchor: true', or every resource of the document "
                     "has one (then the root is the target); here some do and some do not: use '$ref', or "
                     "'$recursiveAnchor: true' on every resource",
}
REFUSED_BY_TYPE = {
    "object": {
        "propertyNames": "constraints on property names are not supported",
        "unevaluatedProperties": "unevaluatedProperties next to 'contains' or a dynamic reference is not "
                                 "supported; use additionalProperties",
    },
    "array": {
        "unevaluatedItems": "unevaluatedItems next to 'contains' or a dynamic reference is not supported; "
                            "use items",
    },
}
KNOWN = (
    ANNOTATIONS | OBJECT_KW | ARRAY_KW | STRING_KW | NUMBER_KW | COMBINATORS
    | set(REFUSED_ANY_TYPE) | CONDITIONALS | {k for d in REFUSED_BY_TYPE.values() for k in d}
)
TYPE_ORDER = ("object", "array", "string", "integer", "number", "boolean", "null")
TYPE_KEYWORDS = {"object": OBJECT_KW, "array": ARRAY_KW, "string": STRING_KW, "number": NUMBER_KW}


def refusal(keyword: str, pointer: str, reason: str) -> UnsupportedConstruct:
    """An :class:`UnsupportedConstruct` naming the keyword and where it sits."""
    where = f"{pointer}/{keyword}" if not keyword.startswith("<") else (pointer or "/")
    err = UnsupportedConstruct(f"unsupported keyword '{keyword}' at {where}: {reason}")
    err.keyword = keyword  # type: ignore[attr-defined]
    err.pointer = where  # type: ignore[attr-defined]
    return err


def unsatisfiable(keyword: str, pointer: str, reason: str, exact: bool = True) -> UnsupportedConstruct:
    """A refusal because poot emits no value here (``anyOf``/``oneOf``/``type`` drop such a branch).

    ``exact``: no value satisfies the schema by JSON Schema's own semantics
    (not only among poot's spellings); only such a branch may be left out of
    ``oneOf``'s disjointness check.
    """
    err = refusal(keyword, pointer, reason)
    err.empty = True  # type: ignore[attr-defined]
    err.exact = exact  # type: ignore[attr-defined]
    return err


def is_unsatisfiable(exc: BaseException) -> bool:
    return getattr(exc, "empty", False)


def bad_value(keyword: str, pointer: str, expected: str, value: Any) -> ConstraintSyntaxError:
    return ConstraintSyntaxError(f"'{keyword}' at {pointer}/{keyword} must be {expected}, got {json.dumps(value)[:80]}")


def json_type_of(value: Any) -> str:
    """The JSON Schema type of a decoded JSON value ('integer' for whole numbers, like jsonschema)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def value_key(value: Any) -> Any:
    """A hashable key equal for equal JSON values (1 == 1.0, but true != 1)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, (int, float)):
        return ("num", value)
    if isinstance(value, list):
        return ("list", tuple(value_key(v) for v in value))
    return ("dict", frozenset((k, value_key(v)) for k, v in value.items()))


def _type_set(value: Any, pointer: str) -> set[str]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and n in TYPE_ORDER for n in names):
        raise bad_value("type", pointer, f"one of {list(TYPE_ORDER)} or a list of them", value)
    return set(names)


def _group(regex: str) -> str:
    return f"(?:{regex})"


def _alternation(alts: list[str]) -> str:
    unique = list(dict.fromkeys(alts))
    return unique[0] if len(unique) == 1 else _group("|".join(unique))


#: patternProperties on free keys: every set of matched patterns is a key kind (2**n of them).
MAX_FREE_KEY_PATTERNS = 3


class AllPatterns(tuple):
    """Several ``pattern`` values that must all match (``allOf`` of patterns).

    Made only by :meth:`SchemaCompiler.merge`, never read from a user's
    schema (JSON has no tuples), so a list-valued ``pattern`` stays an error.
    """

    @classmethod
    def of(cls, *values: "str | AllPatterns") -> "AllPatterns":
        return cls(dict.fromkeys(p for v in values for p in ((v,) if isinstance(v, str) else v)))


def _both(x: Any, y: Any) -> Any:
    """The schema of values valid for both ``x`` and ``y`` (an ``allOf``, or the one that constrains)."""
    parts = [s for s in (x, y) if s is not True and s != {}]
    if any(s is False for s in parts):
        return False
    return parts[0] if len(parts) == 1 else {"allOf": parts} if parts else {}


def _min_len(a: int | None, b: int | None) -> int | None:
    """The smaller of two optional upper bounds (None: unbounded)."""
    return b if a is None else a if b is None else min(a, b)


def _repeat(regex: str, lo: int, hi: int | None) -> str:
    """``regex`` repeated lo..hi times (hi None = unbounded)."""
    if hi == 0:
        return ""
    quant = {(0, None): "*", (1, None): "+", (0, 1): "?", (1, 1): ""}.get((lo, hi))
    if quant is None:
        quant = f"{{{lo}}}" if lo == hi else f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}"
    return _group(regex) + quant if quant else regex


def counted_list(item: str, lo: int, hi: int | None, comma: str = COMMA) -> str:
    """lo..hi comma-separated copies of ``item``."""
    if hi == 0:
        return ""
    rest = _repeat(comma + item, max(lo - 1, 0), None if hi is None else hi - 1)
    return item + rest if lo >= 1 else _group(item + rest) + "?"



def _common_multiple(a: Any, b: Any) -> "int | float | None":
    """The least common multiple of two ``multipleOf`` steps, exactly, or None (an
    invalid step, one not exact in binary, or a result no float holds exactly).

    ``x`` is a multiple of ``p1/q1`` and ``p2/q2`` (reduced) iff it is one of
    ``lcm(p1, p2) / gcd(q1, q2)``.  An int where both steps are (validators then
    check with ``%``), else a float: a float step makes validators divide in
    floating point, and the compiler bounds magnitudes for it as for the original.
    """
    steps = []
    for v in (a, b):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            return None
        f = Fraction(v)
        if isinstance(v, float) and Fraction(repr(v)) != f:
            return None
        steps.append(f)
    (fa, fb) = steps
    step = Fraction(math.lcm(fa.numerator, fb.numerator), math.gcd(fa.denominator, fb.denominator))
    if isinstance(a, int) and isinstance(b, int):
        return int(step)
    as_float = float(step)
    return as_float if Fraction(as_float) == step else None

class SchemaCompiler:
    """One compilation: the root document (for ``$ref``), the limits, caches."""

    def __init__(self, root: Any, limits: Limits, escaped: str = "", whitespace: str = WS,
                 recursion: int = RECURSION_DEPTH, rules: bool = False, free_form: int = FREE_FORM_DEPTH,
                 free_form_rule: bool = False) -> None:
        #: the document, every ``$ref`` a pointer from its root (anchors and ``$id`` resolved)
        self.root = root = local_refs(root)
        self.limits = limits
        #: how many times one schema on a reference cycle may be entered on a path (see RECURSION_DEPTH)
        self.recursion = recursion
        #: the ``$ref`` targets that lie on a reference cycle (their regex depends on the path)
        self.cyclic = cyclic_targets(root)
        #: whether a recursion was cut at ``recursion`` levels (a smaller depth may then fit a budget)
        self.recursion_cut = False
        #: containers a free-form value may nest (FREE_FORM_DEPTHS), and whether any was written
        self.free_form = free_form
        self.free_form_used = False
        #: rules mode only: a free-form value is one grammar rule (any JSON value, any depth),
        #: not a regex nested ``free_form`` containers deep (see :meth:`_free_form_rule`)
        self.free_form_rule = free_form_rule and rules
        #: rules mode only: each distinct string value's regex and each ``$ref`` target is one
        #: grammar rule, called from every place that holds it (see :meth:`_string_rule`)
        self.value_rules = False
        #: rules mode (json_schema.recursive): each cyclic ``$ref`` target is compiled once, as a
        #: grammar rule: target -> [placeholder character standing for it in the regex text, body]
        self.rules: "dict[str, list] | None" = {} if rules else None
        #: > 0 while compiling inside a negation ('not', an overlapping oneOf's differences),
        #: where a placeholder cannot stand for its rule (the rule would be negated)
        self.negating = 0
        #: the separators (whitespace after ',' and ':'; a request's whitespace_pattern replaces WS)
        self.colon = ":" + _group(whitespace) if whitespace != WS else COLON
        self.comma = "," + _group(whitespace) if whitespace != WS else COMMA
        #: characters never written raw in strings (keys, values, enum/const): only as \u escapes
        self.escaped = check_escaped(escaped)
        self.json_char = json_char(self.escaped)
        self.string = f'"{self.json_char}*"'
        #: characters a free key may start with: written raw, so the decoded first character is known
        self.key_first = cs.subtract(cs.subtract(cs.complement(NOT_RAW), ((0xD800, 0xDFFF),)), escaped_set(self.escaped))
        self.ref_cache: dict[Any, str] = {}
        self._any_cache: dict[int, str] = {}
        self.pattern_cache: dict[Any, Any] = {}
        #: steps taken by this compile's negations (negation.MAX_NEGATION_WORK bounds them)
        self.negation_work = [0]
        #: (pointer, keyword, regex, copies) of every counted repetition and other large part, for
        #: explaining an automaton over its budget (largest_parts); regexes are shared, not copied
        self.parts: list[tuple[str, str, str, int]] = []
        schema_uri = root.get("$schema", "") if isinstance(root, dict) else ""
        self.draft4 = isinstance(schema_uri, str) and ("draft-04" in schema_uri or "draft-03" in schema_uri)

    # -- bounds ---------------------------------------------------------------
    def check(self, regex: str, pointer: str) -> str:
        self.check_size(len(regex), pointer)
        return regex

    def check_size(self, size: int, pointer: str) -> None:
        if size > self.limits.max_schema_regex_bytes:
            raise LimitExceeded(
                "the regex compiled from the JSON schema",
                "max_schema_regex_bytes",
                self.limits.max_schema_regex_bytes,
                "characters",
                f"passed at {pointer or '/'}",
            )

    def note(self, pointer: str, keyword: str, regex: str, copies: int) -> str:
        """Record a part of the automaton (``copies`` of ``regex``, set by ``keyword`` at ``pointer``); returns ``regex``."""
        self.parts.append((pointer, keyword, regex, copies))
        return regex

    def largest_parts(self, top: int = 3) -> str:
        """Which schema parts make the automaton large, largest first (for a budget refusal).

        Each part is weighed by its NFA positions after counted repetitions
        are expanded (what the automaton build charges first), times its copies.
        """
        weights: dict[tuple[str, str], int] = {}
        for pointer, keyword, regex, copies in self.parts:
            key = (pointer or "/", keyword)
            weights[key] = weights.get(key, 0) + expanded_positions(regex) * copies
        total = sum(weights.values())
        if not total:
            return ""
        ranked = sorted(weights.items(), key=lambda kv: -kv[1])[:top]
        advice = {"maxLength": "lower maxLength", "minLength": "lower minLength", "maxItems": "lower maxItems",
                  "additionalProperties": "list the keys in 'properties' or simplify the value",
                  "format": "drop the format or use a plain string", "pattern": "simplify the pattern",
                  "multipleOf": "widen the step or narrow the range",
                  "uniqueItems": "give the items a type or an enum, or drop uniqueItems",
                  "maxContains": "lower maxContains", "patternProperties": "list the keys in 'properties'",
                  FREE_FORM_PART: "give it a type (or leave it out)"}
        out = []
        for (pointer, keyword), weight in ranked:
            what = "the numeric range" if keyword in NUMBER_KW or keyword == "type" else keyword
            hint = advice.get(keyword, "narrow the range")
            out.append(f"{pointer}: {what} contributes {100 * weight // total}% of it; {hint}")
        return "largest parts of the schema: " + "; ".join(out)

    # -- free-form values -----------------------------------------------------
    def any_value(self, depth: "int | None" = None) -> str:
        """Any JSON value with at most ``depth`` nested containers (default: this compile's ``free_form``)."""
        self.free_form_used = True
        if self.free_form_rule:
            return self._free_form_rule()
        if depth is None:
            depth = self.free_form
        if depth not in self._any_cache:
            self._any_cache[depth] = self._any_of(self.any_value(depth - 1) if depth > 0 else None)
        return self._any_cache[depth]

    def free_value(self, pointer: str) -> str:
        """A free-form member or item of the container at ``pointer`` (one level less deep),
        noted as a part of the automaton: free-form values copied into several places are
        often what passes the budget, and the refusal should say so."""
        return self.note(pointer, FREE_FORM_PART, self.any_value(self.free_form - 1), 1)

    def _any_of(self, inner: "str | None") -> str:
        """A JSON scalar, or (with ``inner``) an array of ``inner`` items or a free-form object
        whose value is ``inner``."""
        values = [self.string, NUMBER, "true", "false", "null"]
        if inner is not None:
            values = [f"\\[{counted_list(inner, 0, None, self.comma)}\\]", self.free_object(inner)] + values
        return self.check(_alternation(values), "")

    def _free_form_rule(self) -> str:
        """Rules mode with ``free_form_rule``: any JSON value as one grammar rule that calls
        itself for the items and member values of its containers, so that every free-form
        value of the schema is a call (one copy, exact at any depth) instead of a regex
        copied into every place that holds one (json_schema.recursive; what
        :func:`~poot_vllm.core.json_schema.compile_json_schema` falls back to where those
        copies pass the automaton budget)."""
        entry = self.rules.get(FREE_FORM_RULE)
        if entry is None:
            entry = self.rules[FREE_FORM_RULE] = [rule_placeholder(len(self.rules)), None]
            entry[1] = self._any_of(entry[0])  # containers call the rule itself
        return entry[0]

    def free_object(self, inner: str) -> str:
        """A free-form object: at most one key, whose value is ``inner``.

        Keys must never repeat; a slot per key (maps.py) would multiply the
        automaton by the value's, and free-form values are already the
        largest part of a ``{}`` schema, so free-form objects hold one key.
        """
        return f"\\{{{self.free_members(inner, 0, 1)}\\}}"

    # -- entry ------------------------------------------------------------------
    def compile(self, schema: Any, pointer: str = "", refs: tuple[str, ...] = (), depth: int = 0) -> str:
        """Regex for the JSON texts poot emits for ``schema`` (found at ``pointer``)."""
        if depth > MAX_SCHEMA_DEPTH:
            raise refusal("<nesting>", pointer, f"schemas nested deeper than {MAX_SCHEMA_DEPTH} levels are not supported")
        if schema is True:
            return self.any_value()
        if schema is False:
            raise unsatisfiable("<false>", pointer, "the schema 'false' matches no value")
        if not isinstance(schema, dict):
            raise ConstraintSyntaxError(f"the schema at {pointer or '/'} must be an object or a boolean, got {type(schema).__name__}")
        for kw, reason in REFUSED_ANY_TYPE.items():
            if kw in schema:
                raise refusal(kw, pointer, reason)
        if any(schema.get(k, True) is not True for k in ("unevaluatedProperties", "unevaluatedItems")):
            static = self._unevaluated(schema, pointer, refs)
            if static is not None:
                merged, followed = static
                return self.compile(merged, pointer, refs + followed, depth + 1)
        if any(k in schema for k in ("then", "else", "dependentRequired", "dependentSchemas", "dependencies")):
            return self.compile(self._conditionals(schema, pointer), pointer, refs, depth + 1)
        if "$ref" in schema:
            target = ref_to_pointer(schema["$ref"], f"{pointer}/$ref")
            if not self._constraining(schema, exclude=("$ref",)):
                return self._compile_ref(target, pointer, refs, depth)
        if "$ref" in schema or "allOf" in schema:
            merged, followed = self.flatten(schema, pointer, refs)
            return self.compile(merged, pointer, refs + followed, depth + 1)
        if "not" in schema:
            return self._compile_not(schema, pointer, refs, depth)
        for comb in ("anyOf", "oneOf"):
            if comb in schema:
                return self._compile_alternatives(schema, comb, pointer, refs, depth)
        if "enum" in schema or "const" in schema:
            return self._compile_enum(schema, pointer, refs, depth)
        return self._compile_typed(schema, pointer, refs, depth)

    def _constraining(self, schema: dict, exclude: Iterable[str] = ()) -> list[str]:
        """The keywords of ``schema`` that constrain values (unknown keywords are ignored, like jsonschema does)."""
        skip = set(exclude)
        out = [k for k in schema if k in KNOWN and k not in ANNOTATIONS and k not in skip]
        if "if" in out and "then" not in schema and "else" not in schema:
            out.remove("if")  # 'if' alone constrains nothing
        return out

    def _compile_ref(self, target: str, pointer: str, refs: tuple[str, ...], depth: int) -> str:
        if self.rules is not None and (target in self.cyclic or (self.value_rules and not self.negating)):
            return self._rule_ref(target, pointer, refs, depth)
        if refs.count(target) >= self.recursion:
            raise self._recursion_end(target, pointer)
        # A target's regex depends on how often the cyclic targets were entered on this path.
        key = (target, tuple(refs.count(t) for t in self.cyclic)) if self.cyclic else target
        if key not in self.ref_cache:
            sub = resolve_pointer(self.root, target, f"{pointer}/$ref")
            self.ref_cache[key] = self.compile(sub, target, refs + (target,), depth + 1)
        return self.ref_cache[key]

    def _rule_ref(self, target: str, pointer: str, refs: tuple[str, ...], depth: int) -> str:
        """Rules mode: a cyclic target is one grammar rule, compiled once; every use is its placeholder."""
        if self.negating:
            raise NeedsUnrolling(f"the recursive reference '#{target}' at {pointer or '/'} is negated")
        entry = self.rules.get(target)
        if entry is None:
            entry = self.rules[target] = [rule_placeholder(len(self.rules)), None]
            sub = resolve_pointer(self.root, target, f"{pointer}/$ref")
            entry[1] = self.compile(sub, target, refs + (target,), depth + 1)
        return entry[0]

    def plain(self, regex: str) -> str:
        """``regex``, which is about to be read as an automaton: never one holding a rule placeholder."""
        if self.rules and any(entry[0] in regex for entry in self.rules.values()):
            raise NeedsUnrolling("a recursive reference is inside a construct poot checks on an automaton")
        return regex

    def _recursion_end(self, target: str, pointer: str) -> UnsupportedConstruct:
        """Unrolled far enough: this path ends here.  An optional property, an array item,
        an anyOf branch holding it are left out (narrowing); if nothing is left, the refusal."""
        if self.rules is not None:
            raise NeedsUnrolling(f"the recursive reference '#{target}' at {pointer or '/'} is merged into itself")
        self.recursion_cut = True
        return unsatisfiable("$ref", pointer, f"the recursive reference '#{target}' is unrolled to {self.recursion} "
                             "levels and no shallower value is possible here; give the recursion a way to end "
                             "(an optional property, an empty array or a null branch)", exact=False)

    # -- allOf / $ref merging ---------------------------------------------------
    def flatten(self, schema: Any, pointer: str, refs: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
        """Inline top-level ``$ref`` and merge ``allOf`` into one schema (refs followed, for cycle checks)."""
        if isinstance(schema, bool):
            return schema, ()
        if not isinstance(schema, dict):
            raise ConstraintSyntaxError(f"the schema at {pointer or '/'} must be an object or a boolean, got {type(schema).__name__}")
        followed: tuple[str, ...] = ()
        parts: list[Any] = []
        rest = {k: v for k, v in schema.items() if k not in ("$ref", "allOf")}
        parts.append(rest)
        if "$ref" in schema:
            target = ref_to_pointer(schema["$ref"], f"{pointer}/$ref")
            if (refs + followed).count(target) >= self.recursion:
                raise self._recursion_end(target, pointer)
            sub, more = self.flatten(self._scoped(resolve_pointer(self.root, target, f"{pointer}/$ref"), target, refs),
                                     target, refs + (target,))
            followed += (target,) + more
            parts.append(sub)
        if "allOf" in schema:
            subs = schema["allOf"]
            if not isinstance(subs, list) or not subs:
                raise bad_value("allOf", pointer, "a non-empty array of schemas", subs)
            for i, sub in enumerate(subs):
                flat, more = self.flatten(self._scoped(sub, f"{pointer}/allOf/{i}", refs + followed),
                                          f"{pointer}/allOf/{i}", refs + followed)
                followed += more
                parts.append(flat)
        merged: Any = True
        for part in parts:
            merged = self.merge(merged, part, pointer)
        return merged, followed

    def merge(self, a: Any, b: Any, pointer: str) -> Any:
        """One schema whose valid values are exactly those valid for both ``a`` and ``b`` (or a refusal)."""
        if a is False or b is False:
            return False
        if a is True or a == {}:
            return b
        if b is True or b == {}:
            return a
        out: dict[str, Any] = {}
        keys = [k for k in dict.fromkeys([*a, *b]) if k not in ANNOTATIONS and k in KNOWN]
        if any(k in a or k in b for k in ("properties", "additionalProperties")):
            self._merge_objects(a, b, out)
        handled = {"properties", "additionalProperties"}
        if self._merge_arrays(a, b, out):
            handled |= {"prefixItems", "items"}
        for k in keys:
            if k in handled:
                continue
            if k not in a or k not in b:
                out[k] = a[k] if k in a else b[k]
                continue
            va, vb = a[k], b[k]
            if k == "required":
                out[k] = list(dict.fromkeys([*va, *vb])) if isinstance(va, list) and isinstance(vb, list) else va
            elif k == "type":
                ta, tb = _type_set(va, pointer), _type_set(vb, pointer)
                both = (ta & tb) | ({"integer"} if ("integer" in ta and "number" in tb) or ("number" in ta and "integer" in tb) else set())
                out[k] = sorted(both)
            elif k in ("enum", "const"):
                la = va if k == "enum" else [va]
                lb = {value_key(v) for v in (vb if k == "enum" else [vb])} if isinstance(vb, list) or k == "const" else set()
                if not isinstance(la, list):
                    raise bad_value(k, pointer, "an array", va)
                out["enum" if k == "enum" else "const"] = [v for v in la if value_key(v) in lb] if k == "enum" else va
                if k == "const" and value_key(va) != value_key(vb):
                    out.pop("const")
                    out["enum"] = []
            elif k in ("minimum", "minLength", "minItems", "minProperties") or (k == "exclusiveMinimum" and not isinstance(va, bool) and not isinstance(vb, bool)):
                out[k] = max(va, vb)
            elif k in ("maximum", "maxLength", "maxItems", "maxProperties") or (k == "exclusiveMaximum" and not isinstance(va, bool) and not isinstance(vb, bool)):
                out[k] = min(va, vb)
            elif k in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(va, bool) and isinstance(vb, bool):
                out[k] = va or vb  # exclusive is the narrower reading of both
            elif k == "items" and isinstance(va, (dict, bool)) and isinstance(vb, (dict, bool)):
                out[k] = {"allOf": [va, vb]}
            elif json.dumps(va, sort_keys=True) == json.dumps(vb, sort_keys=True):
                out[k] = va
            elif k == "anyOf" and isinstance(va, list) and isinstance(vb, list) and len(va) * len(vb) <= MAX_ANYOF_PRODUCT:
                out[k] = [{"allOf": [x, y]} for x in va for y in vb]  # (A1 or A2) and (B1 or B2): every pair
            elif k == "not":
                # failing both A and B is failing (A or B); flat, however many are merged
                out[k] = {"anyOf": [x for v in (va, vb) for x in
                                    (v["anyOf"] if isinstance(v, dict) and set(v) == {"anyOf"} else [v])]}
            elif k == "pattern" and all(isinstance(v, (str, AllPatterns)) for v in (va, vb)):
                out[k] = AllPatterns.of(va, vb)  # every pattern must match: an intersection (_compile_string)
            elif k == "multipleOf" and _common_multiple(va, vb) is not None:
                out[k] = _common_multiple(va, vb)  # a multiple of both is a multiple of their least common one
            else:
                raise refusal("allOf", pointer, f"cannot merge two different '{k}' values exactly; combine them by hand")
        return out

    @staticmethod
    def _merge_objects(a: dict, b: dict, out: dict) -> None:
        """Per-key merge: a key's schema on each side is its property schema, else that side's additionalProperties."""
        pa, pb = a.get("properties", {}), b.get("properties", {})
        if not isinstance(pa, dict) or not isinstance(pb, dict):
            return
        apa, apb = a.get("additionalProperties", True), b.get("additionalProperties", True)
        out["properties"] = {k: _both(pa.get(k, apa), pb.get(k, apb)) for k in dict.fromkeys([*pa, *pb])}
        if "additionalProperties" in a or "additionalProperties" in b:
            out["additionalProperties"] = _both(apa, apb)

    @staticmethod
    def _merge_arrays(a: dict, b: dict, out: dict) -> bool:
        """Per-index merge when a side has ``prefixItems``: an index's schema on each side is its
        ``prefixItems`` entry, else that side's ``items`` (which, without a tuple, covers every
        index).  False (nothing done) without ``prefixItems`` or with draft-4 tuple ``items``."""
        pa, pb = a.get("prefixItems", []), b.get("prefixItems", [])
        ia, ib = a.get("items", True), b.get("items", True)
        if not (pa or pb) or not isinstance(pa, list) or not isinstance(pb, list) or isinstance(ia, list) \
                or isinstance(ib, list):
            return False
        out["prefixItems"] = [_both(pa[i] if i < len(pa) else ia, pb[i] if i < len(pb) else ib)
                              for i in range(max(len(pa), len(pb)))]
        if "items" in a or "items" in b:
            out["items"] = _both(ia, ib)
        return True

    # -- anyOf / oneOf ------------------------------------------------------------
    def _compile_alternatives(self, schema: dict, comb: str, pointer: str, refs: tuple[str, ...], depth: int) -> str:
        branches = schema[comb]
        if not isinstance(branches, list) or not branches:
            raise bad_value(comb, pointer, "a non-empty array of schemas", branches)
        rest = {k: v for k, v in schema.items() if k != comb}
        constraining = self._constraining(rest)
        uneval = {k: rest[k] for k in ("unevaluatedProperties", "unevaluatedItems") if rest.get(k, True) is not True}
        unscoped = {k: v for k, v in rest.items() if k not in uneval}
        flat: list[tuple[Any, str, tuple[str, ...]]] = []
        for i, branch in enumerate(branches):
            where = f"{pointer}/{comb}/{i}"
            if not isinstance(branch, (dict, bool)):
                raise ConstraintSyntaxError(f"the schema at {where} must be an object or a boolean, got {type(branch).__name__}")
            if constraining:
                # The branch's own unevaluated* see only its keywords; the parent's see the branch's too.
                branch = self._scoped(branch, where, refs)
                merged, followed = self.flatten({"allOf": [unscoped, branch]}, where, refs)
                if uneval and isinstance(merged, dict):
                    merged = {**merged, **uneval}
                flat.append((merged, where, followed))
            else:
                flat.append((branch, where, ()))
        # A branch no value satisfies is dropped (anyOf: it adds nothing; oneOf: it
        # matches nothing, so it cannot make a value match twice).
        alts: list[str] = []
        kept: list[tuple[Any, str, tuple[str, ...]]] = []
        compiled: list[str | None] = []  # per kept branch (None: no value among poot's spellings)
        empties: list[UnsupportedConstruct] = []
        for branch, where, followed in flat:
            if branch is False:
                empties.append(unsatisfiable("<false>", where, "the schema 'false' matches no value"))
                continue
            try:
                alts.append(self.compile(branch, where, refs + followed, depth + 1))
                compiled.append(alts[-1])
            except UnsupportedConstruct as exc:
                if not is_unsatisfiable(exc):
                    raise
                empties.append(exc)
                if getattr(exc, "exact", False):
                    continue
                # Empty only among poot's spellings: valid values may still match it, so
                # oneOf's disjointness must still hold against it.
                compiled.append(None)
            kept.append((branch, where, followed))
        if not alts:
            reasons = "; ".join(f"{getattr(e, 'pointer', '?')}: {str(e).split(': ', 1)[-1]}" for e in empties)
            raise unsatisfiable(comb, pointer, f"no branch can produce a value ({reasons})",
                                exact=all(getattr(e, "exact", False) for e in empties))
        if comb == "oneOf":
            overlaps = self._overlaps(kept, refs)
            if any(overlaps):
                alts = self._one_of_differences(kept, compiled, overlaps, pointer, refs, depth)
        return self.check(_alternation(alts), pointer)

    def _one_of_differences(self, kept: list[tuple[Any, str, tuple[str, ...]]], compiled: list[str | None],
                            overlaps: list[list[int]], pointer: str, refs: tuple[str, ...], depth: int) -> list[str]:
        """``oneOf`` whose branches may share values: each branch minus the branches it may
        overlap (``A and not B``, see negation.py), so no emitted value matches two."""
        alts: list[str] = []
        for i, (branch, where, followed) in enumerate(kept):
            if compiled[i] is None:
                continue
            if not overlaps[i]:
                alts.append(compiled[i])  # type: ignore[arg-type]
                continue
            others = [kept[j] for j in overlaps[i]]
            diff = {"allOf": [branch] + [{"not": b} for b, _, _ in others]}
            self.negating += 1
            try:
                alts.append(self.compile(diff, where, refs + followed + sum((f for _, _, f in others), ()), depth + 1))
            except UnsupportedConstruct as exc:
                if not is_unsatisfiable(exc):
                    raise
            finally:
                self.negating -= 1
        if not alts:
            i = next(i for i, o in enumerate(overlaps) if o)
            a, b = (kept[k][1].rsplit("/", 1)[-1] for k in (i, overlaps[i][0]))
            raise unsatisfiable("oneOf", pointer, f"branches {a} and {b} overlap and poot can write no value that "
                                "matches exactly one branch; make the branches disjoint or use anyOf", exact=False)
        return alts

    def _overlaps(self, kept: list[tuple[Any, str, tuple[str, ...]]], refs: tuple[str, ...]) -> list[list[int]]:
        """Per branch, the other branches it may share a value with (not provably disjoint)."""
        out: list[list[int]] = [[] for _ in kept]
        for i in range(len(kept)):
            for j in range(i + 1, len(kept)):
                if not self._disjoint(kept[i][0], kept[j][0], refs + kept[i][2] + kept[j][2]):
                    out[i].append(j)
                    out[j].append(i)
        return out

    # -- unevaluatedProperties / unevaluatedItems -------------------------------------------
    def _unevaluated(self, schema: dict, pointer: str, refs: tuple[str, ...]) -> tuple[Any, tuple[str, ...]] | None:
        """``unevaluatedProperties``/``unevaluatedItems`` where what is evaluated is known
        statically: no in-place ``anyOf``/``oneOf``/``if``/``dependentSchemas``/``contains``
        (their annotations depend on the value) in the schema, its ``allOf`` members and
        ``$ref`` targets.  Then the evaluated properties are those the merged schema lists
        (``properties``, ``patternProperties``; all of them once a part has
        ``additionalProperties`` or its own ``unevaluatedProperties``), the evaluated items the
        tuple's (all once a part has ``items``), and ``unevaluated*`` is the merged schema's
        ``additionalProperties``/``items``.  ``None`` when not static: an ``anyOf``/``oneOf``
        (also from ``if``) then takes the keyword into each branch, where it is static again
        (a value valid for one branch has only that branch's properties: a narrowing)."""
        parts: list[dict] = []
        seen: set[str] = set()

        def walk(sub: Any) -> bool:
            if not isinstance(sub, dict):
                return True
            if any(k in sub for k in ("anyOf", "oneOf", "then", "else", "dependentSchemas", "dependencies",
                                      "contains", "$dynamicRef", "$recursiveRef")):
                return False
            parts.append(sub)
            if "$ref" in sub:
                try:
                    target = ref_to_pointer(sub["$ref"], "")
                    if target in seen:
                        return False
                    seen.add(target)
                    if not walk(resolve_pointer(self.root, target, "")):
                        return False
                except PootError:
                    return False
            members = sub.get("allOf", [])
            return isinstance(members, list) and all(walk(m) for m in members)

        if not walk(schema):
            return None
        nested = parts[1:]
        rest = {k: v for k, v in schema.items() if k not in ("unevaluatedProperties", "unevaluatedItems")}
        merged, followed = self.flatten(rest, pointer, refs)  # nested unevaluated* are scoped there
        if not isinstance(merged, dict):
            return merged, followed
        merged = dict(merged)
        props_all = "additionalProperties" in schema or any(
            "additionalProperties" in p or "unevaluatedProperties" in p for p in nested)
        if schema.get("unevaluatedProperties", True) is not True and not props_all:
            merged["additionalProperties"] = schema["unevaluatedProperties"]
        items_all = any(("items" in p and not isinstance(p["items"], list)) or "additionalItems" in p
                        for p in parts) or any("unevaluatedItems" in p for p in nested)
        if schema.get("unevaluatedItems", True) is not True and not items_all:
            tuple_form = isinstance(merged.get("items"), list)
            merged["additionalItems" if tuple_form else "items"] = schema["unevaluatedItems"]
        return merged, followed

    def _scoped(self, schema: Any, pointer: str, refs: tuple[str, ...]) -> Any:
        """A subschema about to be merged into another (an ``allOf`` member, a ``$ref`` target,
        a branch taking its parent's keywords), its own ``unevaluated*`` resolved first: they see
        only its own annotations, not the schema it is merged into."""
        if not isinstance(schema, dict) or all(schema.get(k, True) is True for k in ("unevaluatedProperties",
                                                                                      "unevaluatedItems")):
            return schema
        static = self._unevaluated(schema, pointer, refs)
        if static is None:
            kw = "unevaluatedProperties" if schema.get("unevaluatedProperties", True) is not True else "unevaluatedItems"
            raise refusal(kw, pointer, f"{kw} in a subschema with anyOf/oneOf/if/dependentSchemas/contains "
                          "of its own is not supported (its annotations depend on the value); "
                          "use additionalProperties/items")
        return static[0]

    # -- conditionals ---------------------------------------------------------------
    def _conditionals(self, schema: dict, pointer: str) -> Any:
        """``schema`` with its conditionals written as the combinators they abbreviate (exact):

        if I then T else E         anyOf: [I and T, (not I) and E]
        dependentRequired a: [b]   not {object, a present, b absent}
        dependentSchemas a: S      not {object, a present, not S}
        dependencies (draft-04)    either of the two above, by the value's kind
        """
        rest = {k: v for k, v in schema.items() if k not in CONDITIONALS or k == "if" and not
                ("then" in schema or "else" in schema)}
        parts: list[Any] = []
        if "then" in schema or "else" in schema:
            if "if" in schema:  # then/else without if constrain nothing
                cond = schema["if"]
                parts.append({"anyOf": [{"allOf": [cond, schema.get("then", True)]},
                                        {"allOf": [{"not": cond}, schema.get("else", True)]}]})
        for kw in ("dependentRequired", "dependentSchemas", "dependencies"):
            if kw not in schema:
                continue
            value = schema[kw]
            if not isinstance(value, dict):
                raise bad_value(kw, pointer, "an object", value)
            for key, dep in value.items():
                if isinstance(dep, list) and kw != "dependentSchemas":
                    if not all(isinstance(d, str) for d in dep):
                        raise bad_value(kw, pointer, "arrays of property names", dep)
                    parts += [{"not": {"type": "object", "required": [key], "properties": {d: False}}} for d in dep]
                elif isinstance(dep, (dict, bool)) and kw != "dependentRequired":
                    parts.append({"not": {"type": "object", "required": [key], "not": dep}})
                else:
                    raise bad_value(kw, pointer, "property names" if kw == "dependentRequired" else "schemas", dep)
        # The nots as one 'not anyOf' (merging them one by one re-serializes a growing list).
        nots = [p["not"] for p in parts if set(p) == {"not"}]
        merged: Any = rest
        for part in [p for p in parts if set(p) != {"not"}] + ([{"not": nots[0] if len(nots) == 1 else
                                                                 {"anyOf": nots}}] if nots else []):
            merged = self.merge(merged, part, pointer)
        return merged

    # -- not ------------------------------------------------------------------------
    def _negator(self, refs: tuple[str, ...]) -> Negator:
        def flatten(schema: Any) -> Any:
            if isinstance(schema, dict) and any(k in schema for k in CONDITIONALS if k != "if"):
                schema = self._conditionals(schema, "")
            return self.flatten(schema, "", refs)[0]

        return Negator(flatten=flatten, merge=lambda a, b: self.merge(a, b, ""),
                       disjoint=lambda a, b: self._disjoint(a, b, refs), constraining=self._constraining,
                       work=self.negation_work)

    def _compile_not(self, schema: dict, pointer: str, refs: tuple[str, ...], depth: int) -> str:
        """``not N``: the rest of the schema intersected with each piece of N's complement
        (positive schemas, see negation.py); a piece poot cannot write is left out (a narrowing)."""
        self.negating += 1
        try:
            return self._compile_not_pieces(schema, pointer, refs, depth)
        finally:
            self.negating -= 1

    def _compile_not_pieces(self, schema: dict, pointer: str, refs: tuple[str, ...], depth: int) -> str:
        rest = {k: v for k, v in schema.items() if k != "not"}
        try:
            neg = self._negator(refs).negate(schema["not"], context=rest)
        except NegationTooLarge as exc:
            raise refusal("not", pointer, f"{exc}; simplify the schema (poot also writes 'not' for an "
                          "overlapping oneOf, if/else and dependentRequired/dependentSchemas)") from None
        alts: list[str] = []
        skipped: list[UnsupportedConstruct] = []
        for piece in neg.pieces:  # each already intersected with the rest
            try:
                merged, followed = self.flatten(piece, pointer, refs)
                alts.append(self.compile(merged, pointer, refs + followed, depth + 1))
                self.check_size(sum(map(len, alts)), pointer)  # refused as soon as the pieces pass it
            except UnsupportedConstruct as exc:
                skipped.append(exc)
        if alts:
            return self.check(_alternation(alts), pointer)
        refused = [e for e in skipped if not is_unsatisfiable(e)]
        if refused:
            raise refused[0]  # the rest of the schema is what poot cannot build
        exact = neg.exact and all(getattr(e, "exact", False) for e in skipped)
        raise unsatisfiable("not", pointer, "no value poot can write fails the 'not' schema and satisfies the rest"
                            + ("" if exact else " (poot writes the values failing 'format', 'items', non-integer "
                               "numbers and a few more keywords as no value; see docs/json-schema.md)"),
                            exact=exact)

    def _deref(self, schema: Any, refs: tuple[str, ...]) -> Any:
        """Follow plain ``$ref`` chains (a helper for checks; compile() reports ref errors)."""
        seen: set[str] = set()
        while isinstance(schema, dict) and "$ref" in schema and not self._constraining(schema, exclude=("$ref",)):
            try:
                target = ref_to_pointer(schema["$ref"], "")
                if target in seen:
                    return True
                seen.add(target)
                schema = resolve_pointer(self.root, target, "")
            except PootError:
                return schema  # compiling it reports the problem with its real pointer
        return schema

    def _flat(self, schema: Any, refs: tuple[str, ...]) -> Any:
        """``schema`` with its ``$ref``/``allOf`` merged (a property's schema after a parent's
        keywords were merged into a branch); as it is when that is refused."""
        try:
            return self.flatten(schema, "", refs)[0]
        except PootError:
            return self._deref(schema, refs)

    def _semantic_types(self, schema: Any, refs: tuple[str, ...]) -> set[str]:
        """Types a schema accepts *by JSON Schema semantics* (not poot's narrowed output)."""
        schema = self._deref(schema, refs)
        every = set(TYPE_ORDER)
        if not isinstance(schema, dict):
            return every if schema is not False else set()
        types = every
        if "type" in schema:
            types = _type_set(schema["type"], "")
            if "number" in types:
                types = types | {"integer"}
        if "const" in schema:
            types = types & {json_type_of(schema["const"])}
        if isinstance(schema.get("enum"), list):
            types = types & {json_type_of(v) for v in schema["enum"]}
        return types

    def _values(self, schema: Any) -> set | None:
        """The set of allowed values (as value keys) if the schema pins them with const/enum."""
        if not isinstance(schema, dict):
            return None
        sets = []
        if "const" in schema:
            sets.append({value_key(schema["const"])})
        if isinstance(schema.get("enum"), list):
            sets.append({value_key(v) for v in schema["enum"]})
        if not sets:
            return None
        return set.intersection(*sets)

    def _disjoint(self, a: Any, b: Any, refs: tuple[str, ...]) -> bool:
        a, b = self._deref(a, refs), self._deref(b, refs)
        ta, tb = self._semantic_types(a, refs), self._semantic_types(b, refs)
        if not (ta & tb):
            return True
        va, vb = self._values(a), self._values(b)
        if va is not None and vb is not None and not (va & vb):
            return True
        # Objects told apart by a required discriminator property whose values differ.
        if ta & tb == {"object"} and isinstance(a, dict) and isinstance(b, dict):
            pa, pb = a.get("properties", {}), b.get("properties", {})
            ra, rb = set(a.get("required", [])), set(b.get("required", []))
            if isinstance(pa, dict) and isinstance(pb, dict):
                for key in ra & rb & set(pa) & set(pb):
                    fa, fb = self._flat(pa[key], refs), self._flat(pb[key], refs)
                    xa, xb = self._values(fa), self._values(fb)
                    if xa is not None and xb is not None and not (xa & xb):
                        return True
                    if self._strings_disjoint(fa, fb, refs):
                        return True
        return self._strings_disjoint(a, b, refs)

    def _strings_disjoint(self, a: Any, b: Any, refs: tuple[str, ...]) -> bool:
        """Two string schemas that share no string by their ``pattern``s (or a pattern and the
        other's listed strings), under ``re.search`` as validators read them (a discriminator
        like ``"type": {"pattern": "^basic:date:$"}``)."""
        if not (isinstance(a, dict) and isinstance(b, dict)):
            return False
        if self._semantic_types(a, refs) != {"string"} or self._semantic_types(b, refs) != {"string"}:
            return False
        pa, pb = a.get("pattern"), b.get("pattern")
        budget = self.limits.max_automaton_bytes
        if isinstance(pa, str) and isinstance(pb, str):
            return patterns_disjoint(pa, pb, budget)
        for pattern, other in ((pa, b), (pb, a)):
            listed = [other["const"]] if "const" in other else other.get("enum")
            if isinstance(pattern, str) and isinstance(listed, list) and all(isinstance(v, str) for v in listed):
                return strings_missing_pattern(listed, pattern, budget)
        return False

    # -- enum / const ---------------------------------------------------------------
    def value_regex(self, value: Any, pointer: str) -> str:
        """Regex for the canonical spelling of a JSON value (sorted keys, optional single spaces)."""
        if isinstance(value, dict):
            items = [self.text_regex(json.dumps(k, ensure_ascii=False)) + self.colon + self.value_regex(v, pointer) for k, v in sorted(value.items())]
            return self.check("\\{" + self.comma.join(items) + "\\}", pointer)
        if isinstance(value, list):
            return self.check("\\[" + self.comma.join(self.value_regex(v, pointer) for v in value) + "\\]", pointer)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConstraintSyntaxError(f"the value at {pointer} is not finite JSON ({value})")
        text = json.dumps(value, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise refusal("enum", pointer, "a string value holds a lone surrogate, which UTF-8 cannot spell") from exc
        return self.check(self.text_regex(text), pointer)

    def text_regex(self, json_text: str) -> str:
        """Regex for exactly this JSON text, its ``escaped`` characters spelled as escapes."""
        return escape_text(spell_escaped(json_text, self.escaped))

    def _compile_enum(self, schema: dict, pointer: str, refs: tuple[str, ...], depth: int) -> str:
        values: list[Any]
        if "enum" in schema:
            if not isinstance(schema["enum"], list):
                raise bad_value("enum", pointer, "an array", schema["enum"])
            values = list(schema["enum"])
            if "const" in schema:
                values = [v for v in values if value_key(v) == value_key(schema["const"])]
        else:
            values = [schema["const"]]
        keyword = "enum" if "enum" in schema else "const"
        schema_values = list(values)
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        constraining = self._constraining(rest)
        if constraining == ["type"]:
            allowed = _type_set(rest["type"], pointer)
            if "number" in allowed:
                allowed.add("integer")
            values = [v for v in values if json_type_of(v) in allowed]
        elif constraining:
            # Keep the values the other keywords accept: a value whose compact
            # canonical text matches their (never wider) regex is valid.  The
            # match runs on poot's own automaton (budgeted, linear in the
            # value): Python's backtracking ``re`` over a user's pattern and
            # values is exponential for patterns like ``^(a+)+$``.
            keep = self._spellings_match(self.compile(rest, pointer, refs, depth + 1), values)
            values = [v for v, ok in zip(values, keep) if ok]
        unique = list({json.dumps(v, sort_keys=True): v for v in values}.values())
        if not unique:
            raise unsatisfiable(keyword, pointer, "no value satisfies this keyword together with the schema's other keywords",
                                exact=not schema_values)
        alts = [self.value_regex(v, pointer) for v in unique]
        return self.check(_alternation(alts), pointer)

    # -- typed schemas ------------------------------------------------------------------
    def _compile_typed(self, schema: dict, pointer: str, refs: tuple[str, ...], depth: int) -> str:
        if "type" in schema:
            types = _type_set(schema["type"], pointer)
            if not types:
                raise unsatisfiable("type", pointer, "no type satisfies every branch (the schema matches no value)")
        else:
            # No 'type': poot narrows to the types whose keywords appear (all
            # types when none do), so {"properties": ...} means an object.
            types = {t for t, kws in TYPE_KEYWORDS.items() if any(k in schema for k in kws)}
            types |= {t for t, kws in REFUSED_BY_TYPE.items() if t != "integer" and any(k in schema for k in kws)}
            if not types:
                types = set(TYPE_ORDER) - {"integer"}
        if "number" in types:
            types.discard("integer")  # number's spellings include every integer's
        for t in types:
            for kw, reason in REFUSED_BY_TYPE.get(t, {}).items():
                if kw == "propertyNames":
                    continue  # _compile_object: a finite set of names is supported
                if kw in schema and not (kw in ("unevaluatedProperties", "unevaluatedItems") and schema[kw] is True):
                    raise refusal(kw, pointer, reason)
        alts = []
        empty: UnsupportedConstruct | None = None
        for t in TYPE_ORDER:
            if t not in types:
                continue
            try:
                alts.append(self._compile_type(t, schema, pointer, refs, depth))
            except UnsupportedConstruct as exc:
                # {"type": ["integer", "null"], "minimum": 10, "maximum": 5}: only null remains
                if not is_unsatisfiable(exc):
                    raise
                empty = empty or exc
        if not alts:
            assert empty is not None
            raise empty
        return self.check(_alternation(alts), pointer)

    def _compile_type(self, t: str, schema: dict, pointer: str, refs: tuple[str, ...], depth: int) -> str:
        if t == "object":
            return self._compile_object(schema, pointer, refs, depth)
        if t == "array":
            return self._compile_array(schema, pointer, refs, depth)
        if t == "string":
            return self._compile_string(schema, pointer, refs, depth)
        if t == "integer":
            return self._compile_integer(schema, pointer)
        if t == "number":
            return self._compile_number(schema, pointer)
        return "(?:true|false)" if t == "boolean" else "null"

    def _count(self, schema: dict, keyword: str, pointer: str) -> int | None:
        value = schema.get(keyword)
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise bad_value(keyword, pointer, "a non-negative integer", value)
        return value

    # objects
    def _compile_object(self, schema: dict, pointer: str, refs: tuple[str, ...], depth: int) -> str:
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise bad_value("properties", pointer, "an object", props)
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise bad_value("required", pointer, "an array of strings", required)
        extra = schema.get("additionalProperties", True)
        if not isinstance(extra, (dict, bool)):
            raise bad_value("additionalProperties", pointer, "a schema", extra)
        lo = self._count(schema, "minProperties", pointer) or 0
        hi = self._count(schema, "maxProperties", pointer)
        names, names_regex = self._property_names(schema, pointer, refs, depth)
        by_pattern = schema.get("patternProperties", {})
        if not isinstance(by_pattern, dict):
            raise bad_value("patternProperties", pointer, "an object", by_pattern)
        extra_keys: set[str] = set()
        if names is not None:
            # A finite key set (Dict[Literal[...], X], Dict[SomeEnum, X]): its keys become optional listed keys.
            for r in required:
                if r not in names:
                    raise unsatisfiable("propertyNames", pointer, f"required property {r!r} is not among the allowed property names")
            props = {k: v for k, v in props.items() if k in names}
            extra_keys = names - set(props)
            if not props and not required and not extra_keys:
                extra = False
        elif names_regex is not None and (props or required):
            # Listed keys must be allowed names too: an optional one that is not is left out.
            allowed = self._keys_matching(names_regex, sorted(set(props) | set(required)))
            for r in required:
                if r not in allowed:
                    raise unsatisfiable("propertyNames", pointer, f"required property {r!r} does not satisfy 'propertyNames'")
            props = {k: v for k, v in props.items() if k in allowed}
        if not props and not required and not extra_keys:
            return self._compile_map(extra, lo, hi, pointer, refs, depth, names_regex, by_pattern)
        required_set = set(required)
        entries: list[tuple[str, Any, str, bool]] = []  # key, schema, pointer, required
        for key in sorted(set(props) | required_set | extra_keys):
            matched = self._pattern_schemas(by_pattern, key, pointer, refs, depth) if by_pattern else []
            if key in props:
                sub, where = props[key], f"{pointer}/properties/{escape_token(key)}"
                if matched:  # a listed key also obeys every patternProperties schema its name matches
                    sub = {"allOf": [sub] + [m for m, _ in matched]}
            elif matched:  # additionalProperties applies only to keys no pattern matches
                sub, where = (matched[0][0] if len(matched) == 1 else {"allOf": [m for m, _ in matched]}), matched[0][1]
            else:
                sub, where = extra, f"{pointer}/additionalProperties"
            if sub is False or (isinstance(sub, dict) and self._deref(sub, refs) is False):
                if key in required_set:
                    raise unsatisfiable("required", pointer, f"required property {key!r} is forbidden by its schema (false)")
                continue
            entries.append((key, sub, where, key in required_set))
        n_required = sum(1 for e in entries if e[3])
        if hi is not None and hi < n_required:
            raise unsatisfiable("maxProperties", pointer, f"maxProperties={hi} is below the {n_required} required properties")
        if lo > len(entries):
            raise refusal("minProperties", pointer, f"minProperties={lo} needs more keys than the {len(entries)} listed in 'properties'")
        # Narrowing for the counts: promote the first optional keys to
        # required until minProperties holds; drop the last optional keys
        # until maxProperties holds.
        need = lo - n_required
        keep_optional = None if hi is None else hi - max(lo, n_required)
        shaped: list[tuple[str, Any, str, bool]] = []
        for key, sub, where, req in entries:
            if not req and need > 0:
                req, need = True, need - 1
            elif not req and keep_optional is not None:
                if keep_optional == 0:
                    continue
                keep_optional -= 1
            shaped.append((key, sub, where, req))
        items = []
        for key, sub, where, req in shaped:
            try:
                value = self.compile(sub, where, refs, depth + 1)
            except UnsupportedConstruct as exc:
                if req or not is_unsatisfiable(exc):
                    raise
                continue  # an optional property no value can fill is left out
            items.append((self.text_regex(json.dumps(key, ensure_ascii=False)) + self.colon + value, req))
        return self.check("\\{" + self._member_list(items, pointer) + "\\}", pointer)

    def _pattern_schemas(self, by_pattern: dict, key: str, pointer: str, refs: tuple[str, ...],
                         depth: int) -> list[tuple[Any, str]]:
        """The ``patternProperties`` schemas whose pattern the key ``key`` matches
        (``re.search`` semantics, on poot's own automaton: no backtracking)."""
        out = []
        for pattern, sub in by_pattern.items():
            where = f"{pointer}/patternProperties/{escape_token(pattern)}"
            if self._keys_matching(self._key_pattern(pattern, where, refs, depth), [key]):
                out.append((sub, where))
        return out

    def _key_pattern(self, pattern: Any, where: str, refs: tuple[str, ...], depth: int) -> str:
        """The JSON spellings (quotes included) of the keys a ``patternProperties`` pattern matches."""
        if not isinstance(pattern, str):
            raise bad_value("patternProperties", where, "patterns as keys", pattern)
        return self.compile({"type": "string", "pattern": pattern}, where, refs, depth + 1)

    def _keys_matching(self, key_regex: str, keys: list[str]) -> set[str]:
        """The keys whose JSON spelling ``key_regex`` matches."""
        return {k for k, ok in zip(keys, self._spellings_match(key_regex, keys)) if ok}

    def _spellings_match(self, regex: str, values: list[Any]) -> list[bool]:
        """Whether ``regex`` matches each value's compact canonical spelling (poot's own
        automaton: no backtracking)."""
        from poot_vllm.core.automata.compilers import regex_matches

        texts = [spell_escaped(json.dumps(v, ensure_ascii=False, sort_keys=True, separators=(",", ":")),
                               self.escaped).encode("utf-8", "surrogatepass") for v in values]
        return regex_matches(self.plain(regex), texts, self.limits)

    def _property_names(self, schema: dict, pointer: str, refs: tuple[str, ...],
                        depth: int) -> tuple[set[str] | None, str | None]:
        """What ``propertyNames`` allows: (a finite set of keys, None) for ``enum``/``const``
        (Dict[Literal[...], X]); (None, the JSON spellings of the allowed keys) for any other
        string schema (Dict[constr(max_length=5), X]); (None, None) if absent."""
        if "propertyNames" not in schema:
            return None, None
        pn = self._deref(schema["propertyNames"], refs)
        if pn is True or pn == {}:
            return None, None
        if pn is False:
            return set(), None
        if isinstance(pn, dict) and set(self._constraining(pn)) <= {"enum", "const", "type"} and (
                "enum" in pn or "const" in pn) and pn.get("type", "string") in ("string", ["string"]):
            values = pn["enum"] if isinstance(pn.get("enum"), list) else [pn.get("const")]
            if "const" in pn:
                values = [v for v in values if v == pn["const"]]
            return {v for v in values if isinstance(v, str)}, None
        # Keys are strings whatever else the schema says: compile it as a string schema.
        try:
            return None, self.compile({"allOf": [schema["propertyNames"], {"type": "string"}]},
                                      f"{pointer}/propertyNames", refs, depth + 1)
        except UnsupportedConstruct as exc:
            if is_unsatisfiable(exc):
                return set(), None  # no name is allowed: only the empty object
            raise

    def _member_list(self, items: list[tuple[str, bool]], pointer: str) -> str:
        """Comma-correct regex for the members in order, optional ones skippable (linear size).

        L_k (members 0..k, at least one present) is built from L_{k-1}:
        optional: (?:L_{k-1}(,m_k)?|m_k)    required: (?:L_{k-1},)?m_k
        Once a required member has been placed L_{k-1} is never empty, so
        these simplify to L_{k-1}(,m_k)? and L_{k-1},m_k.

        The optional form nests one group per member; to keep the group
        depth bounded, only the first ``FIRST_KEY_WINDOW`` optional members
        may *start* the object (narrowing: a later optional member appears
        only after an earlier member or a required one).
        """
        acc: str | None = None  # L_{k-1}
        seen_required = False
        opened = 0  # optional members that may start the object
        for item, req in items:
            if acc is None:
                acc = item
                opened = 0 if req else 1
            elif seen_required:
                acc = acc + (self.comma + item if req else _group(self.comma + item) + "?")
            elif req:
                acc = _group(acc + self.comma) + "?" + item
            elif opened < FIRST_KEY_WINDOW:
                acc = _group(f"{acc}(?:{self.comma}{item})?|{item}")
                opened += 1
            else:
                acc = acc + _group(self.comma + item) + "?"
            seen_required = seen_required or req
            self.check(acc, pointer)
        if acc is None:
            return ""
        return acc if seen_required else _group(acc) + "?"

    def _compile_map(self, extra: Any, lo: int, hi: int | None, pointer: str, refs: tuple[str, ...], depth: int,
                     names_regex: str | None = None, by_pattern: dict | None = None) -> str:
        """An object with no listed keys: free keys (never repeated) whose values follow
        ``patternProperties`` and ``additionalProperties``, and whose names satisfy
        ``propertyNames`` (``names_regex``)."""
        if by_pattern:
            kinds = self._pattern_kinds(by_pattern, extra, pointer, refs, depth)
        elif extra is False or hi == 0:
            kinds = []
        elif (extra is True or extra == {}) and lo == 0 and hi is None and names_regex is None:
            return self.check(self.free_object(self.free_value(pointer)), pointer)
        else:
            try:
                value = self.free_value(pointer) if extra is True or extra == {} else \
                    self.compile(extra, f"{pointer}/additionalProperties", refs, depth + 1)
                kinds = [("", value)]
            except UnsupportedConstruct as exc:
                if not is_unsatisfiable(exc):
                    raise
                kinds = []  # no value fits a free key
        if hi == 0:
            kinds = []
        if not kinds:
            if lo > 0:
                raise unsatisfiable("minProperties", pointer, "no property is allowed, so minProperties cannot hold")
            return "\\{\\}"
        if lo > 1:
            raise refusal("minProperties", pointer, "minProperties > 1 on free keys is not supported (poot emits at most one "
                                                    "key per first-character slot, see docs); list the keys in 'properties'")
        if names_regex is not None:  # every key is also an allowed name (an intersection)
            kinds = [(f"(?={names_regex})" + prefix, value) for prefix, value in kinds]
        return self.check("\\{" + self.free_members(kinds, lo, hi, pointer=pointer) + "\\}", pointer)

    def _pattern_kinds(self, by_pattern: dict, extra: Any, pointer: str, refs: tuple[str, ...],
                       depth: int) -> list[tuple[str, str]]:
        """Free keys under ``patternProperties``: (key lookaheads, value regex) per set of matched patterns.

        A key matching the patterns S (and no other) takes allOf(S's schemas);
        one matching none takes ``additionalProperties`` -- and none is emitted
        when that is absent or ``true`` (a narrowing that keeps Pydantic's
        ``Dict[constr(pattern=...), X]``, which rejects such keys, validating).
        "Matches no other pattern" is a negative lookahead on the pattern's
        spellings; the translation of a pattern is exact only on printable
        ASCII (``\\d``, ``\\w``, ``\\s`` and ``$`` are narrowed elsewhere), so
        keys that must miss a pattern are printable ASCII.
        """
        patterns = list(by_pattern.items())
        if len(patterns) > MAX_FREE_KEY_PATTERNS:
            raise refusal("patternProperties", pointer, f"{len(patterns)} patterns on free keys (at most "
                          f"{MAX_FREE_KEY_PATTERNS}: every set of matched patterns is its own key kind); "
                          "list the keys in 'properties'")
        regexes = [self._key_pattern(p, f"{pointer}/patternProperties/{escape_token(p)}", refs, depth) for p, _ in patterns]
        ascii_key = f'(?="{json_char_regex(((0x20, 0x7E),), self.escaped)}*")'
        kinds: list[tuple[str, str]] = []
        for mask in range(1 << len(patterns)):
            chosen = [i for i in range(len(patterns)) if mask >> i & 1]
            if not chosen and (extra is True or extra == {} or extra is False):
                continue
            if chosen:
                subs = [patterns[i][1] for i in chosen]
                where = f"{pointer}/patternProperties/{escape_token(patterns[chosen[0]][0])}"
                sub = subs[0] if len(subs) == 1 else {"allOf": subs}
            else:
                sub, where = extra, f"{pointer}/additionalProperties"
            try:
                value = self.compile(sub, where, refs, depth + 1) if sub is not True and sub != {} \
                    else self.free_value(where)
            except UnsupportedConstruct as exc:
                if not is_unsatisfiable(exc):
                    raise
                continue  # keys of this kind have no value: none is emitted
            missed = [regexes[i] for i in range(len(patterns)) if i not in chosen]
            prefix = "".join(f"(?={regexes[i]})" for i in chosen)
            if missed:
                prefix += ascii_key + "".join(f"(?!{r})" for r in missed)
            kinds.append((prefix, value))
        return kinds

    def free_members(self, value: "str | list[tuple[str, str]]", lo: int, hi: int | None,
                     groups: "int | None | str" = "auto", pointer: str = "") -> str:
        """Comma-separated free-key members (``lo`` <= 1 .. ``hi``) whose keys never repeat (see maps.py).

        ``value``: the value regex, or (key lookaheads, value regex) kinds,
        one of which each member takes.  ``groups``: the letter groups of the
        key slots; ``None``: at most one member (free-form objects: a slot per
        key would multiply their automaton, already the largest part of a
        ``{}`` schema).
        """
        kinds = [("", value)] if isinstance(value, str) else value
        # Slots multiply the values; a key's lookaheads are small automata of their own, so
        # only the values count toward the map's share.
        size = sum(len(v) for _, v in kinds)
        slots = maps.choose_slots(size, hi) if groups == "auto" else None if groups is None else (groups, True)

        def member(key: str) -> str:
            return _alternation([prefix + key + self.colon + v for prefix, v in kinds])

        if hi == 1 or slots is None:
            m = member(self.string)
            return m if lo else _group(m) + "?"
        members = [member(key) for key in self._slot_strings(*slots)]  # type: ignore[misc]
        self.note(pointer, "additionalProperties" if isinstance(value, str) else "patternProperties",
                  _alternation([v for _, v in kinds]), 2 * len(members))
        return maps.ordered_members(members, self.comma, lo >= 1)

    # arrays
    def _compile_array(self, schema: dict, pointer: str, refs: tuple[str, ...], depth: int) -> str:
        lo = self._count(schema, "minItems", pointer) or 0
        hi = self._count(schema, "maxItems", pointer)
        unique = schema.get("uniqueItems", False)
        if not isinstance(unique, bool):
            raise bad_value("uniqueItems", pointer, "a boolean", unique)
        items = schema.get("items", True)
        unique_tuple = False
        if unique and (hi is None or hi > 1):
            if "contains" in schema:
                raise refusal("uniqueItems", pointer, "uniqueItems with 'contains' is only supported with maxItems <= 1")
            if "prefixItems" not in schema and not isinstance(items, list):
                return self._compile_unique(items, f"{pointer}/items", lo, hi, pointer, refs, depth)
            unique_tuple = True  # checked below, once the positions are compiled
        prefix: list[Any] = []
        prefix_kw = "prefixItems"
        if "prefixItems" in schema:
            prefix = schema["prefixItems"]
            if not isinstance(prefix, list):
                raise bad_value("prefixItems", pointer, "an array of schemas", prefix)
            rest, rest_where = items, f"{pointer}/items"
        elif isinstance(items, list):  # draft-4..7 tuple form
            prefix, prefix_kw = items, "items"
            rest, rest_where = schema.get("additionalItems", True), f"{pointer}/additionalItems"
        else:
            rest, rest_where = items, f"{pointer}/items"
        if not isinstance(rest, (dict, bool)):
            raise bad_value("items", pointer, "a schema", rest)
        if "contains" in schema:  # (minContains/maxContains without contains constrain nothing)
            if prefix:
                raise refusal("contains", pointer, "'contains' together with a tuple ('prefixItems') is not supported")
            return self._compile_contains(schema, rest, rest_where, lo, hi, pointer, refs, depth)
        if rest is False:
            hi = len(prefix) if hi is None else min(hi, len(prefix))
        # Narrowing: the tuple part is always emitted in full (up to maxItems).
        n_prefix = len(prefix) if hi is None else min(len(prefix), hi)
        lo = max(lo, n_prefix)
        if hi is not None and lo > hi:
            raise unsatisfiable("minItems", pointer, f"minItems={lo} cannot hold with maxItems={hi} / the item schemas", exact=False)
        parts = [self.compile(prefix[i], f"{pointer}/{prefix_kw}/{i}", refs, depth + 1) for i in range(n_prefix)]
        more_lo = lo - n_prefix
        more_hi = None if hi is None else hi - n_prefix
        if unique_tuple:
            _distinct_positions([self.plain(part) for part in parts], pointer)
            if more_lo > 0:
                raise refusal("uniqueItems", pointer, "uniqueItems with a tuple is only supported when no item "
                                                      "follows the tuple ('minItems' <= the tuple's length)")
            more_hi = 0  # narrowing: no further item, so none can repeat one of the tuple's
        body = self.comma.join(parts)
        element = None
        if more_hi != 0:
            try:
                element = self.free_value(pointer) if rest is True or rest == {} else self.compile(rest, rest_where, refs, depth + 1)
            except UnsupportedConstruct as exc:
                if more_lo > 0 or not is_unsatisfiable(exc):
                    raise
                # no value fits a further item: the array ends after its tuple part
        if element is not None:
            if more_hi is not None and more_hi > 1:
                self.note(pointer, "maxItems", element, counted_copies(element, more_lo, more_hi))
            if parts:
                body += _repeat(self.comma + element, more_lo, more_hi)
            else:
                body = counted_list(element, more_lo, more_hi, self.comma)
        return self.check("\\[" + body + "\\]", pointer)

    def _slot_strings(self, letter_groups: int, with_empty: bool) -> list[str]:
        """The JSON strings of each first-character slot, in slot order (see maps.py)."""
        classes = maps.slot_classes(letter_groups, self.key_first, with_empty)
        escapes = json_char_regex(cs.union(NOT_RAW, escaped_set(self.escaped)), self.escaped)
        return [maps.key_regex(c, self.json_char, escapes if i == len(classes) - 1 else None)
                for i, c in enumerate(classes)]

    def _compile_unique(self, item: Any, item_where: str, lo: int, hi: int | None, pointer: str,
                        refs: tuple[str, ...], depth: int) -> str:
        """``uniqueItems: true``: items that can never be equal, narrowed exactly like free-key maps.

        Items from a finite set (``enum``, ``const``, ``boolean``): each value at most once, in
        sorted order.  Otherwise every item lies in the *slot* of its first character, slots in
        a fixed order, one item per slot (see maps.py): strings by their first character (the
        empty string, digits, letter groups, the rest), numbers by their sign or first digit
        (poot writes no exponent, no leading zero but ``0.``, never ``-0``: numbers that differ
        there differ in value), ``true``, ``false``, ``null``, one object, one array.  Items in
        different slots differ, so no two are equal.  ``minItems``/``maxItems``: a lookahead."""
        if item is False:
            element = None
        else:
            element = self.free_value(pointer) if item is True or item == {} else \
                self.compile(item, item_where, refs, depth + 1)
        members = self._unique_values(item, element, refs) if element is not None else []
        if members is None:
            members = self._unique_slots(item, element, refs)  # type: ignore[arg-type]
        if hi == 0 or not members:
            if lo > 0:
                raise unsatisfiable("minItems", pointer, f"minItems={lo} but no item can be emitted", exact=element is None)
            return "\\[\\]"
        if lo > len(members):
            raise unsatisfiable("uniqueItems", pointer, f"minItems={lo} needs more distinct items than the {len(members)} "
                                "poot can tell apart here (see docs: uniqueItems)", exact=False)
        body = maps.ordered_members(members, self.comma, lo >= 1)
        if lo > 1 or (hi is not None and hi < len(members)):
            body = f"(?={counted_list(element, lo, hi, self.comma)}\\])" + body  # type: ignore[arg-type]
        self.note(pointer, "uniqueItems", element, 2 * len(members))  # type: ignore[arg-type]
        return self.check("\\[" + body + "\\]", pointer)

    def _unique_values(self, item: Any, element: str, refs: tuple[str, ...]) -> list[str] | None:
        """The regexes of a finite item set's values poot emits (sorted, each once); None if not finite."""
        flat = self._deref(item, refs)
        if not isinstance(flat, dict):
            return None
        types = self._semantic_types(flat, refs)
        if "enum" in flat or "const" in flat:
            values = flat["enum"] if isinstance(flat.get("enum"), list) else [flat.get("const")]
        elif types <= {"boolean", "null"}:
            values = [v for t, v in (("boolean", False), ("boolean", True), ("null", None)) if t in types]
        else:
            return None
        distinct = sorted({value_key(v): v for v in values}.values(),
                          key=lambda v: json.dumps(v, ensure_ascii=False, sort_keys=True, separators=(",", ":")))
        return [self.value_regex(v, "") for v, ok in zip(distinct, self._spellings_match(element, distinct)) if ok]

    def _unique_slots(self, item: Any, element: str, refs: tuple[str, ...]) -> list[str]:
        """One member per first-character slot (lookahead + the item's regex), for the item's types."""
        types = self._semantic_types(item, refs)
        slots = maps.choose_slots(len(element), None)
        prefixes: list[str] = []
        if "string" in types:
            if slots is None:
                prefixes.append('(?=")')
            else:
                prefixes += [f"(?={key})" for key in self._slot_strings(*slots)]
        if types & {"integer", "number"}:
            prefixes += ["(?=-)", "(?=0)"] + ([f"(?={d})" for d in "123456789"] if slots is not None else ["(?=[1-9])"])
        prefixes += [f"(?={lit})" for t, lit in (("boolean", "t"), ("boolean", "f"), ("null", "n"),
                                                   ("object", "\\{"), ("array", "\\[")) if t in types]
        return [prefix + element for prefix in prefixes]

    def _compile_contains(self, schema: dict, item: Any, item_where: str, lo: int, hi: int | None, pointer: str,
                          refs: tuple[str, ...], depth: int) -> str:
        """``contains: C`` with ``minContains`` k .. ``maxContains`` m: every item is either
        ``items and C`` (Y, counted) or ``items and not C`` (N, see negation.py), so the number
        of matching items is exact: ``(N,)* Y (,N)* (,Y (,N)*){k-1,m-1}``; ``minItems``/``maxItems``
        hold as a lookahead over the whole list."""
        k = self._count(schema, "minContains", pointer)
        k = 1 if k is None else k
        m = _min_len(self._count(schema, "maxContains", pointer), hi)
        if m is not None and k > m:
            raise unsatisfiable("minContains", pointer, f"minContains={k} is above maxContains/maxItems={m}")

        def part(sub: Any, where: str) -> str | None:
            try:
                return self.compile(sub, where, refs, depth + 1)
            except UnsupportedConstruct as exc:
                if not is_unsatisfiable(exc):
                    raise
                return None  # no item of this kind

        contains = schema["contains"]
        yes = part({"allOf": [item, contains]}, f"{pointer}/contains") if m != 0 else None
        no = part({"allOf": [item, {"not": contains}]}, item_where)
        if yes is None and k > 0:
            raise unsatisfiable("contains", pointer, "no item satisfies both 'items' and 'contains'", exact=False)
        c = self.comma
        bodies = []
        if k == 0:
            bodies.append(_group(no + _repeat(c + no, 0, None)) + "?" if no is not None else "")
        if yes is not None:
            lead, tail = (_repeat(no + c, 0, None), _repeat(c + no, 0, None)) if no is not None else ("", "")
            upper = None if m is None else m - 1
            bodies.append(lead + yes + tail + _repeat(c + yes + tail, max(k - 1, 0), upper))
            if m is not None and m > 1:
                self.note(pointer, "maxContains", yes, counted_copies(yes, max(k - 1, 0), upper))
        body = _alternation(bodies) if len(bodies) > 1 else bodies[0]
        if lo > k or hi is not None:
            anything = _alternation([r for r in (yes, no) if r is not None])
            body = f"(?={counted_list(anything, lo, hi, c)}\\])" + body
        return self.check("\\[" + body + "\\]", pointer)

    # strings
    def _compile_string(self, schema: dict, pointer: str, refs: tuple[str, ...] = (), depth: int = 0) -> str:
        lo = self._count(schema, "minLength", pointer) or 0
        hi = self._count(schema, "maxLength", pointer)
        if hi is not None and lo > hi:
            raise unsatisfiable("minLength", pointer, f"minLength={lo} is above maxLength={hi}")
        fmt = schema.get("format")
        pattern = schema.get("pattern")
        if fmt is not None and not isinstance(fmt, str):
            raise bad_value("format", pointer, "a string", fmt)
        char = self.json_char
        if fmt in ANY_STRING_FORMATS:
            # Pydantic's names for types that take any string (SecretStr, bytes, Path).  bytes and
            # SecretBytes measure max_length in UTF-8 bytes, JSON Schema in characters: with a length,
            # ASCII characters only, where the two counts agree (a narrowing).
            if fmt in BYTE_COUNTED_FORMATS and (hi is not None or lo > 0):
                char = json_char_regex(((0x00, 0x7F),), self.escaped) or char
            fmt = None
        patterns = list(pattern) if isinstance(pattern, AllPatterns) else [] if pattern is None else [pattern]
        if not all(isinstance(p, str) for p in patterns):
            raise bad_value("pattern", pointer, "a string", pattern)
        main: str | None = None  # the content that spells the string; the other parts become lookaheads
        if fmt is not None:
            try:
                built = format_regex(fmt, self.escaped, hi)
            except ValueError as exc:  # maxLength too small for the bounded variant
                raise refusal("maxLength", pointer, f"format {fmt!r} with maxLength={hi}: {exc}") from None
            if built is None:
                raise refusal("format", pointer, f"format {fmt!r} is not supported (supported: "
                                                 f"{', '.join(sorted(FORMATS.keys() | ANY_STRING_FORMATS))})")
            main, cmin, cmax = built
            self.note(pointer, "format", main, 1)
            if fmt not in ESCAPE_DEPENDENT and any(c in main for c in self.escaped):
                raise refusal("format", pointer, f"format {fmt!r} cannot be used where {self.escaped!r} must be escaped")
        translated = [self._pattern(p, pointer) for p in patterns]
        embedded = self._embedded_json(schema, pointer, refs, depth)
        if embedded is not None:
            translated.append(embedded)
        if main is None and translated:
            last = translated.pop()
            if embedded is None and (lo > last.min_len or (hi is not None and (last.max_len is None or last.max_len > hi))):
                # The lengths folded into the pattern's one repetition where they can be
                # (a counted repetition), else a lookahead below (an automaton per character).
                folded = self._pattern(patterns[-1], pointer, (lo, hi))
                if folded.min_len >= lo and (hi is None or (folded.max_len is not None and folded.max_len <= hi)):
                    last = folded
                    if hi is not None:
                        self.note(pointer, "maxLength", char, 1)
            main, cmin, cmax = last.regex, last.min_len, last.max_len
            self.note(pointer, "pattern", main, 1)
        if main is None:
            content = _repeat(char, lo, hi)
            if hi is not None:
                self.note(pointer, "maxLength", char, counted_copies(char, lo, hi))
            elif lo > 1:
                self.note(pointer, "minLength", self.json_char, lo)
        else:
            # Every other pattern (a format's text has one spelling; several
            # patterns come from allOf) as a lookahead up to the closing
            # quote: an exact intersection.
            for t in translated:
                main = f'(?={t.regex}")' + main
                cmin, cmax = max(cmin, t.min_len), _min_len(cmax, t.max_len)
            content = self._with_lengths(main, lo, hi, cmin, cmax, pointer)
        return self._string_rule(self.check(f'"{content}"', pointer))

    def _string_rule(self, regex: str) -> str:
        """Rules mode with ``value_rules``: a string value's regex as one grammar rule (one
        per distinct regex), every use a call -- as every ``$ref`` target is then
        (:meth:`_compile_ref`).  A schema with many string fields (eighty optional
        ``attributeN: str``) holds a copy of the string per field in its DFA, each with a
        different continuation, and one that uses a definition in many places a copy per
        use: either passes the automaton budget; as calls, the rule model holds each once
        (what :func:`~poot_vllm.core.json_schema.compile_json_schema` falls back to last).
        Inline where a placeholder cannot stand for a rule (negations)."""
        if not self.value_rules or self.negating:
            return regex
        key = STRING_RULE + regex
        entry = self.rules.get(key)
        if entry is None:
            entry = self.rules[key] = [rule_placeholder(len(self.rules)), regex]
        return entry[0]

    def _embedded_json(self, schema: dict, pointer: str, refs: tuple[str, ...], depth: int) -> Any:
        """``contentMediaType: application/json`` with ``contentSchema`` (Pydantic's ``Json[T]``): the
        string holds JSON text valid for ``contentSchema``, as a pattern on the decoded string.

        JSON Schema makes both keywords annotations (any string passes), so this is a narrowing;
        it is what Pydantic checks.  Only where a value is written, never inside ``not``/``oneOf``
        differences, which read the schema's keywords and treat these two as annotations (exact
        there too).  With ``contentEncoding`` the text is encoded: left as an annotation."""
        media = schema.get("contentMediaType")
        if ("contentSchema" not in schema or "contentEncoding" in schema or not isinstance(media, str)
                or media.split(";")[0].strip().lower() != "application/json"):
            return None
        where = f"{pointer}/contentSchema"
        try:
            inner = self.compile(schema["contentSchema"], where, refs, depth + 1)
            # The inner text is the *decoded* string: translate it like a pattern (escaping '"', '\', controls).
            return self._pattern(f"^(?:{inner})$", where)
        except PootError:
            return None  # what poot cannot build stays an annotation, as JSON Schema reads it

    def _pattern(self, pattern: str, pointer: str, lengths: "tuple[int, int | None] | None" = None) -> Any:
        # Cached: 'not' and oneOf differences translate the same negated patterns once per piece.
        key = pattern if lengths is None else (pattern, lengths)
        if key in self.pattern_cache:
            return self.pattern_cache[key]
        try:
            out = translate_pattern(pattern, lambda n: self.check_size(n, pointer), self.escaped, lengths)
            self.pattern_cache[key] = out
            return out
        except PatternError as exc:
            if exc.unsupported:
                raise refusal("pattern", pointer, f"{exc} (pattern {pattern!r})") from None
            raise ConstraintSyntaxError(f"'pattern' at {pointer}/pattern is not a valid regex: {exc}") from None

    def _with_lengths(self, content: str, lo: int, hi: int | None, cmin: int, cmax: int | None, pointer: str) -> str:
        """``content`` (a pattern's or format's string content) that also has ``lo..hi`` characters.

        When the content's own lengths already satisfy the bounds, it is
        returned as is; otherwise a lookahead up to the closing quote counts
        the characters (automaton intersection, exact: the content's text and
        the counted JSON characters read the same raw text, and neither
        reads past the first raw ``"``).
        """
        if cmin >= lo and (hi is None or (cmax is not None and cmax <= hi)):
            return content
        if hi is not None:
            self.note(pointer, "maxLength", self.json_char, counted_copies(self.json_char, lo, hi))
        elif lo > 1:
            self.note(pointer, "minLength", self.json_char, lo)
        return f'(?={_repeat(self.json_char, lo, hi)}")' + content

    # numbers
    def _bound(self, schema: dict, keyword: str, pointer: str) -> float | int | None:
        value = schema.get(keyword)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise bad_value(keyword, pointer, "a finite number", value)
        return value

    def _exclusive(self, schema: dict, keyword: str, base: str, pointer: str) -> tuple[float | int | None, bool]:
        """(bound, exclusive) from minimum/exclusiveMinimum in either the draft-4 or the draft-6+ form."""
        value = schema.get(keyword)
        if isinstance(value, bool):
            if not self.draft4:
                raise refusal(keyword, pointer, 'the boolean form is draft-04 syntax: add "$schema": "http://json-schema.org/draft-04/schema#" or use a number')
            return (self._bound(schema, base, pointer) if value else None), value
        return self._bound(schema, keyword, pointer), True

    def _sides(self, schema: dict, pointer: str) -> tuple[list[tuple[Any, bool, str]], list[tuple[Any, bool, str]]]:
        """The lower and upper bounds as (value, exclusive, keyword the user wrote)."""
        lows: list[tuple[Any, bool, str]] = []
        highs: list[tuple[Any, bool, str]] = []
        for base, excl_kw, side in (("minimum", "exclusiveMinimum", lows), ("maximum", "exclusiveMaximum", highs)):
            e, excl = self._exclusive(schema, excl_kw, base, pointer)
            if isinstance(schema.get(excl_kw), bool):  # draft-04: the exclusive flag qualifies the base keyword
                if e is not None:
                    side.append((e, excl, base))
                elif (b := self._bound(schema, base, pointer)) is not None:
                    side.append((b, False, base))
                continue
            b = self._bound(schema, base, pointer)
            if b is not None:
                side.append((b, False, base))
            if e is not None:
                side.append((e, True, excl_kw))
        return lows, highs

    @staticmethod
    def _exact(value: Any) -> Fraction:
        """A bound's exact value (what Python compares a parsed integer with)."""
        return Fraction(value)

    @staticmethod
    def _decimal(value: Any) -> Fraction:
        """A bound as the user wrote it: a JSON float is read from its shortest repr."""
        return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)

    @staticmethod
    def _empty(kind: str, lo_kw: str | None, hi_kw: str | None, pointer: str, why: str = "", exact: bool = False) -> UnsupportedConstruct:
        kw = lo_kw or hi_kw or "type"
        other = f" and '{hi_kw}'" if lo_kw and hi_kw else ""
        return unsatisfiable(kw, pointer, f"no {kind} satisfies '{kw}'{other}{why}", exact=exact)

    def _integer_range(self, schema: dict, pointer: str, float_step: bool = False) -> tuple[int, int, str | None, str | None]:
        """Exact [lo, hi] of the integers poot emits, and the keywords that set them."""
        lows, highs = self._sides(schema, pointer)
        lo: int | None = None
        hi: int | None = None
        lo_kw = hi_kw = None
        for v, excl, kw in lows:
            x = self._exact(v)
            n = math.floor(x) + 1 if excl else -((-x.numerator) // x.denominator)
            if lo is None or n > lo:
                lo, lo_kw = n, kw
        for v, excl, kw in highs:
            x = self._exact(v)
            n = -((-x.numerator) // x.denominator) - 1 if excl else math.floor(x)
            if hi is None or n < hi:
                hi, hi_kw = n, kw
        if lo is not None and hi is not None and lo > hi:
            raise self._empty("integer", lo_kw, hi_kw, pointer, exact=True)
        # Magnitudes: an open side stops at INTEGER_DIGITS digits (or at the other bound's
        # length), never past MAX_INTEGER_DIGITS; a float multipleOf is checked by float
        # division, exact only below 2**53.
        if float_step:
            cap = 2**53 - 1
        else:
            digits = max([decimals.INTEGER_DIGITS] + [len(str(abs(b))) for b in (lo, hi) if b is not None])
            cap = 10 ** min(digits, decimals.MAX_INTEGER_DIGITS) - 1
        a = max(lo, -cap) if lo is not None else -cap
        b = min(hi, cap) if hi is not None else cap
        if a > b:
            limit = "2**53 (a float multipleOf is checked by float division)" if float_step else f"{decimals.MAX_INTEGER_DIGITS} digits"
            raise refusal(lo_kw if lo is not None and lo > 0 else (hi_kw or lo_kw or "type"), pointer,
                          f"poot emits integers of at most {limit}; this bound lies beyond that")
        return a, b, lo_kw, hi_kw

    def _multiple_of(self, schema: dict, pointer: str) -> Fraction | None:
        value = schema.get("multipleOf")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise bad_value("multipleOf", pointer, "a number greater than 0", value)
        if isinstance(value, float) and Fraction(repr(value)) != Fraction(value):
            raise refusal("multipleOf", pointer,
                          f"{value!r} is not exact in binary floating point, so validators disagree on its multiples "
                          f"(they compute 0.07 / 0.01 = 7.000000000000001); use an integer scaled by a power of ten, "
                          "or a step that is exact in binary (0.5, 0.25, 0.125, 2.5, ...)")
        return Fraction(value)

    @functools.cached_property
    def source_text(self) -> str:
        """The schema as text (what :func:`~poot_vllm.core.automata.residues.residue_markers` checks)."""
        return json.dumps(self.root, ensure_ascii=False)

    @functools.cached_property
    def residues(self) -> bool:
        """Whether multipleOf may be a residue lookahead (automata/residues.py): the schema's own
        text holds no marker character, so every marker in the regex is the compiler's."""
        return schema_allows_residues(self.source_text)

    def _multiples(self, lo: int, hi: int, c: int, scale: int, lo_kw: str | None, hi_kw: str | None, kind: str, pointer: str) -> str:
        try:
            # In rules mode (a recursive schema) a residue cannot be a grammar node: that schema
            # takes the unrolled DFA (json_schema.recursive raises NeedsUnrolling on the marker).
            regex = decimals.multiples_regex(lo, hi, c, scale, residues=self.residues)
        except ValueError:
            raise self._empty(kind, lo_kw, hi_kw, pointer, " and 'multipleOf'") from None
        if regex is None:
            why = (f"its digits {c} are neither a divisor of 10**{decimals.MAX_SUFFIX_DIGITS} times a factor of at "
                   f"most {MAX_RESIDUE} prime to 10, nor at most {MAX_RESIDUE}" if self.residues else
                   f"the schema holds characters U+{RESIDUE_BASE:X}..U+{RESIDUE_BASE + MAX_RESIDUE:X}, which poot "
                   "reserves for it")
            raise refusal("multipleOf", pointer,
                          f"multiples of {c}{f' * 10**-{scale}' if scale else ''} are not built: {why}; "
                          f"steps whose digits divide 10**{decimals.MAX_SUFFIX_DIGITS} (2, 4, 5, 8, 10, 20, 25, 50, "
                          f"..., 1000) or ranges ('minimum'/'maximum') with at most {decimals.MAX_ENUMERATED} "
                          "multiples always are")
        return self.check(self.note(pointer, "multipleOf", regex, 1), pointer)

    def _compile_integer(self, schema: dict, pointer: str) -> str:
        if isinstance(schema.get("multipleOf"), NotMultiple):
            return self._not_multiples(schema, *schema["multipleOf"], pointer)
        step = self._multiple_of(schema, pointer)
        if step is None and not any(k in schema for k in NUMBER_KW):
            return INTEGER
        lo, hi, lo_kw, hi_kw = self._integer_range(schema, pointer, float_step=isinstance(schema.get("multipleOf"), float))
        if step is None or step.numerator == 1:
            # Integer multiples of p/q (in lowest terms) are the multiples of p.
            return self.check(self.note(pointer, lo_kw or hi_kw or "type", integer_range_regex(lo, hi), 1), pointer)
        return self._multiples(lo, hi, step.numerator, 0, lo_kw, hi_kw, "integer", pointer)

    def _not_multiples(self, schema: dict, k: int, q: int, pointer: str) -> str:
        """The integers in range that are no multiple of ``k`` (a piece of ``not``,
        negation.py): the range behind a negated residue lookahead.

        A float step ``k/q``: validators compute ``x / step`` in floating point,
        whose rounding reads a non-multiple as a multiple once the quotient's
        spacing passes ``2/k``; below ``|x| < 2**53 / q`` it never does (the
        quotient stays below ``2**53 / k``), so the range stops there."""
        lo, hi, lo_kw, hi_kw = self._integer_range(schema, pointer, float_step=q > 0)
        if q > 0:
            cap = (2**53 - 1) // q
            lo, hi = max(lo, -cap), min(hi, cap)
            if lo > hi:
                raise refusal("not", pointer, f"with a float step {k}/{q}, integers poot can check are below "
                                              f"2**53/{q}; this range lies beyond that")
        if not self.residues or k > MAX_RESIDUE:
            why = (f"only steps up to {MAX_RESIDUE} are" if self.residues else
                   f"the schema holds characters U+{RESIDUE_BASE:X}..U+{RESIDUE_BASE + MAX_RESIDUE:X}, which poot "
                   "reserves for it")
            raise refusal("not", pointer, f"the integers that are no multiple of {k} are built by a residue "
                                          f"automaton, and {why}")
        regex = residue_lookahead(k, negated=True) + integer_range_regex(lo, hi)
        return self.check(self.note(pointer, lo_kw or hi_kw or "type", regex, 1), pointer)

    def _compile_number(self, schema: dict, pointer: str) -> str:
        step = self._multiple_of(schema, pointer)
        if step is None and not any(k in schema for k in NUMBER_KW):
            return NUMBER
        # Values lie on the 15-significant-digit grid (decimals.py); bounds are read
        # exactly as written and snapped inwards onto the grid.
        lows, highs = self._sides(schema, pointer)
        lo, hi = -decimals.GRID_MAX, decimals.GRID_MAX
        lo_kw = hi_kw = None
        for v, excl, kw in lows:
            g = (decimals.grid_above if excl else decimals.grid_ceil)(self._decimal(v))
            if g is None:
                raise refusal(kw, pointer, f"poot emits numbers with at most {decimals.SIG_DIGITS} significant digits "
                                           f"and no exponent (|x| < 1e{decimals.SIG_DIGITS}); use 'integer' for larger values")
            if lo_kw is None or g > lo:
                lo, lo_kw = g, kw
        for v, excl, kw in highs:
            g = (decimals.grid_below if excl else decimals.grid_floor)(self._decimal(v))
            if g is None:
                raise refusal(kw, pointer, f"poot emits numbers with at most {decimals.SIG_DIGITS} significant digits "
                                           f"and no exponent (|x| < 1e{decimals.SIG_DIGITS}); use 'integer' for larger values")
            if hi_kw is None or g < hi:
                hi, hi_kw = g, kw
        if lo > hi:
            raise self._empty("number", lo_kw, hi_kw, pointer, f" (among numbers of at most {decimals.SIG_DIGITS} significant digits)")
        if step is None:
            return self.check(self.note(pointer, lo_kw or hi_kw or "type", decimals.number_range_regex(lo, hi), 1), pointer)
        # Multiples of p/2**t are the grid values n * 10**-t with n a multiple of p * 5**t.
        t = step.denominator.bit_length() - 1
        if t > decimals.SIG_DIGITS:
            raise refusal("multipleOf", pointer, f"a step finer than 1e-{decimals.SIG_DIGITS} is not supported")
        scale = 10**t
        n_lo = -((-(lo * scale).numerator) // (lo * scale).denominator)
        n_hi = math.floor(hi * scale)
        cap = 10**decimals.SIG_DIGITS - 1  # n has at most 15 digits: on the grid
        n_lo, n_hi = max(n_lo, -cap), min(n_hi, cap)
        if n_lo > n_hi:
            raise self._empty("number", lo_kw, hi_kw, pointer, " and 'multipleOf'")
        return self._multiples(n_lo, n_hi, step.numerator * 5**t, t, lo_kw, hi_kw, "number", pointer)


#: A JSON value's first character -> a class of values no other class can equal: the string, number,
#: object and array kinds, and true, false, null each alone (poot never writes ``-0``).
_VALUE_CLASSES = {'"': "a string", "-": "a number", **{d: "a number" for d in "0123456789"}, "{": "an object",
                  "[": "an array", "t": "true", "f": "false", "n": "null"}


def _distinct_positions(parts: list[str], pointer: str) -> None:
    """``uniqueItems`` on a tuple: exact when no two positions can hold equal values, which poot
    knows when their values start with characters of different classes (``[string, integer]``,
    ``[true, null]``); refused otherwise, naming the two positions."""
    from poot_vllm.core.regex.parser import parse

    seen: dict[str, int] = {}
    for i, part in enumerate(parts):
        classes = {_VALUE_CLASSES.get(chr(c), "?") for lo, hi in _first_chars(parse(part)) for c in range(lo, min(hi, 0x7F) + 1)}
        for cls in classes:
            if cls == "?" or cls in seen:
                which = f"positions {seen[cls]} and {i}" if cls in seen else f"position {i}"
                raise refusal("uniqueItems", pointer, f"uniqueItems with a tuple: {which} may hold equal "
                                                      "values; poot serves it when each position holds values of its own "
                                                      "kind (string, number, object, array, true, false, null)")
            seen[cls] = i


def _first_chars(node: Any) -> cs.CodepointSet:
    """The characters a match of the regex tree ``node`` may start with."""
    from poot_vllm.core.automata.counters import nullable
    from poot_vllm.core.regex import ast

    out: cs.CodepointSet = ()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Chars):
            out = cs.union(out, n.ranges)
        elif isinstance(n, ast.Alt):
            stack.extend(n.items)
        elif isinstance(n, ast.Repeat):
            stack.append(n.item)
        elif isinstance(n, ast.Concat):
            for item in n.items:  # up to the first item that cannot match the empty string
                stack.append(item)
                if not nullable(item):
                    break
    return out


@functools.lru_cache(maxsize=256)
def expanded_positions(regex: str) -> int:
    """Character positions of ``regex`` as the automaton builder counts them: repetitions
    expanded, except the large ones it builds once with a counter (``automata/counters.py``)."""
    from poot_vllm.core.automata import counters
    from poot_vllm.core.regex.parser import parse

    try:
        return counters.count_positions(counters.plan(parse(regex))[0])
    except (PootError, RecursionError):
        return len(regex)


@functools.lru_cache(maxsize=256)
def _has_counted(regex: str) -> bool:
    from poot_vllm.core.automata import counters
    from poot_vllm.core.regex.parser import parse

    try:
        return counters.plan(parse(regex))[1]
    except (PootError, RecursionError):
        return False


def counted_copies(item: str, lo: int, hi: int | None) -> int:
    """Copies of ``item`` that ``item{lo,hi}`` costs the automaton builder: ``hi``,
    or ``lo`` with at most one more when the repetition gets a counter."""
    from poot_vllm.core.automata.counters import COUNTED_MIN, COUNTED_PREFIX_MAX

    if hi is None:
        return max(lo, 1)
    if hi >= COUNTED_MIN and lo <= COUNTED_PREFIX_MAX and hi - max(lo - 1, 0) >= COUNTED_MIN and not _has_counted(item):
        return max(lo - 1, 0) + 1
    return hi


def _parse_canonical(schema: dict | bool | str, limits: Limits) -> tuple[Any, str]:
    """The schema as Python data and its canonical text (sorted keys, compact), both size-checked.

    The canonical text is what ``max_schema_bytes`` bounds (so spacing and
    key order do not count: a pretty-printed schema is measured as sent
    compact); JSON text more than :data:`~.text_size.PARSE_FACTOR` times the
    bound is refused before it is parsed.  A refusal names where the bytes
    are (:func:`~.text_size.largest_text_parts`).
    """
    if isinstance(schema, str):
        size = len(schema.encode("utf-8", "surrogatepass"))
        if size > PARSE_FACTOR * limits.max_schema_bytes:  # not even parsed
            raise LimitExceeded("the JSON schema", "max_schema_bytes", limits.max_schema_bytes, "bytes",
                                f"got {size}, more than {PARSE_FACTOR} times the limit, so it was not parsed")

        def no_constants(name: str) -> Any:
            raise ValueError(f"{name} is not JSON")

        try:
            schema = json.loads(schema, parse_constant=no_constants)
        except (ValueError, RecursionError) as exc:
            raise ConstraintSyntaxError(f"the JSON schema is not valid JSON: {exc}") from None
    if not isinstance(schema, (dict, bool)):
        raise ConstraintSyntaxError(
            f"a JSON schema must be an object or a boolean (or its JSON text), not {type(schema).__name__}")
    try:
        text = json.dumps(schema, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ConstraintSyntaxError(f"the JSON schema is not JSON data: {exc}") from None
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.max_schema_bytes:
        where = largest_text_parts(schema)
        raise LimitExceeded("the JSON schema", "max_schema_bytes", limits.max_schema_bytes, "bytes",
                            f"got {size} without spaces" + (f"; {where}" if where else ""))
    return schema, text


def parse_schema(schema: dict | bool | str, limits: Limits) -> Any:
    """The schema as Python data; JSON text is size-checked before it is parsed."""
    return _parse_canonical(schema, limits)[0]


def canonical_schema_text(schema: dict | bool | str, limits: Limits) -> str:
    """The schema's canonical JSON text (sorted keys, compact), size-checked.

    What a constraint carries from the API server to the engine and what
    caches key on, so equal schemas written differently compile once.
    """
    return _parse_canonical(schema, limits)[1]


def schema_to_regex(schema: dict | bool | str, limits: Limits, escaped: str = "") -> str:
    """See :func:`poot_vllm.core.json_schema.schema_to_regex`."""
    return compile_schema(schema, limits, escaped)[0]


def compile_schema(schema: dict | bool | str, limits: Limits, escaped: str = "",
                   recursion: "int | None" = None, free_form: int = FREE_FORM_DEPTH) -> tuple[str, SchemaCompiler]:
    """The regex and the compiler that built it (its ``largest_parts`` explain a budget refusal).

    ``recursion``: how many levels a recursive ``$ref`` is unrolled to; by
    default the deepest of ``RECURSION_DEPTHS`` whose regex fits
    ``max_schema_regex_bytes`` (callers that build the automaton retry
    shallower depths themselves when it passes ``max_automaton_bytes``).
    """
    if recursion is not None:
        return _compile_schema(schema, limits, escaped, recursion, free_form)
    for i, levels in enumerate(RECURSION_DEPTHS):
        try:
            return _compile_schema(schema, limits, escaped, levels, free_form)
        except LimitExceeded as exc:
            if not getattr(exc, "recursion_cut", False) or i == len(RECURSION_DEPTHS) - 1:
                raise
    raise AssertionError("unreachable")


def _new_compiler(schema: dict | bool | str, limits: Limits, escaped: str, recursion: int,
                  rules: bool = False, free_form: int = FREE_FORM_DEPTH) -> SchemaCompiler:
    root = parse_schema(schema, limits)
    whitespace = WS
    if isinstance(root, dict) and WHITESPACE_KEY in root:
        try:
            whitespace = check_whitespace_pattern(root[WHITESPACE_KEY])
        except PootError as exc:
            raise type(exc)(f"whitespace_pattern {exc.message}") from None
    return SchemaCompiler(root, limits, escaped, whitespace, recursion, rules, free_form)


def compile_schema_rules(schema: dict | bool | str, limits: Limits, escaped: str = "",
                         free_form_rule: bool = False, value_rules: bool = False) -> tuple[str, SchemaCompiler]:
    """Rules mode (json_schema.recursive): the root's regex text, and the compiler whose
    ``rules`` hold each cyclic target's placeholder and regex text (and, with
    ``free_form_rule``, the free-form value's: ``FREE_FORM_RULE``).  Raises
    ``NeedsUnrolling`` where a placeholder cannot stand for its rule."""
    # recursion=2 only bounds merging a target into itself through allOf/$ref siblings
    # (_recursion_end raises NeedsUnrolling in rules mode); references become rules.
    compiler = _new_compiler(schema, limits, escaped, 2, rules=True)
    compiler.free_form_rule = free_form_rule
    compiler.value_rules = value_rules
    if "" in compiler.cyclic:  # "#" refers back to the root: the root is a rule too
        return compiler._compile_ref("", "", (), 0), compiler
    return compiler.compile(compiler.root, "", ()), compiler


def _compile_schema(schema: dict | bool | str, limits: Limits, escaped: str, recursion: int,
                    free_form: int = FREE_FORM_DEPTH) -> tuple[str, SchemaCompiler]:
    compiler = _new_compiler(schema, limits, escaped, recursion, free_form=free_form)
    try:
        # The root counts as entered once, like a $ref target, when "#" refers back to it.
        return compiler.compile(compiler.root, "", ("",) if "" in compiler.cyclic else ()), compiler
    except RecursionError:
        raise refusal("<nesting>", "", "the schema is nested too deeply") from None
    except LimitExceeded as exc:
        exc.recursion_cut = compiler.recursion_cut or compiler.cyclic  # type: ignore[attr-defined]
        exc.free_form_used = compiler.free_form_used  # type: ignore[attr-defined]
        raise
