"""guided_grammar in Lark syntax in a real vllm serve, on both tiny models.

A random-weight model emits garbage unless constrained, so every reply that
lark's own parser accepts is the constraint at work.
"""

from __future__ import annotations

import httpx
import lark
import pytest

#: Bounded (every reply ends within max_tokens), with rules, terminals, common imports, ~ and [ ].
GRAMMAR = r'''
start: "(" pair (";" pair)~0..2 ")"
pair: KEY "=" value
?value: NUM | WORD | "[" NUM ["," NUM] "]"
KEY: /[a-z]{1,3}/
NUM: "-"? DIGIT~1..3
WORD: "'" LCASE_LETTER~1..4 "'"
%import common.DIGIT
%import common.LCASE_LETTER
'''

PARSER = lark.Lark(GRAMMAR, start="start", parser="earley")


def _client(server):
    import openai

    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=120)


def _parses(text: str) -> bool:
    try:
        PARSER.parse(text)
        return True
    except lark.exceptions.LarkError:
        return False


@pytest.mark.parametrize("fixture", ["spm_server", "bpe_server"])
def test_lark_grammar_replies_parse_with_lark(request, fixture):
    server = request.getfixturevalue(fixture)
    client = _client(server)
    chat = client.chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "hi"}], max_tokens=80, n=4,
        extra_body={"guided_grammar": GRAMMAR})
    completion = client.completions.create(model=server.model, prompt="Data:", max_tokens=80, n=4,
                                           extra_body={"guided_grammar": GRAMMAR})
    replies = [(c.finish_reason, c.message.content) for c in chat.choices]
    replies += [(c.finish_reason, c.text) for c in completion.choices]
    assert len(replies) == 8
    for finish_reason, text in replies:
        assert finish_reason == "stop", (finish_reason, text)
        assert _parses(text), text


@pytest.mark.parametrize("stream", [False, True])
def test_bad_lark_grammar_is_a_400_naming_line_and_column(spm_server, stream):
    r = httpx.post(spm_server.base_url + "/completions", timeout=60, json={
        "model": spm_server.model, "prompt": "x", "max_tokens": 5, "stream": stream,
        "guided_grammar": 'start: pair\npair: KEY "=" VALUE\nKEY: /[a-z]+?/\n'})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "guided_grammar", err
    assert "line 3:6" in err["message"] and "lazy" in err["message"], err["message"]
