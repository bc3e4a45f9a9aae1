"""Flags, anchors anywhere, word boundaries and lookarounds against their oracle, ``re.fullmatch``.

Every test compares poot's DFA (and its lazy matcher) with Python's ``re`` on
the same pattern and text; patterns are random where a generator fits.
"""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from poot_vllm.core.automata.compilers import compile_regex, regex_matches
from poot_vllm.core.errors import ConstraintSyntaxError, LimitExceeded, PootError, UnsupportedConstruct
from poot_vllm.core.json_schema import compile_json_schema
from poot_vllm.core.limits import Limits
from poot_vllm.core.regex import casefold

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Characters on the edges of case folding and of \w / \s: Kelvin sign, long s,
# sharp s and its capital, dotted/dotless i, Greek sigmas, a cased non-BMP letter.
CASE_POOL = list("aAkKsSiIzZ_1 \n.-é") + ["\u212a", "\u017f", "\u00df", "\u1e9e", "\u0130", "\u0131",
                                           "\u03c3", "\u03c2", "\u03a3", "\U00010400", "\U00010428",
                                           "\u00b5", "\u03bc", "\u0663", "\xa0"]


def check(pattern: str, texts: "list[str]", limits: Limits = Limits()) -> None:
    """poot agrees with re.fullmatch on every text (DFA and lazy matcher)."""
    try:
        dfa = compile_regex(pattern, limits)
    except LimitExceeded:
        raise  # a bound, not a wrong answer: the random tests skip such patterns
    except PootError as exc:
        # only an empty language may be refused: re must match none of the texts
        assert "matches no string" in str(exc), (pattern, str(exc))
        assert not any(re.fullmatch(pattern, t) for t in texts), pattern
        return
    lazy = regex_matches(pattern, [t.encode() for t in texts], limits)
    for text, lazy_match in zip(texts, lazy):
        expected = bool(re.fullmatch(pattern, text))
        assert dfa.matches(text.encode()) == expected, (pattern, text)
        assert lazy_match == expected, ("lazy", pattern, text)


def all_texts(alphabet: "list[str]", max_len: int) -> "list[str]":
    return ["".join(p) for n in range(max_len + 1) for p in itertools.product(alphabet, repeat=n)]


# --- flags ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "pattern",
    [
        "(?i)k", "(?i)s", "(?i)ß", "(?i)\u1e9e", "(?i)[a-z]", "(?i)[^k]", "(?i)[^a-z]", "(?i)[\\w]", "(?i)\\W",
        "(?i)[\\W\\d]", "(?i)[k-s]", "(?ai)k", "(?ai)[^k]", "(?i)\u03a3", "(?i)[\U00010400-\U00010410]",
        "(?i)\U00010400", "(?i)[\u0100-\u01ff]", "(?i)\u0130", "(?i)[\u0130-\u0131]", "(?i)\u00b5", "(?i)[^\\W_]",
    ],
)
def test_ignorecase_class_is_re_s_on_every_relevant_code_point(pattern: str) -> None:
    """Every cased code point (where folding can matter) plus a wide random sample of the rest."""
    dfa = compile_regex(pattern)
    rng = random.Random(pattern)
    _, cased_text = casefold._cased()
    codes = {ord(c) for c in cased_text} | set(range(0x250)) | set(rng.sample(range(0x110000), 3000))
    for cp in sorted(codes):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        assert dfa.matches(ch.encode()) == bool(re.fullmatch(pattern, ch)), (pattern, hex(cp))


def test_cased_set_covers_every_code_point_where_ignorecase_changes_a_class() -> None:
    """Outside CASED, (?i)X matches exactly what X matches: checked with re over every code point."""
    cased, _ = casefold._cased()
    inside = [False] * 0x110000
    for lo, hi in cased:
        for cp in range(lo, hi + 1):
            inside[cp] = True
    text = "".join(chr(cp) for cp in range(0x110000) if not inside[cp] and not 0xD800 <= cp <= 0xDFFF)
    for pattern in (r"[a-z]", r"[^a-z]", r"[\w]", r"[^\W\d]", r"[\u0100-\u024f]", r"[\U00010000-\U0001ffff]", "[\u1e9e]"):
        plain = [m.start() for m in re.finditer(pattern, text)]
        folded = [m.start() for m in re.finditer("(?i)" + pattern, text)]
        assert plain == folded, pattern


