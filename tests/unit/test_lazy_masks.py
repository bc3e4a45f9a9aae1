"""Lazy masks (core.lazy_masks): served before the full index is built, and the same masks.

The oracle is the eager index (``CompiledDFA.build`` without ``lazy``), itself
held against brute force in test_masks.py / test_matcher.py.  A lazy matcher
is driven through random replies with accepts, speculative validation and
rollbacks, under no budget, a loose one and tight ones; at every step its mask
must equal the eager matcher's.  The background build is held back (the
pending index is built only where the test says), so the lazy path itself is
what runs, and the switch to the full index mid-reply is tested too.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poot_vllm.core.automata.compilers import compile_regex
from poot_vllm.core.cache import ByteCache
from poot_vllm.core.json_schema import compile_json_schema
from poot_vllm.core import lazy_masks
from poot_vllm.core.lazy_masks import PendingMasks, lazy_eligible
from poot_vllm.core.matchers.compiled import CompiledDFA, LazyCompiledDFA
from poot_vllm.core.matchers.dfa import CountedDFAMatcher, DFAMatcher, LazyCountedDFAMatcher, LazyDFAMatcher
from poot_vllm.core.token_trie import TokenTrie
from poot_vllm.core.masks import _NO_SEEN, UNREACHABLE, _walk_dfa
from poot_vllm.core.vocabulary import TokenVocabulary, with_stop_ids
from tests.bench_data import bench_path, needs_bench

from mask_helpers import allowed_set, make_vocab, random_dfa, random_vocab

PIECES = [b'{"', b'":', b'",', b'"}', b"true", b"false", b"null", b"12", b"ab", b"abc", b"name", b'"name":"',
          b", ", b"]", b"[1", b"\xc3\xa9", b"\xe2\x82\xac", b"  ", b"ba"]
#: Every byte a token (byte-level BPE), a few longer tokens, a stop id.
FULL = make_vocab([bytes([b]) for b in range(256)] + PIECES + [None], {256 + len(PIECES)}, 256 + len(PIECES) + 3)

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "ok": {"type": "boolean"},
                                           "tags": {"type": "array", "items": {"enum": ["ab", "ba", "é"]}}},
          "required": ["name"]}
#: Bounded strings and arrays: counted DFAs (a counter instead of copies).
COUNTED_SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 20}, "note": {"type": "string", "minLength": 1, "maxLength": 30},
    "tags": {"type": "array", "maxItems": 17, "items": {"enum": ["ab", "ba"]}}}, "required": ["name", "note"]}
DFAS = {
    "regex": compile_regex(r"(ab|ba|c)*( ?\((1|12)(,12)*\))?"),
    "utf8": compile_regex(r"[a-zé€]{1,6}(-[0-9]+)?"),
    "schema": compile_json_schema(json.dumps(SCHEMA)),
    "counted": compile_regex(r"(ab|c){0,20}(,[a-c]{1,17})*"),
    "counted_schema": compile_json_schema(json.dumps(COUNTED_SCHEMA)),
}


def _pending(dfa, vocab=FULL, max_work=None, loops=True) -> PendingMasks:
    """A pending index whose full build has not started (nothing submitted).
    With ``loops``, every state counts as expensive, so its row goes through its
    loop's cached walk (the test vocabulary is too small for any to be)."""
    saved = lazy_masks.LAZY_MAX_NODES
    lazy_masks.LAZY_MAX_NODES = -1 if loops else saved
    try:
        return PendingMasks(dfa, vocab, TokenTrie.build(vocab), max_work)
    finally:
        lazy_masks.LAZY_MAX_NODES = saved


