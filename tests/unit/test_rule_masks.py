"""poot's own grammar masks (core/grammar/rule_masks.py, matchers/rules.py).

The oracle is xgrammar's matcher on the same grammar and vocabulary: at every
step of random replies, poot's mask must be exactly xgrammar's (where they
differ, xgrammar's own token-by-token parse decides: its 0.2.8 mask misses
tokens in some recursive grammars), and both must accept and refuse the
same tokens; the sentences they end in are checked by
each grammar's Lark twin.  Rollback, validation and the fallbacks are held to
the same masks.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from poot_vllm.core.grammar import parse_gbnf
from poot_vllm.core.grammar.rule_automata import MAX_CONFIGS, rule_automata
from poot_vllm.core.matchers.rules import RuleMatcher
from poot_vllm.core.vocabulary import TokenVocabulary

from tests.unit.test_grammar_budget import GRAMMARS, MODELLED, STOP, VOCAB, _allowed, compile_grammar, plain_matcher
from tests.unit.test_pushdown_matcher import oracle, sample, tokenize_randomly


def _row(m, vocab) -> np.ndarray:
    row = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    m.fill_bitmask(row)
    return row


#: (reply so far, tokens) where xgrammar's mask missed tokens its matcher accepts
XGRAMMAR_MASK_MISSES: list = []


def _walk_both(gbnf: str, vocab: TokenVocabulary, rng: random.Random, steps: int, bias_text: bytes = b""):
    """Random replies on poot's and xgrammar's matchers in lockstep; masks equal at every step
    (or, where xgrammar's mask misses a token, its matcher accepts it and poot allows it)."""
    comp = compile_grammar(gbnf, vocab, own=True)
    assert comp.compiled is None, "expected poot's own masks"
    mine, ref = comp.new_matcher(), plain_matcher(gbnf, vocab)
    assert isinstance(mine, RuleMatcher)
    stop = min(vocab.stop_ids)
    out = b""
    for _ in range(steps):
        a, b = _row(mine, vocab), _row(ref, vocab)
        if not np.array_equal(a, b):
            # xgrammar 0.2.8's mask can miss a token its own matcher accepts (random grammars found
            # 'root ::= ")" | "a" root root': after "a", "))" is accepted but not in its mask).  Where
            # the masks differ, xgrammar's matcher (a full Earley parse of the token) decides.
            mine_set = set(np.flatnonzero(np.unpackbits(a.view(np.uint8), bitorder="little")).tolist())
            ref_set = set(np.flatnonzero(np.unpackbits(b.view(np.uint8), bitorder="little")).tolist())
            # poot keeps at most MAX_CONFIGS parses of an ambiguous grammar (the cheapest: a reply can
            # always finish): once a reply passed that, a parse it dropped may have allowed a token
            # (docs/gbnf.md), a narrowing; never a token xgrammar refuses.
            capped = any(len(h) >= MAX_CONFIGS for h in mine._history)
            for t in mine_set ^ ref_set:
                if capped and t in ref_set:
                    continue
                assert (t in mine_set) == (ref.validate_tokens([t]) == [t]), (out, t, t in mine_set)
            XGRAMMAR_MASK_MISSES.append((out, sorted(mine_set - ref_set)))
        allowed = np.flatnonzero(np.unpackbits(a.view(np.uint8), bitorder="little")[:vocab.size]).tolist()
        if not allowed or mine.is_terminated():
            break
        text = [t for t in allowed if t != stop]
        t = rng.choice(text) if text and rng.random() < 0.9 else rng.choice(allowed)
        # A token the grammar refuses is refused by both, state unchanged.
        bad = rng.randrange(vocab.size)
        if bad not in allowed:
            assert not mine.accept_tokens([bad]) and not ref.accept_tokens([bad])
        assert mine.accept_tokens([t]) and ref.accept_tokens([t])
        if t != stop:
            out += vocab.token_bytes[t]
    return mine, ref, out


@pytest.mark.parametrize("name", MODELLED)
def test_masks_equal_xgrammars_along_random_replies(name):
    gbnf, lark_text = GRAMMARS[name]
    accepts = oracle(lark_text)
    for seed in range(6):
        mine, ref, out = _walk_both(gbnf, VOCAB, random.Random(seed), 40)
        assert mine.is_terminated() == ref.is_terminated()
        if mine.is_terminated():
            assert accepts(out.decode()), out


@pytest.mark.parametrize("name", MODELLED)
def test_sampled_sentences_are_accepted_token_by_token(name):
    """Sentences of the grammar, split into tokens at random: accepted, then the stop token."""
    gbnf, _ = GRAMMARS[name]
    comp = compile_grammar(gbnf, own=True)
    grammar = parse_gbnf(gbnf)
    rng = random.Random(name)
    for _ in range(30):
        s = sample(grammar, rng)
        if len(s) > 60:
            continue
        ids = tokenize_randomly(s.encode(), VOCAB, rng)
        m = comp.new_matcher()
        assert m.accept_tokens(ids), s
        assert STOP in _allowed(m)
        assert m.accept_tokens([STOP]) and m.is_terminated()


def test_rollback_and_validate_keep_the_masks():
    gbnf, _ = GRAMMARS["nested-lists-with-text"]
    comp = compile_grammar(gbnf, own=True)
    m, ref = comp.new_matcher(), plain_matcher(gbnf)
    ids = [ord("["), ord("["), ord('"'), ord("a"), ord('"'), ord("]"), ord(","), ord("7")]
    assert m.accept_tokens(ids) and ref.accept_tokens(ids)
    before = _allowed(m)
    assert m.validate_tokens([ord("]"), STOP, ord("x")]) == ref.validate_tokens([ord("]"), STOP, ord("x")]) \
        == [ord("]"), STOP]
    assert _allowed(m) == before == _allowed(ref)
    assert m.accept_tokens([ord("]"), STOP]) and m.is_terminated()
    m.rollback(2)  # the stop token and "]"
    assert not m.is_terminated() and _allowed(m) == before
    m.rollback(3)
    ref.rollback(3)
    assert _allowed(m) == _allowed(ref)
    m.reset()
    assert m.num_accepted == 0 and _allowed(m) == _allowed(plain_matcher(gbnf))


def test_a_fill_past_its_work_cap_checks_every_token_and_agrees():
    gbnf, _ = GRAMMARS["ambiguous-depth"]
    comp = compile_grammar(gbnf, own=True)
    m, ref = comp.new_matcher(), plain_matcher(gbnf)
    ids = [ord("(")] * 3
    m.accept_tokens(ids)
    ref.accept_tokens(ids)
    cap = comp.rules.work_cap
    try:
        comp.rules.work_cap = 1
        assert _allowed(m) == _allowed(ref)
    finally:
        comp.rules.work_cap = cap


def test_left_recursion_and_no_model_stay_on_xgrammar():
    gbnf, _ = GRAMMARS["left-recursive-precedence"]
    assert rule_automata(parse_gbnf(gbnf)) is None
    comp = compile_grammar(gbnf, own=True)
    assert comp.compiled is not None and not isinstance(comp.new_matcher(), RuleMatcher)


def test_a_grammar_whose_every_state_accepts_is_modelled():
    # found by the random-grammar property test in CI: with one acceptance class
    # the state merging numbered it 1 of 1; such grammars merge to one state
    for gbnf in ('root ::= "" | ("a")*', 'root ::= "a" root | ""'):
        grammar = parse_gbnf(gbnf)
        model = rule_automata(grammar)
        assert model is not None
        matcher = compile_grammar(gbnf, own=True).new_matcher()
        assert isinstance(matcher, RuleMatcher)
        assert matcher.accept_tokens([VOCAB.token_bytes.index(b"a")] * 3 + [STOP]) and matcher.is_terminated()


# ---------------------------------------------------- real vocabularies

# ------------------------------------------------ remembered masks (shared by replies)

_BRACKETS = 'root ::= group+\ngroup ::= "(" group* ")" | "[" group* "]"\n'
_CLOSERS = [b"))", b")]", b"])", b"]]", b")))", b"))]", b")])", b"]))", b"()", b"[]", b"((", b")("]
MEMO_VOCAB = TokenVocabulary(tuple([bytes([b]) for b in range(256)] + _CLOSERS + [None]),
                             frozenset({256 + len(_CLOSERS)}), 256 + len(_CLOSERS) + 1, "raw")


def _at(compiled, text: bytes):
    m = compiled.new_matcher()
    assert m.accept_tokens(list(text))
    return m


def test_a_mask_is_shared_by_replies_whose_stacks_agree_as_deep_as_it_reads():
    """The memo keys a mask by the top of the stack its walk read: stacks that
    differ only deeper share one mask (one slot); stacks that differ where a
    closing token reads get their own, and every mask is xgrammar's."""
    comp = compile_grammar(_BRACKETS, MEMO_VOCAB)
    a = _at(comp, b"[((((((")  # 7 frames; the top six are "(" groups
    b = _at(comp, b"(((((((")  # ... the same six, another bottom
    c = _at(comp, b"[[(")      # differs within reach of ")])" and "))]"
    for m, text in ((a, b"[(((((("), (b, b"((((((("), (c, b"[[(")):
        ref = plain_matcher(_BRACKETS, MEMO_VOCAB)
        assert ref.accept_tokens(list(text))
        assert _allowed(m) == _allowed(ref), text
    slot = {id(m): set(m._configs.memo_slots.values()) for m in (a, b, c)}
    assert slot[id(a)] and slot[id(a)] == slot[id(b)]
    assert not slot[id(a)] & slot[id(c)]


@pytest.mark.parametrize("order", [0, 1, 2])
def test_remembered_masks_equal_xgrammars_across_replies_and_orders(order):
    """Many replies over one compiled grammar (one memo), in different orders:
    every mask still equals xgrammar's, rollbacks included."""
    rng = random.Random(order)
    comp = compile_grammar(_BRACKETS, MEMO_VOCAB)
    texts = [bytes(rng.choice(b"([") for _ in range(rng.randint(1, 9))) for _ in range(12)]
    for text in texts:
        mine = _at(comp, text)
        ref = plain_matcher(_BRACKETS, MEMO_VOCAB)
        assert ref.accept_tokens(list(text))
        for step in range(8):
            assert _allowed(mine) == _allowed(ref), (text, step)
            allowed = [t for t in _allowed(mine) if t != min(MEMO_VOCAB.stop_ids)]
            if not allowed:
                break
            t = rng.choice(allowed)
            assert mine.accept_tokens([t]) and ref.accept_tokens([t])
        mine.rollback(1)
        ref.rollback(1)
        assert _allowed(mine) == _allowed(ref)


def test_masks_filled_from_threads_equal_the_serial_ones():
    """vLLM fills a batch from a thread pool: replies of one grammar share its memo."""
    from concurrent.futures import ThreadPoolExecutor

    comp = compile_grammar(GRAMMARS["arithmetic"][0], VOCAB)
    rng = random.Random(7)
    replies = []
    for _ in range(16):
        m, out = comp.new_matcher(), []
        for _ in range(20):
            allowed = [t for t in _allowed(m) if t != STOP]
            if not allowed:
                break
            out.append(rng.choice(allowed))
            m.accept_tokens(out[-1:])
        replies.append(out)
    expected = []
    for ids in replies:
        ref, masks = plain_matcher(GRAMMARS["arithmetic"][0]), []
        for t in ids:
            masks.append(_allowed(ref))
            ref.accept_tokens([t])
        expected.append(masks)

    def walk(ids):
        m, masks = comp.new_matcher(), []
        for t in ids:
            masks.append(_allowed(m))
            m.accept_tokens([t])
        return masks

    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            assert list(pool.map(walk, replies)) == expected


@pytest.fixture(scope="module", params=("llama2-spm-32k", "llama3-bpe-128k"))
def real_vocab(request):
    from transformers import AutoTokenizer

    from tests.bench_data import require_bench

    tok = AutoTokenizer.from_pretrained(str(require_bench("vocab", request.param, "tokenizer.json").parent))
    return TokenVocabulary.from_tokenizer(tok, stop_ids=[tok.eos_token_id])


@pytest.mark.parametrize("name", ["arithmetic", "nested-lists-with-text", "ambiguous-depth", "nested-brackets"])
def test_masks_equal_xgrammars_on_real_vocabularies(real_vocab, name):
    gbnf, lark_text = GRAMMARS[name]
    accepts = oracle(lark_text)
    for seed in range(3):
        mine, ref, out = _walk_both(gbnf, real_vocab, random.Random(seed), 25)
        if mine.is_terminated():
            assert accepts(out.decode()), out


_FREE_FORM_IDS = ("Github_hard/o64686", "JsonSchemaStore/meta-runtime")


def test_free_form_rule_grammars_get_poots_own_masks_on_real_vocabularies(real_vocab):
    """The free-form fallback's bound (json_schema.recursive.FREE_FORM_RULE_POSITION_BYTES) keeps
    its grammars small enough for poot's per-state masks at 32k and 128k tokens: past them a
    grammar steps on xgrammar's matcher, ~50 ms a step inside strings at 128k."""
    import json

    from poot_vllm.core.grammar.gbnf import Grammar
    from poot_vllm.core.json_schema import compile_json_schema
    from poot_vllm.core.matchers.pushdown import compile_pushdown
    from tests.bench_data import require_bench
    from tests.unit.test_json_recursive import WIDE_ANY

    schemas = [WIDE_ANY, {"type": "object", "required": ["id"], "additionalProperties": False,
                          "properties": {"id": {"type": "string", "maxLength": 12},
                                         **{f"field_{i}": {} for i in range(8)}}}]
    for subset in {i.split("/")[0] for i in _FREE_FORM_IDS}:
        for line in require_bench("jsonschemabench", f"{subset}.jsonl").read_text().splitlines():
            item = json.loads(line)
            if item["id"] in _FREE_FORM_IDS:
                schemas.append(item["schema"])
    assert len(schemas) == 2 + len(_FREE_FORM_IDS)
    for schema in schemas:
        grammar = compile_json_schema(schema)
        assert isinstance(grammar, Grammar)
        compiled = compile_pushdown(grammar, real_vocab)
        assert compiled.rules is not None and compiled.rules.has_masks
        assert isinstance(compiled.new_matcher(), RuleMatcher)


# ------------------------------------------------ random grammars (property)

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_ALPHA = "ab(),"
_MULTI = [b"ab", b"((", b"))", b"a,", b",(", b"b)", b"()", b"ba(", b"))b"]
RANDOM_VOCAB = TokenVocabulary(tuple([bytes([b]) for b in range(256)] + _MULTI + [None]),
                               frozenset({256 + len(_MULTI)}), 256 + len(_MULTI) + 1, "raw")


def _expr(draw, names, depth):
    kind = draw(st.sampled_from(["lit", "class", "ref", "seq", "alt", "rep"] if depth < 3 else ["lit", "class", "ref"]))
    if kind == "lit":
        return '"' + draw(st.text(alphabet=_ALPHA, min_size=0, max_size=3)) + '"'
    if kind == "class":
        return "[" + "".join(sorted(set(draw(st.text(alphabet="ab(", min_size=1, max_size=3))))) + "]"
    if kind == "ref":
        return draw(st.sampled_from(names))
    if kind == "seq":
        return " ".join(_expr(draw, names, depth + 1) for _ in range(draw(st.integers(2, 3))))
    if kind == "alt":
        return "(" + " | ".join(_expr(draw, names, depth + 1) for _ in range(draw(st.integers(2, 3)))) + ")"
    lo = draw(st.integers(0, 2))
    hi = draw(st.sampled_from([None, lo, lo + 1, lo + 2]))
    suffix = {(0, None): "*", (1, None): "+"}.get((lo, hi)) or ("{%d,}" % lo if hi is None else "{%d,%d}" % (lo, hi))
    return "(" + _expr(draw, names, depth + 1) + ")" + suffix


@st.composite
def random_grammars(draw):
    """Small GBNF grammars over a tiny alphabet, recursion welcome; every rule has a
    base case (a literal alternative), so every rule is productive."""
    names = ["root", "x", "y"][: draw(st.integers(1, 3))]
    lines = []
    for name in names:
        base = '"' + draw(st.text(alphabet=_ALPHA, min_size=0, max_size=2)) + '"'
        lines.append(f"{name} ::= {base} | {_expr(draw, names, 0)}")
    return "\n".join(lines) + "\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(random_grammars(), st.integers(0, 2**32))
def test_masks_equal_xgrammars_on_random_grammars(gbnf, seed):
    """Any grammar poot models: its masks are xgrammar's, step by step (the soundness of poot's
    own pushdown masks rests on this and on the table above)."""
    from hypothesis import assume

    from poot_vllm.core.errors import PootError

    try:
        grammar = parse_gbnf(gbnf)
    except PootError:
        assume(False)
    assume(rule_automata(grammar) is not None)  # left recursion stays on xgrammar
    for k in range(3):  # several replies over one compiled grammar: masks remembered from one serve the next
        _walk_both(gbnf, RANDOM_VOCAB, random.Random(seed + k), 12)


def test_warm_up_loads_every_kernel_a_first_grammar_reply_runs():
    """vLLM builds the backend (and poot warms up) before traffic: a kernel the
    warm-up misses is loaded -- or compiled, seconds -- inside the first grammar
    reply's step, on the scheduler.  In a fresh process, after ``warm_up()``,
    the memo's lookup, walk and store kernels have a compiled signature."""
    import subprocess
    import sys

    code = ("from poot_vllm.core.grammar import rule_masks as m\n"
            "m.warm_up()\n"
            "missing = [k.__name__ for k in (m._memo_lookup, m._fill_packed, m._memo_store, m._walk_items)\n"
            "           if not k.signatures]\n"
            "assert not missing, missing\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]


def test_replies_whose_keys_fit_the_memo_are_not_walked_again(monkeypatch):
    """Masks a reply's stacks keep returning to stay remembered while the memo
    has room for every key: replaying the same replies walks nothing.  (With
    4-slot sets, a few keys hashed into one set evicted each other: random
    bracket replies re-walked most of the keys they had stored.)"""
    comp = compile_grammar(_BRACKETS, MEMO_VOCAB)
    masks = comp.rules  # (shared through the compiled cache: monkeypatch restores it)
    monkeypatch.setattr(masks, "_memo_rows", 64)  # a small memo: conflicts show at a few dozen keys
    monkeypatch.setattr(masks, "_memo", None)
    monkeypatch.setattr(masks, "_ret", None)  # (allocated with the memo, its slots with it)
    walks = []
    run_fill = masks._run_fill
    monkeypatch.setattr(masks, "_run_fill", lambda *a, **k: walks.append(1) or run_fill(*a, **k))
    rng = random.Random(5)
    replies = []
    for _ in range(40):
        m, ids = comp.new_matcher(), []
        for _ in range(12):
            allowed = [t for t in _allowed(m) if t != min(MEMO_VOCAB.stop_ids)]
            ids.append(rng.choice(allowed))
            assert m.accept_tokens(ids[-1:])
        replies.append(ids)
    first = len(walks)
    assert 16 <= first <= 3 * masks._memo_rows // 4, first  # enough keys to collide, room for all of them
    walks.clear()
    for ids in replies:
        m = comp.new_matcher()
        for t in ids:
            _allowed(m)
            assert m.accept_tokens([t])
    assert not walks, f"{len(walks)} of {first} masks walked again"
