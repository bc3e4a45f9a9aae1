"""The exact bytes each token adds to the output.

A constraint is an automaton over *bytes*; the model emits *token ids*.  This
module bridges the two: :class:`TokenVocabulary` holds, for every id the model
can emit, the bytes that token appends to the reply when it is decoded in the
middle of a sequence (what the detokenizer shows the user), or ``None`` when the
token must never be produced as constraint content.

How the bytes are derived: a Hugging Face fast tokenizer decodes with a
``tokenizers`` *decoder* pipeline; :func:`TokenVocabulary.from_tokenizer` reads
that pipeline and applies, per token, the steps that act on each token
(``Replace "▁" -> " "``, ``Metaspace``, ``ByteFallback`` ``<0xNN>`` -> one byte,
``ByteLevel`` GPT-2 ``bytes_to_unicode`` -> bytes).  Steps that act only on the
start of the whole text (``Strip`` after ``Fuse``; ``Metaspace`` dropping the
first token's leading space) are left out on purpose: a reply is always decoded
after the prompt, so its tokens are never at the start of the text.  Added
tokens go through the same decoder (that is what ``tokenizers`` does), so a
non-special added token like ``<tool_call>`` contributes its literal text.

SentencePiece models prepend one ``▁`` (a space) to the text they encode, so
the bytes of ``tokenizer.encode("Hello")`` are ``b" Hello"``: a SentencePiece
model's first word token carries a leading space, which the decoder strips
only at the very start of a text.  (Llama-2's converted tokenizer always
prepends; transformers' newer ``Metaspace(prepend_scheme="first")`` conversion
not when the text already starts with a space or an added token.)  Mid-reply,
nothing is stripped, so the bytes here are what the user sees; the serving
layer must allow for the space (a model may open a JSON reply with ``▁{`` =
``b" {"``, which only a constraint admitting leading whitespace accepts).
A literal ``▁`` in *input* text is encoded as a space by such tokenizers.

``None`` entries: special/control tokens (``<s>``, ``</s>``, ``<unk>``,
``<|im_start|>`` ...), stop tokens (they end the reply and add no text; they are
listed in :attr:`TokenVocabulary.stop_ids` instead), ids past the tokenizer
(models pad their embedding matrix), and tokens whose bytes are empty -- an
empty token is always "allowed" by any automaton state, so a model could emit
it forever without making progress, and a bounded reply could never finish.

This module imports no vLLM and no transformers: it duck-types the tokenizer.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

KINDS = ("sentencepiece", "byte_level", "raw")

#: Marker for ``tokenizers``' SentencePiece-style word boundary.
SPM_SPACE = "\u2581"


class UnsupportedTokenizerError(ValueError):
    """The tokenizer decodes in a way poot cannot map to per-token bytes.

    A deployment problem (raised once, when the backend is set up), not a
    request error, hence not a :class:`~poot_vllm.core.errors.PootError`.
    """


@dataclass(frozen=True, eq=False)
class TokenVocabulary:
    """Per-token output bytes of one model's vocabulary.

    ``token_bytes[i]`` is what token ``i`` appends to the output mid-sequence,
    or ``None`` when ``i`` is never allowed as content.  ``stop_ids`` end a
    reply (allowed only where the constraint accepts).  ``size`` is the
    model's vocab size (>= the tokenizer's length); the token bitmask has
    ``(size + 31) // 32`` int32 words.

    Equality and hashing go through :attr:`cache_key` (a sha256 of the
    content, computed once), so a vocabulary can key caches of compiled masks.
    """

    token_bytes: tuple[bytes | None, ...]
    stop_ids: frozenset[int]
    size: int
    kind: str

    def __post_init__(self) -> None:
        if len(self.token_bytes) != self.size:
            raise ValueError(f"token_bytes has {len(self.token_bytes)} entries, size is {self.size}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        bad = [i for i in self.stop_ids if not 0 <= i < self.size]
        if bad:
            raise ValueError(f"stop ids {sorted(bad)[:5]} are outside the vocabulary of size {self.size}")

    @property
    def bitmask_words(self) -> int:
        """int32 words per token-bitmask row."""
        return (self.size + 31) // 32

    @functools.cached_property
    def token_key(self) -> str:
        """sha256 hex digest of the token bytes, size and kind -- not the stop ids.

        What the token trie and the xgrammar compiler depend on, so the
        vocabularies of requests with other stop ids share them.
        """
        h = hashlib.sha256()
        h.update(f"{self.kind}|{self.size}|".encode())
        # Length-prefixed so that different splits of the same bytes differ;
        # 0xFFFFFFFF marks None.
        parts = []
        for b in self.token_bytes:
            if b is None:
                parts.append(b"\xff\xff\xff\xff")
            else:
                parts.append(len(b).to_bytes(4, "little"))
                parts.append(b)
        h.update(b"".join(parts))
        return h.hexdigest()

    @functools.cached_property
    def cache_key(self) -> str:
        """sha256 hex digest of everything that defines the vocabulary (stop ids
        included: they change token masks).  Cheap once :attr:`token_key` is known."""
        return hashlib.sha256(f"{self.token_key}|{sorted(self.stop_ids)}".encode()).hexdigest()

    def __hash__(self) -> int:
        return hash(self.cache_key)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TokenVocabulary):
            return NotImplemented
        return self is other or self.cache_key == other.cache_key

    @classmethod
    def from_tokenizer(
        cls,
        tokenizer: Any,
        vocab_size: int | None = None,
        stop_ids: Iterable[int] = (),
    ) -> "TokenVocabulary":
        """Build from a Hugging Face tokenizer (fast or slow, or vLLM's cached
        wrapper around one).

        ``vocab_size`` is the model's (defaults to the tokenizer's length);
        ids at or past it are dropped, ids the tokenizer lacks below it are
        ``None``.  ``stop_ids`` are the ids that end a reply (e.g. the
        generation config's ``eos_token_id`` list); the tokenizer's own
        ``eos_token_id`` is always added.  Stop ids get ``None`` bytes: a stop
        token ends the reply and its text is not part of it.
        """
        vocab: dict[str, int] = tokenizer.get_vocab()
        n_tok = max(len(tokenizer), max(vocab.values(), default=-1) + 1)
        size = n_tok if vocab_size is None else int(vocab_size)
        if size <= 0:
            raise ValueError(f"vocab_size must be positive, got {size}")

        pieces: list[str | None] = [None] * n_tok
        for piece, i in vocab.items():
            pieces[i] = piece

        stops = {int(i) for i in stop_ids}
        eos = getattr(tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            stops.add(eos)
        stops = {i for i in stops if 0 <= i < size}

        excluded = _special_ids(tokenizer) | stops
        kind, to_bytes = _piece_to_bytes(tokenizer, vocab)

        token_bytes: list[bytes | None] = [None] * size
        for i in range(min(n_tok, size)):
            piece = pieces[i]
            if piece is None or i in excluded:
                continue
            b = to_bytes(piece)
            token_bytes[i] = b if b else None  # empty tokens: see module docstring
        return cls(tuple(token_bytes), frozenset(stops), size, kind)


def vocabulary_cache_key(vocab: TokenVocabulary) -> str:
    """Stable key for caching artefacts compiled against ``vocab``."""
    return vocab.cache_key


# ---------------------------------------------------------------------------
# Special tokens
# ---------------------------------------------------------------------------

def _special_ids(tokenizer: Any) -> set[int]:
    """Ids of special/control tokens: never constraint content."""
    ids = {int(i) for i in (getattr(tokenizer, "all_special_ids", None) or ()) if i is not None}
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids.update(int(i) for i, tok in added.items() if getattr(tok, "special", False))
    sp = getattr(tokenizer, "sp_model", None)  # slow SentencePiece: control / unknown pieces
    if sp is not None:
        ids.update(i for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i))
    return ids


# ---------------------------------------------------------------------------
# Piece -> bytes, per decoder family
# ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def gpt2_unicode_to_bytes() -> dict[str, int]:
    """GPT-2's ``bytes_to_unicode`` table, inverted: symbol -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + extra)] = b
            extra += 1
    return table


@functools.lru_cache(maxsize=1)
def _byte_level_translation() -> dict[int, str]:
    """``str.translate`` table turning a byte-level symbol string into a
    latin-1 string of its bytes.  Characters that are not symbols map to a
    code point > 255, so the latin-1 encode fails and the caller falls back
    to the token's UTF-8 (as ``tokenizers``' ByteLevel decoder does)."""
    table: dict[int, str] = {ord(c): chr(b) for c, b in gpt2_unicode_to_bytes().items()}
    for cp in range(256):
        table.setdefault(cp, "\U0010ffff")
    return table


def _byte_level_bytes(piece: str) -> bytes:
    try:
        return piece.translate(_byte_level_translation()).encode("latin-1")
    except UnicodeEncodeError:  # not all symbols: the decoder keeps the text
        return piece.encode("utf-8")


def _byte_fallback(piece: str) -> int | None:
    """The byte of a ``<0xNN>`` piece (as ``tokenizers``' ByteFallback reads it)."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            return int(piece[3:5], 16)
        except ValueError:
            return None
    return None


StrStep = Callable[[str], str]


def _compose(steps: list[StrStep], byte_fallback: bool, byte_level: bool) -> Callable[[str], bytes]:
    """Per-token function: string steps in order, then to bytes."""
    single_bytes = [bytes([b]) for b in range(256)]

    def to_bytes(piece: str) -> bytes:
        for step in steps:
            piece = step(piece)
        if byte_fallback:
            b = _byte_fallback(piece)
            if b is not None:
                return single_bytes[b]
        if byte_level:
            return _byte_level_bytes(piece)
        return piece.encode("utf-8")

    return to_bytes


def _piece_to_bytes(tokenizer: Any, vocab: dict[str, int]) -> tuple[str, Callable[[str], bytes]]:
    """(kind, per-piece byte function) for ``tokenizer``."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        backend = getattr(tokenizer, "_tokenizer", None)
    decoder = getattr(backend, "decoder", None) if backend is not None else None
    if decoder is not None:
        return _from_decoder_config(json.loads(decoder.__getstate__()))
    if backend is not None and hasattr(backend, "decode"):  # a tokenizers.Tokenizer without a decoder
        raise UnsupportedTokenizerError(
            "the tokenizer has no decoder, so tokens decode joined by spaces; poot cannot constrain such a model")
    return _from_slow_tokenizer(tokenizer, vocab)


def _from_decoder_config(config: dict) -> tuple[str, Callable[[str], bytes]]:
    """Interpret a ``tokenizers`` decoder pipeline per token."""
    flat = config["decoders"] if config.get("type") == "Sequence" else [config]
    steps: list[StrStep] = []
    byte_fallback = byte_level = fused = spm = False

    def unsupported(why: str) -> UnsupportedTokenizerError:
        return UnsupportedTokenizerError(f"tokenizer decoder {json.dumps(config)[:300]}: {why}")

    for d in flat:
        kind = d.get("type")
        if byte_level and kind not in ("Fuse",):
            raise unsupported(f"{kind} after ByteLevel is not supported")
        if kind == "Replace":
            pattern = d["pattern"].get("String")
            if pattern is None:
                raise unsupported("regex Replace is not supported")
            if fused and len(pattern) != 1:
                raise unsupported("a multi-character Replace after Fuse can span tokens")
            if byte_fallback:
                raise unsupported("Replace after ByteFallback is not supported")
            content = d["content"]
            spm = spm or (pattern == SPM_SPACE and content == " ")
            steps.append(lambda s, p=pattern, c=content: s.replace(p, c))
        elif kind == "Metaspace":
            replacement = d.get("replacement", SPM_SPACE)
            if byte_fallback:
                raise unsupported("Metaspace after ByteFallback is not supported")
            spm = True
            # Its "drop the first token's leading space" acts at text start only.
            steps.append(lambda s, r=replacement: s.replace(r, " "))
        elif kind == "ByteFallback":
            if fused:
                raise unsupported("ByteFallback after Fuse is not supported")
            byte_fallback = True
        elif kind == "Fuse":
            fused = True
        elif kind == "Strip":
            start, stop, content = d.get("start", 0), d.get("stop", 0), d.get("content", " ")
            if stop:
                raise unsupported("Strip from the end of the text is not supported")
            if not fused:  # acts on every token
                steps.append(lambda s, n=start, c=content: _strip_left(s, c, n))
            # after Fuse it strips the start of the whole text only: not mid-sequence
        elif kind == "ByteLevel":
            byte_level = True
        else:
            raise unsupported(f"decoder {kind!r} is not supported")

    family = "byte_level" if byte_level else "sentencepiece" if spm else "raw"
    return family, _compose(steps, byte_fallback, byte_level)


def _strip_left(s: str, content: str, n: int) -> str:
    for _ in range(n):
        if not s.startswith(content):
            break
        s = s[len(content):]
    return s


def _from_slow_tokenizer(tokenizer: Any, vocab: dict[str, int]) -> tuple[str, Callable[[str], bytes]]:
    """Python tokenizers: SentencePiece models, GPT-2-style byte-level ones,
    and, failing those, a guess from the vocabulary's alphabet."""
    replace_space: list[StrStep] = [lambda s: s.replace(SPM_SPACE, " ")]
    if getattr(tokenizer, "sp_model", None) is not None:
        return "sentencepiece", _compose(replace_space, "<0x00>" in vocab, False)
    if getattr(tokenizer, "byte_decoder", None) is not None:
        return "byte_level", _compose([], False, True)
    symbols = gpt2_unicode_to_bytes()
    if sum(1 for c in symbols if c in vocab) == 256 and "Ġ" in vocab:
        return "byte_level", _compose([], False, True)
    if sum(1 for p in vocab if p.startswith(SPM_SPACE)) > len(vocab) // 100:
        return "sentencepiece", _compose(replace_space, "<0x00>" in vocab, False)
    raise UnsupportedTokenizerError(
        f"cannot tell how {type(tokenizer).__name__} decodes tokens (no tokenizers decoder, "
        "no SentencePiece model, no byte-level alphabet)")


__all__ = ["TokenVocabulary", "UnsupportedTokenizerError", "vocabulary_cache_key", "gpt2_unicode_to_bytes", "KINDS"]


def with_stop_ids(vocab: TokenVocabulary, stop_ids: Iterable[int]) -> TokenVocabulary:
    """The same vocabulary with a request's stop ids (EOS plus its own stop tokens).

    ``token_bytes`` is shared (same tuple object), so the token trie built for
    ``vocab`` is reused; only the stop handling in the masks differs.
    """
    stops = frozenset(int(i) for i in stop_ids if 0 <= int(i) < vocab.size)
    if stops == vocab.stop_ids:
        return vocab
    derived = dataclasses.replace(vocab, stop_ids=stops)
    # Same token bytes: carry the digest over rather than hash 100k+ tokens again.
    derived.__dict__["token_key"] = vocab.token_key
    return derived