def _mask(matcher) -> set[int]:
    row = np.zeros((FULL.size + 31) // 32, dtype=np.int32)
    matcher.fill_bitmask(row)
    return allowed_set(row, FULL.size)


def _drive(lazy, eager, rng: random.Random, steps: int, build_at: int | None, pending: PendingMasks) -> None:
    """Random reply on both matchers; masks equal at every step."""
    for step in range(steps):
        if step == build_at:
            pending.run()
        want = _mask(eager)
        assert _mask(lazy) == want, f"step {step}"
        if not want or eager.is_terminated():
            return
        drafts = [rng.choice(sorted(want))] + [rng.randrange(FULL.size) for _ in range(2)]
        assert lazy.validate_tokens(drafts) == eager.validate_tokens(drafts)
        if rng.random() < 0.2 and eager.num_accepted:
            n = rng.randint(1, eager.num_accepted)
            lazy.rollback(n)
            eager.rollback(n)
            continue
        token = drafts[0]
        assert lazy.accept_tokens([token]) and eager.accept_tokens([token])
        assert lazy.is_terminated() == eager.is_terminated()


@pytest.mark.parametrize("name", sorted(DFAS))
@pytest.mark.parametrize("budget", [None, 400, "tight"])
@pytest.mark.parametrize("build_at", [None, 5])
@pytest.mark.parametrize("loops", [False, True])
def test_lazy_masks_equal_the_full_index_at_every_step(name, budget, build_at, loops):
    dfa = DFAS[name]
    eager_index = CompiledDFA.build(dfa, FULL)
    for seed in range(6):
        rng = random.Random(seed)
        pending = _pending(dfa, loops=loops)
        lazy, eager = LazyCompiledDFA(pending).new_matcher(), eager_index.new_matcher()
        b = pending.bound + rng.randint(-2, 3) if budget == "tight" else budget
        if b is not None:
            eager.set_token_budget(b)
            lazy.set_token_budget(b)
        if budget == "tight" and b <= pending.bound:
            assert pending.ready and lazy._pending is None  # a tight max_tokens waits at compile time
        _drive(lazy, eager, rng, 60, build_at, pending)


def test_a_string_state_is_its_loop_walk_plus_the_walks_past_its_exits():
    # two string properties: the same loop (the string body) in two places, so
    # one cached walk serves both, and the tokens that close each string
    # (`",` / `"}` / `"`) differ by what follows it
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
              "required": ["a", "b"]}
    dfa = compile_json_schema(json.dumps(schema))
    pending = _pending(dfa)
    eager = CompiledDFA.build(dfa, FULL).index
    text = b'{"a":"x'
    s_a = dfa.run(text)[0]
    s_b = dfa.run(b'{"a":"","b":"x')[0]
    assert pending._loop_row(s_a) is not None and pending._loop_row(s_b) is not None
    for s in (s_a, s_b):
        assert (pending.row(s) == eager.row(s)).all()
    assert not (eager.row(s_a) == eager.row(s_b)).all()  # `",` closes only a


def test_a_request_stop_id_with_bytes_is_never_text_on_the_loop_path():
    # a request's stop_token_ids may name an ordinary token ("x" here, and "ab"):
    # it ends the reply, so no row may allow it as text, inside a loop or past it
    stops = {FULL.token_bytes.index(b"x"), FULL.token_bytes.index(b"ab"), *FULL.stop_ids}
    vocab = with_stop_ids(FULL, stops)
    dfa = DFAS["schema"]
    pending = _pending(dfa, vocab)
    eager = CompiledDFA.build(dfa, vocab).index
    state = dfa.run(b'{"name":"q')[0]
    assert pending._loop_row(state) is not None
    assert (pending.row(state) == eager.row(state)).all()
    assert not stops & allowed_set(pending.row(state), vocab.size)


def test_before_the_build_only_the_visited_states_are_walked():
    dfa = DFAS["schema"]
    pending = _pending(dfa, loops=False)
    lazy = LazyDFAMatcher(pending)
    _mask(lazy)
    assert not pending.ready and set(pending._rows) == {dfa.start}
    assert lazy.accept_tokens([FULL.token_bytes.index(b'{"')])
    _mask(lazy)
    assert len(pending._rows) == 2 and pending.index is None
    pending.run()
    _mask(lazy)
    assert lazy._pending is None and pending._rows == {}  # switched, and the walked rows dropped


