"""Public compilers: constraint text -> :class:`~poot_vllm.core.automata.dfa.DFA`.

Each compiler checks the raw input against its size limit first, then builds
within ``limits.max_automaton_bytes`` (see :mod:`poot_vllm.core.automata.build`).
Every refusal is a :class:`~poot_vllm.core.errors.PootError`.  Results are not
cached here: callers cache compiled DFAs (they are immutable and shareable).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from poot_vllm.core.automata.build import (
    RANGE_BYTES,
    STATE_BYTES,
    Budget,
    byte_classes,
    finalize,
    regex_tree_matches,
    regex_tree_to_dfa,
)
from poot_vllm.core.automata.dfa import DFA
from poot_vllm.core.errors import LimitExceeded, PootError
from poot_vllm.core.limits import DEFAULT_LIMITS, Limits
from poot_vllm.core.regex.parser import parse

__all__ = ["compile_regex", "compile_choice", "regex_escape", "regex_to_dfa", "regex_matches", "regex_excerpt"]


def _utf8_size(text: str) -> int:
    # surrogatepass: a lone surrogate must be measured, not crash the size check
    return len(text.encode("utf-8", "surrogatepass"))


def compile_regex(pattern: str, limits: Limits = DEFAULT_LIMITS) -> DFA:
    """The DFA of the byte strings that are UTF-8 texts ``re.fullmatch``-ed by ``pattern``."""
    if not isinstance(pattern, str):
        raise PootError(f"the regex must be a string, not {type(pattern).__name__}")
    size = _utf8_size(pattern)
    if size > limits.max_regex_bytes:
        raise LimitExceeded(f"the regex ({size} bytes)", "max_regex_bytes", limits.max_regex_bytes, "bytes")
    try:
        return regex_to_dfa(pattern, limits)
    except LimitExceeded as exc:
        if exc.limit_name != "max_automaton_bytes":
            raise
        # The build's own message names only the stage it stopped in; the user
        # needs to know *which* regex (a request may carry several, e.g. tools)
        # and what in it to change.
        raise LimitExceeded(
            f"the automaton of the regex {regex_excerpt(pattern)}", exc.limit_name, exc.limit, exc.unit,
            (exc.detail + "; " if exc.detail else "")
            + "large counts {m,n}, nested counts, or counts after an unbounded part such as .* or (a|b)* "
            "multiply the automaton's states: use smaller counts or a more specific pattern",
        ) from None


#: How much of a regex a refusal quotes (the rest is elided with "...").
EXCERPT_CHARS = 60


def regex_excerpt(pattern: str, limit: int = EXCERPT_CHARS) -> str:
    """``pattern`` quoted for an error message: its first ``limit`` characters,
    then ``...`` if it is longer (a 4 KiB regex must not flood the 400's message)."""
    if len(pattern) <= limit:
        return repr(pattern)
    return repr(pattern[:limit]) + f"... ({len(pattern)} characters)"


def regex_to_dfa(pattern: str, limits: Limits = DEFAULT_LIMITS) -> DFA:
    """Like :func:`compile_regex` without the ``max_regex_bytes`` check.

    For regexes poot generates itself (e.g. from a JSON schema), whose size
    the caller bounds with its own limit (``max_schema_regex_bytes``).
    """
    return regex_tree_to_dfa(parse(pattern), Budget(limits.max_automaton_bytes))


def regex_matches(pattern: str, texts: Sequence[bytes], limits: Limits = DEFAULT_LIMITS) -> list[bool]:
    """Whether each byte string is a whole match of a poot regex.

    Linear in each text, and it never builds the whole DFA (only the states
    on each text's path), so it works where the full DFA would pass
    ``max_automaton_bytes``.  The one way poot matches user values against a
    regex: Python's backtracking ``re`` is exponential on patterns like
    ``(a+)+$``.
    """
    return regex_tree_matches(parse(pattern), list(texts), Budget(limits.max_automaton_bytes))


_META = frozenset("\\.^$*+?{}[]|()")


def regex_escape(text: str) -> str:
    """A poot regex matching exactly ``text`` (for use outside character classes).

    Metacharacters get a backslash and control characters become ``\\xHH``
    escapes; everything else, including non-ASCII, stays as it is.  The
    result means the same to Python's ``re``.
    """
    out = []
    for ch in text:
        if ch in _META:
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def compile_choice(choices: Sequence[str], limits: Limits = DEFAULT_LIMITS) -> DFA:
    """The DFA matching exactly one of ``choices`` (literal text, UTF-8 encoded).

    The options are built into a trie (charged to ``max_automaton_bytes`` like
    DFA states: 16 bytes per node plus 8 per outgoing edge), minimized by
    merging nodes with equal suffix languages.
    """
    if isinstance(choices, (str, bytes)) or not isinstance(choices, Sequence):
        raise PootError(f"the choices must be a list of strings, not {type(choices).__name__}")
    if not choices:
        raise PootError("the choice list is empty; give at least one option")
    if len(choices) > limits.max_choices:
        raise LimitExceeded(f"the choice list ({len(choices)} options)", "max_choices", limits.max_choices, "options")
    encoded: list[bytes] = []
    total = 0
    for i, choice in enumerate(choices):
        if not isinstance(choice, str):
            raise PootError(f"choice {i} must be a string, not {type(choice).__name__}")
        try:
            data = choice.encode("utf-8")
        except UnicodeEncodeError:
            raise PootError(f"choice {i} is not valid Unicode text (it contains a lone surrogate)") from None
        total += len(data)
        if total > limits.max_choice_bytes:
            raise LimitExceeded(
                "the choice list's total size", "max_choice_bytes", limits.max_choice_bytes, "bytes (UTF-8)"
            )
        encoded.append(data)
    return _trie_dfa(encoded, Budget(limits.max_automaton_bytes))


def _trie_dfa(words: list[bytes], budget: Budget) -> DFA:
    children: list[dict[int, int]] = [{}]
    final = [False]
    budget.charge(STATE_BYTES, "building the choice trie")
    for word in words:
        node = 0
        for byte in word:
            nxt = children[node].get(byte)
            if nxt is None:
                nxt = len(children)
                children[node][byte] = nxt
                children.append({})
                final.append(False)
                budget.charge(STATE_BYTES + RANGE_BYTES, "building the choice trie")
            node = nxt
        final[node] = True

    # Merge nodes with equal suffix languages, children before parents
    # (the trie is acyclic, so one bottom-up pass gives the minimal DFA).
    canonical = [0] * len(children)
    register: dict[tuple, int] = {}
    order = _postorder(children)
    for node in order:
        key = (final[node], tuple((b, canonical[c]) for b, c in sorted(children[node].items())))
        canonical[node] = register.setdefault(key, len(register))

    n = len(register)
    used = sorted({b for kids in children for b in kids})
    boundaries = set(used) | {b + 1 for b in used}
    byte_to_class, _ = byte_classes(boundaries)
    n_classes = int(byte_to_class[-1]) + 1
    table = np.full((n, n_classes), -1, dtype=np.int32)
    accepting = np.zeros(n, dtype=bool)
    for node in order:
        s = canonical[node]
        accepting[s] = final[node]
        for b, c in children[node].items():
            table[s, byte_to_class[b]] = canonical[c]
    return finalize(table, accepting, canonical[0], byte_to_class, minimal=True)


def _postorder(children: list[dict[int, int]]) -> list[int]:
    out: list[int] = []
    stack = [(0, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            out.append(node)
            continue
        stack.append((node, True))
        for c in children[node].values():
            stack.append((c, False))
    return out
