"""TokenVocabulary: the bytes each token adds agree with the tokenizer's own
decoding, on the tiny test tokenizers and on real 32k-152k vocabularies."""

from __future__ import annotations

import functools
import json
import os
import random
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Required test dependencies (test extras): an import failure fails these tests, never skips them.
import sentencepiece  # noqa: E402
import tokenizers  # noqa: E402, F401
import transformers  # noqa: E402

from poot_vllm.core.vocabulary import (  # noqa: E402
    TokenVocabulary,
    UnsupportedTokenizerError,
    gpt2_unicode_to_bytes,
    vocabulary_cache_key,
)
from tests.bench_data import require_bench  # noqa: E402

TINY = ("tiny-llama-spm", "tiny-qwen2-bpe")
REAL = ("llama2-spm-32k", "llama3-bpe-128k", "qwen2-bpe-152k")
SAMPLES_PER_REAL_VOCAB = 3000

TEXTS = [
    "Hello, world!",
    'The answer is {"name": "Alice", "age": 42, "tags": ["a", "b"], "ok": true, "x": null}',
    "def f(x):\n    return x ** 2  # square\n\n\tindented\ttabs",
    "  leading and trailing spaces  ",
    "numbers 3.14159 -2e10 1,000,000 0x1F",
    "naïve café — “quotes” ‘single’ … ½ €100 ¥ ñ",
    "中文字符 日本語 한국어 العربية עברית ไทย",
    "emoji 😀🎉👍🏽 👨‍👩‍👧 ✓ ✗",
    "control \x00\x01\x7f and \r\n newlines",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
]


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _load(name: str, tiny_models_dir: Path):
    if name in TINY:
        path = tiny_models_dir / name
    else:
        path = require_bench("vocab", name, "tokenizer.json").parent
    return transformers.AutoTokenizer.from_pretrained(str(path))


_CACHE: dict[str, tuple] = {}


def _case(name: str, tiny_models_dir: Path) -> tuple:
    if name not in _CACHE:
        tok = _load(name, tiny_models_dir)
        _CACHE[name] = (name, tok, TokenVocabulary.from_tokenizer(tok))
    return _CACHE[name]


@pytest.fixture(scope="module", params=TINY + REAL)
def case(request, tiny_models_dir):
    """(name, tokenizer, vocabulary) for every tokenizer under test."""
    return _case(request.param, tiny_models_dir)


@pytest.fixture(scope="module", params=[name for name in TINY + REAL if "spm" not in name])
def byte_level_case(request, tiny_models_dir):
    """(name, tokenizer, vocabulary) for the byte-level BPE tokenizers."""
    return _case(request.param, tiny_models_dir)


def _is_spm(name: str) -> bool:
    return "spm" in name


def _anchor(tok, name: str) -> int:
    """A plain word token: decoding [anchor, t] puts t mid-sequence, away from
    the leading-space strip SentencePiece decoders apply at text start."""
    return tok.convert_tokens_to_ids("▁the" if _is_spm(name) else "the")


def _decode(tok, ids, skip=True) -> str:
    return tok.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False)


def _ids_to_check(name: str, tok, vocab: TokenVocabulary) -> list[int]:
    if name in TINY:
        return list(range(len(tok)))
    rng = random.Random(f"poot-vocab-{name}")
    ids = set(rng.sample(range(len(tok)), SAMPLES_PER_REAL_VOCAB))
    ids.update(tok.all_special_ids)
    ids.update(i for i in range(len(tok)) if tok.convert_ids_to_tokens(i).startswith("<0x"))
    return sorted(ids)


# ---------------------------------------------------------------------------
# Token by token against the tokenizer's decoding
# ---------------------------------------------------------------------------

def test_each_token_adds_exactly_what_the_tokenizer_decodes(case):
    """Oracle: decode([anchor, t]) - decode([anchor]), with special tokens
    skipped as vLLM shows replies.  Tokens that are not whole UTF-8 (byte
    fallback <0x80>.., partial byte-level symbols) decode lossily to U+FFFD,
    so they are compared the same lossy way here and exactly by the
    multi-byte tests below."""
    name, tok, vocab = case
    anchor = _anchor(tok, name)
    prefix = _decode(tok, [anchor])
    checked = 0
    for t in _ids_to_check(name, tok, vocab):
        shown = _decode(tok, [anchor, t])
        assert shown.startswith(prefix), (t, shown)
        added = shown[len(prefix):]
        b = vocab.token_bytes[t]
        if b is None:
            # Never content: adds nothing visible (special) or ends the reply (stop).
            assert added == "" or t in vocab.stop_ids, (t, tok.convert_ids_to_tokens(t), added)
        else:
            assert b, t
            assert b.decode("utf-8", errors="replace") == added, (t, tok.convert_ids_to_tokens(t), b, added)
            checked += 1
    assert checked > 0.9 * min(len(tok), SAMPLES_PER_REAL_VOCAB)


