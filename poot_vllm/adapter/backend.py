"""poot as a vLLM structured-output backend (engine-core side).

``PootBackend`` implements vLLM's ``StructuredOutputBackend``: it turns the
tokenizer into poot's byte vocabulary once, compiles each request's
constraint (DFA constraints into per-state token masks, grammars into a
pushdown matcher), and caches compiled artefacts in the process's one
byte-bounded, single-flight cache (``poot_vllm.core.cache.compiled_cache``).
``PootGrammar`` is the per-request ``StructuredOutputGrammar``: a fresh
matcher per ``compile_grammar`` call, so each of a request's n choices has its
own state.  Everything vLLM-specific lives here; the core modules do the work.
"""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from vllm.v1.structured_output.backend_types import (
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)

from poot_vllm.core import faults
from poot_vllm.core.automata.dfa import DFA
from poot_vllm.core.cache import compiled_cache
from poot_vllm.core.constraints import Constraint, Kind, compile_automaton
from poot_vllm.core.errors import LimitExceeded, PootError
from poot_vllm.adapter.params import TOOL_CALL_TAG
from poot_vllm.core.limits import budget_masks_enabled, server_limits
from poot_vllm.core.vocabulary import TokenVocabulary, with_stop_ids

if TYPE_CHECKING:
    from vllm.v1.request import Request

logger = logging.getLogger("vllm.poot")

_OPTION_KINDS = {
    StructuredOutputOptions.REGEX: Kind.REGEX,
    StructuredOutputOptions.CHOICE: Kind.CHOICE,
    StructuredOutputOptions.JSON: Kind.JSON,
    StructuredOutputOptions.JSON_OBJECT: Kind.JSON_OBJECT,
    StructuredOutputOptions.GRAMMAR: Kind.GRAMMAR,
}


def constraint_for(request_type: StructuredOutputOptions, grammar_spec: str) -> Constraint:
    """The engine's (option, spec) key back to a poot constraint."""
    if request_type is StructuredOutputOptions.STRUCTURAL_TAG:
        if grammar_spec.startswith(TOOL_CALL_TAG):
            return Constraint(Kind.TOOL_CALL, grammar_spec[len(TOOL_CALL_TAG):])
        raise PootError("structural tags are not supported by the poot backend")
    kind = _OPTION_KINDS.get(request_type)
    if kind is None:
        raise PootError(f"unsupported structured output type {request_type}")
    if kind is Kind.CHOICE:
        import json

        # vLLM sends choices as JSON text; normalise it like the API server did.
        return Constraint(kind, json.dumps(json.loads(grammar_spec), ensure_ascii=False))
    if kind is Kind.JSON:
        from poot_vllm.core.constraints import schema_constraint

        return schema_constraint(grammar_spec, server_limits())
    return Constraint(kind, grammar_spec)


def _warm_up(vocab: TokenVocabulary | None = None) -> None:
    from poot_vllm.core.grammar.rule_masks import warm_up as warm_up_grammar_masks
    from poot_vllm.core.lazy_masks import warm_up  # masks' kernels too
    from poot_vllm.core.regex.charsets import category

    warm_up()
    warm_up_grammar_masks()
    for letter in "dws":  # \d \w \s tables: ~0.3 s each, once per process
        category(letter)
    if vocab is not None:
        from poot_vllm.core.lazy_masks import warm_up_loops
        from poot_vllm.core.matchers.pushdown import compiler_for
        from poot_vllm.core.token_trie import TokenTrie

        TokenTrie.build(vocab)   # ~0.5-2 s for 128k tokens; shared by every DFA compile
        compiler_for(vocab)      # xgrammar's tokenizer tables for grammars / json_object
        warm_up_loops(vocab)     # JSON string bodies' trie walks, shared by most schemas


#: (tensor, its numpy view): vLLM fills rows of one long-lived bitmask tensor,
#: and ``tensor[i].numpy()`` costs ~5 us per call; a cached view costs ~0.2 us.
_bitmask_view: tuple[Any, Any] = (None, None)


def _numpy_view(bitmask: torch.Tensor) -> Any:
    global _bitmask_view
    tensor, view = _bitmask_view
    if tensor is not bitmask:
        view = bitmask.numpy()
        _bitmask_view = (bitmask, view)  # one tuple assignment: thread-safe
    return view


