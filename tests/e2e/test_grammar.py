"""guided_grammar (GBNF) and response_format json_object in a real vllm serve."""

from __future__ import annotations

import json
import re

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
    for c in r.choices:  # recursive, and still finished inside max_tokens (core/grammar/rule_automata.py, rule_masks.py)
        assert c.finish_reason == "stop", c.text
        assert _Parser(c.text).parse(), c.text


def test_grammar_streaming_chat(client, server):
    stream = client.chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "sum"}], max_tokens=12, stream=True,
        extra_body={"guided_grammar": 'root ::= "(" root ")" | "x"'},
    )
    chunks = [ch for ch in stream if ch.choices]
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    depth = text.count("(")
    assert text == "(" * depth + "x" + ")" * depth, text
    assert chunks[-1].choices[0].finish_reason == "stop"


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


# A small command language without recursion: regular, so poot runs it as a DFA
# with budget-aware masks (core/grammar/regular.py): every reply finishes inside
# max_tokens, and a max_tokens below its shortest reply is a 400.
COMMANDS = r'''
root ::= cmd (";" " "? cmd)*
cmd  ::= verb " " dir " " num
verb ::= "move" | "turn" | "wait"
dir  ::= "left" | "right" | "up" | "down"
num  ::= [1-9] [0-9]{0,2}
'''
_CMD = r"(?:move|turn|wait) (?:left|right|up|down) [1-9][0-9]{0,2}"
COMMANDS_RE = rf"{_CMD}(?:; ?{_CMD})*"  # the oracle: the same language in Python's re


def _shortest_reply(server, grammar: str) -> int:
    """The shortest reply's token count, as the admission 400 states it."""
    r = httpx.post(server.base_url + "/completions", timeout=60, json={
        "model": server.model, "prompt": "x", "max_tokens": 1, "guided_grammar": grammar})
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "shortest reply" in message and "max_tokens" in message, message
    return int(re.search(r"shortest reply this constraint allows is (\d+) tokens", message).group(1))


@pytest.mark.parametrize("fixture", ["spm_server", "bpe_server"])
def test_grammar_without_recursion_finishes_inside_max_tokens(request, fixture):
    """max_tokens two above the shortest reply: a random model that picks a
    longer verb, direction or number must still close in time (without
    budget-aware masks most of these replies are cut)."""
    import openai

    server = request.getfixturevalue(fixture)
    budget = _shortest_reply(server, COMMANDS) + 2
    client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=120)
    r = client.completions.create(model=server.model, prompt="Robot:", max_tokens=budget, n=8,
                                  extra_body={"guided_grammar": COMMANDS})
    for c in r.choices:
        assert c.finish_reason == "stop", (budget, c.finish_reason, c.text)
        assert re.fullmatch(COMMANDS_RE, c.text), c.text


def test_grammar_without_recursion_shorter_than_its_shortest_reply_is_400(server):
    assert _shortest_reply(server, COMMANDS) >= 3  # "move up 1" and the stop token, however tokenized


# Recursive grammars (pushdown, on xgrammar's matcher) finish inside max_tokens
# too: poot tracks the shortest completion of the reply so far on its own
# model of the grammar and, near the end, allows only tokens after which it
# still fits (core/grammar/rule_automata.py, rule_masks.py).  Oracle: each grammar's Lark twin.
RECURSIVE = {
    "arithmetic": (
        'root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= factor (("*" | "/") factor)*\n'
        'factor ::= number | "(" expr ")" | "-" factor\nnumber ::= [0-9] | [1-9] [0-9]+\n',
        'start: expr\nexpr: term (("+" | "-") term)*\nterm: factor (("*" | "/") factor)*\n'
        'factor: NUMBER | "(" expr ")" | "-" factor\nNUMBER: /[1-9][0-9]+|[0-9]/\n'),
    "nested-lists": (
        'root ::= value\nvalue ::= list | str | [0-9]+\nlist ::= "[" (value ("," value)*)? "]"\n'
        'str ::= "\\"" [a-z ]* "\\""\n',
        'start: value\nvalue: list | STR | DIGITS\nlist: "[" (value ("," value)*)? "]"\n'
        'STR: /"[a-z ]*"/\nDIGITS: /[0-9]+/\n'),
    "block-dsl": (
        'root ::= stmt (" " stmt)*\nstmt ::= "set " ident "=" num ";" | "if " ident " {" (" " stmt)+ " }"\n'
        'ident ::= [a-z]+\nnum ::= [0-9]+\n',
        'start: stmt (" " stmt)*\nstmt: "set " IDENT "=" NUM ";" | "if " IDENT " {" (" " stmt)+ " }"\n'
        'IDENT: /[a-z]+/\nNUM: /[0-9]+/\n'),
}


@pytest.mark.parametrize("fixture", ["spm_server", "bpe_server"])
@pytest.mark.parametrize("name", sorted(RECURSIVE))
def test_recursive_grammar_finishes_inside_max_tokens(request, fixture, name):
    """n = 8 at a tight and a roomier max_tokens: every reply stops, and parses."""
    import lark
    import openai

    gbnf, lark_text = RECURSIVE[name]
    parser = lark.Lark(lark_text, start="start", parser="earley", lexer="dynamic_complete")
    server = request.getfixturevalue(fixture)
    client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=120)
    for max_tokens in (14, 40):
        r = client.completions.create(model=server.model, prompt="Go:", max_tokens=max_tokens, n=8,
                                      extra_body={"guided_grammar": gbnf})
        for c in r.choices:
            assert c.finish_reason == "stop", (name, max_tokens, c.finish_reason, c.text)
            parser.parse(c.text)  # raises on a reply outside the language
