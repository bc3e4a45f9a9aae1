"""Lark grammars in guided_grammar: the language lark itself gives them, and clear 400s.

Oracles: lark's own Earley parser (``lexer='dynamic_complete'``, the lexer
that tries every length of a terminal) for every verdict, Python's ``re`` for
case-insensitive terminals, and each bench grammar's GBNF twin.  Strings are
run through poot's real matcher (xgrammar, a byte-per-token vocabulary).
"""

from __future__ import annotations

import functools
import json
import random
import re

import lark  # the oracle (a vLLM dependency): failing to import it fails these tests
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from poot_vllm.core.constraints import Constraint, Kind, check, grammar_constraint
from poot_vllm.core.errors import ConstraintSyntaxError, LimitExceeded, PootError, UnsupportedConstruct
from poot_vllm.core.grammar.gbnf import parse_gbnf
from poot_vllm.core.grammar.json_object import JSON_OBJECT_GBNF
from poot_vllm.core.grammar.lark import COMMON_LARK, grammar_syntax, parse_grammar, parse_lark
from poot_vllm.core.limits import Limits
from poot_vllm.core.matchers.pushdown import compile_pushdown

from tests.bench_data import bench_path, require_bench
from tests.unit.test_pushdown_matcher import BYTE_VOCAB, accepts_bytes, mutate, sample

BENCH = bench_path("grammar.jsonl")


def bench_items() -> list[dict]:
    return [json.loads(line) for line in require_bench("grammar.jsonl").read_text().splitlines()]


@functools.lru_cache(maxsize=None)
def poot_matcher(text: str):
    return compile_pushdown(parse_grammar(text), BYTE_VOCAB).new_matcher()


def poot_accepts(text: str, s: str) -> bool:
    return accepts_bytes(poot_matcher(text), s.encode("utf-8"))


@functools.lru_cache(maxsize=None)
def lark_parser(text: str) -> lark.Lark:
    return lark.Lark(text, start="start", parser="earley", lexer="dynamic_complete")


def lark_accepts(text: str, s: str) -> bool:
    try:
        lark_parser(text).parse(s)
        return True
    except lark.exceptions.LarkError:
        return False


# ------------------------------------------------------------ the bench twins


def test_bench_lark_twins_accept_exactly_the_valid_examples():
    for item in bench_items():
        text = item["lark"]
        for s in item["valid"]:
            assert poot_accepts(text, s), (item["id"], s)
            assert lark_accepts(text, s), (item["id"], s)  # the data agrees with lark
        for s in item["invalid"]:
            assert not poot_accepts(text, s), (item["id"], s)


def test_bench_lark_twins_have_the_language_of_their_gbnf_twins():
    """Strings of either twin (sampled from each) are accepted by the other, and mutations get one verdict from
    poot's Lark grammar, poot's GBNF grammar and lark."""
    for item in bench_items():
        text, gbnf = item["lark"], parse_gbnf(item["gbnf"])
        gbnf_m = compile_pushdown(gbnf, BYTE_VOCAB).new_matcher()
        rng = random.Random(item["id"])
        from_gbnf = [sample(gbnf, rng) for _ in range(60)]
        from_lark = [sample(parse_grammar(text), rng) for _ in range(60)]
        for s in from_gbnf:
            assert poot_accepts(text, s), (item["id"], s)
        for s in from_lark:
            assert accepts_bytes(gbnf_m, s.encode()), (item["id"], s)
        alphabet = "".join(sorted({c for s in from_gbnf for c in s})) + " x"
        short = [s for s in from_gbnf if len(s) < 25] or from_gbnf
        verdicts = set()
        for _ in range(80):
            s = mutate(rng.choice(short), rng, alphabet)
            want = lark_accepts(text, s)
            verdicts.add(want)
            assert poot_accepts(text, s) == want == accepts_bytes(gbnf_m, s.encode()), (item["id"], s)
        assert verdicts == {True, False}


# ------------------------------------------------- Lark features, lark as oracle

