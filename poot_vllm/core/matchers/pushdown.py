"""Pushdown matcher: grammars on xgrammar's compiled-grammar matcher, and the compile step for every grammar.

Which matcher a grammar gets is decided in :func:`compile_pushdown`: poot's
own (:mod:`poot_vllm.core.matchers.rules`) where its model has masks, else
this module's :class:`PushdownMatcher`.

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
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from poot_vllm.core.limits import DEFAULT_LIMITS, Limits

from poot_vllm.core.grammar.emit import grammar_to_xgrammar_ebnf
from poot_vllm.core.grammar.gbnf import Grammar
from poot_vllm.core.matchers.base import TokenMatcher


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
    #: poot's model of any other grammar (grammar.rule_masks.RuleMasks), None
    #: where the grammar has none (left recursion, too large).  With its masks
    #: precomputed, replies run on it (matchers.rules.RuleMatcher) and
    #: ``compiled`` is None; otherwise xgrammar gives the mask and the model
    #: the budget.
    rules: Any = None

    @property
    def memory_bytes(self) -> int:
        """xgrammar's grammar, or poot's masks where they serve the grammar."""
        if self.compiled is None:
            return int(self.rules.nbytes)
        return int(self.compiled.memory_size_bytes)

    @property
    def nbytes(self) -> int:
        """The xgrammar grammar's bytes (charged once, to its own cache entry;
        this wrapper itself is not cached)."""
        return self.memory_bytes

    def new_matcher(self, stop_ids: "Iterable[int] | None" = None) -> Any:
        """A matcher for one reply: poot's (``RuleMatcher``) where the grammar has
        its masks, else xgrammar's (``PushdownMatcher``).  ``stop_ids`` overrides
        the vocabulary's stop ids."""
        stops = self.stop_ids if stop_ids is None else frozenset(stop_ids)
        if self.compiled is None:
            from poot_vllm.core.matchers.rules import RuleMatcher

            return RuleMatcher(self.rules, stops)
        return PushdownMatcher(self, stops)


def compiler_for(vocab: Any) -> Any:
    """The xgrammar compiler for ``vocab``'s token bytes (cached, single-flight).

    Keyed by ``vocab.token_key`` -- token bytes, size, kind, *not* stop ids:
    the compiler's tokenizer tables are built with no stop tokens, and each
    matcher names its own (``override_stop_tokens``), so a request with its
    own ``stop_token_ids`` reuses the compiler and the compiled grammars
    instead of rebuilding them (~0.25 s for json_object at 128k tokens).
    """
    from poot_vllm.core.cache import compiled_cache

    return compiled_cache().get_or_build(("xgrammar-compiler", vocab.token_key), lambda: _make_compiler(vocab),
                                         sizeof=lambda _: _compiler_bytes(vocab))


def _compiler_bytes(vocab: Any) -> int:
    """An estimate of xgrammar's tokenizer tables (it reports no size): the
    token strings twice (decoded and sorted vocabularies) plus per-token overhead."""
    return 2 * sum(len(b) for b in vocab.token_bytes if b) + 96 * int(vocab.size)


def _make_compiler(vocab: Any) -> Any:
    import xgrammar as xgr

    # Empty strings are xgrammar's "special token": never allowed as content.
    # No stop tokens here: they are per request (PushdownMatcher passes them).
    encoded = [b if b else b"" for b in vocab.token_bytes]
    info = xgr.TokenizerInfo(encoded, xgr.VocabType.RAW, vocab_size=vocab.size, stop_token_ids=[])
    threads = max(1, min(4, os.cpu_count() or 1))
    # poot's byte-bounded cache keeps compiled grammars; xgrammar's is unbounded.
    return xgr.GrammarCompiler(info, max_threads=threads, cache_enabled=False)


def _compile_xgrammar(vocab: Any, runtime_ebnf: str) -> Any:
    """xgrammar's compiled grammar for ``vocab``'s token bytes (stop ids are the matcher's)."""
    return compiler_for(vocab).compile_grammar(runtime_ebnf)


