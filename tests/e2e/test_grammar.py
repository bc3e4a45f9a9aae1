"""guided_grammar (GBNF) and response_format json_object in a real vllm serve."""

from __future__ import annotations

import json

import httpx
import pytest

ARITH = r'''
root   ::= expr
expr   ::= term (("+" | "-") term){0,3}
term   ::= factor (("*" | "/") factor){0,2}
factor ::= [1-9] [0-9]{0,2} | "(" expr ")"
'''


class _Parser:
    """Reference recursive-descent parser for ARITH (the oracle)."""

    def __init__(self, text: str) -> None:
        self.s, self.i = text, 0

    def parse(self) -> bool:
        try:
            self.expr()
        except ValueError:
            return False
        return self.i == len(self.s)

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def expr(self) -> None:
        self.term()
        n = 0
        while self.peek() in ("+", "-") and self.peek():
            self.i += 1
            self.term()
            n += 1
        if n > 3:
            raise ValueError

    def term(self) -> None:
        self.factor()
        n = 0
        while self.peek() in ("*", "/") and self.peek():
            self.i += 1
            self.factor()
            n += 1
        if n > 2:
            raise ValueError

    def factor(self) -> None:
        if self.peek() == "(":
            self.i += 1
            self.expr()
            if self.peek() != ")":
                raise ValueError
            self.i += 1
            return
        if not self.peek() or self.peek() not in "123456789":
            raise ValueError
        self.i += 1
        n = 0
        while self.peek() and self.peek() in "0123456789" and n < 2:
            self.i += 1
            n += 1


def test_oracle_sanity():
    assert _Parser("1+(23*4)").parse() and not _Parser("1+").parse() and not _Parser("01").parse()


def test_arithmetic_grammar_replies_parse(client, server):
    r = client.completions.create(model=server.model, prompt="Math:", max_tokens=60, n=4,
                                  extra_body={"guided_grammar": ARITH})
    for c in r.choices:
        if c.finish_reason == "stop":
            assert _Parser(c.text).parse(), c.text
        else:  # cut at max_tokens: still a prefix of the language (budget masks finish it normally)
            assert c.finish_reason == "length"
    assert any(c.finish_reason == "stop" for c in r.choices)


def test_grammar_streaming_chat(client, server):
    stream = client.chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "sum"}], max_tokens=60, stream=True,
        extra_body={"guided_grammar": 'root ::= "(" root ")" | "x"'},
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    depth = text.count("(")
    assert text == "(" * depth + "x" + ")" * depth or not text.endswith(")" * depth)


def test_json_object_replies_parse(client, server):
    r = client.chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "json"}], max_tokens=200, n=4,
        response_format={"type": "json_object"},
    )
    done = [c for c in r.choices if c.finish_reason == "stop"]
    for c in done:
        assert isinstance(json.loads(c.message.content), dict), c.message.content
    assert done


@pytest.mark.parametrize(
    "grammar,needle",
    [
        ('root ::= "a" ' + "| \"b\" " * 3000, "max_grammar_bytes"),
        ('root ::= foo', "undefined"),
        ('start ::= "a"', "root"),
        ('root ::= ("a"', "1:"),
    ],
)
def test_bad_grammar_is_400(server, grammar, needle):
    for stream in (False, True):
        r = httpx.post(server.base_url + "/completions", timeout=60, json={
            "model": server.model, "prompt": "x", "max_tokens": 5, "stream": stream, "guided_grammar": grammar})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "guided_grammar" and needle in err["message"], err
    assert server.healthy()
