"""``PootBackend`` / ``PootGrammar`` driven the way vLLM's ``StructuredOutputManager``
drives them (vllm/v1/structured_output/__init__.py): ``compile_grammar`` (or
``compile_for_request`` through the engine hook) on a compile thread pool,
then ``fill_bitmask`` into rows of one shared int32 tensor, ``accept_tokens``,
``validate_tokens``, ``rollback`` and ``is_terminated`` per step.

Uses the tiny Qwen2 byte-level BPE tokenizer (tests/conftest.py); its model
vocabulary is padded past the tokenizer, like real models.
"""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
import torch
import transformers
from vllm.v1.structured_output.backend_types import StructuredOutputOptions as Opt

from poot_vllm.adapter.backend import PootBackend, PootGrammar  # noqa: E402
from poot_vllm.adapter.params import TOOL_CALL_TAG  # noqa: E402
from poot_vllm.core import constraints  # noqa: E402
from poot_vllm.core.cache import compiled_cache  # noqa: E402
from poot_vllm.core.errors import PootError  # noqa: E402
from poot_vllm.core.matchers import pushdown  # noqa: E402
from poot_vllm.core.matchers.compiled import CompiledDFA, LazyCompiledDFA  # noqa: E402
from poot_vllm.core.matchers.dfa import DFAMatcher  # noqa: E402
from poot_vllm.core.tool_calls import tool_call_spec  # noqa: E402

#: The model's vocabulary size: the tokenizer has 3004 ids, the embedding 3072.
VOCAB_SIZE = 3072
EOS = 3001        # <|im_end|>
IM_START = 3000   # a special token a client may name in stop_token_ids
BANG = 1          # "!": an ordinary text token

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
          "additionalProperties": False}
#: kind -> (vLLM option, grammar spec as vLLM sends it, a conforming reply)
CASES = {
    "regex": (Opt.REGEX, r"[0-9]{2}-[a-z]+", "12-ab"),
    "choice": (Opt.CHOICE, json.dumps(["yes", "no"]), "no"),
    "json": (Opt.JSON, json.dumps(SCHEMA), '{"a": 12}'),
    "json_object": (Opt.JSON_OBJECT, "", '{"a": [1, "x"]}'),
    "grammar": (Opt.GRAMMAR, 'root ::= "a" [0-9]+ "!"', "a42!"),  # no recursion: a DFA
    "recursive_grammar": (Opt.GRAMMAR, 'root ::= "a" x "!"\nx ::= [0-9]+ | "(" x ")"', "a(42)!"),  # pushdown
    "tool_call": (Opt.STRUCTURAL_TAG, TOOL_CALL_TAG + tool_call_spec([("ping", None)], parallel=False),
                  '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>'),
}


@pytest.fixture(scope="module")
def tokenizer(tiny_models_dir):
    return transformers.AutoTokenizer.from_pretrained(str(tiny_models_dir / "tiny-qwen2-bpe"))


@pytest.fixture(scope="module")
def backend(tokenizer):
    config = SimpleNamespace(speculative_config=None, model_config=SimpleNamespace(max_model_len=4096))
    b = PootBackend(config, tokenizer=tokenizer, vocab_size=VOCAB_SIZE)
    b.warm_up_thread.join()
    return b


def allowed(grammar: PootGrammar, bitmask: torch.Tensor, row: int = 0) -> set[int]:
    grammar.fill_bitmask(bitmask, row)
    words = bitmask[row].numpy().view("uint32")
    return {w * 32 + b for w in range(words.shape[0]) for b in range(32) if (int(words[w]) >> b) & 1}


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def walk(grammar: PootGrammar, bitmask, ids: list[int], row: int = 0) -> list[frozenset[int]]:
    """Accept ``ids`` one by one as vLLM does, checking each is in the mask; the masks seen."""
    masks = []
    for t in ids:
        mask = allowed(grammar, bitmask, row)
        masks.append(frozenset(mask))
        assert t in mask, f"token {t} of the reply is not in the mask"
        assert grammar.accept_tokens("r", [t])
    masks.append(frozenset(allowed(grammar, bitmask, row)))
    return masks


