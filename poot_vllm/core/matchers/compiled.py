"""A DFA compiled against one vocabulary: the shared, read-only artefact.

Built once per (constraint, vocabulary) on vLLM's compile thread pool and
cached by the backend; each request choice gets its own cheap
:class:`~poot_vllm.core.matchers.dfa.DFAMatcher` over it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

from poot_vllm.core import lazy_masks
from poot_vllm.core.lazy_masks import PendingMasks
from poot_vllm.core.masks import DFAMaskIndex, kernel_stops
from poot_vllm.core.matchers.dfa import CountedDFAMatcher, DFAMatcher, LazyCountedDFAMatcher, LazyDFAMatcher
from poot_vllm.core.token_trie import TokenTrie


@dataclass(frozen=True)
class CompiledDFA:
    index: DFAMaskIndex

    @classmethod
    def build(cls, dfa, vocab, max_work: int | None = None,
              lazy: bool = False) -> "Union[CompiledDFA, LazyCompiledDFA]":
        """``max_work``: ``Limits.max_mask_work`` (LimitExceeded past it).

        ``lazy``: where :func:`~poot_vllm.core.lazy_masks.lazy_eligible` allows it,
        return at once a :class:`LazyCompiledDFA` whose full index builds on the
        background thread (the same masks, the first one in one trie walk).
        """
        trie = TokenTrie.build(vocab)
        if lazy and lazy_masks.has_room() and lazy_masks.lazy_eligible(dfa, trie, kernel_stops(vocab, trie)[1],
                                                                       max_work):
            pending = PendingMasks(dfa, vocab, trie, max_work)
            if not pending.dead_end:
                pending.prefetch()  # the long walks now, not at a first visit in the scheduler
                if not pending.over_memory:
                    lazy_masks.submit(pending)
                    return LazyCompiledDFA(pending)
        return cls(DFAMaskIndex.build(dfa, vocab, trie, max_work=max_work))

    @property
    def nbytes(self) -> int:
        """Bytes of cached masks and tables (what the backend's LRU counts)."""
        return int(self.index.nbytes)

    def new_matcher(self) -> DFAMatcher:
        """A fresh matcher for one request; it keeps every state of the reply
        (bounded by ``max_tokens``), so any accepted tokens can be rolled back."""
        if self.index.counter is not None:
            return CountedDFAMatcher(self.index)
        return DFAMatcher(self.index)


@dataclass(frozen=True)
class LazyCompiledDFA:
    """A :class:`CompiledDFA` whose index is still building (:mod:`~poot_vllm.core.lazy_masks`)."""

    pending: PendingMasks

    @property
    def nbytes(self) -> int:
        """The index's size once built, an upper bound of it before (what the LRU counts)."""
        return int(self.pending.nbytes)

    def when_ready(self, callback: Callable[[], None]) -> None:
        self.pending.when_ready(callback)

    def new_matcher(self) -> DFAMatcher:
        index = self.pending.index
        if index is not None:
            return CompiledDFA(index).new_matcher()
        return LazyCountedDFAMatcher(self.pending) if self.pending.counted else LazyDFAMatcher(self.pending)
