"""guided_regex with inline flags, word boundaries, anchors and lookarounds, through a real vllm serve.

A random-weight model emits garbage unless constrained, so n = 4 replies that
all ``re.fullmatch`` the pattern show the constraint held, on both tokenizer
kinds (SentencePiece with byte fallback, byte-level BPE).
"""

from __future__ import annotations

import re

import openai
import pytest

PATTERNS = [
    r"(?i)(yes|no|maybe)",  # case folding, with Kelvin/long-s style folds in play
    r"\b[a-z]{2,6}\b(?: \b[a-z]{2,6}\b){1,3}",  # word boundaries
    r"(?i:hello) \bworld\b",
    r"(?m)[a-z]{1,5}$\n^[0-9]{1,3}",  # MULTILINE anchors in the middle
    r"(?=.*\d)(?=.*[A-Z])[A-Za-z\d]{6,10}",  # lookaheads
    r"(?x) [a-z]{2,5} \s* (?<!\s) = \s* \d{1,3}  # verbose, lookbehind",
]


@pytest.fixture(params=["spm_server", "bpe_server"])
def tiny(request):
    server = request.getfixturevalue(request.param)
    client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=120)
    return server, client


@pytest.mark.parametrize("pattern", PATTERNS)
def test_regex_with_flags_and_assertions_n4(tiny, pattern):
    server, client = tiny
    r = client.completions.create(
        model=server.model, prompt="Answer:", max_tokens=40, n=4, temperature=1.0,
        extra_body={"guided_regex": pattern},
    )
    assert len(r.choices) == 4
    for c in r.choices:
        assert c.finish_reason == "stop", c
        assert re.fullmatch(pattern, c.text), (pattern, c.text)


def test_chat_ignorecase_and_boundary_n4(tiny):
    server, client = tiny
    pattern = r"(?i)\bok\b(?: [a-z]{1,4}){0,2}"
    r = client.chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "Say ok"}], max_tokens=30, n=4,
        temperature=1.0, extra_body={"guided_regex": pattern},
    )
    assert len(r.choices) == 4
    for c in r.choices:
        assert c.finish_reason == "stop", c
        assert re.fullmatch(pattern, c.message.content), c.message.content


def test_backreference_is_still_a_clear_400(tiny):
    server, client = tiny
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=server.model, prompt="x", max_tokens=5,
                                  extra_body={"guided_regex": r"(a)\1"})
    assert "backreference" in str(info.value)