FEATURES = {
    # lark's own JSON example: %ignore, imports, ?rule, [x]
    "json": (
        '?start: value\n'
        '?value: object | array | ESCAPED_STRING | SIGNED_NUMBER | "true" | "false" | "null"\n'
        'array: "[" [value ("," value)*] "]"\n'
        'object: "{" [pair ("," pair)*] "}"\n'
        'pair: ESCAPED_STRING ":" value\n'
        '%import common.ESCAPED_STRING\n%import common.SIGNED_NUMBER\n%import common.WS\n%ignore WS\n',
        ['{"a": [1, -2.5e3, true, null]}', ' [ ] ', '{"k\\"q": "v"}', '[1 2]', '{"a" 1}', '"x\\"', '[01]']),
    # i flags, aliases, ! and ~, ignore of a literal
    "greeting": (
        'start: greeting name+ punct\n'
        'greeting: "hello"i | "hi"i -> hi\n'
        'name: NAME ","?\n'
        'NAME: /[a-z]+/i\n'
        '!punct: "!" ~ 1..3 | "."\n'
        '%ignore " "\n',
        ['HeLLo Bob, Al!!', 'hi x.', 'hello!', 'hi  a b c !!!!', 'HI A.', 'hey a.']),
    # ranges, ~ on terminals and rules, optional tail, recursion
    "ranges": (
        'start: item ~ 2..4 [tail]\n'
        'item: LETTER DIGIT? | "(" item ")"\n'
        'tail: "-" HEX~2\n'
        'HEX: "0".."9" | "a".."f"\n'
        'LETTER: "a".."c"\n'
        'DIGIT: /[0-9]/\n',
        ['ab', 'a1(b2)c-0f', '((a))b', 'a', 'abcde', 'ab-0g', 'ab-0']),
    # line continuations, both comment styles, priorities, s flag
    "layout": (
        '// a grammar\n'
        'start.2: a\n'
        '     | b   // trailing comment\n'
        '     # a hash comment\n'
        '     | "c" ANY "c"\n'
        'a: "x" (b | "y")*\n'
        'b: "z"\n'
        'ANY.3: /./s\n',
        ['x', 'xzyz', 'z', 'c\nc', 'cdc', 'cc', 'xa']),
    # unicode: classes and strings, a regex with classes, counted repetitions
    "unicode": (
        'start: GREEK+ "-" NOTAZ "é"~1..2 CJK?\n'
        'GREEK: /[α-ω]/\nNOTAZ: /[^a-z]/\nCJK: /[\\u4e00-\\u9fff]{1,2}/\n',
        ['αβ-Zé', 'ω-1éé中文', 'α-aé', 'a-Zé']),
    # terminals built from other terminals; imports with an alias and a list
    "terminals": (
        'start: ID "=" VALUE (_SEP ID "=" VALUE)*\n'
        'ID: LETTER (LETTER | DIGIT | "_")*\n'
        'VALUE: INT | "\'" /[^\'\\n]*/ "\'"\n'
        '_SEP: ";" SPACE?\n'
        '%import common.WS_INLINE -> SPACE\n'
        '%import common (LETTER, DIGIT, INT)\n',
        ["a=1", "x_2='hi there'; y=30", "a=1;b=2", "1=a", "a='x", "a=1 ;b=2"]),
    # no line break after the last definition (its last element is not followed by an operator)
    "no-final-newline": ('start: A B?\nB: "b"\nA: "a"', ["a", "ab", "", "aa", "abb"]),
}


@pytest.mark.parametrize("name", list(FEATURES))
def test_examples_match_lark(name):
    text, examples = FEATURES[name]
    verdicts = set()
    for s in examples:
        want = lark_accepts(text, s)
        verdicts.add(want)
        assert poot_accepts(text, s) == want, (s, want)
    assert verdicts == {True, False}, "each table exercises both sides"