def compile_pushdown(grammar: Grammar, vocab: Any, limits: Limits = DEFAULT_LIMITS) -> CompiledPushdown:
    """Compile a validated grammar for ``vocab``.

    A grammar with a model (grammar.rule_automata: not left-recursive, not
    too large) whose per-state masks fit ``limits.max_mask_work`` runs on
    poot's own masks (``compiled`` is None; matchers.rules); others on
    xgrammar's matcher, with poot's model for budgets where there is one.
    ``POOT_GRAMMAR_MASKS=off`` keeps every grammar on xgrammar.

    The expensive parts live in the process's compiled-artefact cache (one
    byte budget, ``Limits.mask_cache_bytes``, read when the cache is first
    used): poot's masks per (token bytes, grammar text), the xgrammar grammar
    per (token bytes, grammar text), both shared by every stop-id set, and
    json_object's closing tables per vocabulary.  The returned
    :class:`CompiledPushdown` is a cheap wrapper, built per call and not
    cached itself, so no grammar is counted (or kept) twice.
    """
    from poot_vllm.core.cache import compiled_cache

    cache = compiled_cache()
    ebnf = grammar_to_xgrammar_ebnf(grammar)
    closing = None
    runtime_ebnf = ebnf
    if ebnf == _json_object_ebnf():
        from poot_vllm.core.grammar.json_budget import closing_tables
        from poot_vllm.core.grammar.json_object import json_object_runtime_ebnf

        closing = cache.get_or_build(("json-closing", vocab.cache_key), lambda: closing_tables(vocab),
                                     sizeof=_closing_bytes)
        runtime_ebnf = json_object_runtime_ebnf(ebnf)
    rules = None
    if closing is None and ebnf != _json_object_ebnf():
        own = _own_masks()
        work = limits.max_mask_work
        rules = cache.get_or_build(("grammar-rules", vocab.token_key, ebnf, own, work),
                                   lambda: _rule_masks(grammar, vocab, own, work),
                                   sizeof=lambda r: 0 if r is None else r.nbytes)
        if rules is not None and rules.has_masks:
            return CompiledPushdown(None, ebnf, vocab.size, frozenset(vocab.stop_ids), None, rules)
    compiled = cache.get_or_build(("xgrammar", vocab.token_key, runtime_ebnf),
                                  lambda: _compile_xgrammar(vocab, runtime_ebnf),
                                  sizeof=lambda c: int(c.memory_size_bytes))
    return CompiledPushdown(compiled, ebnf, vocab.size, frozenset(vocab.stop_ids), closing, rules)


def _rule_masks(grammar: Grammar, vocab: Any, own: bool, max_work: int) -> Any:
    """poot's model of a grammar for ``vocab`` (grammar.rule_masks), with its
    masks precomputed if ``own`` (within ``max_work`` trie visits), or None."""
    from poot_vllm.core.grammar.rule_masks import rule_masks

    return rule_masks(grammar, vocab, precompute=own, max_work=max_work)


def _own_masks() -> bool:
    """``POOT_GRAMMAR_MASKS=off`` keeps xgrammar's matcher for every grammar (poot's
    model then only gives budgets); read per compile."""
    from poot_vllm.core.limits import env_switch

    return env_switch("POOT_GRAMMAR_MASKS", default=True)


def _closing_bytes(tables: Any) -> int:
    """json_object closing tables: their own stop-id array (the trie is cached on its own)."""
    if tables is None:
        return 0
    is_stop = getattr(tables, "is_stop", None)
    return int(getattr(is_stop, "nbytes", 0)) + 256


@functools.lru_cache(maxsize=1)
def _json_object_ebnf() -> str:
    from poot_vllm.core.grammar.json_object import json_object_grammar

    return grammar_to_xgrammar_ebnf(json_object_grammar())


