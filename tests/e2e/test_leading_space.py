"""SentencePiece leading space: a word-initial token is its space plus the word.

Three facts, checked in a real server with the tiny SentencePiece model:
1. ``guided_regex: " the [a-z]+"`` constrains the tokens the model emits, so
   the first token may be ``▁the`` / ``▁th`` (bytes b" th...").
2. The bytes of each logprob entry include that space, and the entries'
   bytes joined are exactly a string the regex matches.
3. The reply text: the tokenizer's ``decode`` of the reply as one sequence
   drops the single leading space SentencePiece adds at the start of text;
   vLLM (0.32, measured) detokenizes the reply incrementally after the prompt,
   so the returned text keeps it and equals the matched bytes, streamed or not.
"""

from __future__ import annotations

import re

import pytest

PATTERN = " the [a-z]{1,12}"


@pytest.fixture(scope="module")
def spm_client(spm_server):
    import openai

    return openai.OpenAI(base_url=spm_server.base_url, api_key="EMPTY", max_retries=0, timeout=120)


def _tokenizer_and_vocab():
    from transformers import AutoTokenizer

    from poot_vllm.core.vocabulary import TokenVocabulary
    from tests.e2e.conftest import _models_dir

    tok = AutoTokenizer.from_pretrained(_models_dir() / "tiny-llama-spm")
    return tok, TokenVocabulary.from_tokenizer(tok)


@pytest.mark.parametrize("attempt", range(3))
def test_word_initial_token_carries_the_space(spm_client, spm_server, attempt):
    tok, vocab = _tokenizer_and_vocab()
    r = spm_client.chat.completions.create(
        model=spm_server.model, messages=[{"role": "user", "content": "hi"}], max_tokens=30, logprobs=True,
        extra_body={"guided_regex": PATTERN, "return_token_ids": True},
    )
    choice = r.choices[0]
    ids = list(choice.token_ids)
    content = [(t, e) for t, e in zip(ids, choice.logprobs.content) if vocab.token_bytes[t] is not None]
    # 1. the tokens the model emitted spell a string the regex matches, space included
    emitted = b"".join(vocab.token_bytes[t] for t, _ in content).decode()
    assert re.fullmatch(PATTERN, emitted), emitted
    # 2. a word-initial piece's logprob entry carries its space
    pieces = tok.convert_ids_to_tokens([t for t, _ in content])
    for piece, (_, entry) in zip(pieces, content):
        if piece.startswith("\u2581"):
            assert bytes(entry.bytes).startswith(b" "), (piece, entry)
    # 3. the reply text is the matched bytes, leading space included
    assert choice.message.content == emitted


def test_tokenizer_decode_drops_the_leading_space_vllm_text_keeps_it(spm_client, spm_server):
    tok, _ = _tokenizer_and_vocab()
    r = spm_client.completions.create(
        model=spm_server.model, prompt="Say:", max_tokens=30, extra_body={"guided_regex": PATTERN,
                                                                            "return_token_ids": True},
    )
    c = r.choices[0]
    ids = [t for t in c.token_ids if t not in tok.all_special_ids]
    assert re.fullmatch(PATTERN, c.text), c.text
    assert tok.decode(ids) == c.text[1:]  # decoded as one sequence: the single leading space is dropped
    stream = spm_client.completions.create(model=spm_server.model, prompt="Say:", max_tokens=30, stream=True,
                                           extra_body={"guided_regex": PATTERN})
    streamed = "".join(ch.choices[0].text for ch in stream if ch.choices)
    assert re.fullmatch(PATTERN, streamed), streamed
