"""The byte-level DFA every regex-like constraint compiles to."""

from __future__ import annotations

from dataclasses import dataclass

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
    """

    transitions: np.ndarray  # int32 (n_states, 256); -1 = dead
    accepting: np.ndarray  # bool (n_states,)
    start: int

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

    @property
    def n_states(self) -> int:
        return int(self.transitions.shape[0])

    def step(self, state: int, data: bytes) -> int:
        """The state after reading ``data`` from ``state``; ``-1`` once dead."""
        table = self.transitions
        for byte in data:
            if state < 0:
                return DEAD
            state = int(table[state, byte])
        return state

    def matches(self, data: bytes) -> bool:
        """Whether ``data`` (a whole reply) is in the language."""
        state = self.step(self.start, data)
        return state >= 0 and bool(self.accepting[state])

    def __repr__(self) -> str:
        return f"DFA(n_states={self.n_states}, start={self.start})"
