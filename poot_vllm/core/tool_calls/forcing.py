"""The forced tool-call reply as a regular language, in the model's own format.

``tool_choice: "required"`` or a named tool is a regular language over the
codec's envelope (:mod:`.codecs`): ``prefix call (separator call)* suffix``
with each call ``call_head(name) <args> call_tail`` -- for ChatML/Hermes
``<tool_call>\\n{"name": "<name>", "arguments": <args>}\\n</tool_call>`` --,
where ``<args>`` is the tool's ``parameters`` schema compiled by poot's JSON
Schema compiler (an empty or missing schema gives exactly ``{}``) and the
name one of the allowed tools.  In the arguments, the codec's
``escaped_in_arguments`` characters (Hermes: ``<``) are only ever written as
``\\u00XX`` escapes (the decoded values are the same), so no marker can
appear inside them and the parser (which finds markers by text) always reads
the whole call.  When parallel calls are allowed the call is repeated with
the codec's separator: the DFA of one call is built once and looped
(:func:`repeat_with_separator`), never written twice into the regex; the
prefix and suffix are chained around it (:func:`wrap_literals`).

The request carries a small JSON payload (:func:`tool_call_spec`); the
engine rebuilds the automaton from it (:func:`compile_tool_call_constraint`).
poot generates the regex, so the user regex size limit does not apply;
``max_schema_regex_bytes`` bounds the regex of one call and
``max_automaton_bytes`` the whole build (one call, plus the loop).
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from poot_vllm.core.automata.build import RANGE_BYTES, STATE_BYTES, SUBSET_ITEM_BYTES, Budget, finalize, regex_tree_to_dfa
from poot_vllm.core.automata.compilers import regex_escape
from poot_vllm.core.automata.dfa import DFA
from poot_vllm.core.errors import ConstraintSyntaxError, LimitExceeded, PootError
from poot_vllm.core.limits import DEFAULT_LIMITS, Limits
from poot_vllm.core.automata.residues import residue_markers
from poot_vllm.core.regex.parser import parse
from poot_vllm.core.tool_calls.codecs import Codec, get_codec
from poot_vllm.core.json_schema import (FREE_FORM_DEPTH, FREE_FORM_DEPTHS, RECURSION_DEPTHS, canonical_schema_text,
                                        schema_to_regex)
from poot_vllm.core.json_schema.refs import cyclic_targets

if TYPE_CHECKING:
    from poot_vllm.core.grammar.gbnf import Grammar

SPEC_VERSION = 1
#: Keywords that describe a schema without constraining it.
_ANNOTATIONS = frozenset({"title", "description", "$schema", "$id", "$comment", "examples", "default"})


def is_empty_parameters(schema: Any) -> bool:
    """A tool without arguments: no schema, ``{}``, or an object schema with no properties and nothing else.

    These get exactly ``{}``: a valid value for each of them, and a reply
    that ends (a free-form object would let a model ramble until max_tokens).
    """
    if schema is None or schema == {}:
        return True
    if not isinstance(schema, dict):
        return False
    rest = {k: v for k, v in schema.items() if k not in _ANNOTATIONS}
    return rest.get("type", "object") == "object" and not rest.get("properties") and set(rest) <= {"type", "properties"}


def tool_call_spec(tools: list[tuple[str, Any]], *, parallel: bool, codec: str = "hermes",
                   limits: Limits = DEFAULT_LIMITS) -> str:
    """The canonical payload for ``Constraint(Kind.TOOL_CALL, spec)``.

    ``tools`` are the allowed (name, parameters schema) pairs.  Each schema is
    size-checked and canonicalised like a ``guided_json`` schema.
    """
    if not tools:
        raise PootError("no tool to call; give at least one tool in tools")
    entries = []
    for name, parameters in tools:
        if not isinstance(name, str) or not name:
            raise PootError("every tool needs a non-empty function name")
        try:
            schema = None if is_empty_parameters(parameters) else json.loads(canonical_schema_text(parameters, limits))
        except LimitExceeded as exc:  # name the tool whose schema is too large
            raise LimitExceeded(f"the parameters schema of tool {name!r}", exc.limit_name, exc.limit, exc.unit,
                                exc.detail) from None
        entries.append({"name": name, "parameters": schema})
    payload = {"v": SPEC_VERSION, "codec": codec, "parallel": bool(parallel), "tools": entries}
    return json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _parse_spec(spec: str) -> dict:
    try:
        payload = json.loads(spec)
    except (ValueError, RecursionError) as exc:
        raise ConstraintSyntaxError(f"the tool-call constraint is not valid JSON: {exc}") from None
    if not isinstance(payload, dict) or payload.get("v") != SPEC_VERSION or not payload.get("tools"):
        raise ConstraintSyntaxError("the tool-call constraint is not a poot tool-call payload")
    return payload


def arguments_regex(parameters: Any, limits: Limits, escaped: str = "", recursion: int | None = None,
                    free_form: int = FREE_FORM_DEPTH) -> str:
    """The regex of a tool's arguments (``escaped``: characters spelled only as ``\\u`` escapes in strings;
    ``recursion``: the levels a recursive ``$ref`` is unrolled to, see json_schema.RECURSION_DEPTHS;
    ``free_form``: the containers free-form values nest, see json_schema.FREE_FORM_DEPTHS)."""
    if parameters is None:
        return regex_escape("{}")
    return schema_to_regex(parameters, limits, escaped=escaped, recursion=recursion, free_form=free_form)


def _forcing_codec(payload: dict) -> Codec:
    codec = get_codec(payload.get("codec", "hermes"))
    if not codec.can_force:
        raise PootError(f"tool calls in the {codec.name} format cannot be forced by poot")
    return codec


def _checked_name(codec: Codec, name: str) -> str:
    for marker in codec.reserved:
        if marker in name:
            raise PootError(f"tool {name!r}: a tool name cannot contain {marker!r}, "
                            "which would end the call for the model's tool parser")
    return name


def call_regex(spec: str, limits: Limits = DEFAULT_LIMITS, recursion: int | None = None,
               free_form: int = FREE_FORM_DEPTH) -> str:
    """The poot regex of exactly one call to one of the payload's tools (``recursion``, ``free_form``: see
    arguments_regex)."""
    payload = _parse_spec(spec)
    codec = _forcing_codec(payload)
    # The bound is checked as each tool's part is built, so a flood of tools
    # stops at the first one that passes it instead of after compiling them all.
    alternatives = []
    total = 0
    for i, tool in enumerate(payload["tools"]):
        name = _checked_name(codec, tool["name"])
        try:
            args = arguments_regex(tool.get("parameters"), limits, codec.escaped_in_arguments, recursion, free_form)
        except PootError as exc:
            exc.message = f"tool {name!r}: {exc.message}"  # which tool's schema, for the 400
            raise
        alternatives.append(regex_escape(codec.call_head(name)) + args + regex_escape(codec.call_tail))
        total += len(alternatives[-1].encode("utf-8", "surrogatepass")) + 1
        if total > limits.max_schema_regex_bytes:
            raise LimitExceeded("the tool-call constraint built from the tools' schemas", "max_schema_regex_bytes",
                                limits.max_schema_regex_bytes, "bytes",
                                f"it passed the limit at tool {i + 1} of {len(payload['tools'])} "
                                f"({name!r}); offer fewer or smaller tools")
    return "(?:" + "|".join(alternatives) + ")"


def tool_call_regex(spec: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """The poot regex of every reply the payload allows (see the module docstring).

    With parallel calls this writes the call twice (``X(?:sep X)*``): it is
    the reference the tests compare the automaton with; the automaton itself
    is built from one copy (:func:`compile_tool_call_constraint`).
    """
    payload = _parse_spec(spec)
    codec = _forcing_codec(payload)
    call = call_regex(spec, limits)
    if payload.get("parallel"):
        call = call + "(?:" + regex_escape(codec.separator) + call + ")*"
    return regex_escape(codec.prefix) + call + regex_escape(codec.suffix)


def compile_tool_call_constraint(spec: str, limits: Limits = DEFAULT_LIMITS) -> "DFA | Grammar":
    """The DFA of ``Constraint(Kind.TOOL_CALL, spec)`` (called by ``constraints.compile_automaton``).

    One budget covers the whole build: the call's automaton, built once, and
    for parallel calls the loop back to its start after the separator.  With
    a recursive tool, a grammar instead (:func:`tool_call_grammar`).
    """
    payload = _parse_spec(spec)
    codec = _forcing_codec(payload)
    recursive = any(isinstance(t.get("parameters"), dict) and cyclic_targets(t["parameters"]) for t in payload["tools"])
    if recursive:
        # Recursive parameters: a grammar, exact at any depth (as for response_format) ...
        grammar = tool_call_grammar(spec, limits)
        if grammar is not None:
            return grammar
    # ... else unrolled to the deepest level whose automaton fits, and free-form
    # values nested as deep as fits (json_schema.FREE_FORM_DEPTHS), as for response_format.
    depths = RECURSION_DEPTHS if recursive else (None,)
    try:
        for j, free_form in enumerate(FREE_FORM_DEPTHS):
            try:
                return _build_call(spec, limits, codec, payload, depths, free_form)
            except LimitExceeded:
                if j == len(FREE_FORM_DEPTHS) - 1 or (call_regex(spec, limits, depths[-1], FREE_FORM_DEPTHS[j + 1])
                                                      == call_regex(spec, limits, depths[-1], free_form)):
                    raise  # the last depth, or no free-form value in the tools (a shallower one changes nothing)
        raise AssertionError("unreachable")
    except LimitExceeded as exc:
        # Free-form values copied into every place that holds one can pass the budget even
        # 1 container deep: as for response_format, a grammar with the free-form value as one
        # rule per tool (bounded by schema_grammar's own rule; None past it or without any).
        grammar = tool_call_grammar(spec, limits, free_form_rule=True)
        if grammar is None:  # ... and where many string fields or uses of a definition pass it, those as rules
            grammar = tool_call_grammar(spec, limits, free_form_rule=True, value_rules=True)
        if grammar is not None:
            return grammar
        explained = largest_tool_parts(spec, limits)
        if not explained or getattr(exc, "what", None) is None:
            raise
        detail = f"{exc.detail}; {explained}" if getattr(exc, "detail", "") else explained
        raise LimitExceeded(exc.what, exc.limit_name, exc.limit, exc.unit, detail) from None


def _build_call(spec: str, limits: Limits, codec: Codec, payload: dict, depths: tuple, free_form: int) -> DFA:
    """The call's DFA at the deepest of ``depths`` that fits (one budget per try)."""
    for i, levels in enumerate(depths):
        budget = Budget(limits.max_automaton_bytes)
        try:
            with residue_markers(json.dumps(payload, ensure_ascii=False)):  # multipleOf residues in the arguments
                dfa = regex_tree_to_dfa(parse(call_regex(spec, limits, levels, free_form)), budget)
            if payload.get("parallel"):
                dfa = repeat_with_separator(dfa, codec.separator.encode("utf-8"), budget)
            if codec.prefix or codec.suffix:
                dfa = wrap_literals(dfa, codec.prefix.encode("utf-8"), codec.suffix.encode("utf-8"), budget)
            return dfa
        except LimitExceeded:
            if i == len(depths) - 1:
                raise
    raise AssertionError("unreachable")


