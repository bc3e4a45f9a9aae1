"""Pushdown matcher: poot grammars run on xgrammar's compiled-grammar matcher.

poot parses and validates grammars itself (:mod:`.gbnf`), emits canonical
xgrammar EBNF (:mod:`.emit`), and lets xgrammar's C++ Earley matcher do the
per-token work.  xgrammar (and torch, which it imports) is loaded lazily, on
the first compile, so the rest of the core stays import-light.

The vocabulary is poot's :class:`~poot_vllm.core.vocabulary.TokenVocabulary`, handed
to xgrammar as raw bytes (``VocabType.RAW``), so poot's byte mapping is the
single source of truth.  Tokens whose bytes are ``None`` are given the empty
string, which xgrammar treats as a special token: never allowed, never
accepted (stop ids excepted -- xgrammar allows them exactly where the grammar
accepts, and accepting one terminates).
"""

from __future__ import annotations

import functools
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from poot_vllm.core.limits import DEFAULT_LIMITS, Limits

from poot_vllm.core.grammar.emit import grammar_to_xgrammar_ebnf
from poot_vllm.core.grammar.gbnf import Grammar


@dataclass(frozen=True, eq=False)
class CompiledPushdown:
    """A grammar compiled against one vocabulary (shared, read-only)."""

    compiled: Any            # xgrammar.CompiledGrammar
    ebnf: str                # the xgrammar text it was compiled from
    vocab_size: int
    stop_ids: frozenset[int]
    #: Budget tables when this is the json_object grammar over a vocabulary
    #: that can spell its closing bytes (see json_budget); else None.
    closing: Any = None

    @property
    def memory_bytes(self) -> int:
        return int(self.compiled.memory_size_bytes)

    @property
    def nbytes(self) -> int:
        """What the backend's LRU counts (the trie of ``closing`` is shared)."""
        return self.memory_bytes

    def new_matcher(self, max_rollback_tokens: int = 0) -> "PushdownMatcher":
        return PushdownMatcher(self, max_rollback_tokens=max_rollback_tokens)