class PushdownMatcher(TokenMatcher):
    """The state of one request constrained by a grammar (one per request).

    Accept / validate / rollback / termination are :class:`~poot_vllm.core.matchers.base.TokenMatcher`'s,
    shared with the DFA matcher; here a token moves xgrammar's matcher (which
    keeps the whole history, so any number of accepted tokens can be rolled
    back) and, for json_object, the closing state used by budgets.
    """

    def __init__(self, compiled: CompiledPushdown, stop_ids: Iterable[int] | None = None) -> None:
        """``stop_ids`` overrides the vocabulary's stop ids when given."""
        import xgrammar as xgr

        self._compiled = compiled
        self._stop_ids = frozenset(compiled.stop_ids if stop_ids is None else stop_ids)
        # The compiled grammar has no stop tokens (one per token bytes, shared
        # by every stop set): this matcher's always come from here.  xgrammar
        # refuses an empty override; None then means "no stop tokens".
        override = sorted(self._stop_ids) or None
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
        # Budgets (json_object only): the reply's closing state, token by token.
        self._closing = compiled.closing
        self._closer = None
        if self._closing is not None:
            from poot_vllm.core.grammar.json_budget import JsonCloser

            self._closer = JsonCloser()
        # Budgets (other grammars with a model): the parse configurations after
        # each accepted token, so a rollback is a truncation.
        self._rules = compiled.rules
        self._configs = None
        if self._rules is not None:
            from poot_vllm.core.grammar.rule_automata import Configurations

            self._configs = Configurations(self._rules.model)
            self._history = [self._configs.initial()]
        self._budget = None
        self._stop_cost = 1 if self._stop_ids else 0

    def _restart(self) -> None:
        self._m.reset()
        if self._closer is not None:
            self._closer.reset()
        if self._configs is not None:
            self._history = [self._configs.initial()]

    @property
    def supports_budget(self) -> bool:
        """Whether ``set_token_budget`` makes replies finish in time: json_object
        over a vocabulary that spells its closing bytes, and grammars with a
        model (grammar.rule_automata: not left-recursive, not too large)."""
        return self._closer is not None or self._configs is not None

    def closing_cost(self) -> int | None:
        """Fewest tokens that still finish the reply, stop included (json_object)."""
        if self._closer is None:
            return None
        if self.is_terminated():
            return 0
        return self._closer.cost() + self._stop_cost

    def _advance(self, token: int) -> bool:
        # xgrammar rejects out-of-range ids itself; the range check keeps a
        # negative id from wrapping around in the C++ layer.  xgrammar accepts
        # a stop id exactly where the grammar may end, and terminates then.
        if not 0 <= token < self._size or not self._m.accept_token(token):
            return False
        if self._closer is not None:
            data = self._closing.token_bytes[token] if token not in self._stop_ids else None
            self._closer.advance(data or b"")
        if self._configs is not None:
            data = self._rules.token_bytes[token] if token not in self._stop_ids else None
            self._history.append(self._configs.advance(self._history[-1], data or b""))
        return True

    def _retreat(self, n: int) -> None:
        self._m.rollback(n)
        if self._closer is not None:
            self._closer.undo(n)
        if self._configs is not None:
            del self._history[-n:]

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
            if self._closer is not None:
                self._restrict_to_budget(row)
            elif self._configs is not None:
                self._restrict_to_completion(row)

    def _budget_near(self) -> bool:
        remaining = self._budget - self._accepted
        if self._closer is not None:
            return remaining - 1 - self._stop_cost < self._closer.cost() + self._closing.max_increase
        if self._configs is not None:
            from poot_vllm.core.matchers.rules import budget_far

            return not budget_far(self._rules, self._configs, self._history[-1], remaining, self._stop_cost)
        return False

    def _restrict_to_completion(self, row: np.ndarray) -> None:
        """Keep only tokens after which the grammar's reply still finishes in the
        tokens left (poot's model of the grammar; see matchers.rules)."""
        from poot_vllm.core.matchers.rules import restrict_to_budget

        configs = self._history[-1]
        if configs:  # (the model reads what xgrammar reads, so it always has one)
            restrict_to_budget(self._rules, self._configs, configs, row, self._budget - self._accepted,
                               self._stop_cost, self._stop_row)

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
