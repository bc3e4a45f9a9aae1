"""guided_regex and guided_choice through a real vllm serve with the poot backend.

A random-weight model emits garbage unless constrained, so every reply that
matches proves the constraint held.
"""

from __future__ import annotations

import re

import openai
import pytest

REGEXES = [
    r"[0-9]{3}-[0-9]{4}",
    r"(cat|dog|bird)s?",
    r"[a-z]{2,8}@[a-z]{2,6}\.(com|org)",
    r"\d+(\.\d{1,2})?",
    r"(yes|no)",
]


@pytest.mark.parametrize("pattern", REGEXES)
def test_chat_regex_matches(client, server, pattern):
    r = client.chat.completions.create(
        model=server.model,
        messages=[{"role": "user", "content": "Say something"}],
        max_tokens=40,
        temperature=1.0,
        extra_body={"guided_regex": pattern},
    )
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice
    assert re.fullmatch(pattern, choice.message.content), choice.message.content


def test_completion_regex_n4_all_match(client, server):
    pattern = r"[A-Z][a-z]{1,6} [0-9]{1,3}"
    r = client.completions.create(
        model=server.model, prompt="Name and age:", max_tokens=30, n=4, temperature=1.0,
        extra_body={"guided_regex": pattern},
    )
    assert len(r.choices) == 4
    for c in r.choices:
        assert re.fullmatch(pattern, c.text), c.text


def test_choice_non_streaming_and_streaming(client, server):
    options = ["yes", "no", "maybe so", "ça dépend", "a|b*"]
    for _ in range(3):
        r = client.chat.completions.create(
            model=server.model, messages=[{"role": "user", "content": "?"}], max_tokens=20, n=4,
            extra_body={"guided_choice": options},
        )
        assert all(c.message.content in options for c in r.choices), [c.message.content for c in r.choices]
    stream = client.chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "?"}], max_tokens=20, stream=True,
        extra_body={"guided_choice": options},
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text in options, text


def test_streaming_regex(client, server):
    pattern = r"\[(1|2|3)(,(1|2|3)){2,4}\]"
    stream = client.completions.create(
        model=server.model, prompt="List:", max_tokens=40, stream=True, n=2,
        extra_body={"guided_regex": pattern},
    )
    texts = {0: "", 1: ""}
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.text
    for t in texts.values():
        assert re.fullmatch(pattern, t), t


def test_structured_outputs_field_is_poot_validated(client, server):
    """vLLM's own structured_outputs field is validated by poot too (no silent xgrammar)."""
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=server.model, prompt="x", max_tokens=5,
                                  extra_body={"structured_outputs": {"regex": "(a)\\1"}})
    assert "backreference" in str(e.value).lower()
    r = client.completions.create(model=server.model, prompt="x", max_tokens=20,
                                  extra_body={"structured_outputs": {"regex": "[ab]{3}"}})
    assert re.fullmatch("[ab]{3}", r.choices[0].text)