def tool_call_grammar(spec: str, limits: Limits = DEFAULT_LIMITS, free_form_rule: bool = False,
                      value_rules: bool = False) -> "Grammar | None":
    """The forced reply as a grammar, for tools whose parameters are recursive
    (a ``TreeNode`` argument): ``root ::= prefix call (separator call)* suffix``,
    ``call ::= head_1 args_1 tail | ...``; a recursive tool's arguments are its
    schema's grammar (``json_schema.recursive``, rules prefixed per tool), a
    plain tool's its regex as a node.  The codec's escapes hold in both.  None
    where a tool's schema takes the unrolled DFA (see ``schema_grammar``): the
    caller then unrolls every tool, as before.

    With ``free_form_rule`` (the call's DFA passed the budget), a tool with
    free-form values takes the grammar too, the free-form value one rule; the
    tools share ``schema_grammar``'s bound (each gets its share of
    ``max_automaton_bytes``).  None where no tool has free-form values or one
    passes its share.  With ``value_rules`` too, each tool's string values and
    ``$ref`` targets are rules as well (json_schema.compiler ``_string_rule``)."""
    from poot_vllm.core.grammar.gbnf import Alternation, Grammar, Literal, Repeat, Rule, RuleRef, Sequence
    from poot_vllm.core.grammar.rule_automata import rule_automata
    from poot_vllm.core.json_schema.placeholders import NeedsUnrolling
    from poot_vllm.core.json_schema.recursive import regex_node, renamed, schema_grammar

    payload = _parse_spec(spec)
    codec = _forcing_codec(payload)
    rules: list[Rule] = []
    calls = []
    share = dataclasses.replace(limits, max_automaton_bytes=limits.max_automaton_bytes // len(payload["tools"]))
    for i, tool in enumerate(payload["tools"]):
        name, parameters = _checked_name(codec, tool["name"]), tool.get("parameters")
        try:
            grammar = None
            if free_form_rule and isinstance(parameters, dict) and not cyclic_targets(parameters):
                grammar = schema_grammar(parameters, share, codec.escaped_in_arguments, free_form_rule=True,
                                         value_rules=value_rules)
            if grammar is not None:
                prefix = f"t{i}-"
                rules += renamed(grammar, prefix)
                args = RuleRef(prefix + grammar.root)
            elif isinstance(parameters, dict) and cyclic_targets(parameters):
                grammar = schema_grammar(parameters, limits, codec.escaped_in_arguments)
                if grammar is None:
                    return None
                prefix = f"t{i}-"
                rules += renamed(grammar, prefix)
                args = RuleRef(prefix + grammar.root)
            else:
                args = regex_node(arguments_regex(parameters, limits, codec.escaped_in_arguments), limits)
        except NeedsUnrolling:
            return None
        except PootError as exc:
            exc.message = f"tool {name!r}: {exc.message}"  # which tool's schema, for the 400
            raise
        calls.append(Sequence((Literal(codec.call_head(name)), args, Literal(codec.call_tail))))
    if free_form_rule and not rules:
        return None  # no tool has free-form values: the DFA path's 400 stands
    call = calls[0] if len(calls) == 1 else Alternation(tuple(calls))
    rules.append(Rule("call", call))
    items = [Literal(codec.prefix), RuleRef("call")]
    if payload.get("parallel"):
        items.append(Repeat(Sequence((Literal(codec.separator), RuleRef("call"))), 0, None))
    items.append(Literal(codec.suffix))
    grammar = Grammar((Rule("root", Sequence(tuple(items))), *rules), "root")
    return grammar if rule_automata(grammar) is not None else None


def largest_tool_parts(spec: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """Which tool makes a forced call's automaton large, and which parts of its
    parameters' schema (JSON pointer, keyword, share), for a bound's 400."""
    from poot_vllm.core.json_schema import largest_parts
    from poot_vllm.core.json_schema.compiler import expanded_positions

    try:
        tools = _parse_spec(spec)["tools"]
        sizes = [(expanded_positions(arguments_regex(t.get("parameters"), limits)), t) for t in tools]
    except PootError:
        return ""
    total = sum(size for size, _ in sizes)
    if not total:
        return ""
    size, tool = max(sizes, key=lambda st: st[0])
    parts = largest_parts(tool["parameters"], limits) if tool.get("parameters") is not None else ""
    share = f"tool {tool['name']!r} makes {100 * size // total}% of the call"
    return f"{share}; in its parameters, {parts}" if parts else share


def wrap_literals(dfa: DFA, prefix: bytes, suffix: bytes, budget: Budget) -> DFA:
    """The minimal DFA of ``prefix L suffix`` from the DFA of ``L``, in place of a second build.

    The prefix is a chain of new states into the start; the accepting states
    get an edge on the suffix's first byte into a chain that ends in the one
    accepting state.  That keeps the automaton deterministic only when no
    accepting state already reads that byte (true for every codec: a call
    ends with its closing brace and then reads at most the separator);
    otherwise :class:`ValueError`, a bug in the codec, not in the request.
    The new states and edges are charged to ``budget``.
    """
    table = np.asarray(dfa.transitions)
    accepting = np.asarray(dfa.accepting)
    n = dfa.n_states
    if suffix and (table[accepting, suffix[0]] >= 0).any():
        raise ValueError(f"the suffix {suffix!r} clashes with the automaton's accepting states")
    budget.charge((STATE_BYTES + RANGE_BYTES) * (len(prefix) + len(suffix))
                  + RANGE_BYTES * int(accepting.sum()), "wrapping the tool calls in their envelope")
    # New states: prefix chain n..n+p-1 (its last edge enters the old start),
    # then suffix chain n+p..n+p+s-1 (the first is entered from the accepting
    # states; the last is the new accepting state).
    p, s = len(prefix), len(suffix)
    extra = np.full((p + s, 256), -1, dtype=np.int32)
    for i, byte in enumerate(prefix):
        extra[i, byte] = n + i + 1 if i + 1 < p else dfa.start
    wrapped = np.vstack([table, extra]).astype(np.int32)
    final = np.concatenate([accepting, np.zeros(p + s, dtype=bool)])
    if s:
        wrapped[np.nonzero(accepting)[0], suffix[0]] = n + p
        for i in range(1, s):
            wrapped[n + p + i - 1, suffix[i]] = n + p + i
        final[:n] = False
        final[n + p + s - 1] = True
    start = n if p else dfa.start
    return finalize(wrapped, final, start, np.arange(256, dtype=np.int32), **_counter_tables(dfa, p + s))


def _counter_tables(dfa: DFA, extra: int) -> dict:
    """A counted DFA's actions and limits with ``extra`` new states (no action, no
    counter): the envelope and the separator chain never touch a counter."""
    if dfa.actions is None:
        return {}
    return {"actions": np.vstack([dfa.actions, np.zeros((extra, 256), dtype=np.int8)]),
            "limits": np.concatenate([dfa.counter_limit, np.zeros(extra, dtype=np.int32)])}


def repeat_with_separator(dfa: DFA, separator: bytes, budget: Budget) -> DFA:
    """The minimal DFA of ``L (separator L)*`` from the DFA of ``L``, without a second copy of ``L``.

    Each accepting state gets an edge on the separator (through a chain of
    ``len(separator) - 1`` new states) back to the start.  When no accepting
    state already reads the separator's first byte (the usual case: a tool
    call ends with its end marker) those edges keep the automaton
    deterministic and it is built directly; otherwise the looped automaton
    is determinized by a subset construction.  Either way the new states and
    edges are charged to ``budget`` (the build of ``L`` already was).
    """
    if not separator:
        raise ValueError("the separator must not be empty")
    table = np.asarray(dfa.transitions)
    accepting = np.asarray(dfa.accepting)
    n, k, first = dfa.n_states, len(separator), separator[0]
    stage = "looping the tool call for parallel calls"
    back = n if k > 1 else dfa.start  # where an accepting state goes on the separator's first byte
    if not (table[accepting, first] >= 0).any():
        budget.charge((STATE_BYTES + RANGE_BYTES) * (k - 1) + RANGE_BYTES * int(accepting.sum()), stage)
        chain = np.full((k - 1, 256), -1, dtype=np.int32)
        for i in range(k - 1):
            chain[i, separator[i + 1]] = n + i + 1 if i + 1 < k - 1 else dfa.start
        looped = np.vstack([table, chain]).astype(np.int32)
        looped[np.nonzero(accepting)[0], first] = back
        final = np.concatenate([accepting, np.zeros(k - 1, dtype=bool)])
        return finalize(looped, final, dfa.start, np.arange(256, dtype=np.int32), **_counter_tables(dfa, k - 1))
    if dfa.actions is not None:
        raise ValueError(f"the separator {separator!r} clashes with a counted automaton's accepting states")
    return _determinize_loop(table, accepting, dfa.start, separator, budget, stage)


def _determinize_loop(table: np.ndarray, accepting: np.ndarray, start: int, separator: bytes,
                      budget: Budget, stage: str) -> DFA:
    """Subset construction for :func:`repeat_with_separator` when the loop's edges clash with the DFA's.

    NFA states: the DFA's states ``0..n-1`` and the separator chain
    ``n..n+k-2``; the extra edges are the accepting states' separator edges.
    """
    n, k = table.shape[0], len(separator)

    def extra(q: int) -> tuple[int, int] | None:
        if q < n:
            return (separator[0], n if k > 1 else start) if accepting[q] else None
        i = q - n + 1  # separator bytes read so far
        return separator[i], (n + i if i + 1 < k else start)

    rows_in: list[list[int]] = table.tolist()
    ids: dict[frozenset[int], int] = {frozenset([start]): 0}
    subsets: list[frozenset[int]] = [frozenset([start])]
    budget.charge(STATE_BYTES + SUBSET_ITEM_BYTES, stage)
    rows: list[list[int]] = []
    final: list[bool] = []
    sid = 0
    while sid < len(subsets):
        members = subsets[sid]
        final.append(any(q < n and accepting[q] for q in members))
        targets: list[set[int]] = [set() for _ in range(256)]
        for q in members:
            if q < n:
                for b, t in enumerate(rows_in[q]):
                    if t >= 0:
                        targets[b].add(t)
            edge = extra(q)
            if edge is not None:
                targets[edge[0]].add(edge[1])
        row = [-1] * 256
        for b, ts in enumerate(targets):
            if ts:
                key = frozenset(ts)
                t = ids.get(key)
                if t is None:
                    t = ids[key] = len(subsets)
                    subsets.append(key)
                    budget.charge(STATE_BYTES + SUBSET_ITEM_BYTES * len(key), stage)
                row[b] = t
        budget.charge(RANGE_BYTES * sum(1 for b in range(256) if row[b] >= 0 and (b == 0 or row[b - 1] != row[b])), stage)
        rows.append(row)
        sid += 1
    return finalize(np.asarray(rows, dtype=np.int32), np.asarray(final, dtype=bool), 0,
                    np.arange(256, dtype=np.int32))