def test_special_tokens_are_never_content(case):
    name, tok, vocab = case
    specials = set(tok.all_special_ids) | {i for i, t in tok.added_tokens_decoder.items() if t.special}
    assert specials, "every tokenizer under test has special tokens"
    assert all(vocab.token_bytes[i] is None for i in specials)
    # ...but they do print something when not skipped, so leaving them out is a real choice.
    assert all(_decode(tok, [i], skip=False) != "" for i in specials)


def test_eos_is_a_stop_token(case):
    name, tok, vocab = case
    assert tok.eos_token_id in vocab.stop_ids
    assert vocab.token_bytes[tok.eos_token_id] is None


def test_kind_is_detected(case):
    name, tok, vocab = case
    assert vocab.kind == ("sentencepiece" if _is_spm(name) else "byte_level")


# ---------------------------------------------------------------------------
# Whole texts: encode, then concatenate token bytes
# ---------------------------------------------------------------------------

def _expected_bytes(name: str, tok, text: str) -> bytes:
    """SentencePiece models add one space in front of the text they encode:
    Llama-2's converted tokenizer always (a ``Prepend "▁"`` normalizer);
    transformers' current Llama conversion (``Metaspace``, prepend_scheme
    "first") unless the text already starts with a space or with an added
    token.  Their decoders strip one leading space at text start.  Byte-level
    BPE adds nothing."""
    if not (_is_spm(name) and text):
        return text.encode()
    pre = tok.backend_tokenizer.pre_tokenizer
    if pre is not None and json.loads(pre.__getstate__()).get("type") == "Metaspace":
        added = [t.content for t in tok.added_tokens_decoder.values()]
        if text.startswith(" ") or any(text.startswith(a) for a in added):
            return text.encode()
    return b" " + text.encode()


def _concat(vocab: TokenVocabulary, ids: list[int]) -> bytes:
    parts = [vocab.token_bytes[i] for i in ids]
    assert None not in parts, ids
    return b"".join(parts)


@pytest.mark.parametrize("text", TEXTS)
def test_encoded_text_concatenates_to_its_utf8(case, text):
    name, tok, vocab = case
    ids = tok.encode(text, add_special_tokens=False)
    expected = _expected_bytes(name, tok, text)
    assert _concat(vocab, ids) == expected
    # SentencePiece decoders strip one leading space at text start (only there).
    strip = _is_spm(name) and expected.startswith(b" ")
    assert _decode(tok, ids).encode() == (expected[1:] if strip else expected)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=40))
def test_encoded_random_text_concatenates_to_its_utf8(case, text):
    name, tok, vocab = case
    # Qwen2 tokenizers NFC-normalise input; special-token text encodes as the special token.
    assume(unicodedata.is_normalized("NFC", text))
    assume(not any(s in text for s in tok.all_special_tokens))
    # SentencePiece tokenizers spell spaces as "▁", so a literal "▁" in the
    # input is encoded as a space and cannot come back (the tokenizer's own loss).
    assume(not (_is_spm(name) and "▁" in text))
    ids = tok.encode(text, add_special_tokens=False)
    assert _concat(vocab, ids) == _expected_bytes(name, tok, text)


@pytest.mark.parametrize("char", ["é", "€", "中", "😀", "𝔸", "\u0301"])
def test_multibyte_chars_split_into_byte_tokens_decode_exactly(case, char):
    """A character spelled by several tokens whose bytes are not UTF-8 on
    their own (SentencePiece <0xNN> tokens, byte-level symbols)."""
    name, tok, vocab = case
    if _is_spm(name):
        ids = tok.convert_tokens_to_ids([f"<0x{b:02X}>" for b in char.encode()])
        assert all(vocab.token_bytes[i] == bytes([b]) for i, b in zip(ids, char.encode()))
    else:
        ids = tok.encode(char, add_special_tokens=False)
    anchor = _anchor(tok, name)
    assert _concat(vocab, ids) == char.encode()
    assert _decode(tok, [anchor, *ids]) == _decode(tok, [anchor]) + char


def test_byte_level_symbols_map_to_each_byte(byte_level_case):
    name, tok, vocab = byte_level_case
    table = gpt2_unicode_to_bytes()
    vocab_map = tok.get_vocab()
    assert sorted(table.values()) == list(range(256))
    for symbol, byte in table.items():
        assert vocab.token_bytes[vocab_map[symbol]] == bytes([byte])


