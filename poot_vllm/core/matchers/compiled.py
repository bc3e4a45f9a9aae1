"""A DFA compiled against one vocabulary: the shared, read-only artefact.

Built once per (constraint, vocabulary) on vLLM's compile thread pool and
cached by the backend; each request choice gets its own cheap
:class:`~poot_vllm.core.matchers.dfa.DFAMatcher` over it.
"""

from __future__ import annotations

from dataclasses import dataclass

from poot_vllm.core.masks import DFAMaskIndex
from poot_vllm.core.matchers.dfa import CountedDFAMatcher, DFAMatcher
from poot_vllm.core.token_trie import TokenTrie


@dataclass(frozen=True)
class CompiledDFA:
    index: DFAMaskIndex

    @classmethod
    def build(cls, dfa, vocab, max_work: int | None = None) -> "CompiledDFA":
        """``max_work``: ``Limits.max_mask_work`` (LimitExceeded past it)."""
        return cls(DFAMaskIndex.build(dfa, vocab, TokenTrie.build(vocab), max_work=max_work))

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
