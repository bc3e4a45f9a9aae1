"""The matcher protocol, and the bookkeeping every matcher shares.

A matcher is the per-request state of one constrained reply; the adapter
(``adapter/backend.py`` ``PootGrammar``) drives it the way vLLM drives
xgrammar's matcher.  :class:`Matcher` is that interface.  :class:`TokenMatcher`
implements its semantics once -- argument checks, termination, rollback and
the accepted-token count -- so the DFA and pushdown matchers only say how one
token advances them (:meth:`TokenMatcher._advance`) and how to undo tokens
(:meth:`TokenMatcher._retreat`), and cannot drift apart on the rules:

* ``accept_tokens`` advances token by token and returns False at the first
  rejected token, keeping the tokens before it; once a stop token is accepted
  the matcher is terminated and further tokens are ignored (True);
* ``validate_tokens`` returns the longest acceptable prefix (ending after a stop
  token, if any) without changing state; ``[]`` once terminated;
* ``rollback(n)`` undoes exactly the last ``n`` accepted tokens (speculative
  decoding), termination included: a stop token is always the last accepted
  one, so any rollback undoes it.

vLLM-free and torch-free: ``fill_bitmask`` gets a numpy int32 row.
"""

from __future__ import annotations

from typing import AbstractSet, Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class Matcher(Protocol):
    """What every compiled constraint's ``new_matcher()`` returns (one per request)."""

    @property
    def num_accepted(self) -> int:
        """Tokens accepted since the start (stop token included), net of rollbacks."""

    def accept_tokens(self, ids: Sequence[int]) -> bool:
        """Advance; False at the first token not allowed (earlier ones stay)."""

    def validate_tokens(self, ids: Sequence[int]) -> list[int]:
        """The longest prefix ``accept_tokens`` would take; never changes state."""

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens, termination included."""

    def fill_bitmask(self, row: np.ndarray) -> None:
        """Write the allowed tokens into ``row`` (int32 words; bit ``t & 31`` of word ``t >> 5``)."""

    def is_terminated(self) -> bool:
        """A stop token was accepted."""

    def reset(self) -> None:
        """Back to the start: nothing accepted, not terminated."""

    def set_token_budget(self, max_new_tokens: int | None) -> None:
        """Make replies finish within ``max_new_tokens`` tokens (stop included), where supported."""


class TokenMatcher:
    """Shared bookkeeping for matchers: subclasses set ``_stop_ids`` and implement
    :meth:`_advance`, :meth:`_retreat`, :meth:`_restart` and ``fill_bitmask``.

    ``_advance`` and ``_retreat`` move the underlying automaton only; this
    class owns the accepted count, termination and the argument checks.
    """

    _stop_ids: AbstractSet[int]
    _size: int
    _accepted: int = 0
    _terminated: bool = False
    _budget: int | None = None

    # ------------------------------------------------------- subclass hooks

    def _advance(self, token: int) -> bool:
        """Take one token if allowed (a stop token only where the reply may end); False otherwise, unchanged."""
        raise NotImplementedError

    def _retreat(self, n: int) -> None:
        """Undo the last ``n`` tokens that ``_advance`` took (``0 < n <= _accepted``)."""
        raise NotImplementedError

    def _restart(self) -> None:
        """Back to the automaton's start state."""
        raise NotImplementedError

    @property
    def supports_budget(self) -> bool:
        """Whether ``set_token_budget`` makes replies finish in time."""
        return True

    # ------------------------------------------------------------ protocol

    def reset(self) -> None:
        """Back to the start, nothing accepted, not terminated."""
        self._restart()
        self._accepted = 0
        self._terminated = False

    @property
    def num_accepted(self) -> int:
        """Tokens accepted since the start (stop token included), net of rollbacks."""
        return self._accepted

    def is_terminated(self) -> bool:
        return self._terminated

    def accept_tokens(self, ids: Sequence[int]) -> bool:
        """Advance over ``ids``; False at the first token not allowed (earlier ones stay)."""
        if self._terminated:
            return True
        advance = self._advance
        stop_ids = self._stop_ids
        for token in ids:
            token = int(token)
            if not advance(token):
                return False
            self._accepted += 1
            if token in stop_ids:
                self._terminated = True
                break
        return True

    def validate_tokens(self, ids: Sequence[int]) -> list[int]:
        """The longest prefix of ``ids`` that ``accept_tokens`` would take, and, with a
        token budget, that the budget masks would allow at their positions; no
        state change.

        vLLM filters speculative drafts with this and then lets the rejection
        sampler keep any draft it filtered, so a draft the grammar allows but
        the budget mask does not (one that would leave too few tokens to
        finish) must stop here, or replies overrun ``max_tokens`` under
        speculative decoding (seen with ngram drafts in a real server).
        """
        if self._terminated:
            return []
        out: list[int] = []
        budget = self._budget is not None
        try:
            for token in ids:
                token = int(token)
                if budget and not self._budget_allows(token):
                    break
                if not self._advance(token):
                    break
                out.append(token)
                self._accepted += 1  # the next draft's budget mask is one position later
                if token in self._stop_ids:
                    break
        finally:
            self._accepted -= len(out)
            if out:
                self._retreat(len(out))
        return out

    def _budget_near(self) -> bool:
        """Whether the budget can restrict this position's mask (subclasses say when it
        cannot, so drafts far from the end cost no mask fill)."""
        return True

    def _budget_allows(self, token: int) -> bool:
        """Whether this position's mask (budget included) has ``token``."""
        if not 0 <= token < self._size:
            return False
        if not self._budget_near():
            return True
        row = getattr(self, "_probe_row", None)
        if row is None:
            row = self._probe_row = np.zeros((self._size + 31) // 32, dtype=np.int32)
        self.fill_bitmask(row)
        return bool((int(row[token >> 5]) >> (token & 31)) & 1)

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens (termination included)."""
        if n < 0:
            raise ValueError(f"rollback count must be >= 0, got {n}")
        if n == 0:
            return
        if n > self._accepted:
            raise ValueError(f"cannot roll back {n} tokens: only {self._accepted} were accepted")
        self._retreat(n)
        self._accepted -= n
        self._terminated = False

    def set_token_budget(self, max_new_tokens: int | None) -> None:
        """Limit the reply to ``max_new_tokens`` tokens (counted from the start,
        stop token included): masks then allow only tokens after which the
        reply can still finish in time.  ``None`` removes the limit; a no-op
        where ``supports_budget`` is False."""
        if max_new_tokens is not None and max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        self._budget = max_new_tokens if self.supports_budget else None