# ---------------------------------------------------------------------------
# Model vocab size, stop ids, added tokens (tiny models)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", TINY)
def test_ids_past_the_tokenizer_are_never_allowed(name, tiny_models_dir):
    tok = _load(name, tiny_models_dir)
    config = json.loads((tiny_models_dir / name / "config.json").read_text())
    gen = json.loads((tiny_models_dir / name / "generation_config.json").read_text())
    vocab = TokenVocabulary.from_tokenizer(tok, vocab_size=config["vocab_size"], stop_ids=gen["eos_token_id"])
    assert vocab.size == config["vocab_size"] > len(tok)
    assert len(vocab.token_bytes) == vocab.size
    assert vocab.bitmask_words == -(-config["vocab_size"] // 32)
    assert all(b is None for b in vocab.token_bytes[len(tok):])
    assert vocab.stop_ids == frozenset(gen["eos_token_id"])
    assert all(vocab.token_bytes[i] is None for i in vocab.stop_ids)
    # Plain added tokens are content, with their literal text.
    for text in ("<tool_call>", "</tool_call>"):
        assert vocab.token_bytes[tok.convert_tokens_to_ids(text)] == text.encode()


def test_vocab_size_smaller_than_tokenizer_truncates(tiny_models_dir):
    tok = _load("tiny-qwen2-bpe", tiny_models_dir)
    full = TokenVocabulary.from_tokenizer(tok)
    small = TokenVocabulary.from_tokenizer(tok, vocab_size=1000, stop_ids=[5, 2000])
    assert small.size == 1000 and len(small.token_bytes) == 1000
    assert small.stop_ids == frozenset({5})  # 2000 and the eos are past the model's vocab
    assert small.token_bytes[5] is None
    assert small.token_bytes[6:] == full.token_bytes[6:1000]


def test_a_regular_token_given_as_stop_is_only_a_stop(tiny_models_dir):
    tok = _load("tiny-llama-spm", tiny_models_dir)
    newline = tok.convert_tokens_to_ids("<0x0A>")
    vocab = TokenVocabulary.from_tokenizer(tok, stop_ids=[newline])
    assert newline in vocab.stop_ids and tok.eos_token_id in vocab.stop_ids
    assert vocab.token_bytes[newline] is None


# ---------------------------------------------------------------------------
# Cache key, wrappers, speed
# ---------------------------------------------------------------------------

def test_cache_key_identifies_the_content(tiny_models_dir):
    path = str(tiny_models_dir / "tiny-llama-spm")
    a = TokenVocabulary.from_tokenizer(transformers.AutoTokenizer.from_pretrained(path))
    b = TokenVocabulary.from_tokenizer(transformers.AutoTokenizer.from_pretrained(path))
    assert a is not b and a == b and hash(a) == hash(b)
    assert vocabulary_cache_key(a) == vocabulary_cache_key(b)
    assert len({a: 1, b: 2}) == 1
    tok = _load("tiny-llama-spm", tiny_models_dir)
    others = [
        TokenVocabulary.from_tokenizer(tok, vocab_size=a.size + 64),
        TokenVocabulary.from_tokenizer(tok, stop_ids=[5]),
        TokenVocabulary.from_tokenizer(_load("tiny-qwen2-bpe", tiny_models_dir)),
        TokenVocabulary(a.token_bytes[:-2] + (a.token_bytes[-1], a.token_bytes[-2]), a.stop_ids, a.size, a.kind),
    ]
    keys = {vocabulary_cache_key(v) for v in others} | {vocabulary_cache_key(a)}
    assert len(keys) == len(others) + 1
    assert all(v != a for v in others)


def test_vllm_cached_tokenizer_gives_the_same_vocabulary(tiny_models_dir):
    import vllm.tokenizers.hf as hf

    for name in TINY:
        tok = _load(name, tiny_models_dir)
        cached = hf.get_cached_tokenizer(tok)
        assert TokenVocabulary.from_tokenizer(cached) == TokenVocabulary.from_tokenizer(tok)


def test_slow_sentencepiece_tokenizer_matches_the_sentencepiece_library(tiny_models_dir):
    """The Python (non-``tokenizers``) path, checked against sentencepiece itself."""
    backend = getattr(transformers, "SentencePieceBackend", None)
    if backend is None:
        pytest.skip(f"transformers {transformers.__version__} has no SentencePieceBackend (the slow tokenizer "
                    "path this test checks): install a transformers that has it to run it")
    model_file = str(tiny_models_dir / "tiny-llama-spm" / "tokenizer.model")
    slow = backend(vocab_file=model_file, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    vocab = TokenVocabulary.from_tokenizer(slow)
    assert vocab.kind == "sentencepiece"
    sp = sentencepiece.SentencePieceProcessor(model_file=model_file)
    assert [i for i in range(sp.get_piece_size()) if vocab.token_bytes[i] is None] == [0, 1, 2]
    anchor = sp.piece_to_id("▁the")
    for t in range(3, sp.get_piece_size()):
        whole = sp.decode_ids([anchor, t]).encode("utf-8", "surrogateescape")
        if sp.is_byte(t):
            assert vocab.token_bytes[t] == bytes([int(sp.id_to_piece(t)[3:5], 16)])
        else:
            assert b"the" + vocab.token_bytes[t] == whole, t
    for text in TEXTS:
        assert _concat(vocab, sp.encode(text)) == b" " + text.encode()


@pytest.mark.parametrize("name", ["qwen2-bpe-152k", "llama3-bpe-128k"])
def test_large_vocabulary_builds(name, tiny_models_dir):
    tok = _load(name, tiny_models_dir)
    vocab = TokenVocabulary.from_tokenizer(tok)
    assert vocab.size == len(tok) > 100_000


# ---------------------------------------------------------------------------
# Decoder pipelines beyond the ones above (synthetic tokenizers)
# ---------------------------------------------------------------------------

def _synthetic(decoder, pieces: list[str], specials=()):
    from tokenizers import Tokenizer, models

    vocab = {p: i for i, p in enumerate(pieces)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=pieces[0]))
    core.decoder = decoder
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token=pieces[0])
    if specials:
        tok.add_special_tokens({"additional_special_tokens": list(specials)})
    return tok


