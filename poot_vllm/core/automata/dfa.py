"""The byte-level DFA every regex-like constraint compiles to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

DEAD = -1


@dataclass(frozen=True, eq=False)
class DFA:
    """A deterministic automaton over bytes that matches whole replies.

    ``transitions[s, b]`` is the state after reading byte ``b`` in state ``s``
    (``-1``: no continuation can be accepted).  Compilers return DFAs that
    are minimal, have at least one state, and whose every state can still
    reach an accepting state.  The arrays are read-only, so one compiled DFA
    can be shared by any number of requests and threads.

    A DFA with counted regions (:mod:`~poot_vllm.core.automata.counters`) also
    has ``actions[s, b]`` (``ACT_NONE``/``ACT_INC``/``ACT_SET1``) and
    ``counter_limit[s]``; a configuration is then (state, counter), and
    :meth:`run` / :meth:`matches` honour the counter.  Without the counter
    (``step``, the tables alone) it over-approximates the language.
    """

    transitions: np.ndarray  # int32 (n_states, 256); -1 = dead
    accepting: np.ndarray  # bool (n_states,)
    start: int
    actions: Optional[np.ndarray] = None  # int8 (n_states, 256), or None: no counter
    counter_limit: Optional[np.ndarray] = None  # int32 (n_states,): the live region's hi, 0 if none

    def __post_init__(self) -> None:
        transitions = np.ascontiguousarray(self.transitions, dtype=np.int32)
        accepting = np.ascontiguousarray(self.accepting, dtype=np.bool_)
        if transitions.ndim != 2 or transitions.shape[1] != 256 or accepting.shape != (transitions.shape[0],):
            raise ValueError("DFA needs transitions of shape (n, 256) and accepting of shape (n,)")
        if not 0 <= self.start < transitions.shape[0]:
            raise ValueError("DFA start state out of range")
        transitions.flags.writeable = False
        accepting.flags.writeable = False
        object.__setattr__(self, "transitions", transitions)
        object.__setattr__(self, "accepting", accepting)
        if self.actions is not None:
            actions = np.ascontiguousarray(self.actions, dtype=np.int8)
            limit = np.ascontiguousarray(self.counter_limit, dtype=np.int32)
            if actions.shape != transitions.shape or limit.shape != accepting.shape:
                raise ValueError("a counted DFA needs actions shaped like transitions and one limit per state")
            actions.flags.writeable = False
            limit.flags.writeable = False
            object.__setattr__(self, "actions", actions)
            object.__setattr__(self, "counter_limit", limit)

    @property
    def counted(self) -> bool:
        """Whether the DFA carries a counter (its tables alone over-approximate)."""
        return self.actions is not None

    @property
    def n_states(self) -> int:
        return int(self.transitions.shape[0])

    def step(self, state: int, data: bytes) -> int:
        """The state after reading ``data`` from ``state``; ``-1`` once dead
        (the counter, if any, is not checked: see :meth:`run`)."""
        table = self.transitions
        for byte in data:
            if state < 0:
                return DEAD
            state = int(table[state, byte])
        return state

    def run(self, data: bytes, state: int | None = None, counter: int = 0) -> tuple[int, int]:
        """The (state, counter) after reading ``data`` from ``(state, counter)``
        (default: the start), honouring counter checks; state ``-1`` once dead."""
        from poot_vllm.core.automata.counters import ACT_INC, ACT_SET1

        table = self.transitions
        s = self.start if state is None else state
        if self.actions is None:
            return self.step(s, data), 0
        acts, limit = self.actions, self.counter_limit
        c = counter
        for byte in data:
            if s < 0:
                return DEAD, 0
            action = int(acts[s, byte])
            if action == ACT_INC:
                if c >= limit[s]:
                    return DEAD, 0
                c += 1
            elif action == ACT_SET1:
                c = 1
            s = int(table[s, byte])
            if s >= 0 and limit[s] == 0:
                c = 0
        return s, c

    def matches(self, data: bytes) -> bool:
        """Whether ``data`` (a whole reply) is in the language."""
        state, _ = self.run(data)
        return state >= 0 and bool(self.accepting[state])

    def __repr__(self) -> str:
        return f"DFA(n_states={self.n_states}, start={self.start})"
