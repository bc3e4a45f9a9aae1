"""Grammar replies on poot's own pushdown model (no xgrammar at decode time).

A grammar with a model (:mod:`poot_vllm.core.grammar.rule_automata`) and
precomputed masks (:mod:`poot_vllm.core.grammar.rule_masks`) runs here: the
reply's parse configurations advance by each accepted token's bytes, the
mask is the states' stored rows plus the few tokens that return into the
frame below, and near ``max_tokens`` only tokens after which the shortest
completion still fits are kept.  :func:`restrict_to_budget` is shared with
:class:`~poot_vllm.core.matchers.pushdown.PushdownMatcher`, which uses the same
model for budgets when xgrammar gives the grammar mask.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from poot_vllm.core.grammar.rule_automata import Configurations
from poot_vllm.core.matchers.base import TokenMatcher


def stop_row(stop_ids: Iterable[int], words: int) -> np.ndarray:
    """An int32 bitmask row with exactly ``stop_ids`` set."""
    row = np.zeros(words, dtype=np.uint32)
    for t in stop_ids:
        row[t >> 5] |= np.uint32(1 << (t & 31))
    return row.view(np.int32)


def budget_far(masks: Any, configs_state: Configurations, configs: tuple, remaining: int, stop_cost: int) -> bool:
    """No token can break the budget yet: one byte raises a configuration's distance by at
    most ``inc1``, so a token by at most ``masks.reach``."""
    return not configs or remaining - 1 - stop_cost >= max(configs_state.cost(c) for c in configs) + masks.reach


def restrict_to_budget(masks: Any, configs_state: Configurations, configs: tuple, row: np.ndarray,
                       remaining: int, stop_cost: int, stop: np.ndarray) -> None:
    """Keep in ``row`` (the grammar's mask) only tokens after which some
    configuration still finishes in the tokens left: one token now, then at
    most one token per byte of the shortest completion, then the stop token."""
    if budget_far(masks, configs_state, configs, remaining, stop_cost):
        return
    costs = [configs_state.cost(c) for c in configs]
    limit = remaining - 1 - stop_cost
    grammar_row = row.copy()
    allowed = np.empty_like(grammar_row)
    masks.within(configs_state, configs, limit, allowed)
    allowed &= ~stop
    row &= allowed
    if remaining >= stop_cost:
        row |= grammar_row & stop
    if not row.any():
        # Past the point of no return (a budget below the shortest reply,
        # which admission refuses where it can tell): head for the end.
        masks.within(configs_state, configs, min(costs) - 1, allowed)
        allowed &= ~stop
        row[...] = grammar_row & (allowed | stop)
        if not row.any():
            row[...] = grammar_row


class RuleMatcher(TokenMatcher):
    """The state of one grammar reply on poot's model (one per request)."""

    def __init__(self, masks: Any, stop_ids: Iterable[int]) -> None:
        self._masks = masks
        self._stop_ids = frozenset(stop_ids)
        self._configs = Configurations(masks.model)
        self._history = [self._configs.initial()]
        self._words = masks.words
        self._size = masks.size
        self._stop_row = stop_row(self._stop_ids, self._words)
        self._text_only = ~self._stop_row
        # Masks only ever set tokens with bytes: a stop id without bytes (the
        # usual EOS) needs no clearing, and a few stop bits are set one by one
        # rather than by a pass over the whole row.
        self._stops_are_text = any(0 <= t < self._size and masks.token_bytes[t] for t in self._stop_ids)
        self._stop_bits = [(t >> 5, np.uint32(1 << (t & 31)).view(np.int32)) for t in sorted(self._stop_ids)
                           if 0 <= t < self._size]
        self._stop_cost = 1 if self._stop_ids else 0
        self._budget = None

    def _restart(self) -> None:
        self._history = [self._configs.initial()]

    def _can_end(self) -> bool:
        configs = self._history[-1]
        if len(configs) == 1:
            return self._configs.cost(configs[0]) == 0
        return any(self._configs.cost(c) == 0 for c in configs)

    def _advance(self, token: int) -> bool:
        if not 0 <= token < self._size:
            return False
        if token in self._stop_ids:
            if not self._can_end():
                return False
            self._history.append(self._history[-1])  # one entry per accepted token, the stop too
            return True  # the base class terminates the reply
        data = self._masks.token_bytes[token]
        if not data:
            return False  # special tokens (no bytes) are never text
        after = self._configs.advance(self._history[-1], data)
        if not after:
            return False
        self._history.append(after)
        return True

    def _retreat(self, n: int) -> None:
        del self._history[-n:]

    def _budget_near(self) -> bool:
        return not budget_far(self._masks, self._configs, self._history[-1], self._budget - self._accepted,
                              self._stop_cost)

    def fill_bitmask(self, row: np.ndarray) -> None:
        """Write the allowed tokens into ``row`` (int32 words; bit ``t & 31`` of word ``t >> 5``)."""
        if row.dtype != np.int32 or row.shape != (self._words,):
            raise ValueError(f"bitmask row must be int32 of shape ({self._words},), got {row.dtype} {row.shape}")
        if self._terminated:
            row[...] = self._stop_row
            return
        configs = self._history[-1]
        target = row if row.flags.c_contiguous else np.empty(self._words, dtype=np.int32)
        bound = self._masks.fill(self._configs, configs, target)
        if bound is None:
            # The return walk passed its cap (only heavily ambiguous grammars,
            # many stacks at once): every token checked on its own, slow and exact.
            self._fill_one_by_one(configs, target)
        can_end = self._can_end()
        if self._budget is None:
            self._add_stops(target, can_end)
        else:
            remaining = self._budget - self._accepted
            limit = remaining - 1 - self._stop_cost
            # Every allowed token leaves configurations that finish within
            # ``bound`` bytes: if that fits, no token can break the budget.
            if bound is not None and bound <= limit:
                self._add_stops(target, can_end)
            elif bound is not None and self._masks.cost_off is not None and self._within(
                    configs, limit, target, can_end and remaining >= self._stop_cost):
                # Budget tables: the mask's own walk cut at the limit is the
                # budget mask itself (grammatical text tokens that still fit).
                self._add_stops(target, can_end and remaining >= self._stop_cost)
            else:
                self._add_stops(target, can_end)
                restrict_to_budget(self._masks, self._configs, configs, target, remaining, self._stop_cost,
                                   self._stop_row)
        if target is not row:
            row[...] = target

    def _within(self, configs: tuple, limit: int, target: np.ndarray, may_stop: bool) -> bool:
        """The grammatical text tokens that still fit into ``target``; False
        (``target`` then holds the grammar mask again) when none does and the
        reply may not stop here: past the point of no return,
        :func:`restrict_to_budget` heads for the end."""
        self._masks.within(self._configs, configs, limit, target)
        if may_stop or target.any():
            return True
        self._masks.fill(self._configs, configs, target)
        return False

    def _add_stops(self, target: np.ndarray, can_end: bool) -> None:
        """Clear stop ids that have bytes (text tokens), set them where the reply may end."""
        if self._stops_are_text:
            target &= self._text_only
        if can_end:
            if len(self._stop_bits) <= 8:
                for w, bit in self._stop_bits:
                    target[w] |= bit
            else:
                target |= self._stop_row

    def _fill_one_by_one(self, configs: tuple, out: np.ndarray) -> None:
        words = out.view(np.uint32)
        words[:] = 0
        for t, data in enumerate(self._masks.token_bytes):
            if data and self._configs.advance(configs, data):
                words[t >> 5] |= np.uint32(1 << (t & 31))