FLAG_TABLE = [
    ("(?s)a.b", ["a\nb", "axb"], ["ab"]),
    ("(?s:.).", ["\nx"], ["\n\n"]),
    ("(?x) a  b # comment", ["ab"], ["a b"]),
    ("(?x)a\\ b[ ]c", ["a b c"], ["abc"]),
    ("(?x)a # c\nb", ["ab"], ["a"]),
    ("(?x)a {2}", ["aa"], ["a {2}"]),
    ("(?a)\\w+", ["abc_1"], ["é", "\u0663"]),
    ("(?a:\\d)\\d", ["1\u0663"], ["\u06631"]),
    ("(?i)a(?-i:b)c", ["AbC", "abc"], ["ABC"]),
    ("(?i:a)b", ["Ab"], ["AB"]),
    ("(?m)a$", ["a"], ["a\n"]),
    ("(?im)^K$", ["k", "\u212a"], ["x"]),
    ("(?u)\\w", ["é"], ["-"]),
]


@pytest.mark.parametrize("pattern,accepted,rejected", FLAG_TABLE)
def test_flag_table(pattern: str, accepted: "list[str]", rejected: "list[str]") -> None:
    for text in accepted:
        assert re.fullmatch(pattern, text), (pattern, text)
    for text in rejected:
        assert not re.fullmatch(pattern, text), (pattern, text)
    check(pattern, accepted + rejected)


FLAG_ERRORS = ["a(?i)b", "(?i:a(?m)b)", "(?L)a", "(?-i)a", "(?i-i:a)", "(?a-u:b)", "(?au)a", "(?iz)a", "(?i", "(?-", "x|(?i)y"]


@pytest.mark.parametrize("pattern", FLAG_ERRORS)
def test_flag_syntax_errors_are_re_s(pattern: str) -> None:
    with pytest.raises(re.error) as python:
        re.compile(pattern)
    with pytest.raises(ConstraintSyntaxError) as poot:
        compile_regex(pattern)
    assert python.value.msg in str(poot.value)
    assert f"position {python.value.pos}" in str(poot.value)


def test_ascii_and_unicode_together_is_refused_like_re() -> None:
    with pytest.raises(ValueError, match="incompatible"):
        re.compile("(?a)(?u)x")
    with pytest.raises(ConstraintSyntaxError, match="ASCII and UNICODE flags are incompatible"):
        compile_regex("(?a)(?u)x")


_FLAG_ATOMS = ["a", "k", "K", "s", "S", "\u017f", "\u212a", "ß", "\\w", "\\W", "\\d", ".", "[a-k]", "[^s]", "[K\\d]",
               "\\n", " ", "é", "\u03a3", "\u03c2", "\\s"]
_FLAG_SETS = ["i", "s", "m", "x", "a", "is", "ia", "im", "ix", "sm", "u"]


def _flagged(draw: st.DrawFn, depth: int = 0) -> str:
    kind = draw(st.sampled_from(["atom", "atom", "cat", "alt", "rep", "scoped"] if depth < 3 else ["atom"]))
    if kind == "atom":
        return draw(st.sampled_from(_FLAG_ATOMS))
    if kind == "cat":
        return "".join(_flagged(draw, depth + 1) for _ in range(draw(st.integers(2, 3))))
    if kind == "alt":
        return "(?:" + "|".join(_flagged(draw, depth + 1) for _ in range(2)) + ")"
    if kind == "rep":
        return "(?:" + _flagged(draw, depth + 1) + ")" + draw(st.sampled_from(["*", "+", "?", "{2}", "{0,2}"]))
    on = draw(st.sampled_from(["i", "s", "a", "x", "", "is"]))
    off = draw(st.sampled_from(["", "-i", "-s", "-m"]))
    assume(on or off)
    assume(not set(on) & set(off))
    return f"(?{on}{off}:" + _flagged(draw, depth + 1) + ")"


@st.composite
def flagged_patterns(draw: st.DrawFn) -> str:
    prefix = draw(st.sampled_from([""] + [f"(?{f})" for f in _FLAG_SETS]))
    return prefix + _flagged(draw)


@SETTINGS
@given(pattern=flagged_patterns(), seed=st.integers(0, 2**32))
def test_random_flagged_patterns_agree_with_re(pattern: str, seed: int) -> None:
    rng = random.Random(seed)
    texts = all_texts(rng.sample(CASE_POOL, 4), 2)
    texts += ["".join(rng.choice(CASE_POOL) for _ in range(rng.randint(3, 6))) for _ in range(60)]
    check(pattern, texts)