SYNTHETIC_PIECES = ["<unk>", "▁hello", "world", "▁", "<0x41>", "<0xC3>", "<0xA9>", "__x", "_", "ab▁cd", " sp",
                    "Ġhi", "Ċ", "Ã©", "tab\t"]


def _decoders():
    d = tokenizers.decoders
    return {
        "metaspace": d.Metaspace(replacement="▁", prepend_scheme="always"),
        "metaspace-bytefallback": d.Sequence([d.Metaspace(replacement="▁", prepend_scheme="first"),
                                              d.ByteFallback(), d.Fuse()]),
        "replace-underscore-strip-each": d.Sequence([d.Replace("_", " "), d.Strip(" ", 1, 0), d.Fuse()]),
        "bytefallback-only": d.Sequence([d.ByteFallback(), d.Fuse()]),
        "byte-level": d.ByteLevel(),
    }


@pytest.mark.parametrize("decoder_name", list(_decoders()))
def test_synthetic_decoders_agree_with_decode(decoder_name):
    tok = _synthetic(_decoders()[decoder_name], SYNTHETIC_PIECES)
    vocab = TokenVocabulary.from_tokenizer(tok)
    anchor = tok.convert_tokens_to_ids("world")
    prefix = _decode(tok, [anchor])
    for t in range(1, len(SYNTHETIC_PIECES)):
        added = _decode(tok, [anchor, t])[len(prefix):]
        b = vocab.token_bytes[t]
        assert (b or b"").decode("utf-8", "replace") == added, (decoder_name, SYNTHETIC_PIECES[t], b, added)
    if "bytefallback" in decoder_name:
        ids = tok.convert_tokens_to_ids(["<0xC3>", "<0xA9>"])
        assert _concat(vocab, ids) == "é".encode()


def test_empty_tokens_are_never_allowed():
    d = tokenizers.decoders
    # "_" strips to nothing: a token that adds no bytes would let a model stall forever.
    tok = _synthetic(d.Sequence([d.Replace("_", " "), d.Strip(" ", 1, 0)]), SYNTHETIC_PIECES)
    vocab = TokenVocabulary.from_tokenizer(tok)
    empty = tok.convert_tokens_to_ids("_")
    assert _decode(tok, [1, empty]) == _decode(tok, [1])
    assert vocab.token_bytes[empty] is None
    assert vocab.token_bytes[tok.convert_tokens_to_ids("__x")] == b" x"  # "  x", one space stripped


def test_unsupported_decoder_is_refused_with_a_reason():
    tok = _synthetic(tokenizers.decoders.WordPiece(), SYNTHETIC_PIECES)
    with pytest.raises(UnsupportedTokenizerError, match="WordPiece"):
        TokenVocabulary.from_tokenizer(tok)


def test_invalid_vocabulary_is_refused():
    with pytest.raises(ValueError, match="size"):
        TokenVocabulary((b"a", None), frozenset(), 3, "raw")
    with pytest.raises(ValueError, match="stop ids"):
        TokenVocabulary((b"a", None), frozenset({2}), 2, "raw")
    with pytest.raises(ValueError, match="kind"):
        TokenVocabulary((b"a", None), frozenset(), 2, "wordpiece")
