"""JSON Schema -> poot regex, exactly (refusing what cannot be enforced).

See docs/json-schema.md for the supported subset, the refusals and every
departure from JSON Schema (all of them narrowings: poot may emit fewer of
the valid documents, never an invalid one).
"""

from __future__ import annotations

from poot_vllm.core.automata.compilers import regex_to_dfa
from poot_vllm.core.automata.residues import residue_markers
from poot_vllm.core.automata.dfa import DFA
from poot_vllm.core.json_schema.compiler import (FREE_FORM_DEPTH, FREE_FORM_DEPTHS, MAX_SCHEMA_DEPTH, RECURSION_DEPTHS,
                                                canonical_schema_text, parse_schema)
from poot_vllm.core.json_schema.compiler import compile_schema
from poot_vllm.core.errors import LimitExceeded
from poot_vllm.core.json_schema.recursive import schema_grammar
from poot_vllm.core.json_schema.refs import cyclic_targets
from poot_vllm.core.grammar.gbnf import Grammar
from poot_vllm.core.limits import DEFAULT_LIMITS, Limits


def schema_to_regex(schema: dict | bool | str, limits: Limits = DEFAULT_LIMITS, *, escaped: str = "",
                    recursion: "int | None" = None, free_form: "int | None" = None) -> str:
    """The regex (poot syntax) whose matches are JSON texts valid for ``schema``.

    ``schema`` is a parsed schema or its JSON text (text over
    ``limits.max_schema_bytes`` raises ``LimitExceeded`` before parsing;
    non-JSON text raises ``ConstraintSyntaxError``).  Keywords poot cannot
    enforce exactly raise ``UnsupportedConstruct`` naming the keyword and its
    JSON pointer; a regex longer than ``limits.max_schema_regex_bytes`` raises
    ``LimitExceeded`` while it is being built.

    ``escaped``: printable ASCII characters that are never written raw in
    strings, keys, ``enum``/``const`` values and ``pattern`` strings, only as
    ``\\u00XX`` escapes (the decoded values are the same); tool-call
    forcing passes ``"<"`` so no markup tag can appear in the arguments.

    ``recursion``: the levels a recursive ``$ref`` is unrolled to (default:
    the deepest of ``RECURSION_DEPTHS`` and ``FREE_FORM_DEPTHS`` whose
    automaton fits its budgets, the regex :func:`compile_json_schema`
    enforces).  ``free_form``: the containers a free-form value may nest
    (default ``FREE_FORM_DEPTH``; :func:`served_regex` fits it, as
    :func:`compile_json_schema` does, for a non-recursive schema).
    """
    if recursion is None and free_form is None and cyclic_targets(parse_schema(schema, limits)):
        return _fit_recursion(schema, limits, escaped)[0]
    return compile_schema(schema, limits, escaped, recursion,
                          FREE_FORM_DEPTH if free_form is None else free_form)[0]


def served_regex(schema: "dict | bool | str", limits: Limits = DEFAULT_LIMITS) -> str:
    """The regex of the DFA :func:`compile_json_schema` serves for a schema it
    does not serve as a grammar: recursion and free-form depth fitted to the
    budgets (builds the automaton to know; raises what a request would get)."""
    return _fit_recursion(schema, limits)[0]


def compile_json_schema(schema: "dict | bool | str", limits: Limits = DEFAULT_LIMITS) -> "DFA | Grammar":
    """The automaton of the JSON texts poot emits for a JSON Schema (see docs/json-schema.md).

    A recursive schema (a ``$ref`` target that reaches itself) is a grammar,
    each cyclic target one rule, exact at any depth (json_schema.recursive);
    where that cannot be written, and for every other schema, a DFA; where the
    DFA passes ``max_automaton_bytes`` because of its free-form values, a
    grammar with the free-form value as one rule (within that path's own
    bound; docs/json-schema.md "Free-form values as a rule").  The
    generated regex is bounded by ``max_schema_regex_bytes`` while it is
    built, so the user-regex limit ``max_regex_bytes`` does not apply to it.
    An automaton over ``max_automaton_bytes`` is refused naming the schema
    parts (JSON pointer and keyword) that contribute most of it.
    """
    grammar = schema_grammar(schema, limits)
    if grammar is not None:
        return grammar
    try:
        return _fit_recursion(schema, limits)[1]
    except LimitExceeded:
        # Free-form values copied into every place that holds one (each copy a different
        # continuation) can pass the automaton budget even 1 container deep: as a grammar
        # the free-form value is one rule, called from each place (and exact at any depth).
        grammar = schema_grammar(schema, limits, free_form_rule=True)
        if grammar is not None:
            return grammar
        # Many string fields (each string copied with its own continuation): each string
        # value one rule too (docs/json-schema.md "Values as rules").
        grammar = schema_grammar(schema, limits, free_form_rule=True, value_rules=True)
        if grammar is not None:
            return grammar
        raise


def _fit_recursion(schema: "dict | bool | str", limits: Limits, escaped: str = "") -> tuple[str, DFA]:
    """The regex and DFA of a schema, a recursive one unrolled to the deepest of
    ``RECURSION_DEPTHS``, and free-form values nested to the deepest of
    ``FREE_FORM_DEPTHS``, whose regex and automaton fit their budgets (each
    try is bounded by them; free-form depth is given up last).  A refusal
    names the schema parts that make it large."""
    for j, free_form in enumerate(FREE_FORM_DEPTHS):
        last_free_form = j == len(FREE_FORM_DEPTHS) - 1
        for i, levels in enumerate(RECURSION_DEPTHS):
            last = i == len(RECURSION_DEPTHS) - 1
            try:
                regex, compiler = compile_schema(schema, limits, escaped, recursion=levels, free_form=free_form)
            except LimitExceeded as exc:
                if getattr(exc, "recursion_cut", False) and not last:
                    continue
                if getattr(exc, "free_form_used", False) and not last_free_form:
                    break
                raise
            try:
                with residue_markers(compiler.source_text):  # multipleOf residues (the compiler's own markers)
                    return regex, regex_to_dfa(regex, limits)
            except LimitExceeded as exc:
                if compiler.recursion_cut and not last:
                    continue
                if compiler.free_form_used and not last_free_form:
                    break
                # Name the schema parts that make the automaton large (pointer, keyword, share).
                parts = compiler.largest_parts()
                if not parts or getattr(exc, "what", None) is None:
                    raise
                detail = f"{exc.detail}; {parts}" if getattr(exc, "detail", "") else parts
                raise LimitExceeded(exc.what, exc.limit_name, exc.limit, exc.unit, detail) from None
    raise AssertionError("unreachable")


def largest_parts(schema: "dict | bool | str", limits: Limits = DEFAULT_LIMITS) -> str:
    """Which parts of a schema make its automaton large (JSON pointer, keyword,
    share), for a refusal of a compiled schema (e.g. its mask work)."""
    return compile_schema(schema, limits)[1].largest_parts()


__all__ = ["schema_to_regex", "served_regex", "compile_json_schema", "RECURSION_DEPTHS", "largest_parts", "canonical_schema_text", "parse_schema",
           "FREE_FORM_DEPTH", "FREE_FORM_DEPTHS", "MAX_SCHEMA_DEPTH"]