# --- anchors anywhere, \b, \B ---------------------------------------------------------------------

ANCHOR_TABLE = [
    (r"a^b", [], ["ab", "a\nb"]),
    (r"(?m)a\n^b", ["a\nb"], ["ab"]),
    (r"a$\n", ["a\n"], ["a"]),
    (r"a$\n\n", [], ["a\n\n"]),
    (r"(?m)a$\n\n", ["a\n\n"], []),
    (r"(^a|b)+", ["a", "ab", "abb"], ["ba", "aa"]),
    (r"(a$|b)*", ["", "a", "bba"], ["ab"]),
    (r"x\Z|y", ["x", "y"], ["x\n"]),
    (r"\Ax", ["x"], []),
    (r"(?:\A|,)x", ["x", ",x"], [",,x"]),
    (r"\bfoo\b", ["foo"], ["foox"]),
    (r"foo\b.*", ["foo", "foo bar", "foo-"], ["foobar", "foo_"]),
    (r".*\Bo\B.*", ["foot"], ["o", "fo o", "fo "]),
    (r"\B", [], [""]),
    (r"\b", [], [""]),
    (r"a\B", [], ["a"]),
    (r".\B.", ["ab", "  "], ["a "]),
    (r"(?a).\b.", ["éa", "a "], ["é ", "ab"]),
    (r".\b.", ["a ", "é-"], ["éa"]),
]


@pytest.mark.parametrize("pattern,accepted,rejected", ANCHOR_TABLE)
def test_anchor_and_boundary_table(pattern: str, accepted: "list[str]", rejected: "list[str]") -> None:
    for text in accepted:
        assert re.fullmatch(pattern, text), (pattern, text)
    for text in rejected:
        assert not re.fullmatch(pattern, text), (pattern, text)
    check(pattern, accepted + rejected)


_ASSERT_ATOMS = ["a", "b", " ", "\\n", "é", "\\w", "\\W", ".", "\\s", "-", "[ab]"]
_ASSERTIONS = ["^", "$", "\\A", "\\Z", "\\b", "\\B"]
_LOOK_OPENERS = ["(?=", "(?!", "(?<=", "(?<!"]


def _asserting(draw: st.DrawFn, depth: int, looks: bool) -> str:
    kinds = ["atom", "atom", "assert", "cat", "alt", "rep"] + (["look"] if looks else [])
    kind = draw(st.sampled_from(kinds if depth < 3 else ["atom", "assert"]))
    if kind == "atom":
        return draw(st.sampled_from(_ASSERT_ATOMS))
    if kind == "assert":
        return draw(st.sampled_from(_ASSERTIONS))
    if kind == "cat":
        return "".join(_asserting(draw, depth + 1, looks) for _ in range(draw(st.integers(2, 4))))
    if kind == "alt":
        return "(?:" + "|".join(_asserting(draw, depth + 1, looks) for _ in range(2)) + ")"
    if kind == "rep":
        return "(?:" + _asserting(draw, depth + 1, looks) + ")" + draw(st.sampled_from(["*", "+", "?", "{2}"]))
    opener = draw(st.sampled_from(_LOOK_OPENERS))
    if opener.startswith("(?<"):
        # lookbehind bodies: fixed width, no lookahead-type assertion (refused)
        body = "".join(draw(st.sampled_from(["a", "b", " ", "\\w", "\\W", ".", "\\n", "[ab]", "(?<!a)"]))
                       for _ in range(draw(st.integers(1, 2))))
        if draw(st.booleans()):
            body = draw(st.sampled_from(["^", "\\A", ""])) + body
    else:
        body = "".join(draw(st.sampled_from(["a", "b", " ", "\\w", "\\W", ".", "\\n", "[ab]*", "$", "\\Z",
                                             "(?!a)", "(?=.b)", "(?s:.)*", "a|b", "\\b", "\\B", "^", "\\A",
                                             "(?<=a)", "(?<!\\w)"]))
                       for _ in range(draw(st.integers(1, 3))))
    return opener + body + ")"


@st.composite
def asserting_patterns(draw: st.DrawFn, looks: bool = False) -> str:
    return draw(st.sampled_from(["", "(?m)", "(?a)", "(?s)", "(?ms)"])) + _asserting(draw, 0, looks)


_TEXT_POOL = ["a", "b", " ", "\n", "é", "-", "_"]


