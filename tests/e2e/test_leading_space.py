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


def test_word_initial_token_carries_the_space(spm_client, spm_server):
    r = spm_client.chat.completions.create(
        model=spm_server.model, messages=[{"role": "user", "content": "hi"}], max_tokens=30, logprobs=True,
        extra_body={"guided_regex": PATTERN},
    )
    entries = r.choices[0].logprobs.content
    content_entries = [e for e in entries if e.token != "<|im_end|>"]
    joined = b"".join(bytes(e.bytes) for e in content_entries).decode()
    assert re.fullmatch(PATTERN, joined), joined
    assert bytes(content_entries[0].bytes).startswith(b" "), content_entries[0]
    # the reply text is the matched bytes, leading space included
    assert r.choices[0].message.content == joined


def test_tokenizer_decode_drops_the_leading_space_vllm_text_keeps_it(spm_client, spm_server):
    from transformers import AutoTokenizer

    from tests.e2e.conftest import _models_dir

    tok = AutoTokenizer.from_pretrained(_models_dir() / "tiny-llama-spm")
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
