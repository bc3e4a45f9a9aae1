"""Per-request matcher over a compiled DFA: the decode-time hot path.

A :class:`DFAMatcher` holds only a stack of DFA states; everything heavy (the
per-state mask rows, token distances) lives in the shared, read-only
:class:`~poot_vllm.core.masks.DFAMaskIndex`.  ``fill_bitmask`` is a row copy.

Semantics follow vLLM's xgrammar backend (``StructuredOutputGrammar``):

* ``accept_tokens`` advances token by token and returns False at the first
  rejected token, keeping the tokens before it; once a stop token is accepted
  the matcher is terminated and further tokens are ignored (True).
* ``validate_tokens`` returns the longest acceptable prefix (ending after a stop
  token, if any) without changing state; ``[]`` once terminated.
* ``rollback(n)`` undoes exactly the last ``n`` accepted tokens (speculative
  decoding), termination included.

A token is accepted in state ``s`` exactly when its bit is set in ``s``'s mask
row, so what the matcher accepts and what the mask allows never disagree.

No torch here: the adapter hands ``fill_bitmask`` a numpy view of the row.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from poot_vllm.core.masks import DFAMaskIndex


class DFAMatcher:
    """The state of one request constrained by a DFA (not thread-safe; one per request)."""

    def __init__(self, index: DFAMaskIndex, *, max_rollback: int | None = None) -> None:
        """``max_rollback``: keep at least this many states for ``rollback``
        (``None``: all; replies are bounded by ``max_tokens`` anyway)."""
        self._index = index
        self._trans = index.transitions
        self._rows = index.rows
        self._row_of_state = index.row_of_state
        self._accepting = index.accepting
        self._token_bytes = index.vocab.token_bytes
        self._stop_ids = index.vocab.stop_ids
        self._size = index.trie.size
        self._max_rollback = max_rollback
        self._budget: int | None = None
        self.reset()

    # ----------------------------------------------------------------- state

    def reset(self) -> None:
        """Back to the start state, nothing accepted, not terminated."""
        self._history: list[int] = [int(self._index.dfa.start)]
        self._dropped = 0          # states trimmed off the front of _history
        self._terminated = False   # the last accepted token was a stop token

    @property
    def state(self) -> int:
        """The current DFA state."""
        return self._history[-1]

    @property
    def num_accepted(self) -> int:
        """Tokens accepted since the start (stop token included), net of rollbacks."""
        return self._dropped + len(self._history) - 1

    def is_terminated(self) -> bool:
        return self._terminated

    # ------------------------------------------------------------- advancing

    def _allowed(self, state: int, token: int) -> bool:
        """The token's bit in the state's row (so accepting agrees with the mask)."""
        if not 0 <= token < self._size:
            return False
        # ndarray.item: a Python int without building numpy scalars (hot path).
        word = self._rows.item(self._row_of_state.item(state), token >> 5)
        return (word >> (token & 31)) & 1 == 1

    def _next_state(self, state: int, token: int) -> int:
        """End state of an allowed text token (stop tokens do not move)."""
        if token in self._stop_ids:
            return state
        item = self._trans.item
        for b in self._token_bytes[token]:
            state = item(state, b)
        return state

    def accept_tokens(self, ids: Sequence[int]) -> bool:
        """Advance over ``ids``; False at the first token not allowed (earlier ones stay)."""
        if self._terminated:
            return True
        for token in ids:
            token = int(token)
            state = self._history[-1]
            if not self._allowed(state, token):
                return False
            self._history.append(self._next_state(state, token))
            if token in self._stop_ids:
                self._terminated = True
                break
        self._trim_history()
        return True

    def validate_tokens(self, ids: Sequence[int]) -> list[int]:
        """The longest prefix of ``ids`` that ``accept_tokens`` would take; no state change."""
        if self._terminated:
            return []
        state = self._history[-1]
        out: list[int] = []
        for token in ids:
            token = int(token)
            if not self._allowed(state, token):
                break
            out.append(token)
            if token in self._stop_ids:
                break
            state = self._next_state(state, token)
        return out

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens (termination included)."""
        if n < 0:
            raise ValueError(f"rollback count must be >= 0, got {n}")
        if n == 0:
            return
        if n > len(self._history) - 1:
            raise ValueError(f"cannot roll back {n} tokens: only {len(self._history) - 1} "
                             f"are kept (max_rollback={self._max_rollback})")
        del self._history[-n:]
        # A stop token is always the last accepted one, so any rollback undoes it.
        self._terminated = False

    def _trim_history(self) -> None:
        keep = self._max_rollback
        if keep is not None and len(self._history) > 2 * keep + 2:
            # Amortised: trim to keep + 1 states once the stack doubles.
            cut = len(self._history) - (keep + 1)
            del self._history[:cut]
            self._dropped += cut

    # ---------------------------------------------------------------- masks

    def set_token_budget(self, max_new_tokens: int | None) -> None:
        """Limit the reply to ``max_new_tokens`` tokens (counted from the start,
        stop token included): masks then allow only tokens after which the
        reply can still finish in time.  ``None`` removes the limit."""
        if max_new_tokens is not None and max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        self._budget = max_new_tokens

    def fill_bitmask(self, row: np.ndarray) -> None:
        """Write the allowed tokens of the current state into ``row`` (int32 words)."""
        if self._terminated:  # vLLM does not ask then; a finished reply may only stop
            row[...] = self._index.stop_row
            return
        state = self._history[-1]
        if self._budget is not None:
            remaining = self._budget - self.num_accepted
            if remaining < self._index.plain_row_budget[state]:
                # Too few tokens left for some allowed token: keep only those
                # that can still finish in time.  If even the shortest
                # completion does not fit, follow the shortest completions
                # rather than leave the mask empty.
                budget = max(remaining, int(self._index.min_tokens_to_accept[state]))
                self._index.restricted_mask(state, budget, row)
                return
        row[...] = self._rows[self._row_of_state[state]]