@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_kind_compiles_and_a_conforming_reply_walks_to_the_stop(backend, tokenizer, kind):
    option, spec, reply = CASES[kind]
    grammar = backend.compile_grammar(option, spec, stop_token_ids={EOS})
    bitmask = backend.allocate_token_bitmask(2)
    assert bitmask.shape == (2, VOCAB_SIZE // 32) and bitmask.dtype == torch.int32
    masks = walk(grammar, bitmask, encode(tokenizer, reply), row=1)
    assert all(max(m) < len(tokenizer) for m in masks if m)   # padded ids are never allowed
    assert EOS in masks[-1] and not grammar.is_terminated()
    assert grammar.accept_tokens("r", [EOS])
    assert grammar.is_terminated()


@pytest.mark.parametrize("kind", ["regex", "grammar", "recursive_grammar"])
def test_a_rejected_token_fails_accept_and_was_not_in_the_mask(backend, tokenizer, kind):
    option, spec, _ = CASES[kind]
    grammar = backend.compile_grammar(option, spec, stop_token_ids={EOS})
    bitmask = backend.allocate_token_bitmask(1)
    bad = encode(tokenizer, "z")[0]
    assert bad not in allowed(grammar, bitmask) and EOS not in allowed(grammar, bitmask)
    assert not grammar.accept_tokens("r", [bad])


@pytest.mark.parametrize("kind", sorted(CASES))
def test_rollback_and_validate_restore_the_masks(backend, tokenizer, kind):
    option, spec, reply = CASES[kind]
    ids = encode(tokenizer, reply)
    grammar = backend.compile_grammar(option, spec, stop_token_ids={EOS})
    bitmask = backend.allocate_token_bitmask(1)
    masks = walk(grammar, bitmask, ids)
    assert grammar.validate_tokens([EOS, ids[0]]) == [EOS]          # no state change
    assert frozenset(allowed(grammar, bitmask)) == masks[-1]
    assert grammar.accept_tokens("r", [EOS]) and grammar.is_terminated()
    grammar.rollback(1)                                               # termination undone
    assert not grammar.is_terminated()
    grammar.rollback(len(ids) - 1)
    assert frozenset(allowed(grammar, bitmask)) == masks[1]
    assert grammar.validate_tokens(ids[1:]) == ids[1:]
    grammar.reset()
    assert frozenset(allowed(grammar, bitmask)) == masks[0]


def _count_calls(monkeypatch, owner, name: str) -> list:
    calls: list = []
    original = getattr(owner, name)

    def spy(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    if isinstance(owner, type):
        monkeypatch.setattr(owner, name, classmethod(lambda cls, *a, **k: spy(*a, **k)))
    else:
        monkeypatch.setattr(owner, name, spy)
    return calls


@pytest.mark.parametrize("kind", ["regex", "grammar"])
def test_the_n_choices_of_one_request_compile_once(backend, tokenizer, monkeypatch, kind):
    """vLLM submits each choice's compile to its pool; they share one build and
    each gets its own matcher state."""
    word = "w" + uuid.uuid4().hex[:8]                                 # a constraint nobody compiled yet
    if kind == "regex":
        option, spec = Opt.REGEX, f"{word}[0-9]+"
        builds = _count_calls(monkeypatch, CompiledDFA, "build")
    else:
        # recursive, so it runs on poot's pushdown masks (a grammar without recursion is a DFA)
        option, spec = Opt.GRAMMAR, f'root ::= "{word}" x\nx ::= [0-9]+ | "(" x ")"'
        builds = _count_calls(monkeypatch, pushdown, "_rule_masks")
    n = 6
    with ThreadPoolExecutor(n) as pool:
        grammars = list(pool.map(lambda _: backend.compile_grammar(option, spec, stop_token_ids={EOS}), range(n)))
    assert len(builds) == 1
    bitmask = backend.allocate_token_bitmask(n)
    first = encode(tokenizer, word)[0]
    start = allowed(grammars[1], bitmask, 1)
    assert grammars[0].accept_tokens("r", [first])
    assert allowed(grammars[1], bitmask, 1) == start                  # the other choice did not move
    assert allowed(grammars[0], bitmask, 0) != start


@pytest.mark.parametrize("kind", ["regex", "json_object", "grammar", "recursive_grammar"])
def test_a_requests_own_special_stop_token_ends_the_reply(backend, tokenizer, kind):
    option, spec, reply = CASES[kind]
    grammar = backend.compile_grammar(option, spec, stop_token_ids={EOS, IM_START})
    bitmask = backend.allocate_token_bitmask(1)
    masks = walk(grammar, bitmask, encode(tokenizer, reply))
    assert {EOS, IM_START} <= masks[-1]
    assert IM_START not in masks[0]
    assert grammar.accept_tokens("r", [IM_START]) and grammar.is_terminated()


@pytest.mark.parametrize("option, spec", [(Opt.REGEX, "a(!b)?"), (Opt.GRAMMAR, 'root ::= "a" ("!b")?'),
                                          (Opt.GRAMMAR, 'root ::= "a" x\nx ::= ("!b" x)?')])
def test_a_text_token_named_as_stop_is_a_stop_not_text(backend, tokenizer, option, spec):
    """stop_token_ids naming "!" make it end the reply: allowed only where the
    constraint accepts, never as the "!" of the text (DFA and grammar alike)."""
    grammar = backend.compile_grammar(option, spec, stop_token_ids={EOS, BANG})
    bitmask = backend.allocate_token_bitmask(1)
    assert BANG not in allowed(grammar, bitmask)
    assert grammar.accept_tokens("r", encode(tokenizer, "a"))
    assert {EOS, BANG} <= allowed(grammar, bitmask)
    assert grammar.accept_tokens("r", [BANG]) and grammar.is_terminated()


def test_new_stop_sets_reuse_the_xgrammar_compiler_and_grammar(backend, monkeypatch):
    """A client sending a new stop_token_ids set per request rebuilds neither the
    xgrammar tokenizer tables nor the compiled grammar (only matchers differ)."""
    option, spec, _ = CASES["json_object"]
    backend.compile_grammar(option, spec, stop_token_ids={EOS})
    compilers = _count_calls(monkeypatch, pushdown, "_make_compiler")
    grammars = _count_calls(monkeypatch, pushdown, "_compile_xgrammar")
    for extra in range(2, 22):
        g = backend.compile_grammar(option, spec, stop_token_ids={EOS, extra})
        assert g.accept_tokens("r", [265 if extra != 265 else 90])   # '{"' (or '{') opens the object
    assert compilers == [] and grammars == []
    assert compiled_cache().nbytes <= compiled_cache().max_bytes


def test_compile_for_request_uses_the_requests_stop_ids_and_budget(backend, tokenizer):
    """The engine hook passes what only the request knows: here a 3-token budget
    (stop included), so after two letters the reply must stop."""
    request = SimpleNamespace(
        request_id="r1",
        num_prompt_tokens=5,
        sampling_params=SimpleNamespace(all_stop_token_ids={EOS}, max_tokens=3),
        structured_output_request=SimpleNamespace(structured_output_key=(Opt.REGEX, "[a-z]{1,40}")),
    )
    grammar = backend.compile_for_request(request)
    bitmask = backend.allocate_token_bitmask(1)
    letters = encode(tokenizer, "a") + encode(tokenizer, "x")
    assert len(letters) == 2
    # Speculative drafts: the grammar allows three letters, the budget two (vLLM keeps
    # whatever validate_tokens passes, so the budget must hold there too).
    assert grammar.validate_tokens(letters * 2) == letters
    for t in letters:
        assert t in allowed(grammar, bitmask)
        assert grammar.accept_tokens("r1", [t])
    assert allowed(grammar, bitmask) == {EOS}
    assert grammar.validate_tokens(letters[:1]) == [] and grammar.validate_tokens([EOS]) == [EOS]


def test_unsupported_structural_tag_is_refused_with_a_hint(backend):
    with pytest.raises(PootError, match="structural tags are not supported"):
        backend.compile_grammar(Opt.STRUCTURAL_TAG, '{"structures": []}')


def _run(backend, tokenizer, case: str, stops: frozenset[int], bitmask, row: int) -> list[frozenset[int]]:
    option, spec, reply = CASES[case]
    grammar = backend.compile_grammar(option, spec, stop_token_ids=set(stops))
    masks = walk(grammar, bitmask, encode(tokenizer, reply), row)
    grammar.accept_tokens("r", [EOS])
    return masks + [frozenset(allowed(grammar, bitmask, row))]


def test_concurrent_compile_and_fill_give_the_serial_masks(backend, tokenizer):
    """vLLM's shape: compiles on a thread pool, masks filled into rows of one
    shared tensor from several threads.  Cold caches, the same constraints
    asked by several threads at once: every mask equals the serial run's."""
    jobs = [(case, stops) for case in sorted(CASES) for stops in (frozenset({EOS}), frozenset({EOS, IM_START}))]
    serial_bitmask = backend.allocate_token_bitmask(1)
    expected = {job: _run(backend, tokenizer, *job, serial_bitmask, 0) for job in jobs}

    compiled_cache().clear()
    constraints._automata.clear()
    work = jobs * 3
    bitmask = backend.allocate_token_bitmask(len(work))
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: _run(backend, tokenizer, *work[i], bitmask, i), range(len(work))))
    for job, masks in zip(work, results):
        assert masks == expected[job], f"{job}: masks differ from the serial run"


