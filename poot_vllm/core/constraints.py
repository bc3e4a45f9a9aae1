"""One constraint, whatever request field it came from, and its compilation.

A :class:`Constraint` is what poot enforces: a kind and its canonical text.
:func:`check` is the API-server validation (sizes, parsing, and the budgeted
automaton build, so every refusal is a 400 before the engine is asked);
:func:`compile_automaton` is the engine-side half that the backend turns into
token masks.  Both share an in-process cache, so validating and compiling the
same constraint in one process builds it once.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from poot_vllm.core.cache import ByteCache
from poot_vllm.core.errors import LimitExceeded, PootError
from poot_vllm.core.limits import DEFAULT_LIMITS, Limits


class Kind(str, enum.Enum):
    CHOICE = "choice"
    REGEX = "regex"
    GRAMMAR = "grammar"
    JSON = "json"
    JSON_OBJECT = "json_object"
    #: poot's own tool-call envelope (a regex built by poot, see tool_calls.py)
    TOOL_CALL = "tool_call"


@dataclass(frozen=True)
class Constraint:
    kind: Kind
    spec: str  # regex text, JSON list of choices, GBNF or Lark text, schema JSON text, "" for json_object

    @property
    def nbytes(self) -> int:
        """What a cache key holding this constraint costs (its text, as ``cache.approx_nbytes`` counts)."""
        return 56 + 49 + len(self.spec) + 64


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def choice_constraint(choices: Any) -> Constraint:
    if not isinstance(choices, list) or not choices:
        raise PootError("must be a non-empty list of strings, e.g. [\"yes\", \"no\"]")
    bad = [i for i, c in enumerate(choices) if not isinstance(c, str)]
    if bad:
        raise PootError(f"every option must be a string; item {bad[0]} is {type(choices[bad[0]]).__name__}")
    return Constraint(Kind.CHOICE, json.dumps(choices, ensure_ascii=False))


def regex_constraint(value: Any, limits: Limits) -> Constraint:
    if not isinstance(value, str):
        raise PootError(f"must be a string (a regular expression), not {type(value).__name__}")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limits.max_regex_bytes:
        raise LimitExceeded("the regex", "max_regex_bytes", limits.max_regex_bytes, "bytes", f"it is {size} bytes")
    return Constraint(Kind.REGEX, value)


def grammar_constraint(value: Any, limits: Limits) -> Constraint:
    if not isinstance(value, str) or not value.strip():
        raise PootError("must be a non-empty string holding a grammar: GBNF with a 'root ::= ...' rule "
                        "or Lark with a 'start: ...' rule")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limits.max_grammar_bytes:
        raise LimitExceeded("the grammar", "max_grammar_bytes", limits.max_grammar_bytes, "bytes", f"it is {size} bytes")
    return Constraint(Kind.GRAMMAR, value)


def schema_constraint(schema: Any, limits: Limits = DEFAULT_LIMITS) -> Constraint:
    """A JSON Schema (text, dict or bool) as a constraint on its canonical text (size-checked first)."""
    from poot_vllm.core.json_schema import canonical_schema_text

    return Constraint(Kind.JSON, canonical_schema_text(schema, limits))


def _sizeof(value: Any) -> int:
    """What an automaton costs the cache: a DFA's tables, a parsed grammar's estimate."""
    nbytes = getattr(value, "nbytes", None)
    if nbytes is not None:
        return int(nbytes)
    transitions = getattr(value, "transitions", None)
    if transitions is not None:
        return int(transitions.nbytes) + int(getattr(value, "accepting").nbytes) + 256
    return 4096


#: Vocabulary-independent automata, in the API server (validation) and the
#: engine (compilation).  Its own small budget, not ``POOT_MASK_CACHE_BYTES``:
#: the API server compiles nothing against a vocabulary and must stay small.
_automata: ByteCache[Any] = ByteCache("automata", 64 * 1024 * 1024, _sizeof)


def compile_automaton(constraint: Constraint, limits: Limits = DEFAULT_LIMITS, *, publish: bool = False) -> Any:
    """The vocabulary-independent automaton: a ``DFA``, or a parsed grammar
    (a grammar without recursion is a ``DFA`` too: :mod:`.grammar.regular`).

    Cached per (constraint, limits), single-flight: validating and compiling
    the same constraint in one process, or the n choices of a request, build
    it once.  Across processes, a DFA the API server built (``publish=True``,
    its validation) is taken by the engine instead of built again
    (:mod:`poot_vllm.core.handoff`).  Raises :class:`PootError` for anything
    poot refuses (not cached: the next request retries).
    """
    from poot_vllm.core import handoff

    def build() -> Any:
        taken = handoff.take(constraint, limits)
        return taken if taken is not None else _build(constraint, limits)

    automaton = _automata.get_or_build((constraint, limits), build)
    if publish:
        handoff.publish(constraint, limits, automaton)
    return automaton


def _build(constraint: Constraint, limits: Limits) -> Any:
    from poot_vllm.core.automata import compilers as compile_mod

    kind, spec = constraint.kind, constraint.spec
    if kind is Kind.REGEX:
        return compile_mod.compile_regex(spec, limits)
    if kind is Kind.CHOICE:
        return compile_mod.compile_choice(json.loads(spec), limits)
    if kind is Kind.JSON:
        from poot_vllm.core.json_schema import compile_json_schema

        return compile_json_schema(spec, limits)
    if kind is Kind.TOOL_CALL:
        from poot_vllm.core.tool_calls import compile_tool_call_constraint

        return compile_tool_call_constraint(spec, limits)
    if kind is Kind.GRAMMAR:
        # GBNF or Lark, told apart by one documented rule (grammar.lark.grammar_syntax)
        from poot_vllm.core.grammar.lark import parse_grammar
        from poot_vllm.core.grammar.regular import regular_dfa

        grammar = parse_grammar(spec, limits)
        # Without recursion a grammar is regular: a DFA (budget-aware masks,
        # exact admission); the rest, and any too large, stay pushdown.
        dfa = regular_dfa(grammar, limits)
        return grammar if dfa is None else dfa
    if kind is Kind.JSON_OBJECT:
        from poot_vllm.core.grammar import json_object_grammar

        return json_object_grammar()
    raise PootError(f"unknown constraint kind {kind!r}")


def check_mask_work(automaton: Any, vocab_size: int, limits: Limits = DEFAULT_LIMITS,
                    constraint: "Constraint | None" = None) -> None:
    """Refuse a DFA whose token masks would cost more than ``limits.max_mask_work``
    to compute for a ``vocab_size`` vocabulary (an estimate; see
    :func:`poot_vllm.core.masks.estimate_mask_work`).  Parsed grammars: no-op; a
    grammar's DFA is never refused (the engine runs it on the pushdown matcher).
    Given the ``constraint`` of a JSON schema, the refusal names its largest parts."""
    if getattr(automaton, "transitions", None) is None:
        return
    from poot_vllm.core.masks import estimate_mask_work

    work = estimate_mask_work(automaton, vocab_size)
    if work <= limits.max_mask_work:
        return
    if constraint is not None and constraint.kind is Kind.GRAMMAR:
        return  # a regular grammar's DFA: the engine runs it on the pushdown matcher instead (backend._compile)
    n = int(automaton.transitions.shape[0])
    advice = "fewer or shorter free-text parts (string properties, '.*', long patterns) cost less"
    if constraint is not None and constraint.kind is Kind.JSON:
        from poot_vllm.core.json_schema import largest_parts

        advice = largest_parts(constraint.spec, limits) or advice
    elif constraint is not None and constraint.kind is Kind.TOOL_CALL:
        from poot_vllm.core.tool_calls.forcing import largest_tool_parts

        advice = largest_tool_parts(constraint.spec, limits) or advice
    raise LimitExceeded("computing the token masks of this constraint", "max_mask_work",
                        limits.max_mask_work, "trie-node visits",
                        f"estimated {work} for {n} automaton states over {vocab_size} tokens; {advice}")


def check(constraint: Constraint, limits: Limits = DEFAULT_LIMITS) -> None:
    """Validate a constraint completely (what the API server runs before the engine)."""
    compile_automaton(constraint, limits)
