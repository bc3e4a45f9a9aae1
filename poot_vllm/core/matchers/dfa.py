"""Per-request matcher over a compiled DFA: the decode-time hot path.

A :class:`DFAMatcher` holds only a stack of DFA states; everything heavy (the
per-state mask rows, token distances, budget tables) lives in the shared,
read-only :class:`~poot_vllm.core.masks.DFAMaskIndex`.  ``fill_bitmask`` is a
row copy; near the end of a token budget, a row copy plus the bits of a few
precomputed token groups (``DFAMaskIndex.restricted_mask``), never a trie walk
unless the constraint's budget tables passed their memory bound.

Accept / validate / rollback / termination follow vLLM's xgrammar backend and
are implemented once for every matcher in :class:`~poot_vllm.core.matchers.base.TokenMatcher`;
this module says only how a token moves the DFA.  A token is accepted in state
``s`` exactly when its bit is set in ``s``'s mask row, so what the matcher
accepts and what the mask allows never disagree.  The state stack keeps every
state of the reply (replies are bounded by ``max_tokens``), so any number of
accepted tokens can be rolled back.

No torch here: the adapter hands ``fill_bitmask`` a numpy view of the row.
"""

from __future__ import annotations

import numpy as np

from poot_vllm.core.lazy_masks import PendingMasks
from poot_vllm.core.masks import DFAMaskIndex
from poot_vllm.core.matchers.base import TokenMatcher


class DFAMatcher(TokenMatcher):
    """The state of one request constrained by a DFA (not thread-safe; one per request)."""

    def __init__(self, index: DFAMaskIndex) -> None:
        self._index = index
        self._trans = index.transitions
        self._rows = index.rows
        self._row_of_state = index.row_of_state
        self._accepting = index.accepting
        self._token_bytes = index.vocab.token_bytes
        self._stop_ids = index.vocab.stop_ids
        self._size = index.trie.size
        self._start = int(index.dfa.start)
        self._budget = None
        self.reset()

    # ----------------------------------------------------------------- state

    def _restart(self) -> None:
        self._history: list[int] = [self._start]

    @property
    def state(self) -> int:
        """The current DFA state."""
        return self._history[-1]

    # ------------------------------------------------------------- advancing

    def _advance(self, token: int) -> bool:
        """Take ``token`` iff its bit is set in the current row (so accepting
        agrees with the mask); a stop token does not move the state."""
        state = self._history[-1]
        if not 0 <= token < self._size:
            return False
        # ndarray.item: a Python int without building numpy scalars (hot path).
        word = self._rows.item(self._row_of_state.item(state), token >> 5)
        if not (word >> (token & 31)) & 1:
            return False
        self._take(state, token)
        return True

    def _take(self, state: int, token: int) -> None:
        """Move from ``state`` over an allowed ``token``'s bytes (a stop token stays)."""
        if token not in self._stop_ids:
            item = self._trans.item
            for b in self._token_bytes[token]:
                state = item(state, b)
        self._history.append(state)

    def _retreat(self, n: int) -> None:
        del self._history[-n:]

    def _budget_near(self) -> bool:
        return self._budget - self._accepted < self._index.plain_row_budget[self._history[-1]]

    # ---------------------------------------------------------------- masks

    def fill_bitmask(self, row: np.ndarray) -> None:
        """Write the allowed tokens of the current state into ``row`` (int32 words)."""
        if self._terminated:  # vLLM does not ask then; a finished reply may only stop
            row[...] = self._index.stop_row
            return
        state = self._history[-1]
        if self._budget is not None:
            remaining = self._budget - self._accepted
            if remaining < self._index.plain_row_budget[state]:
                # Too few tokens left for some allowed token: keep only those
                # that can still finish in time.  If even the shortest
                # completion does not fit, follow the shortest completions
                # rather than leave the mask empty.
                budget = max(remaining, int(self._index.min_tokens_to_accept[state]))
                self._index.fill_restricted(state, budget, row.view(np.uint32))
                return
        row[...] = self._rows[self._row_of_state[state]]