def _lazy_and_eager(dfa, vocab, loops: bool, rng: random.Random, budgets: list):
    """A lazy matcher (every state through its loop with ``loops``) and an eager
    one over ``dfa``, with the same budget drawn from ``budgets``."""
    trie = TokenTrie.build(vocab)
    saved = lazy_masks.LAZY_MAX_NODES
    lazy_masks.LAZY_MAX_NODES = -1 if loops else saved
    try:
        pending = PendingMasks(dfa, vocab, trie, None)
    finally:
        lazy_masks.LAZY_MAX_NODES = saved
    assert lazy_eligible(dfa, trie, pending.is_stop, None)
    lazy, eager = LazyCompiledDFA(pending).new_matcher(), CompiledDFA.build(dfa, vocab).new_matcher()
    budget = rng.choice(budgets)
    lazy.set_token_budget(budget)
    eager.set_token_budget(budget)
    return lazy, eager


def _same_masks_on_a_random_reply(lazy, eager, vocab, rng: random.Random, steps: int) -> None:
    words = (vocab.size + 31) // 32
    for _ in range(steps):
        a, b = np.zeros(words, np.int32), np.zeros(words, np.int32)
        lazy.fill_bitmask(a)
        eager.fill_bitmask(b)
        assert (a == b).all()
        allowed = sorted(allowed_set(b, vocab.size))
        if not allowed or eager.is_terminated():
            break
        t = rng.choice(allowed)
        assert lazy.accept_tokens([t]) and eager.accept_tokens([t])
        assert getattr(lazy, "counter", 0) == getattr(eager, "counter", 0)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9), st.booleans())
def test_lazy_equals_eager_on_random_dfas_and_vocabularies(seed, loops):
    """Random DFAs (random loops, exits anywhere) and vocabularies; with ``loops``
    every state's row goes through its loop's cached walk."""
    rng = random.Random(seed)
    dfa = random_dfa(rng, b"abc", rng.randint(2, 9))
    vocab = random_vocab(rng, b"abc", rng.randint(3, 12), all_singles=True)
    lazy, eager = _lazy_and_eager(dfa, vocab, loops, rng, [None, rng.randint(1, 12)])
    _same_masks_on_a_random_reply(lazy, eager, vocab, rng, 25)


COUNTED_PATTERNS = [r"(?:[ab]){0,%d}(?:,c{1,%d})*", r"a(?:b|cc){1,%d}(?:,[ab]{0,%d})?", r"(?:ab){0,%d},(?:[ac]){0,%d}"]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9), st.booleans())
def test_lazy_equals_eager_on_counted_dfas_with_long_tokens(seed, loops):
    """Counted regions (bounds 16-22) against random vocabularies whose tokens
    reach 30 bytes: a token can pass a region's bound from inside it, enter the
    next region and pass that one (never allowed), or fit only at low counters;
    with ``loops`` every state's list goes through its loop's cached guard walk."""
    rng = random.Random(seed)
    dfa = compile_regex(rng.choice(COUNTED_PATTERNS) % (rng.randint(16, 22), rng.randint(16, 22)))
    assert dfa.actions is not None
    runs = [rng.choice([b"", b","]) + rng.choice([b"a", b"b", b"c", b"ab", b"cc"]) * rng.randint(5, 24)
            for _ in range(rng.randint(0, 8))]  # long enough to pass a bound, or to enter a region and pass it
    pieces = [bytes(rng.choice(b"abc,") for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(5, 30))]
    tokens = sorted(set(runs + pieces) | {bytes([b]) for b in b"abc,"})
    rng.shuffle(tokens)
    vocab = make_vocab(tokens + [None], {len(tokens)}, len(tokens) + 3)
    lazy, eager = _lazy_and_eager(dfa, vocab, loops, rng, [None, None, rng.randint(1, 40)])
    _same_masks_on_a_random_reply(lazy, eager, vocab, rng, 40)


def test_not_lazy_where_a_byte_has_no_token():
    # "c" only inside "abc": the vocabulary cannot spell every byte, so a state
    # may be token-dead and only the full build knows the rows
    partial = make_vocab([b"a", b"b", b"abc", None], {3}, 4)
    compiled = CompiledDFA.build(compile_regex(r"(a|b|c)+"), partial, lazy=True)
    assert isinstance(compiled, CompiledDFA)
    lazy = CompiledDFA.build(DFAS["regex"], FULL, lazy=True)
    assert isinstance(lazy, LazyCompiledDFA)
    lazy.pending.wait()  # the background thread builds it (or this call does)
    assert isinstance(lazy.new_matcher(), DFAMatcher) and not isinstance(lazy.new_matcher(), LazyDFAMatcher)