@SETTINGS
@given(pattern=asserting_patterns(), seed=st.integers(0, 2**32))
def test_random_anchor_and_boundary_patterns_agree_with_re(pattern: str, seed: int) -> None:
    rng = random.Random(seed)
    texts = all_texts(rng.sample(_TEXT_POOL, 4), 3)
    texts += ["".join(rng.choice(_TEXT_POOL) for _ in range(rng.randint(4, 7))) for _ in range(40)]
    try:
        check(pattern, texts)
    except UnsupportedConstruct:
        assume(False)


# --- lookarounds ----------------------------------------------------------------------------------

LOOK_TABLE = [
    (r"(?=.*\d)(?=.*[a-z]).{3,}", ["a1b", "1aa"], ["abc", "123", "a1"]),
    (r"(?!foo).*", ["fo", "bar", ""], ["foo", "foobar"]),
    (r".*(?<!\.txt)", ["a.py", ""], ["a.txt"]),
    (r"(?<=a)b|ab", ["ab"], ["b"]),
    (r"a(?=b)\w", ["ab"], ["ac"]),
    (r"a(?=$)", ["a"], []),
    (r"a(?=\n?\Z)\n?", ["a", "a\n"], []),
    (r"(?=(?!a)).", ["b"], ["a"]),
    (r"(?:(?=a)|b)*a", ["a", "ba"], ["bb"]),
    (r"(?<=(?<!a)b)c|.*", ["", "bc"], []),
    (r"\w+(?<!_)", ["ab"], ["a_"]),
    (r"(?=a)", [], ["", "a"]),
    (r"(?!)a|b", ["b"], ["a"]),
    # one-character lookbehinds inside a lookahead read the character before it
    (r"(?a)(?=.*\bfoo\b).*", ["a foo", "foo-x"], ["foox"]),
    (r"x(?=(?<=x)y)y|(?=^a).*", ["xy", "a", "ab"], ["ba"]),
    (r"(?:a|-)(?=\bb)\w", ["-b"], ["ab"]),
    (r"(?ms).(?=^b).", ["\nb"], ["ab"]),
]


@pytest.mark.parametrize("pattern,accepted,rejected", LOOK_TABLE)
def test_lookaround_table(pattern: str, accepted: "list[str]", rejected: "list[str]") -> None:
    for text in accepted:
        assert re.fullmatch(pattern, text), (pattern, text)
    for text in rejected:
        assert not re.fullmatch(pattern, text), (pattern, text)
    check(pattern, accepted + rejected)


@SETTINGS
@given(pattern=asserting_patterns(looks=True), seed=st.integers(0, 2**32))
def test_random_lookaround_patterns_agree_with_re(pattern: str, seed: int) -> None:
    rng = random.Random(seed)
    texts = all_texts(rng.sample(_TEXT_POOL, 4), 3)
    texts += ["".join(rng.choice(_TEXT_POOL) for _ in range(rng.randint(4, 7))) for _ in range(40)]
    try:
        check(pattern, texts)
    except (UnsupportedConstruct, LimitExceeded):
        assume(False)


LOOK_REFUSALS = [
    (r"(?=(?<=ab)c)", "lookbehind (?<=...) inside a lookahead", 3),
    (r"(?=a(?=\bb))", "\\b inside a lookahead", 7),
    (r"(?=(?!^a))", "^ inside a lookahead", 6),
    (r"(?<=a$)", "$ inside a lookbehind", 5),
    (r"(?<=a(?=b))", "lookahead", 5),
    (r"(?<=a\b)", "\\b inside a lookbehind", 5),
]


@pytest.mark.parametrize("pattern,name,pos", LOOK_REFUSALS)
def test_assertions_reading_across_a_lookaround_edge_are_refused(pattern: str, name: str, pos: int) -> None:
    re.compile(pattern)
    with pytest.raises(UnsupportedConstruct) as info:
        compile_regex(pattern)
    assert name in str(info.value) and f"position {pos}" in str(info.value)


def test_variable_width_lookbehind_is_re_s_syntax_error() -> None:
    with pytest.raises(re.error, match="fixed-width"):
        re.compile(r"(?<=a+)b")
    with pytest.raises(ConstraintSyntaxError, match="fixed-width"):
        compile_regex(r"(?<=a+)b")


