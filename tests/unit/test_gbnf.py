"""GBNF parser and validator: what users get for good and bad grammars.

These tests need neither xgrammar nor vLLM: the API server validates grammars
without compiling them.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from poot_vllm.core.errors import ConstraintSyntaxError, LimitExceeded, PootError
from poot_vllm.core.grammar.emit import grammar_to_xgrammar_ebnf
from poot_vllm.core.grammar.gbnf import (
    Alternation, CharClass, Grammar, Literal, Repeat, RuleRef, Rule, Sequence, grammar_cost, parse_gbnf,
)
from poot_vllm.core.limits import DEFAULT_LIMITS, Limits

BAD = [
    # (grammar, error type, fragments the message must contain)
    ('root ::= foo', ConstraintSyntaxError, ["1:10", "undefined rule 'foo'"]),
    ('root ::= "a"\n\nx ::= "b" bar-baz', ConstraintSyntaxError, ["3:11", "undefined rule 'bar-baz'"]),
    ('start ::= "a"', ConstraintSyntaxError, ["no 'root' rule"]),
    ('', ConstraintSyntaxError, ["no 'root' rule"]),
    ('root ::= "a"\nroot ::= "b"', ConstraintSyntaxError, ["2:1", "defined twice", "first at line 1"]),
    ('root ::= "a\\q"', ConstraintSyntaxError, ["1:12", "bad escape '\\q'"]),
    ('root ::= "\\x4"', ConstraintSyntaxError, ["1:11", "\\x needs exactly 2 hex digits"]),
    ('root ::= [\\u12G4]', ConstraintSyntaxError, ["1:11", "\\u needs exactly 4 hex digits"]),
    ('root ::= "\\U00110000"', ConstraintSyntaxError, ["past U+10FFFF"]),
    ('root ::= "\\uD800"', ConstraintSyntaxError, ["surrogate"]),
    ('root ::= "abc', ConstraintSyntaxError, ["1:10", "unterminated literal"]),
    ('root ::= "abc\n  "', ConstraintSyntaxError, ["1:14", "line break inside a literal"]),
    ('root ::= [abc', ConstraintSyntaxError, ["1:10", "unterminated character class"]),
    ('root ::= [z-a]', ConstraintSyntaxError, ["1:10", "range out of order"]),
    ('root ::= []', ConstraintSyntaxError, ["1:10", "matches no character"]),
    ('root ::= [^\\x00-\\U0010FFFF]', ConstraintSyntaxError, ["matches no character"]),
    ('root ::= ("a" | "b"', ConstraintSyntaxError, ["1:10", "unbalanced '('"]),
    ('root ::= ("a"\nx ::= "b"', ConstraintSyntaxError, ["1:10", "unbalanced '('", "next rule"]),
    ('root ::= "a")', ConstraintSyntaxError, ["1:13", "unbalanced ')'"]),
    ('root ::= root "a"', ConstraintSyntaxError, ["1:1", "rule 'root' matches no string"]),
    ('root ::= "x" | a\na ::= "(" b ")"\nb ::= a a', ConstraintSyntaxError, ["2:1", "rule 'a' matches no string"]),
    ('root ::= "a"{3,2}', ConstraintSyntaxError, ["1:13", "max < min"]),
    ('root ::= "a"{,2}', ConstraintSyntaxError, ["1:13", "{0,n}"]),
    ('root ::= "a"{x}', ConstraintSyntaxError, ["1:13", "malformed repetition"]),
    ('root ::= * "a"', ConstraintSyntaxError, ["1:10", "must follow an element"]),
    ('root ::= "a" ::= "b"', ConstraintSyntaxError, ["1:14", "unexpected ':'"]),
    ('root ::= "a" x ::= "b"', ConstraintSyntaxError, ["1:14", "must start on its own line"]),
    ('"a" ::= root', ConstraintSyntaxError, ["1:1", "expected a rule definition"]),
    ('root ::= "a" @', ConstraintSyntaxError, ["1:14", "unexpected '@'"]),
    ('root ::= [a-z]{1000} [a-z]{1000} [a-z]{1000}', LimitExceeded, ["max_grammar_cost"]),
    ('root ::= ' + '[^"]* ' * 100, LimitExceeded, ["max_grammar_cost"]),
    ('root ::= ' + "(" * 100 + '"a"' + ")" * 100, LimitExceeded, ["max_grammar_nesting"]),
    ('root ::= "a"' + "*" * 100, LimitExceeded, ["max_grammar_nesting"]),
    ('root ::= "' + "a" * (16 * 1024) + '"', LimitExceeded, ["max_grammar_bytes=16384"]),
]


@pytest.mark.parametrize("text,error,fragments", BAD, ids=[b[0][:40] for b in BAD])
def test_bad_grammar_is_refused_with_location(text, error, fragments):
    with pytest.raises(error) as exc:
        parse_gbnf(text)
    assert isinstance(exc.value, PootError)
    for fragment in fragments:
        assert fragment in str(exc.value), (fragment, str(exc.value))


def test_size_limit_is_checked_before_parsing():
    # Garbage that would be a syntax error: the size refusal must come first.
    with pytest.raises(LimitExceeded):
        parse_gbnf("@" * 100, Limits(max_grammar_bytes=99))
    assert parse_gbnf('root ::= "a"', Limits(max_grammar_bytes=12))


def test_cost_limit_is_configurable():
    text = 'root ::= [a-z]{100}'
    assert grammar_cost(parse_gbnf(text)) >= 100
    with pytest.raises(LimitExceeded, match="max_grammar_cost=50"):
        parse_gbnf(text, dataclasses.replace(DEFAULT_LIMITS, max_grammar_cost=50))


GOOD = [
    'root ::= "a"',
    'root ::= ""',
    'root ::=',                                    # empty body = empty string (llama.cpp allows it)
    'root ::= | "x"',                              # empty alternative
    'root ::= "a" | \n  "b"\n  "c"',               # a rule continues until the next `name ::=`
    'root ::= x # comment ::= not a rule\nx ::= [a-z\\-]+ # trailing',
    'root ::= expr\nexpr ::= expr "+" term | term\nterm ::= [0-9]+',  # left recursion is allowed
    'root ::= ("(" root ")")* ',
    'root ::= [^"\\\\\\x00-\\x1F] . "\\u00e9\\U0001F600\\t\\n\\r\\"\\[\\]\\-"',
    'root ::= "a"{0} "b"{2} "c"{1,} "d"{2,5} "e"?+*',
    'root ::= rule-with-dashes_and_underscores\nrule-with-dashes_and_underscores ::= 1x\n1x ::= "x"',
    'root ::= [α-ω] "日本" [😀-🙏]',
]


def _rename(grammar: Grammar, mapping) -> Grammar:
    """The grammar with every rule name passed through ``mapping``."""
    def node(n):
        if isinstance(n, RuleRef):
            return RuleRef(mapping(n.name))
        if isinstance(n, Sequence):
            return Sequence(tuple(node(i) for i in n.items))
        if isinstance(n, Alternation):
            return Alternation(tuple(node(i) for i in n.options))
        if isinstance(n, Repeat):
            return Repeat(node(n.item), n.min, n.max)
        return n
    return Grammar(tuple(Rule(mapping(r.name), node(r.body)) for r in grammar.rules), mapping(grammar.root))


@pytest.mark.parametrize("text", GOOD)
def test_good_grammar_round_trips_through_the_emitted_text(text):
    """The emitted xgrammar text is itself valid GBNF and parses back to the same AST."""
    from poot_vllm.core.grammar.emit import rule_name

    grammar = parse_gbnf(text)
    emitted = grammar_to_xgrammar_ebnf(grammar)
    again = parse_gbnf(emitted)
    assert _rename(again, lambda n: n) == _rename(grammar, lambda n: rule_name(n, "root"))


def test_ast_shapes():
    g = parse_gbnf('root ::= "ab" | [c-ea\\]b] x?\nx ::= .{2,}')
    assert g.rule("root").body == Alternation((
        Literal("ab"),
        Sequence((CharClass(((ord("]"), ord("]")), (ord("a"), ord("e")))), Repeat(RuleRef("x"), 0, 1))),
    ))
    # `.` is every code point but the surrogates (UTF-8 cannot encode them).
    assert g.rule("x").body == Repeat(CharClass(((0, 0xD7FF), (0xE000, 0x10FFFF))), 2, None)
    neg = parse_gbnf('root ::= [^\\x00-\\x09\\x0B-\\U0010FFFF]').rule("root").body
    assert neg == CharClass(((10, 10),))


def test_parser_does_not_import_xgrammar():
    code = ("import sys; from poot_vllm.core.grammar import parse_gbnf, json_object_grammar, grammar_to_xgrammar_ebnf;"
            "grammar_to_xgrammar_ebnf(parse_gbnf('root ::= \"a\"')); json_object_grammar();"
            "assert 'xgrammar' not in sys.modules and 'torch' not in sys.modules and 'vllm' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