def test_a_counted_dfa_is_lazy_and_its_matchers_count():
    counted = compile_regex(r"[a-z]{0,300}")
    assert counted.actions is not None
    lazy = CompiledDFA.build(counted, FULL, lazy=True)
    assert isinstance(lazy, LazyCompiledDFA)
    assert isinstance(lazy.new_matcher(), LazyCountedDFAMatcher) or lazy.pending.ready
    lazy.pending.wait()
    assert isinstance(lazy.new_matcher(), CountedDFAMatcher)


def test_counted_lists_past_their_memory_bound_wait_for_the_full_index(monkeypatch):
    # the lazy counter lists are bounded (GUARD_BYTES); past it the matcher takes
    # the full index (which shares equal lists), at compile time when the
    # prefetch passes it, else at the visit that does
    monkeypatch.setattr(lazy_masks, "GUARD_BYTES", 0)
    dfa = DFAS["counted_schema"]
    monkeypatch.setattr(lazy_masks, "LAZY_MAX_NODES", -1)  # every state prefetched: lists at compile time
    assert isinstance(CompiledDFA.build(dfa, FULL, lazy=True), CompiledDFA)
    monkeypatch.setattr(lazy_masks, "LAZY_MAX_NODES", 16384)
    pending = _pending(dfa, loops=False)
    lazy, eager = LazyCountedDFAMatcher(pending), CompiledDFA.build(dfa, FULL).new_matcher()
    _drive(lazy, eager, random.Random(1), 40, None, pending)
    assert pending.ready and pending.index is not None


@pytest.mark.parametrize("name", ["schema", "counted_schema"])
def test_a_failed_full_build_keeps_serving_exact_rows_and_finishes_in_budget(name):
    dfa = DFAS[name]
    pending = _pending(dfa, max_work=1)  # the real work passes any limit this small
    pending.run()
    assert pending.error is not None and pending.index is None
    eager_index = CompiledDFA.build(dfa, FULL)
    for seed in range(10):
        rng = random.Random(seed)
        lazy, eager = LazyCompiledDFA(pending).new_matcher(), eager_index.new_matcher()
        _drive(lazy, eager, rng, 30, None, pending)  # no budget: the plain rows
        budget = int(pending.byte_dist[dfa.start]) + rng.randint(0, 4)
        lazy = LazyCompiledDFA(pending).new_matcher()
        lazy.set_token_budget(budget)
        text = b""
        while not lazy.is_terminated():
            allowed = sorted(_mask(lazy))
            assert allowed, text
            t = rng.choice(allowed)
            assert lazy.accept_tokens([t])
            text += FULL.token_bytes[t] or b""
        assert lazy.num_accepted <= budget and dfa.matches(text)


def test_the_cache_charges_the_built_index_once_ready():
    cache = ByteCache("t", 1 << 30)
    pending = _pending(DFAS["schema"])
    compiled = LazyCompiledDFA(pending)
    cache.get_or_build("k", lambda: compiled)
    before = cache.nbytes
    compiled.when_ready(lambda: cache.recharge("k", compiled))
    pending.run()
    assert cache.nbytes < before  # the upper bound replaced by the real size
    assert cache.nbytes >= pending.index.nbytes


