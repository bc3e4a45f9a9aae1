"""Replies that complete: the shortest conforming reply, and admission by it.

The engine's budget-aware masks (``DFAMatcher.set_token_budget``,
``PushdownMatcher.set_token_budget``) make a reply finish inside its token
budget whenever the shortest conforming reply fits.  This module answers the
admission question in the API server, before the engine is asked: *how many
tokens does the shortest conforming reply take with this model's vocabulary?*
If that exceeds what the request allows (``max_tokens``, already capped by
vLLM at the context left after the prompt), the request is a 400 naming both
numbers, rather than a reply that is cut off and does not parse.

Counts include the stop token: vLLM checks for a stop token before the
length limit (``vllm/v1/core/sched/utils.py`` ``check_stop``), so a stop
sampled as the ``max_tokens``-th token ends the reply with
``finish_reason: "stop"``; the stop token is one of the ``max_tokens``.

Exactness, per constraint kind (never refuse a request that could fit):

* DFA kinds (regex, choice, JSON Schema, tool calls): exact (for a DFA with
  counted regions, the same distances the engine uses:
  :func:`poot_vllm.core.automata.counters.without_increments`).  A forward BFS
  over the model's tokens from the start state (the mask kernel's trie walk,
  :func:`poot_vllm.core.masks._walk_trie`, once per state, stopping at the
  first accepting state) gives the same number as the engine's ``min_tokens_to_accept[start]``
  without computing any mask.  If the walk passes ``Limits.max_mask_work``
  the request is admitted (no refusal without proof).
* ``json_object``: exact (1 text token if one token spells a whole object,
  else 2, plus the stop).
* general GBNF: the sound lower bound "the stop token" (the grammar may accept
  the empty reply); GBNF replies are not budget-aware in the engine.

The vocabulary used here is the model's, with only the EOS stop id.  A request
whose ``stop_token_ids`` name ordinary text tokens takes those tokens away from
the reply in the engine, which can only make the shortest reply longer, so the
number here stays a lower bound (never a wrong refusal).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from poot_vllm.core.automata.dfa import DFA
from poot_vllm.core.cache import compiled_cache
from poot_vllm.core.errors import PootError
from poot_vllm.core.masks import _shortest_text_tokens

#: Result of the BFS when it gave up (work cap) or found no reply.
_GAVE_UP = -2
_NO_REPLY = -1


class ReplyDoesNotFit(PootError):
    """The shortest reply the constraint allows is longer than the request's token budget."""

    def __init__(self, shortest: int, allowed: int, field: str = "max_tokens") -> None:
        super().__init__(
            f"the shortest reply this constraint allows is {shortest} tokens (the stop token included), "
            f"but this request allows at most {allowed} ({field}, or the model's context left after the "
            f"prompt); raise {field} to at least {shortest}, shorten the prompt, or loosen the constraint",
            field=field,
        )
        self.shortest = shortest
        self.allowed = allowed


def _stop_cost(vocab: Any) -> int:
    return 1 if vocab.stop_ids else 0


def shortest_dfa_reply(dfa: Any, vocab: Any, trie: Any = None, max_work: int | None = None) -> int | None:
    """Fewest tokens (stop included) of a reply matching ``dfa`` with ``vocab``;
    ``None`` when unknown (the walk passed ``max_work``, or no reply exists --
    the engine refuses that constraint itself)."""
    from poot_vllm.core.token_trie import TokenTrie

    if trie is None:
        trie = TokenTrie.build(vocab)
    from poot_vllm.core.automata.counters import without_increments

    # A counted DFA: the moves every counter value allows, as the engine's distances (masks.py).
    trans = np.ascontiguousarray(without_increments(dfa.transitions, getattr(dfa, "actions", None)), dtype=np.int32)
    accepting = np.ascontiguousarray(dfa.accepting, dtype=np.bool_)
    is_stop = np.zeros(trie.size, dtype=np.bool_)
    for t in vocab.stop_ids:
        if 0 <= t < trie.size:
            is_stop[t] = True
    n = _shortest_text_tokens(trans, np.int32(dfa.start), accepting, trie.node_byte, trie.node_depth,
                              trie.node_end, trie.tok_offsets, trie.tok_ids, is_stop, np.int64(trie.max_depth),
                              np.int64(-1 if max_work is None else max_work))
    if n < 0:
        return None
    return int(n) + _stop_cost(vocab)