class _CompilerCache:
    """xgrammar compilers per vocabulary, and an LRU of compiled grammars by
    (vocabulary, grammar text), bounded in bytes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._compilers: OrderedDict[str, Any] = OrderedDict()
        self._compiled: OrderedDict[tuple[str, str], CompiledPushdown] = OrderedDict()
        self._bytes = 0

    def compiler(self, vocab: Any) -> Any:
        key = vocab.cache_key if hasattr(vocab, "cache_key") else str(id(vocab))
        with self._lock:
            comp = self._compilers.get(key)
            if comp is not None:
                self._compilers.move_to_end(key)
                return comp
        comp = _make_compiler(vocab)
        with self._lock:
            self._compilers[key] = comp
            while len(self._compilers) > 4:  # a server has one model; tests a few
                self._compilers.popitem(last=False)
        return comp

    def get(self, key: tuple[str, str]) -> CompiledPushdown | None:
        with self._lock:
            hit = self._compiled.get(key)
            if hit is not None:
                self._compiled.move_to_end(key)
            return hit

    def put(self, key: tuple[str, str], value: CompiledPushdown, budget: int) -> None:
        with self._lock:
            if key in self._compiled:
                return
            self._compiled[key] = value
            self._bytes += value.memory_bytes
            while self._bytes > budget and len(self._compiled) > 1:
                _, old = self._compiled.popitem(last=False)
                self._bytes -= old.memory_bytes


_CACHE = _CompilerCache()


def _make_compiler(vocab: Any) -> Any:
    import xgrammar as xgr

    # Empty strings are xgrammar's "special token": never allowed as content.
    encoded = [b if b else b"" for b in vocab.token_bytes]
    info = xgr.TokenizerInfo(encoded, xgr.VocabType.RAW, vocab_size=vocab.size,
                             stop_token_ids=sorted(vocab.stop_ids))
    threads = max(1, min(4, os.cpu_count() or 1))
    # poot keeps its own byte-bounded cache (below); xgrammar's is unbounded.
    return xgr.GrammarCompiler(info, max_threads=threads, cache_enabled=False)


def compile_pushdown(grammar: Grammar, vocab: Any, limits: Limits = DEFAULT_LIMITS) -> CompiledPushdown:
    """Compile a validated grammar for ``vocab`` (cached per vocabulary and text).

    ``limits.mask_cache_bytes`` bounds the bytes of compiled grammars kept.
    """
    ebnf = grammar_to_xgrammar_ebnf(grammar)
    vkey = vocab.cache_key if hasattr(vocab, "cache_key") else str(id(vocab))
    key = (vkey, ebnf)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    closing = None
    runtime_ebnf = ebnf
    if ebnf == _json_object_ebnf():
        from poot_vllm.core.grammar.json_budget import closing_tables
        from poot_vllm.core.grammar.json_object import json_object_runtime_ebnf

        closing = closing_tables(vocab)
        runtime_ebnf = json_object_runtime_ebnf(ebnf)
    compiled = _CACHE.compiler(vocab).compile_grammar(runtime_ebnf)
    result = CompiledPushdown(compiled, ebnf, vocab.size, frozenset(vocab.stop_ids), closing)
    _CACHE.put(key, result, limits.mask_cache_bytes)
    return result


@functools.lru_cache(maxsize=1)
def _json_object_ebnf() -> str:
    from poot_vllm.core.grammar.json_object import json_object_grammar

    return grammar_to_xgrammar_ebnf(json_object_grammar())


class PushdownMatcher:
    """The state of one request constrained by a grammar (one per request).

    Same interface and semantics as :class:`poot_vllm.core.matchers.dfa.DFAMatcher`:
    ``accept_tokens`` stops at the first rejected token (earlier ones stay);
    once a stop token is accepted the matcher is terminated and later tokens
    are ignored; ``validate_tokens`` never changes state; ``rollback(n)`` undoes
    the last ``n`` accepted tokens, termination included.
    """

    def __init__(self, compiled: CompiledPushdown, stop_ids: Iterable[int] | None = None,
                 max_rollback_tokens: int = 0) -> None:
        """``stop_ids`` overrides the vocabulary's stop ids when given.
        ``max_rollback_tokens`` is accepted for interface parity: xgrammar keeps
        the whole history, so any number of accepted tokens can be rolled back."""
        import xgrammar as xgr

        self._compiled = compiled
        self._stop_ids = frozenset(compiled.stop_ids if stop_ids is None else stop_ids)
        override = None if stop_ids is None else sorted(self._stop_ids)
        self._m = xgr.GrammarMatcher(compiled.compiled, override_stop_tokens=override)
        self._size = compiled.vocab_size
        self._words = (self._size + 31) // 32
        words = np.zeros(self._words, dtype=np.uint32)
        for t in self._stop_ids:
            words[t >> 5] |= np.uint32(1 << (t & 31))
        self._stop_row = words.view(np.int32)
        # xgrammar sets the unused high bits of the last word; poot's rows
        # never allow ids past the vocabulary.
        tail = self._size & 31
        self._last_word = np.uint32((1 << tail) - 1).view(np.int32) if tail else None
        self._max_rollback = max_rollback_tokens
        self._accepted = 0
        # Budgets (json_object only): the reply's closing state, token by token.
        self._closing = compiled.closing
        self._closer = None
        if self._closing is not None:
            from poot_vllm.core.grammar.json_budget import JsonCloser

            self._closer = JsonCloser()
        self._budget: int | None = None
        self._stop_cost = 1 if self._stop_ids else 0

    def reset(self) -> None:
        self._m.reset()
        self._accepted = 0
        if self._closer is not None:
            self._closer.reset()

    @property
    def supports_budget(self) -> bool:
        """Whether ``set_token_budget`` makes replies finish in time (json_object
        over a vocabulary that spells its closing bytes; not general grammars)."""
        return self._closer is not None

    def set_token_budget(self, max_new_tokens: int | None) -> None:
        """Limit the reply to ``max_new_tokens`` tokens (stop token included):
        masks then allow only tokens after which the JSON object can still be
        closed in time.  A no-op for grammars without budget support."""
        if max_new_tokens is not None and max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        self._budget = max_new_tokens if self._closer is not None else None

    def closing_cost(self) -> int | None:
        """Fewest tokens that still finish the reply, stop included (json_object)."""
        if self._closer is None:
            return None
        if self.is_terminated():
            return 0
        return self._closer.cost() + self._stop_cost

    @property
    def num_accepted(self) -> int:
        """Tokens accepted since the start (stop token included), net of rollbacks."""
        return self._accepted

    def is_terminated(self) -> bool:
        return bool(self._m.is_terminated())

    def _accept_one(self, token: int) -> bool:
        # xgrammar rejects out-of-range ids itself; the range check keeps a
        # negative id from wrapping around in the C++ layer.
        if not 0 <= token < self._size or not self._m.accept_token(token):
            return False
        self._accepted += 1
        if self._closer is not None:
            data = self._closing.token_bytes[token] if token not in self._stop_ids else None
            self._closer.advance(data or b"")
        return True

    def accept_tokens(self, ids: Sequence[int]) -> bool:
        """Advance over ``ids``; False at the first token not allowed (earlier ones stay)."""
        if self.is_terminated():
            return True
        for token in ids:
            if not self._accept_one(int(token)):
                return False
            if self._m.is_terminated():
                break
        return True

    def validate_tokens(self, ids: Sequence[int]) -> list[int]:
        """The longest prefix of ``ids`` that ``accept_tokens`` would take; no state change."""
        if self.is_terminated():
            return []
        out: list[int] = []
        for token in ids:
            if not self._accept_one(int(token)):
                break
            out.append(int(token))
            if self._m.is_terminated():
                break
        if out:
            self.rollback(len(out))
        return out

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens (termination included)."""
        if n < 0:
            raise ValueError(f"rollback count must be >= 0, got {n}")
        if n == 0:
            return
        if n > self._accepted:
            raise ValueError(f"cannot roll back {n} tokens: only {self._accepted} were accepted")
        self._m.rollback(n)
        self._accepted -= n
        if self._closer is not None:
            self._closer.undo(n)

    def fill_bitmask(self, row: np.ndarray) -> None:
        """Write the allowed tokens into ``row`` (int32 words; bit ``t & 31`` of word ``t >> 5``)."""
        if row.dtype != np.int32 or row.shape != (self._words,):
            raise ValueError(f"bitmask row must be int32 of shape ({self._words},), "
                             f"got {row.dtype} {row.shape}")
        if self.is_terminated():  # vLLM does not ask then; a finished reply may only stop
            row[...] = self._stop_row
            return
        if row.flags.c_contiguous:
            self._m.fill_next_token_bitmask(row[None])  # numpy supports DLPack: no torch copy
        else:
            tmp = np.empty(self._words, dtype=np.int32)
            self._m.fill_next_token_bitmask(tmp[None])
            row[...] = tmp
        if self._last_word is not None:
            row[-1] &= self._last_word
        if self._budget is not None:
            self._restrict_to_budget(row)

    def _restrict_to_budget(self, row: np.ndarray) -> None:
        """Keep only tokens after which the object still closes within the budget.

        Closing ``c`` bytes takes at most ``c`` tokens (single-byte tokens
        exist), so a text token is kept iff its closing bytes fit in
        ``remaining - 1 - stop``; far from the limit no token can break that
        (one token adds at most ``max_increase``) and the mask is left as is.
        """
        from poot_vllm.core.grammar.json_budget import closing_mask

        remaining = self._budget - self._accepted
        cost = self._closer.cost()
        limit = remaining - 1 - self._stop_cost
        if limit >= cost + self._closing.max_increase:
            return
        grammar_row = row.copy()
        allowed = np.empty_like(grammar_row)
        closing_mask(self._closing, self._closer, limit, allowed)
        row &= allowed
        if remaining >= self._stop_cost:
            row |= grammar_row & self._stop_row
        if not row.any():
            # Past the point of no return (a budget below the shortest reply,
            # which admission refuses): follow a shortest completion rather
            # than leave the mask empty.
            closing_mask(self._closing, self._closer, cost - 1, allowed)
            row[...] = grammar_row & (allowed | self._stop_row)