@needs_bench("vocab", "llama3-bpe-128k", "tokenizer.json")
def test_on_a_real_vocabulary_a_first_visit_is_short_and_the_masks_are_the_full_indexs():
    """Llama-3's 128k tokens: after compile (prefetch), no state left for a first
    visit walks more than ``LAZY_MAX_NODES`` trie nodes, and random replies see
    the full index's masks with or without the loops (strings of two schemas)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(bench_path("vocab", "llama3-bpe-128k")))
    vocab = TokenVocabulary.from_tokenizer(tok)
    trie = TokenTrie.build(vocab)
    words = trie.words
    for schema in (SCHEMA, {"type": "object", "properties": {
            "id": {"type": "integer"}, "note": {"type": "string"}, "to": {"type": "object", "properties": {
                "name": {"type": "string"}, "mail": {"type": "string", "format": "email"}}}},
            "required": ["id", "note"]}):
        dfa = compile_json_schema(json.dumps(schema))
        pending = PendingMasks(dfa, vocab, trie, None)
        assert lazy_eligible(dfa, trie, pending.is_stop, None) and pending.expensive.any()
        pending.prefetch()
        stack = np.empty(trie.max_depth + 1, dtype=np.int32)
        for s in np.flatnonzero(~pending.expensive):
            work = np.zeros(1, dtype=np.int64)
            _walk_dfa(pending.transitions, int(s), trie.node_byte, trie.node_depth, trie.node_end, trie.tok_offsets,
                      trie.tok_ids, pending.is_stop, pending.byte_dist, int(UNREACHABLE), np.zeros(words, np.uint32),
                      False, _NO_SEEN, 0, _NO_SEEN, stack, work)
            assert work[0] <= lazy_masks.LAZY_MAX_NODES
        eager = CompiledDFA.build(dfa, vocab).index
        for s in range(dfa.transitions.shape[0]):
            assert (pending.row(s) == eager.row(s)).all(), s


@pytest.mark.parametrize("seed", range(40))
def test_a_first_visit_walks_only_the_subtrees_of_the_bytes_it_reads(seed):
    """``PendingMasks._walk`` enters only the first-level subtrees of the bytes a
    state reads (a narrow state's first row at 128k tokens: ~0.02 ms, not ~0.2);
    its rows equal the one trie walk's (``masks._walk_dfa``) for every state,
    with no filter and with byte distances at every limit (``fill_restricted``)."""
    rng = random.Random(seed)
    dfa = random_dfa(rng, b"abc{ ", rng.randint(2, 9))
    vocab = random_vocab(rng, b"abc{ ", rng.randint(3, 30), all_singles=rng.random() < 0.5)
    pending = PendingMasks(dfa, vocab, TokenTrie.build(vocab), None)
    trie = pending.trie
    stack = np.empty(trie.max_depth + 1, dtype=np.int32)
    for s in range(pending.n_states):
        for score, limit in [(pending._zeros, 0)] + [(pending.byte_dist, k) for k in range(-1, 6)]:
            want = np.zeros(trie.words, np.uint32)
            _walk_dfa(pending.transitions, s, trie.node_byte, trie.node_depth, trie.node_end, trie.tok_offsets,
                      trie.tok_ids, pending.is_stop, score, limit, want, False, _NO_SEEN, 0, _NO_SEEN, stack,
                      np.zeros(1, dtype=np.int64))
            assert (pending._walk(s, score, limit) == want).all(), (s, limit)


def test_past_the_backlog_a_compile_builds_its_own_index(monkeypatch):
    # the background queue is bounded: a burst of new constraints falls back to
    # the eager build instead of queueing work (and memory) without limit
    monkeypatch.setattr(lazy_masks, "MAX_BACKLOG", 0)
    compiled = CompiledDFA.build(DFAS["regex"], FULL, lazy=True)
    assert isinstance(compiled, CompiledDFA)


def test_near_the_mask_work_limit_the_index_is_built_before_the_first_mask():
    # the estimate can be a few times off: only well inside the limit are masks
    # served before the build, so a constraint whose real work passes
    # max_mask_work still fails at compile time (LimitExceeded), as without lazy masks
    from poot_vllm.core.errors import LimitExceeded
    from poot_vllm.core.masks import estimate_mask_work

    # (or where the vocabulary's own bound of the full build's work is inside it)
    dfa = DFAS["schema"]
    estimate = estimate_mask_work(dfa, FULL.size)
    trie = TokenTrie.build(FULL)
    bound = lazy_masks.work_bound(dfa, trie)
    is_stop = _pending(dfa).is_stop
    assert lazy_eligible(dfa, trie, is_stop, estimate * lazy_masks.LAZY_WORK_SHARE)
    assert lazy_eligible(dfa, trie, is_stop, bound)
    assert not lazy_eligible(dfa, trie, is_stop, min(estimate * lazy_masks.LAZY_WORK_SHARE, bound) - 1)
    with pytest.raises(LimitExceeded):
        CompiledDFA.build(dfa, FULL, max_work=min(estimate, bound) // 100, lazy=True)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**9), st.booleans())
def test_the_work_bound_bounds_the_full_builds_work(seed, counted):
    """``work_bound`` is what lets a constraint whose vocabulary-free estimate is
    near the limit be served lazily: the full build's real trie-node visits never
    pass it (random DFAs, counted regions, random vocabularies with long tokens)."""
    from poot_vllm.core.masks import DFAMaskIndex

    rng = random.Random(seed)
    if counted:
        dfa = compile_regex(rng.choice(COUNTED_PATTERNS) % (rng.randint(16, 22), rng.randint(16, 22)))
    else:
        dfa = random_dfa(rng, b"abc,", rng.randint(2, 12))
    tokens = sorted({bytes(rng.choice(b"abc,") for _ in range(rng.randint(1, 24))) for _ in range(rng.randint(3, 40))}
                    | {bytes([b]) for b in b"abc,"})
    vocab = make_vocab(tokens + [None], {len(tokens)}, len(tokens) + 3)
    trie = TokenTrie.build(vocab)
    index = DFAMaskIndex.build(dfa, vocab, trie)
    assert index.mask_work <= lazy_masks.work_bound(dfa, trie)
    for name in DFAS:
        index = DFAMaskIndex.build(DFAS[name], FULL, TokenTrie.build(FULL))
        assert index.mask_work <= lazy_masks.work_bound(DFAS[name], TokenTrie.build(FULL)), name


def test_a_background_build_shortens_the_gil_switch_interval_while_it_runs():
    # the build's Python code holds the GIL between its kernels; a scheduler thread that
    # wants it then waits at most the switch interval (5 ms by default, 0.5 ms during builds)
    import sys
    import threading

    before = sys.getswitchinterval()
    started, release, seen = threading.Event(), threading.Event(), []

    class Build:
        def run(self):
            seen.append(sys.getswitchinterval())
            started.set()
            release.wait(10)

    lazy_masks.submit(Build())
    assert started.wait(10)
    assert seen == [lazy_masks.BUILD_SWITCH_INTERVAL] and lazy_masks.BUILD_SWITCH_INTERVAL < before
    release.set()
    lazy_masks.drain()
    assert sys.getswitchinterval() == before


@needs_bench("vocab", "llama3-bpe-128k", "tokenizer.json")
def test_start_up_makes_the_string_body_walks_that_schemas_share():
    """The backend's start-up thread makes the loop walks of JSON string bodies
    (lazy_masks.warm_up_loops), so the first schema holding one -- in an
    object, plain and counted past the longest token, also as tool-call
    arguments (no raw '<') -- walks no loop of its own in its compile (each
    ~5-40 ms at 128k tokens, in the scheduler loop)."""
    from transformers import AutoTokenizer

    from poot_vllm.core.automata.compilers import regex_to_dfa
    from poot_vllm.core.cache import compiled_cache
    from poot_vllm.core.json_schema import schema_to_regex

    vocab = TokenVocabulary.from_tokenizer(AutoTokenizer.from_pretrained(str(bench_path("vocab", "llama3-bpe-128k"))))
    trie = TokenTrie.build(vocab)
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string", "maxLength": 300}},
              "required": ["a", "b"]}

    def walks() -> set:
        return {k for k in list(compiled_cache()._items) if k[0] in ("loop-walk", "loop-guard")
                and k[1] == vocab.token_key}

    def forget() -> None:
        compiled_cache().clear(keep=lambda key: not (key[0] in ("loop-walk", "loop-guard")
                                                     and key[1] == vocab.token_key))

    def compile_(escaped: str) -> set:
        before = walks()
        PendingMasks(regex_to_dfa(schema_to_regex(schema, escaped=escaped)), vocab, trie, None).prefetch()
        return walks() - before

    forget()
    cold = compile_("") | compile_("<")
    assert cold, "without the warm-up the schema's compiles walk its string bodies"
    forget()
    lazy_masks.warm_up_loops(vocab)
    assert cold <= walks()
    assert compile_("") == set() and compile_("<") == set()