def test_a_grammar_too_costly_to_mask_as_a_dfa_runs_on_pushdown(backend, tokenizer, monkeypatch):
    """A grammar without recursion is a DFA, but one whose mask work passes
    max_mask_work is served by the pushdown matcher (never a refusal), decided
    before any mask build is tried."""
    import dataclasses

    from poot_vllm.core.automata.dfa import DFA

    word = "w" + uuid.uuid4().hex[:8]
    spec = f'root ::= "{word}" [0-9]+ "!"'
    assert isinstance(constraints.compile_automaton(constraints.Constraint(constraints.Kind.GRAMMAR, spec)), DFA)
    monkeypatch.setattr(backend, "limits", dataclasses.replace(backend.limits, max_mask_work=10))
    dfa_builds = _count_calls(monkeypatch, CompiledDFA, "build")
    grammar = backend.compile_grammar(Opt.GRAMMAR, spec, stop_token_ids={EOS})
    assert dfa_builds == [] and isinstance(grammar.matcher, pushdown.PushdownMatcher)
    bitmask = backend.allocate_token_bitmask(1)
    masks = walk(grammar, bitmask, encode(tokenizer, f"{word}42!"))
    assert EOS in masks[-1] and EOS not in masks[0]


def test_a_dfa_serves_its_first_masks_before_its_index_is_built(backend, tokenizer, monkeypatch):
    """The backend compiles DFA constraints lazily (core.lazy_masks): the cached
    artefact is a LazyCompiledDFA whose index the background thread builds, and
    the cache charges its real size once built; a tight max_tokens gets the
    built index at compile time; POOT_LAZY_MASKS=0 builds it before the first mask."""
    word = "w" + uuid.uuid4().hex[:8]
    spec = json.dumps({"type": "object", "properties": {word: {"type": "string"}}, "required": [word]})
    grammar = backend.compile_grammar(Opt.JSON, spec, stop_token_ids={EOS})
    key = next(k for k in list(backend._cache._items) if k[0] == "dfa" and word in k[1].spec)
    compiled = backend._cache.get(key)
    assert isinstance(compiled, LazyCompiledDFA)
    bitmask = backend.allocate_token_bitmask(1)
    assert allowed(grammar, bitmask)                                  # served, built or not
    index = compiled.pending.wait()
    assert index is not None and 0 <= backend._cache._items[key][1] - index.nbytes < 2048  # recharged
    tight = backend.compile_grammar(Opt.JSON, spec, stop_token_ids={EOS}, max_new_tokens=5)
    assert type(tight.matcher) is DFAMatcher or tight.matcher._pending is None
    monkeypatch.setenv("POOT_LAZY_MASKS", "0")
    other = spec.replace(word, word + "x")
    backend.compile_grammar(Opt.JSON, other, stop_token_ids={EOS})
    key = next(k for k in list(backend._cache._items) if k[0] == "dfa" and word + "x" in k[1].spec)
    assert isinstance(backend._cache.get(key), CompiledDFA)