@dataclass
class PootBackend(StructuredOutputBackend):
    def __post_init__(self) -> None:
        self.limits = server_limits()
        eos = getattr(self.tokenizer, "eos_token_id", None)
        self.vocab = TokenVocabulary.from_tokenizer(
            self.tokenizer, vocab_size=self.vocab_size, stop_ids=[eos] if eos is not None else []
        )
        spec = getattr(self.vllm_config, "speculative_config", None)
        self.num_speculative_tokens = int(getattr(spec, "num_speculative_tokens", 0) or 0) if spec else 0
        # Compiled artefacts live in the process's one cache (bounded by
        # POOT_MASK_CACHE_BYTES, single-flight): the n choices of a request
        # compile once, and nothing is cached twice.
        self._cache = compiled_cache()
        # Load (or JIT once per machine) the mask kernels and the process-wide
        # tables off the scheduler loop, so no request pays for them.
        self.warm_up_thread = threading.Thread(target=_warm_up, args=(self.vocab,), name="poot-warm-up",
                                                daemon=True)
        self.warm_up_thread.start()
        logger.info("poot backend ready: vocab size %d (%s tokenizer)", self.vocab.size, self.vocab.kind)

    def _vocab_for(self, stop_ids: set[int] | None) -> TokenVocabulary:
        """The vocabulary with this request's stop ids.

        Not kept: it shares ``token_bytes`` and ``token_key`` with
        ``self.vocab``, so making one costs microseconds, and what depends on
        the stop ids (DFA masks, json_object closing tables) is cached by
        ``cache_key`` in the bounded cache -- a client sending a new stop set
        per request cannot grow memory past it.  The trie and the xgrammar
        compiler and grammars depend only on the token bytes and are shared.
        """
        if not stop_ids:
            return self.vocab
        return with_stop_ids(self.vocab, stop_ids)

    def compile_grammar(
        self,
        request_type: StructuredOutputOptions,
        grammar_spec: str,
        stop_token_ids: set[int] | None = None,
        max_new_tokens: int | None = None,
    ) -> StructuredOutputGrammar:
        # An exception here fails only this request: vLLM's compile Future
        # carries it to the scheduler (FINISHED_ERROR), the engine goes on.
        faults.maybe_fail_compile(grammar_spec)
        constraint = constraint_for(request_type, grammar_spec)
        vocab = self._vocab_for(stop_token_ids)
        compiled = self._compile(constraint, vocab)
        matcher = compiled.new_matcher()
        if max_new_tokens is not None and budget_masks_enabled():
            matcher.set_token_budget(max_new_tokens)
        injected = faults.faults_in(grammar_spec)
        if injected:
            matcher = faults.FaultyMatcher(matcher, injected)
        return PootGrammar(matcher=matcher)

    def compile_for_request(self, request: "Request") -> StructuredOutputGrammar:
        """Compile with what only the request knows: stop ids and the token budget."""
        request_type, grammar_spec = request.structured_output_request.structured_output_key
        params = request.sampling_params
        stop_ids = params.all_stop_token_ids if params is not None else None
        budget = getattr(params, "max_tokens", None) if params is not None else None
        # The context limit ends a reply too (after vLLM's stop check, like max_tokens).
        from poot_vllm.core.budget import engine_token_budget

        max_model_len = getattr(getattr(self.vllm_config, "model_config", None), "max_model_len", None)
        budget = engine_token_budget(budget, max_model_len, getattr(request, "num_prompt_tokens", None))
        grammar = self.compile_grammar(request_type, grammar_spec, stop_token_ids=stop_ids, max_new_tokens=budget)
        if budget is not None and budget_masks_enabled() and isinstance(grammar, PootGrammar):
            # With a reasoning parser the constraint starts after the reasoning,
            # whose tokens count against max_tokens too: measured at the first accept.
            try:
                grammar.request_ref = weakref.ref(request)
                grammar.reply_budget = budget
            except TypeError:  # a stand-in without weak references: no reasoning to charge
                pass
        return grammar

    def compile_grammar_for_request(self, request: "Request") -> StructuredOutputGrammar:
        """What a vLLM with patches/0001 calls (no runtime hook needed for the budget)."""
        return self.compile_for_request(request)

    def _compile(self, constraint: Constraint, vocab: TokenVocabulary) -> Any:
        """The shared compiled constraint (a ``CompiledDFA`` or ``CompiledPushdown``).

        Each is cached once, single-flight: DFA masks here, per (constraint,
        limits, vocabulary with its stop ids); grammars inside
        ``compile_pushdown``, per (token bytes, grammar), whose cheap wrapper
        is not cached again (so no grammar is charged or kept twice).
        """
        from poot_vllm.core.lazy_masks import lazy_masks_enabled
        from poot_vllm.core.masks import estimate_mask_work
        from poot_vllm.core.matchers.compiled import CompiledDFA, LazyCompiledDFA
        from poot_vllm.core.matchers.pushdown import compile_pushdown

        automaton = compile_automaton(constraint, self.limits)
        if not isinstance(automaton, DFA):  # json_object, and grammars with recursion
            return compile_pushdown(automaton, vocab, self.limits)
        grammar = constraint.kind is Kind.GRAMMAR
        if grammar and estimate_mask_work(automaton, vocab.size) > self.limits.max_mask_work:
            # A regular grammar whose token masks cost too much as a DFA (the API
            # server's check_mask_work let it through by the same estimate): the
            # pushdown matcher serves it, as every grammar before; never a 400.
            # Decided before building, so no request pays a failed mask build.
            return self._grammar_on_pushdown(constraint, vocab)

        key = ("dfa", constraint, self.limits, vocab.cache_key)

        def build() -> Any:
            # Lazy (core.lazy_masks): the first mask after one trie walk, the full
            # index on the background thread; recharged in the cache once built.
            compiled = CompiledDFA.build(automaton, vocab, max_work=self.limits.max_mask_work,
                                         lazy=lazy_masks_enabled())
            if isinstance(compiled, LazyCompiledDFA):
                compiled.when_ready(lambda: self._cache.recharge(key, compiled))
            return compiled

        try:
            return self._cache.get_or_build(key, build)
        except LimitExceeded:
            if not grammar:
                raise
            return self._grammar_on_pushdown(constraint, vocab)  # the real work passed the estimate

    def _grammar_on_pushdown(self, constraint: Constraint, vocab: TokenVocabulary) -> Any:
        from poot_vllm.core.grammar.lark import parse_grammar
        from poot_vllm.core.matchers.pushdown import compile_pushdown

        return compile_pushdown(parse_grammar(constraint.spec, self.limits), vocab, self.limits)

    def allocate_token_bitmask(self, max_num_seqs: int) -> torch.Tensor:
        return torch.full((max_num_seqs, (self.vocab_size + 31) // 32), -1, dtype=torch.int32)

    def destroy(self) -> None:
        """vLLM is done with this backend: free the compiled artefacts."""
        self._cache.clear()


@dataclass
class PootGrammar(StructuredOutputGrammar):
    """One request choice's matcher, adapted to vLLM's grammar interface.

    These methods run inside vLLM's scheduler loop, where an exception would
    kill the engine core (and every request on it).  So any internal error is
    logged and turns this grammar *failed*: from then on ``accept_tokens``
    returns False, which makes vLLM finish only this request with an error
    (the client gets a 500 / a streamed error, never an unconstrained reply),
    ``validate_tokens`` rejects every draft, and ``fill_bitmask`` writes a
    harmless mask for the one step before the request ends.
    """

    matcher: Any = field(repr=False)
    failed: bool = False
    #: The request's token budget and a weak reference to the request, set by
    #: ``compile_for_request``; dropped once the matcher keeps a token.
    reply_budget: int | None = None
    request_ref: Any = field(default=None, repr=False)

    def _start_after_reasoning(self, tokens: list[int]) -> None:
        """Charge the reply's budget for the output tokens before the constraint.

        With a reasoning parser, vLLM starts the constraint after the
        reasoning (and its end marker), which used part of ``max_tokens``.
        vLLM appends a step's tokens to the request before ``accept_tokens``,
        so before the first committed accept the tokens ahead of ``tokens``
        are ``num_output_tokens - len(tokens)``.  A draft accept (speculative
        decoding) is rolled back to zero accepted tokens, so the committed
        accept that follows measures again; once a token is kept, the
        request is no longer needed.
        """
        if self.matcher.num_accepted > 0:
            self.request_ref = None
            return
        request = self.request_ref()
        if request is None or self.reply_budget is None:
            self.request_ref = None
            return
        produced = getattr(request, "num_output_tokens", None)
        if produced is None:  # a vLLM whose Request does not say: no reasoning to charge
            self.request_ref = None
            return
        before = int(produced) - len(tokens)
        self.matcher.set_token_budget(max(self.reply_budget - max(before, 0), 0))

    def _fail(self, op: str, request_id: str | None = None) -> None:
        self.failed = True
        logger.exception("poot: internal error in %s%s; ending this request only", op,
                         f" (request {request_id})" if request_id else "")

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        if self.failed:
            return False
        try:
            if self.request_ref is not None:
                self._start_after_reasoning(tokens)
            ok = self.matcher.accept_tokens(tokens)
        except Exception:
            self._fail("accept_tokens", request_id)
            return False
        if not ok:
            logger.warning("poot: request %s produced a token the constraint rejects", request_id)
        return ok

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        if self.failed:
            return []
        try:
            return self.matcher.validate_tokens(tokens)
        except Exception:
            self._fail("validate_tokens")
            return []

    def rollback(self, num_tokens: int) -> None:
        if self.failed:
            return
        try:
            self.matcher.rollback(num_tokens)
        except Exception:
            self._fail("rollback")

    def fill_bitmask(self, bitmask: torch.Tensor, batch_index: int) -> None:
        if not self.failed:
            try:
                self.matcher.fill_bitmask(_numpy_view(bitmask)[batch_index])
                return
            except Exception:
                self._fail("fill_bitmask")
        # Any token: the next accept_tokens fails the request, so what is
        # sampled here is never delivered; an all-zero row could yield NaNs.
        bitmask[batch_index].fill_(-1)

    def is_terminated(self) -> bool:
        if self.failed:
            return False
        try:
            return self.matcher.is_terminated()
        except Exception:
            self._fail("is_terminated")
            return False

    def reset(self) -> None:
        try:
            self.matcher.reset()
            self.failed = False
        except Exception:
            self._fail("reset")