class LazyDFAMatcher(DFAMatcher):
    """:class:`DFAMatcher` over a constraint whose full index is still being
    built (:mod:`poot_vllm.core.lazy_masks`): each state's row is one trie walk,
    shared; the first call after the build has finished switches this matcher
    to the full index (same states, so nothing accepted is lost).  The masks
    are the full index's: a budget too tight for the plain row waits for it."""

    def __init__(self, pending: PendingMasks) -> None:
        self._pending: PendingMasks | None = pending
        self._trans = pending.transitions
        self._accepting = pending.accepting
        self._token_bytes = pending.vocab.token_bytes
        self._stop_ids = pending.vocab.stop_ids
        self._size = pending.trie.size
        self._start = pending.start
        self._budget = None
        self.reset()
        self._adopt()

    def _adopt(self) -> bool:
        """Switch to the full index if it is built (True once switched)."""
        pending = self._pending
        if pending is None:
            return True
        index = pending.index
        if index is None:
            return False
        self._index, self._rows, self._row_of_state = index, index.rows, index.row_of_state
        self._pending = None
        return True

    def _tight(self) -> bool:
        """Whether the budget may restrict this position (the plain row is not proven enough)."""
        return self._budget is not None and self._budget - self._accepted <= self._pending.bound

    def _wait(self) -> bool:
        """Wait for the full index (True: switched to it; False: its build failed)."""
        self._pending.wait()
        return self._adopt()

    def set_token_budget(self, max_new_tokens: int | None) -> None:
        super().set_token_budget(max_new_tokens)
        if not self._adopt() and self._tight():
            self._wait()  # at compile time (vLLM's compile thread), not in the scheduler

    def _advance(self, token: int) -> bool:
        if self._adopt():
            return super()._advance(token)
        state = self._history[-1]
        if not 0 <= token < self._size or not (self._pending.row(state).item(token >> 5) >> (token & 31)) & 1:
            return False
        self._take(state, token)
        return True

    def _budget_near(self) -> bool:
        if self._adopt():
            return super()._budget_near()
        return self._tight()

    def _counter_now(self) -> int:
        """The counter the pending rows are read at (a counted DFA's; 0 otherwise)."""
        return 0

    def _fill_adopted(self, row: np.ndarray) -> None:
        DFAMatcher.fill_bitmask(self, row)

    def fill_bitmask(self, row: np.ndarray) -> None:
        if self._adopt() or (self._tight() and self._wait()):
            self._fill_adopted(row)
            return
        pending = self._pending
        if self._terminated:
            row[...] = pending.stop_row
            return
        state = self._history[-1]
        if self._tight():  # the full build failed: byte distances (lazy_masks)
            budget = max(self._budget - self._accepted, int(pending.byte_dist[state]))
            pending.fill_restricted(state, budget, row.view(np.uint32), self._counter_now())
            return
        row[...] = pending.row_at(state, self._counter_now())


class _CounterMoves:
    """The counter half of a counted DFA's matcher (:mod:`poot_vllm.core.automata.counters`):
    the stack holds (state, counter) pairs; a token is taken iff its bit is set
    in the row of both (``_row_at``)."""

    def _init_counter(self, dfa) -> None:
        self._actions = dfa.actions
        self._limit = dfa.counter_limit

    def _restart(self) -> None:
        super()._restart()
        self._counts: list[int] = [0]

    @property
    def counter(self) -> int:
        """The current counter (0 outside counted regions)."""
        return self._counts[-1]

    def _advance(self, token: int) -> bool:
        state = self._history[-1]
        c = self._counts[-1]
        if not 0 <= token < self._size:
            return False
        word = int(self._row_at(state, c).item(token >> 5))
        if not (word >> (token & 31)) & 1:
            return False
        if token not in self._stop_ids:
            item, act = self._trans.item, self._actions.item
            for b in self._token_bytes[token]:
                a = act(state, b)
                if a == 1:  # ACT_INC (allowed: the row checked the counter)
                    c += 1
                elif a == 2:  # ACT_SET1
                    c = 1
                state = item(state, b)
            if self._limit.item(state) == 0:
                c = 0
        self._history.append(state)
        self._counts.append(c)
        return True

    def _retreat(self, n: int) -> None:
        del self._history[-n:]
        del self._counts[-n:]

    def _fill_from_index(self, row: np.ndarray) -> None:
        """``fill_bitmask`` from the full index (budgets included)."""
        index = self._index
        if self._terminated:
            row[...] = index.stop_row
            return
        state = self._history[-1]
        c = self._counts[-1]
        if self._budget is not None:
            remaining = self._budget - self._accepted
            if remaining < index.plain_row_budget[state]:
                budget = max(remaining, int(index.min_tokens_to_accept[state]))
                index.fill_restricted_at(state, c, budget, row.view(np.uint32))
                return
        row[...] = index.row_at(state, c)


class CountedDFAMatcher(_CounterMoves, DFAMatcher):
    """:class:`DFAMatcher` for a DFA with a counter: the mask is the row of
    (state, counter) (:meth:`~poot_vllm.core.masks.DFAMaskIndex.row_at`: a row
    copy unless the counter is near its region's bound)."""

    def __init__(self, index: DFAMaskIndex) -> None:
        self._init_counter(index.dfa)
        super().__init__(index)

    def _row_at(self, state: int, counter: int) -> np.ndarray:
        return self._index.row_at(state, counter)

    def fill_bitmask(self, row: np.ndarray) -> None:
        self._fill_from_index(row)


class LazyCountedDFAMatcher(_CounterMoves, LazyDFAMatcher):
    """:class:`LazyDFAMatcher` for a DFA with a counter: rows of (state,
    counter) from the pending masks (each state's plain row and counter list
    one walk, shared) until the full index is built."""

    def __init__(self, pending: PendingMasks) -> None:
        self._init_counter(pending.dfa)
        super().__init__(pending)

    def _row_at(self, state: int, counter: int) -> np.ndarray:
        if self._adopt():
            return self._index.row_at(state, counter)
        return self._pending.row_at(state, counter)

    def _counter_now(self) -> int:
        return self._counts[-1]

    def _fill_adopted(self, row: np.ndarray) -> None:
        self._fill_from_index(row)
