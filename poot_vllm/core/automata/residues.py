"""Decimal residues: "this number is a multiple of k" as a lookahead automaton.

The multiples of k among decimal numbers are a regular language (k residues,
one digit at a time: ``r -> (10 r + d) mod k``), but its regex is large for
most k (no small regex spells the multiples of 7).  So the JSON Schema
compiler writes ``multipleOf`` as a *lookahead* whose body is one reserved
marker character (:func:`residue_lookahead`), and the automaton builder runs
the residue automaton there (:func:`residue_dfa`) -- the lookahead
construction intersects it with the range the rest of the regex spells.

The marker is a character of Unicode's Supplementary Private Use Area-A
(U+F0000 + k).  It means "multiple of k" only while :func:`residue_markers`
is active -- around the builds of schema automata, for schemas whose own text
holds no such character (:func:`schema_allows_residues`); everywhere else (a
user's ``guided_regex``) it is the plain character it is.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

import numpy as np

from poot_vllm.core.automata.dfa import DFA

#: Markers are U+F0000 + k (Supplementary Private Use Area-A).
RESIDUE_BASE = 0xF0000
#: The largest step written this way (its automaton has about k states per digit position).
MAX_RESIDUE = 4096

_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("poot_residue_markers", default=False)


def residue_lookahead(k: int, negated: bool = False) -> str:
    """Regex text asserting that the number starting here (``-``, digits, at
    most one ``.`` skipped) has digits that spell a multiple of ``k`` (with
    ``negated``: that they do not; ``not: {multipleOf: k}``)."""
    if not 2 <= k <= MAX_RESIDUE:
        raise ValueError(f"residue step {k} outside 2..{MAX_RESIDUE}")
    return f"(?{'!' if negated else '='}{chr(RESIDUE_BASE + k)})"


def schema_allows_residues(text: str) -> bool:
    """Whether a schema's text holds no marker character (so every marker in
    its regex is the compiler's own)."""
    return not any(RESIDUE_BASE <= ord(ch) <= RESIDUE_BASE + MAX_RESIDUE for ch in text)


@contextlib.contextmanager
def residue_markers(source: str) -> Iterator[None]:
    """Markers mean residues inside this block (the builds of schema automata),
    if ``source`` (the schema's or tool spec's text) holds none itself: then
    every marker in the regex is the compiler's, never a user's ``pattern``."""
    token = _ACTIVE.set(schema_allows_residues(source))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def marker_step(ranges: "tuple[tuple[int, int], ...]") -> "int | None":
    """The step k of a character class that is exactly one marker, else None."""
    if len(ranges) != 1 or ranges[0][0] != ranges[0][1]:
        return None
    k = ranges[0][0] - RESIDUE_BASE
    return k if 2 <= k <= MAX_RESIDUE else None


def residue_step(ranges: "tuple[tuple[int, int], ...]") -> "int | None":
    """The step k a lookahead body of one character class stands for, if it
    is a marker while :func:`residue_markers` is active; else None."""
    return marker_step(ranges) if _ACTIVE.get() else None


def residue_dfa(k: int) -> DFA:
    """``B.*`` for the lookahead of :func:`residue_lookahead`: B is an optional
    ``-``, then digits (a ``.`` among them skipped: a multiple of ``p / 10**t``
    spelled with ``t`` fraction digits is one of ``p`` in its digits) whose
    value is a multiple of ``k``, ended by the end of the text or by any other
    byte (after which everything is accepted: the assertion is decided).

    States: 0 the start, 1 after ``-``, 2 + r after digits of residue r, and
    2 + k accepting every continuation."""
    n = k + 3
    t = np.full((n, 256), -1, dtype=np.int32)
    digits = np.arange(ord("0"), ord("9") + 1)
    t[0, ord("-")] = 1
    t[0, digits] = 2 + np.arange(10) % k
    t[1, digits] = 2 + np.arange(10) % k
    done = k + 2
    for r in range(k):
        t[2 + r, digits] = 2 + (10 * r + np.arange(10)) % k
        t[2 + r, ord(".")] = 2 + r
    t[2, :] = np.where(t[2, :] >= 0, t[2, :], done)  # residue 0: any other byte decides it
    t[done, :] = done
    accepting = np.zeros(n, dtype=bool)
    accepting[2] = accepting[done] = True
    return DFA(t, accepting, 0)
