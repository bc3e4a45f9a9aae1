"""One regex front end: the same text means the same thing through every entry point.

``guided_regex`` (:func:`parse`, full match), JSON Schema ``pattern``
(:func:`parse_search`, search) and GBNF classes share one parser and one
code-point library; where their semantics coincide they must give the same
language, and the same refusal.  Python's ``re`` is the oracle throughout.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from poot_vllm.core.automata.compilers import compile_regex
from poot_vllm.core.errors import ConstraintSyntaxError, LimitExceeded, PootError, UnsupportedConstruct
from poot_vllm.core.grammar import parse_gbnf
from poot_vllm.core.grammar.gbnf import CharClass
from poot_vllm.core.json_schema import compile_json_schema
from poot_vllm.core.regex import ast
from poot_vllm.core.regex import charsets as cs
from poot_vllm.core.regex.escape import class_regex, escape_text
from poot_vllm.core.regex.parser import parse, parse_search, python_categories

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- GBNF classes and regex classes ----------------------------------------------------

#: Class members written the same way in GBNF and in Python's re (GBNF's escapes are all re escapes).
_MEMBERS = list("az09A_-.é中^[") + ["\U0001F600", "\\n", "\\t", "\\r", "\\\\", "\\]", "\\[", "\\-", '\\"',
                                   "\\x41", "\\x7f", "\\u00e9", "\\u4e2d", "\\U0001F600", "\\U0010FFFF"]
_class_bodies = st.lists(
    st.one_of(st.sampled_from(_MEMBERS), st.tuples(st.sampled_from(_MEMBERS), st.sampled_from(_MEMBERS)).map("-".join)),
    min_size=1,
    max_size=5,
).map("".join)


def _gbnf_class(text: str) -> cs.CodepointSet | None:
    """The set of a GBNF class, or None when GBNF refuses it."""
    try:
        body = parse_gbnf("root ::= " + text).rule("root").body
    except ConstraintSyntaxError:
        return None
    assert isinstance(body, CharClass), body
    return body.ranges


def _regex_class(text: str) -> cs.CodepointSet | None:
    try:
        node = parse(text)
    except ConstraintSyntaxError:
        return None
    return node.ranges if isinstance(node, ast.Chars) else ()


@pytest.mark.filterwarnings("ignore::FutureWarning")  # re's "possible nested set" on the oracle's side
@SETTINGS
@given(body=_class_bodies, negated=st.booleans())
def test_gbnf_and_regex_classes_are_the_same_set(body: str, negated: bool) -> None:
    assume(not body.startswith("^"))  # a leading ^ would negate, not be a member
    text = "[" + ("^" if negated else "") + body + "]"
    gbnf, regex = _gbnf_class(text), _regex_class(text)
    if gbnf is None:  # refused: a range out of order (both) or no character at all (GBNF only)
        assert regex is None or regex == (), text
        return
    assert gbnf == regex, text
    rng = random.Random(text)
    probes = [chr(c) for lo, hi in gbnf for c in (lo, hi)] + [chr(rng.randrange(0xD800)) for _ in range(30)]
    for ch in probes + list("az-]^\n\U0001F600"):
        assert bool(re.fullmatch(text, ch)) == any(lo <= ord(ch) <= hi for lo, hi in gbnf), (text, ch)


def test_gbnf_and_regex_class_quirks_differ_only_where_documented() -> None:
    # ']' first: a literal for re, the end of an (empty, refused) class for GBNF
    assert _regex_class("[]a]") == cs.union(cs.single(ord("]")), cs.single(ord("a")))
    with pytest.raises(ConstraintSyntaxError, match="matches no character"):
        parse_gbnf("root ::= []")
    assert _gbnf_class("[^]") == cs.ANY_CHAR
    # range errors: the same refusal, each in its own words and position style
    with pytest.raises(ConstraintSyntaxError, match="bad character range z-a at position 1"):
        parse("[z-a]")
    with pytest.raises(ConstraintSyntaxError, match="1:10: character class range out of order"):
        parse_gbnf("root ::= [z-a]")


# --- JSON Schema pattern and guided_regex ---------------------------------------------

#: Characters that JSON must escape, multi-byte ones, and regex metacharacters.
_POOL = list('ab"\\\n\t\x01é-.') + ["\U0001F600", "\x7f"]
_leaves = st.one_of(
    st.sampled_from(_POOL).map(lambda c: escape_text(c)),
    st.sampled_from(["[a-c]", "[^a]", '[\\\\"]', "[\\x00-\\x1f]", "[^\\n]", ".", "[é-\U0001F600]", "[^\\\\\"a]"]),
)


def _patterns() -> st.SearchStrategy[str]:
    return st.recursive(
        _leaves,
        lambda inner: st.one_of(
            st.lists(inner, min_size=2, max_size=3).map("".join),
            st.lists(inner, min_size=2, max_size=3).map(lambda xs: "(?:" + "|".join(xs) + ")"),
            st.tuples(inner, st.sampled_from(["*", "+", "?", "{2}", "{0,2}", "*?"])).map(lambda t: f"(?:{t[0]}){t[1]}"),
        ),
        max_leaves=6,
    )


def _texts(pattern: str, rng: random.Random) -> list[str]:
    texts = ["".join(rng.choice(_POOL) for _ in range(rng.randint(0, 5))) for _ in range(25)]
    # and strings re itself accepts, found among short combinations
    texts += [t for t in ("".join(rng.choice(_POOL) for _ in range(rng.randint(0, 3))) for _ in range(300))
              if re.fullmatch(pattern, t)][:10]
    return texts


def _dfas(pattern: str, json_pattern: str):
    try:
        return compile_regex(pattern), compile_json_schema({"type": "string", "pattern": json_pattern})
    except LimitExceeded:
        assume(False)
        raise


@SETTINGS
@given(pattern=_patterns(), seed=st.integers(0, 2**32))
def test_anchored_json_pattern_is_guided_regex_on_the_decoded_string(pattern: str, seed: int) -> None:
    regex_dfa, json_dfa = _dfas(pattern, "^(?:" + pattern + ")$")
    for text in _texts(pattern, random.Random(seed)):
        expected = bool(re.fullmatch(pattern, text))
        assert regex_dfa.matches(text.encode()) == expected, (pattern, text)
        spelled = json.dumps(text, ensure_ascii=False).encode()
        assert json_dfa.matches(spelled) == expected, (pattern, text, spelled)


@SETTINGS
@given(pattern=_patterns(), seed=st.integers(0, 2**32))
def test_unanchored_json_pattern_is_guided_regex_with_any_text_around(pattern: str, seed: int) -> None:
    regex_dfa, json_dfa = _dfas("[\\s\\S]*(?:" + pattern + ")[\\s\\S]*", pattern)
    for text in _texts(pattern, random.Random(seed)):
        expected = bool(re.search(pattern, text))
        assert regex_dfa.matches(text.encode()) == expected, (pattern, text)
        assert json_dfa.matches(json.dumps(text, ensure_ascii=False).encode()) == expected, (pattern, text)


#: Junk without anchors and \d-style escapes (where full match and search, or JSON's narrowing, differ).
_JUNK = list("ab(){}[],120*+?|\\.-:P<>=!#xé") + ["(?:", "(?P<n>", "{1,2}", "[^", "(?=", "\\b", "(?i)", "\\1"]


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(st.sampled_from(_JUNK), max_size=10))
def test_both_regex_entry_points_accept_and_refuse_alike(tokens: list[str]) -> None:
    pattern = "".join(tokens)
    outcomes = []
    for entry in (parse, lambda p: parse_search(p, python_categories)):
        try:
            outcomes.append(entry(pattern))
        except PootError as exc:
            outcomes.append((type(exc), str(exc)))
    # An anchor inside the pattern is where the two semantics differ on purpose:
    # re.fullmatch (guided_regex) refuses it, re.search (JSON Schema) keeps it.
    assume(not any("Anchor(" in repr(o) or "anchor" in repr(o) for o in outcomes))
    assert outcomes[0] == outcomes[1], pattern


@pytest.mark.parametrize("pattern,name", [("(a)\\1", "backreference"), ("a*+", "possessive"),
                                          ("(?>a)", "atomic group"), ("(?=(?<=ab)c)", "inside a lookahead")])
def test_json_pattern_refusals_are_the_regex_refusals(pattern: str, name: str) -> None:
    with pytest.raises(UnsupportedConstruct) as regex_info:
        compile_regex(pattern)
    with pytest.raises(UnsupportedConstruct) as json_info:
        compile_json_schema({"type": "string", "pattern": pattern})
    assert name in str(regex_info.value) and "position" in str(regex_info.value)
    # the same message (construct and position), inside the schema's pointer and keyword
    assert str(regex_info.value) in str(json_info.value)
    assert "'pattern' at /pattern" in str(json_info.value)


# --- the one code-point library -------------------------------------------------------

_sets = st.lists(st.tuples(st.integers(0, 0x10FFFF), st.integers(0, 300)), max_size=5).map(
    lambda rs: cs.normalize([(lo, min(lo + n, 0x10FFFF)) for lo, n in rs]))


@SETTINGS
@given(a=_sets, b=_sets, probe=st.lists(st.integers(0, 0x10FFFF), max_size=20))
def test_set_algebra(a: cs.CodepointSet, b: cs.CodepointSet, probe: list[int]) -> None:
    def has(s: cs.CodepointSet, c: int) -> bool:
        return any(lo <= c <= hi for lo, hi in s)

    for c in probe + [lo for lo, _ in a + b] + [hi + 1 for _, hi in a + b]:
        if c > 0x10FFFF or cs.SURROGATES[0] <= c <= cs.SURROGATES[1]:
            continue
        assert has(cs.union(a, b), c) == (has(a, c) or has(b, c))
        assert has(cs.intersect(a, b), c) == (has(a, c) and has(b, c))
        assert has(cs.subtract(a, b), c) == (has(a, c) and not has(b, c))
        assert has(cs.complement(a), c) == (not has(a, c))
    if a:
        assert parse(class_regex(a)) == ast.Chars(a)  # written back, a set parses to itself


@pytest.mark.parametrize("pattern,accepted,rejected", [
    ('^"*$', ['""', '""""'], ['\\', '\\"']),   # '"' is spelled \" : the repeat takes both characters
    ("^\\n+$", ["\n", "\n\n"], ["", "\\", "\\n"]),
    ("^\\\\?a$", ["a", "\\a"], ["\\\\a"]),
])
def test_a_repeated_escaped_character_repeats_its_whole_spelling(pattern, accepted, rejected) -> None:
    dfa = compile_json_schema({"type": "string", "pattern": pattern})
    for text in accepted + rejected:
        assert bool(re.search(pattern, text)) == (text in accepted), (pattern, text)  # the table is right
        spelled = json.dumps(text, ensure_ascii=False).encode()
        assert dfa.matches(spelled) == (text in accepted), (pattern, text, spelled)
    assert not dfa.matches(b'"\\"')  # never a lone backslash: that is not JSON