def shortest_reply(constraint: Any, vocab: Any, limits: Any = None) -> int | None:
    """Fewest tokens (stop included) of any reply conforming to ``constraint``,
    or a sound lower bound (see the module docstring); ``None`` if unknown.
    Cached per (constraint, vocabulary, limits)."""
    from poot_vllm.core.limits import DEFAULT_LIMITS

    limits = limits or DEFAULT_LIMITS
    key = ("shortest", constraint, vocab.cache_key, limits)
    # In the process's compiled-artefact cache (one budget with the masks);
    # single-flight, so concurrent admissions of one constraint walk once.
    return compiled_cache().get_or_build(key, lambda: _shortest_reply(constraint, vocab, limits))


def _shortest_reply(constraint: Any, vocab: Any, limits: Any) -> int | None:
    from poot_vllm.core.constraints import Kind, compile_automaton

    if constraint.kind is Kind.JSON_OBJECT:
        from poot_vllm.core.grammar.json_budget import closing_tables, shortest_object_tokens

        tables = closing_tables(vocab)
        text = shortest_object_tokens(tables) if tables is not None else 1
        return text + _stop_cost(vocab)
    automaton = compile_automaton(constraint, limits)
    if not isinstance(automaton, DFA):
        # A grammar with recursion (GBNF/Lark, or a recursive JSON Schema): only the stop
        # token is certain here; the engine's budget masks finish the reply in time.
        return _stop_cost(vocab)
    return shortest_dfa_reply(automaton, vocab, max_work=getattr(limits, "max_mask_work", None))


def check_reply_fits(constraint: Any, max_tokens: int | None, vocab: Any, limits: Any = None,
                     field: str = "max_tokens") -> None:
    """Raise :class:`ReplyDoesNotFit` if no conforming reply fits ``max_tokens``."""
    if max_tokens is None:
        return
    shortest = shortest_reply(constraint, vocab, limits)
    if shortest is not None and shortest > max_tokens:
        raise ReplyDoesNotFit(shortest, int(max_tokens), field)


def engine_token_budget(max_tokens: int | None, max_model_len: int | None, prompt_len: int | None) -> int | None:
    """Tokens a reply may take in the engine, stop token included: ``max_tokens``,
    capped by the context left after the prompt (vLLM ends a request at
    ``max_model_len`` total tokens, after its stop-token check)."""
    budget = max_tokens
    if max_model_len is not None and prompt_len is not None:
        left = int(max_model_len) - int(prompt_len)
        budget = left if budget is None else min(int(budget), left)
    return None if budget is None else max(int(budget), 0)


class ServerVocabulary:
    """The served model's :class:`~poot_vllm.core.vocabulary.TokenVocabulary` in the
    API-server process, built once (in the background from ``record``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokenizer: Any = None
        self._vocab_size: int | None = None
        self._vocab: Any = None

    def record(self, tokenizer: Any, vocab_size: int | None, warm: bool = True) -> None:
        with self._lock:
            if tokenizer is None or self._tokenizer is tokenizer:
                return
            self._tokenizer, self._vocab_size, self._vocab = tokenizer, vocab_size, None
        if warm:
            threading.Thread(target=self._warm, name="poot-budget-warm-up", daemon=True).start()

    def _warm(self) -> None:
        try:
            vocab = self.get()
            if vocab is not None:
                from poot_vllm.core.token_trie import TokenTrie

                TokenTrie.build(vocab)
        except Exception:  # admission then builds it on first use (and logs there)
            pass

    def get(self) -> Any:
        """The vocabulary, or None if no tokenizer was recorded."""
        with self._lock:
            if self._vocab is not None or self._tokenizer is None:
                return self._vocab
            from poot_vllm.core.vocabulary import TokenVocabulary

            self._vocab = TokenVocabulary.from_tokenizer(self._tokenizer, vocab_size=self._vocab_size)
            return self._vocab


SERVER_VOCABULARY = ServerVocabulary()