def test_nothing_to_repeat_after_an_assertion_like_re() -> None:
    for pattern in (r"\b*", r"^*", r"\Z+", r"a$?"):
        with pytest.raises(re.error, match="nothing to repeat"):
            re.compile(pattern)
        with pytest.raises(ConstraintSyntaxError, match="nothing to repeat"):
            compile_regex(pattern)
    check(r"(?=a)*a", ["a", ""])  # a lookaround may be repeated


def test_unicode_word_boundary_after_dot_star_is_exact_or_a_clear_limit() -> None:
    """Unicode \\b after .* needs ~600 states over UTF-8 bytes: past the default budget, within a larger one."""
    pattern = r"(?=.*\bfoo\b).*"
    with pytest.raises(LimitExceeded, match="max_automaton_bytes"):
        compile_regex(pattern)
    check(pattern, ["a foo b", "foo", "afoob", "xfoo", "é foo", "éfoo", "foo_", "foo\u0663"], Limits(max_automaton_bytes=1 << 23))


def test_lookaround_work_is_charged_to_the_budget() -> None:
    limits = Limits(max_automaton_bytes=20_000)
    with pytest.raises(LimitExceeded) as info:
        compile_regex(r"(?=(?:a|b)*a(?:a|b){12}).*", limits)
    assert info.value.limit_name == "max_automaton_bytes"
    assert compile_regex(r"(?=(?:a|b)*a(?:a|b){2}).*", limits).matches(b"abbb")


# --- JSON Schema pattern (re.search on the decoded string) -------------------------------------

# ASCII text without \x1c-\x1f and without a final newline: where poot's narrowings
# of a JSON pattern (\d \w \s to ASCII, $ only at the very end) do not apply, so
# poot must agree with re.search exactly; with '"' and '\\' (spelled as escapes).
_JSON_POOL = ["a", "b", " ", "-", '"', "\\", "1"]


def check_json(pattern: str, texts: "list[str]") -> None:
    try:
        dfa = compile_json_schema({"type": "string", "pattern": pattern})
    except (UnsupportedConstruct, LimitExceeded):
        raise  # refused with a reason (or a bound): the random test skips it
    except PootError as exc:
        assert "matches no string" in str(exc), (pattern, str(exc))
        assert not any(re.search(pattern, t) for t in texts), pattern
        return
    for text in texts:
        expected = bool(re.search(pattern, text))
        assert dfa.matches(json.dumps(text, ensure_ascii=False).encode()) == expected, (pattern, text)


JSON_TABLE = [
    r"\bfoo\b", r"(?i)ab", r"(?m)^a$", r"^(?=.*\d)[a-z\d]{3}$", r"x(?!y)", r'(?<=")b', r"a\B", r"(?<!a)b$",
    r"(^a|b$)+", r"\\\b", r"(?i:A)b", r"(?x) a b",
]


@pytest.mark.parametrize("pattern", JSON_TABLE)
def test_json_pattern_with_flags_and_assertions_is_re_search(pattern: str) -> None:
    texts = all_texts(["a", "b", "f", "o", "x", "y", '"', "\\", " ", "1", "A"], 2)
    texts += ["foo", "a foo b", "foox", "xfoo", "abc", "a1b", "xyz", 'a"b', "a\\b"]
    check_json(pattern, texts)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=asserting_patterns(looks=True), seed=st.integers(0, 2**32))
def test_random_json_patterns_with_assertions_are_re_search(pattern: str, seed: int) -> None:
    assume("\\n" not in pattern and "\\s" not in pattern)  # keep to where JSON's narrowing does not apply
    rng = random.Random(seed)
    texts = all_texts(rng.sample(_JSON_POOL, 4), 3)
    texts += ["".join(rng.choice(_JSON_POOL) for _ in range(rng.randint(4, 6))) for _ in range(20)]
    try:
        check_json(pattern, texts)
    except (UnsupportedConstruct, LimitExceeded):
        assume(False)


def test_json_negative_lookaround_never_widens_the_narrowed_classes() -> None:
    """JSON narrows \\w to ASCII; inside (?!...) it must widen the class instead, so the pattern stays narrower."""
    dfa = compile_json_schema({"type": "string", "pattern": r"^a(?!\w)"})
    for text in ("a", "a-", "ab", "aé", "a\u0663"):
        if dfa.matches(json.dumps(text, ensure_ascii=False).encode()):
            assert re.search(r"^a(?!\w)", text), text
    assert dfa.matches(b'"a-"') and not dfa.matches('"aé"'.encode())