@pytest.mark.parametrize("name", list(FEATURES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_strings_match_lark(name, data):
    """Strings sampled from poot's grammar (lark must accept them), and mutations of them (one verdict)."""
    text, examples = FEATURES[name]
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    s = sample(parse_grammar(text), rng)
    if len(s) <= 40:  # lark's Earley parser is the slow side
        assert lark_accepts(text, s), s
        assert poot_accepts(text, s), s
    alphabet = "".join(sorted(set("".join(examples)))) + " "
    for _ in range(3):
        s = mutate(s[:40], rng, alphabet)
    assert poot_accepts(text, s) == lark_accepts(text, s), s


# --------------------------------------------------- common.lark, terminal by terminal

COMMON = sorted(n for n in re.findall(r"^([A-Z_]+)\s*:", COMMON_LARK, re.M) if not n.startswith("_"))


def test_every_common_terminal_is_defined():
    lark_common = (lark.__file__.rsplit("/", 1)[0] + "/grammars/common.lark")
    with open(lark_common) as f:
        theirs = {n for n in re.findall(r"^([A-Z_]+)\s*:", f.read(), re.M) if not n.startswith("_")}
    assert set(COMMON) == theirs


@pytest.mark.parametrize("name", COMMON)
def test_common_terminal_matches_lark(name):
    text = f"start: {name}\n%import common.{name}\n"
    rng = random.Random(name)
    grammar = parse_grammar(text)
    strings = [sample(grammar, rng)[:30] for _ in range(40)]
    strings += ["", "0", "-1.5e+3", ".5", "1.", "e5", "_a1", "a b", '"a\\"b"', '"a"b"', '"\\\\"', '"\\"',
                "/* x */", "/* a */ */", "/**/", "# c", "// c\n", "-- q", "\r\n\n", " \t", "Ab", "ff", "0x1"]
    alphabet = "".join(sorted(set("".join(strings)))) or "a"
    strings += [mutate(rng.choice(strings), rng, alphabet) for _ in range(60)]
    verdicts = set()
    for s in strings:
        want = lark_accepts(text, s)
        verdicts.add(want)
        assert poot_accepts(text, s) == want, (name, s, want)
    assert verdicts == {True, False}


# --------------------------------------------------------- case-insensitivity

TRICKY = "kKKsSſiIİıµΜμßẞΣσςǄǅǆaAzZéÉ1_-"


@settings(max_examples=80, deadline=None)
@given(pattern=st.sampled_from(["k", "s", "i", "[a-z]", "[k-s]", "[A-Z0-9]", "[μσ]", "ß", "ǅ", "é", "\\W", "[\\w-]", "\\D"]),
       char=st.sampled_from(TRICKY))
def test_i_flag_is_pythons_ignorecase(pattern, char):
    text = f"start: T\nT: /{pattern}/i\n"
    assert poot_accepts(text, char) == bool(re.fullmatch(pattern, char, re.IGNORECASE)), (pattern, char)


@settings(max_examples=40, deadline=None)
@given(word=st.text(st.sampled_from("abkis"), min_size=1, max_size=4), probe=st.text(st.sampled_from(TRICKY[:12]), max_size=4))
def test_i_flag_on_strings_is_pythons_ignorecase(word, probe):
    text = f'start: "{word}"i\n'
    assert poot_accepts(text, probe) == bool(re.fullmatch(re.escape(word), probe, re.IGNORECASE))


# ------------------------------------------------------------------ detection

GBNF_GRAMMARS = [
    'root ::= "a"',
    '# a comment first\n\nroot ::= x\nx ::= "b"',
    'root::="a"',
    '  root ::= "a" | "b"\n',
    'x ::= "q"\nroot ::= x',
    JSON_OBJECT_GBNF,
]


@pytest.mark.parametrize("text", GBNF_GRAMMARS)
def test_gbnf_is_read_as_gbnf(text):
    assert grammar_syntax(text) == "gbnf"
    assert parse_grammar(text) == parse_gbnf(text)


def test_bench_grammars_are_told_apart():
    for item in bench_items():
        assert grammar_syntax(item["gbnf"]) == "gbnf"
        assert parse_grammar(item["gbnf"]) == parse_gbnf(item["gbnf"])
        assert grammar_syntax(item["lark"]) == "lark"


@pytest.mark.parametrize("text", [t for t, _ in FEATURES.values()] + [
    'start: "::=" x\nx: "a"',  # '::=' in a Lark string
    '%import common.WS\nstart: WS',
    '?start: "a"', '!start: "a"', 'start.2: "a"', '// c\nSTART_T: "a"\nstart: START_T',
])
def test_lark_is_read_as_lark(text):
    assert grammar_syntax(text) == "lark"
    lark_parser(text)  # and lark agrees it is a Lark grammar


LINES = st.sampled_from([
    "", "   ", "# comment", "// comment", 'root ::= "a"', 'root ::= x', 'x ::= "b"', "start: x", 'x: "b"',
    'X: /b/', "%ignore \" \"", "  | \"c\"", "::= nothing", "hello world", 'root: "a"', "x ::=", '"a" ::= b',
])


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(LINES, max_size=5))
def test_detection_never_misreads_a_grammar_of_either_syntax(lines):
    """Whatever a text is, if GBNF's parser takes it, it is read as GBNF; if lark's does, as Lark."""
    text = "\n".join(lines)
    try:
        parse_gbnf(text)
        gbnf_ok = True
    except PootError:
        gbnf_ok = False
    try:
        lark.Lark(text, start="start", parser="earley")
        lark_ok = True
    except (lark.exceptions.LarkError, KeyError):
        lark_ok = False
    assert not (gbnf_ok and lark_ok)
    if gbnf_ok:
        assert grammar_syntax(text) == "gbnf"
    if lark_ok:
        assert grammar_syntax(text) == "lark"


def test_neither_syntax_is_refused_naming_both():
    for text in ["hello world", '"a" ::= b', "= x", "{}"]:
        with pytest.raises(ConstraintSyntaxError) as exc:
            parse_grammar(text)
        assert "GBNF" in str(exc.value) and "Lark" in str(exc.value) and "root ::=" in str(exc.value)
        assert "start:" in str(exc.value)


def test_guided_grammar_constraint_takes_lark():
    check(grammar_constraint('start: "a"+', Limits()))
    with pytest.raises(ConstraintSyntaxError, match="1:8"):
        check(Constraint(Kind.GRAMMAR, "start: foo"))


# --------------------------------------------------------------------- errors

BAD = [
    ('start: foo', ConstraintSyntaxError, ["1:8", "undefined rule 'foo'", "foo: ..."]),
    ('start: "a" FOO', ConstraintSyntaxError, ["1:12", "undefined terminal 'FOO'"]),
    ('start: NUMBER', ConstraintSyntaxError, ["1:8", "%import common.NUMBER"]),
    ('a: "x"', ConstraintSyntaxError, ["no 'start' rule", "start: ..."]),
    ('start: "a"\nstart: "b"', ConstraintSyntaxError, ["2:1", "defined twice", "first at line 1"]),
    ('start: A\nA: "a"\nA: "b"', ConstraintSyntaxError, ["3:1", "terminal 'A' is defined twice"]),
    ('start: ("a"', ConstraintSyntaxError, ["1:8", "unbalanced '('"]),
    ('start: ("a"\n  "b")', ConstraintSyntaxError, ["1:8", "unbalanced '('", "end of the line"]),
    ('start: "a")', ConstraintSyntaxError, ["1:11", "unbalanced ')'"]),
    ('start: ["a"', ConstraintSyntaxError, ["1:8", "unbalanced '['"]),
    ('start: "abc', ConstraintSyntaxError, ["1:8", "unterminated string"]),
    ('start: "\\x4"', ConstraintSyntaxError, ["1:8", "bad escape"]),
    ('start: /abc', ConstraintSyntaxError, ["1:8", "unterminated regex"]),
    ('start: /a+?b/', UnsupportedConstruct, ["1:8", "lazy"]),
    ('start: A\nA: /a{2,3}?/', UnsupportedConstruct, ["2:4", "lazy"]),
    ('start: /^a/', UnsupportedConstruct, ["1:8", "anchors"]),
    ('start: /a$/', UnsupportedConstruct, ["anchors"]),
    ('start: /(?<=a)b/', UnsupportedConstruct, ["1:8", "(?<=a)b"]),
    ('start: /a(?=b)/ "b"', UnsupportedConstruct, ["1:8", "a(?=b)"]),
    ('start: /a(/', ConstraintSyntaxError, ["1:8", "/a(/"]),
    ('start: /a/x', UnsupportedConstruct, ["'x' flag"]),
    ('start: /[^a]/i', UnsupportedConstruct, ["negated class"]),
    ('start: A\nA: /a*/', UnsupportedConstruct, ["1:8", "empty string"]),
    ('start: "a" /b?/', UnsupportedConstruct, ["1:12", "empty string"]),
    ('start: "a"\n%ignore /x*/', UnsupportedConstruct, ["2:1", "%ignore", "empty string"]),
    ('start: ""', ConstraintSyntaxError, ["1:8", "empty strings"]),
    ('start: "a"\nA:', ConstraintSyntaxError, ["2:1", "terminal 'A' is empty"]),
    ('start: "a" -> A', ConstraintSyntaxError, ["1:15", "lowercase name after '->'"]),
    ('start: A\nA: "a" -> x', ConstraintSyntaxError, ["2:8", "terminals cannot have one"]),
    ('start: A\nA: "a" A', ConstraintSyntaxError, ["2:1", "recursion in terminal 'A'"]),
    ('start: A\nA: a\na: "x"', ConstraintSyntaxError, ["2:4", "cannot use the rule 'a'"]),
    ('start: x{"a"}\nx{t}: t', UnsupportedConstruct, ["1:8", "templates"]),
    ('start: "a"~3..2', ConstraintSyntaxError, ["1:11", "max < min"]),
    ('start: "a"**', ConstraintSyntaxError, ["1:12", "one repetition operator"]),
    ('start: * "a"', ConstraintSyntaxError, ["1:8", "must follow an element"]),
    ('start: "a"\n%declare FOO', UnsupportedConstruct, ["2:1", "%declare"]),
    ('start: "a"\n%extend start: "b"', UnsupportedConstruct, ["2:1", "%extend"]),
    ('start: X\n%import python.X', UnsupportedConstruct, ["2:9", "only lark's 'common'"]),
    ('start: X\n%import common.X', ConstraintSyntaxError, ["2:9", "no terminal 'X'"]),
    ('start: "ab".."c"', ConstraintSyntaxError, ["1:8", "single characters"]),
    ('start: "z".."a"', ConstraintSyntaxError, ["1:8", "out of order"]),
    ('start: x\nx: x "a"', ConstraintSyntaxError, ["1:1", "rule 'start' matches no string"]),
    ('start: "a" | x\nx: "(" x ")"', ConstraintSyntaxError, ["2:1", "rule 'x' matches no string"]),
    ('Start: "a"', ConstraintSyntaxError, ["1:1", "mixes cases"]),
    ('start "a"', ConstraintSyntaxError, ["neither GBNF nor Lark"]),
    ('start: "a" @', ConstraintSyntaxError, ["1:12", "unexpected '@'"]),
    ('start: "a"~9999999999', LimitExceeded, ["max_grammar_cost"]),
    ('start: "a"~100000', LimitExceeded, ["max_grammar_cost"]),
    ('start: /[a-z]{1000}/ /[a-z]{1000}/', LimitExceeded, ["max_grammar_cost"]),
    ('start: ' + "(" * 100 + '"a"' + ")" * 100, LimitExceeded, ["max_grammar_nesting"]),
    ('start: ' + "[" * 100 + '"a"' + "]" * 100, LimitExceeded, ["max_grammar_nesting"]),
    ('start: "' + "a" * (16 * 1024) + '"', LimitExceeded, ["max_grammar_bytes=16384"]),
]


@pytest.mark.parametrize("text,error,fragments", BAD, ids=[b[0][:40] for b in BAD])
def test_bad_lark_grammar_is_refused_with_location(text, error, fragments):
    with pytest.raises(error) as exc:
        parse_grammar(text)
    assert isinstance(exc.value, PootError)
    for fragment in fragments:
        assert fragment in str(exc.value), (fragment, str(exc.value))
    assert "::=" not in str(exc.value) or "neither" in str(exc.value)  # never GBNF advice for Lark text


def test_size_limit_is_checked_before_parsing():
    with pytest.raises(LimitExceeded, match="max_grammar_bytes=99"):
        parse_lark("@" * 100, Limits(max_grammar_bytes=99))
    with pytest.raises(LimitExceeded, match="max_grammar_bytes=99"):
        parse_grammar("@" * 100, Limits(max_grammar_bytes=99))


def test_ignore_is_honoured_between_tokens_never_inside_one():
    text = 'start: NAME ("," NAME)*\nNAME: /[a-z]+/ "!"\n%ignore " "\n'
    for s in [" ab! , c! ", "ab!,c!", "ab !,c!", "a b!"]:
        assert poot_accepts(text, s) == lark_accepts(text, s), s
    assert poot_accepts(text, " ab! , c! ") and not poot_accepts(text, "ab !,c!")


# ----------------------------------------------------------------- fuzzing

LARK_PIECES = st.sampled_from([
    "start", ":", " ", "\n", "|", "\n  |", "(", ")", "[", "]", '"a"', '"b"i', '"\\\\"', '"\\x4"', "/a+/", "/[a-", "/x/i",
    "/./s", "/a*?/", "A", "_B", "x", "?", "*", "+", "~", "2", "..", "3", "->", "%import common.WS", "%ignore WS",
    "%ignore \" \"", "%declare X", "{", "}", ",", ".", "#c", "//c", "\\\n", '"a".."z"', "::=", "!", "é", "\x00",
])


@settings(max_examples=400, deadline=None)
@given(parts=st.lists(LARK_PIECES, max_size=25))
def test_any_text_parses_or_is_refused_with_a_poot_error(parts):
    """The parser never fails with anything but a PootError (a 400), whatever the text."""
    text = "".join(parts)
    try:
        grammar = parse_grammar(text, Limits(max_grammar_cost=256))
    except PootError as exc:
        assert str(exc)
        return
    assert grammar.rules
    # and what it accepts is a grammar lark reads too (only when it is Lark text)
    if grammar_syntax(text) == "lark":
        lark.Lark(text, start="start", parser="earley", lexer="dynamic_complete")
