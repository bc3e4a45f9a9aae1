"""poot's regex dialect against its oracle, Python's ``re.fullmatch`` on str patterns."""

from __future__ import annotations

import random
import re
import warnings

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from poot_vllm.core.automata.compilers import compile_regex, regex_escape, regex_matches
from poot_vllm.core.errors import ConstraintSyntaxError, LimitExceeded, PootError, UnsupportedConstruct
from poot_vllm.core.limits import Limits

# Characters chosen to sit on the edges of the classes: Unicode digits and
# spaces Python's re counts (\u0663, \x1c, \xa0, \u2028), multi-byte UTF-8.
POOL = list("abcA_1-.\n \t\"\\]^é") + ["\u0663", "\x1c", "\xa0", "\u2028", "ß", "\U0001F600", "\u00ff", "\u4e2d"]


def agrees(pattern: str, text: str) -> bool:
    dfa = compile_regex(pattern)
    return dfa.matches(text.encode("utf-8")) == bool(re.fullmatch(pattern, text))


# --- tables -------------------------------------------------------------------------

TABLE = [
    ("abc", ["abc"], ["ab", "abcd", ""]),
    ("a|bc|", ["a", "bc", ""], ["b", "abc"]),
    ("[a-c]+x?", ["abc", "cx", "a"], ["x", "d", ""]),
    ("[^a-c]", ["d", "\n", "é", "\U0001F600"], ["a", "", "dd"]),
    (".", ["a", "é", "\U0001F600", "\r"], ["\n", "", "ab"]),
    (r"\d{2,3}", ["12", "123", "\u0663\u0664"], ["1", "1234", "ab"]),
    (r"\w+", ["abc_1", "héllo", "中文"], ["a b", "-", ""]),
    (r"\s", [" ", "\t", "\x1c", "\xa0", "\u2028"], ["a", ""]),
    (r"\D\W\S", ["a-a", "é é"[0] + "!" + "x"], ["1-a"]),
    (r"a{,}", ["", "aaaa"], ["b"]),
    (r"a{2}", ["aa"], ["a", "aaa"]),
    (r"a{2,}", ["aa", "aaaaa"], ["a"]),
    (r"a{,2}", ["", "a", "aa"], ["aaa"]),
    (r"x{", ["x{"], ["x"]),
    (r"x{1,2", ["x{1,2"], ["x"]),
    (r"x{}", ["x{}"], ["x"]),
    (r"[]a]", ["]", "a"], ["b"]),
    (r"[^]a]", ["b"], ["]", "a"]),
    (r"[a-]", ["a", "-"], ["b"]),
    (r"[-a]", ["a", "-"], ["b"]),
    (r"[\d-]", ["1", "-"], ["a"]),
    (r"(?P<word>ab)+(?:c|d)", ["abc", "ababd"], ["c", "abe"]),
    (r"a*?b+?c??", ["b", "aabbc"], ["a", "c"]),
    (r"^ab$", ["ab"], ["ab\n", "b"]),
    (r"^a|b$", ["a", "b"], ["ab"]),
    (r"\x41\u00e9\U0001F600\N{EM DASH}\101\0", ["Aé\U0001F600\u2014A\x00"], ["A"]),
    (r"[\b]\a\f\v", ["\b\a\f\v"], ["b"]),
    (r"\.\*\+\?\{\}\[\]\(\)\|\^\$\\", [".*+?{}[]()|^$\\"], ["a"]),
    (r"\-\"\ \#\&", ['-" #&'], ["-"]),
    (r"a(?#comment)*", ["", "aaa"], ["b"]),
    ("(?:)", [""], ["a"]),
    ("", [""], ["a"]),
    ("[\u00e0-\u00ff]+", ["àÿ"], ["a", "\u0100"]),
]


@pytest.mark.parametrize("pattern,accepted,rejected", TABLE)
def test_accept_reject_table(pattern: str, accepted: list[str], rejected: list[str]) -> None:
    dfa = compile_regex(pattern)
    for text in accepted:
        assert re.fullmatch(pattern, text), (pattern, text)  # the table itself is right
        assert dfa.matches(text.encode()), (pattern, text)
    for text in rejected:
        assert not re.fullmatch(pattern, text), (pattern, text)
        assert not dfa.matches(text.encode()), (pattern, text)


@pytest.mark.parametrize("letter", ["d", "w", "s", "D", "W", "S"])
def test_unicode_classes_match_python_re(letter: str) -> None:
    pattern = "\\" + letter
    dfa = compile_regex(pattern)
    rng = random.Random(letter)
    codes = list(range(0x3000)) + rng.sample(range(0x3000, 0x110000), 4000)
    for cp in codes:
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        assert dfa.matches(ch.encode()) == bool(re.fullmatch(pattern, ch)), hex(cp)


# --- refusals ---------------------------------------------------------------------------

UNSUPPORTED = [
    (r"(a)\1", "backreference", 3),
    (r"(?P<n>a)(?P=n)", "backreference", 8),
    (r"(?>ab)", "atomic group", 0),
    (r"a*+", "possessive", 2),
    (r"a{2}+", "possessive", 4),
    (r"(a)?(?(1)b|c)", "conditional", 4),
    (r"(?=(?<=ab)c)", "lookbehind (?<=...) inside a lookahead", 3),
    (r"a(?<=a$)", "$ inside a lookbehind", 6),
]


@pytest.mark.parametrize("pattern,name,pos", UNSUPPORTED)
def test_unsupported_constructs_are_named_with_position(pattern: str, name: str, pos: int) -> None:
    re.compile(pattern)  # valid Python: refused because a DFA cannot do it
    with pytest.raises(UnsupportedConstruct) as info:
        compile_regex(pattern)
    assert name in str(info.value)
    assert f"position {pos}" in str(info.value)


SYNTAX_ERRORS = [
    ("(ab", "missing )", 0),
    ("ab)", "unbalanced parenthesis", 2),
    ("[ab", "unterminated character set", 0),
    ("*a", "nothing to repeat", 0),
    ("a**", "multiple repeat", 2),
    ("a{2}{3}", "multiple repeat", 4),
    ("a{3,2}", "min repeat greater than max repeat", 2),
    ("[z-a]", "bad character range", 1),
    (r"[\d-z]", "bad character range", 1),
    (r"\q", "bad escape", 0),
    (r"\x4", "incomplete escape", 0),
    ("a\\", "bad escape (end of pattern)", 1),
    ("(?P<1>a)", "bad character in group name", 4),
    ("(?P<a>x)(?P<a>y)", "redefinition of group name", 12),
    (r"\2(a)", "invalid group reference", 1),
    ("(?z)", "unknown extension", 1),
    (r"\N{NOT A NAME}", "undefined character name", 0),
]


@pytest.mark.parametrize("pattern,message,pos", SYNTAX_ERRORS)
def test_syntax_errors_carry_position(pattern: str, message: str, pos: int) -> None:
    with pytest.raises(re.error):
        re.compile(pattern)
    with pytest.raises(ConstraintSyntaxError) as info:
        compile_regex(pattern)
    assert message in str(info.value)
    assert f"position {pos}" in str(info.value)


def test_huge_repeat_count_is_a_syntax_error_like_python() -> None:
    with pytest.raises(OverflowError):
        re.compile("a{4294967295}")
    with pytest.raises(ConstraintSyntaxError, match="repetition number is too large"):
        compile_regex("a{4294967295}")


def test_deep_nesting_is_refused_not_a_crash() -> None:
    deep = "(" * 150 + "a" + ")" * 150
    with pytest.raises(UnsupportedConstruct, match="nested"):
        compile_regex(deep)
    ok = "(?:" * 90 + "a" + ")" * 90
    assert compile_regex(ok).matches(b"a")


def test_empty_language_is_refused() -> None:
    for pattern in (r"[^\s\S]", "\ud800", r"[\ud800-\udfff]+x"):
        with pytest.raises(PootError, match="matches no string"):
            compile_regex(pattern)
    # a branch that needs a surrogate is simply dead; the rest still works
    assert compile_regex("a|\ud800").matches(b"a")


def test_max_regex_bytes_is_checked_before_parsing() -> None:
    limits = Limits(max_regex_bytes=10)
    assert compile_regex("é" * 5, limits).matches(("é" * 5).encode())  # 10 bytes: at the limit
    with pytest.raises(LimitExceeded) as info:
        compile_regex("é" * 5 + "a", limits)  # 11 bytes
    assert info.value.limit_name == "max_regex_bytes"
    with pytest.raises(LimitExceeded):
        compile_regex("(" * 11, limits)  # unparseable, but the size check comes first


def test_non_string_pattern_is_refused() -> None:
    with pytest.raises(PootError):
        compile_regex(b"abc")  # type: ignore[arg-type]


# --- property tests against re ------------------------------------------------------------

_LEAVES = st.one_of(
    st.sampled_from(POOL).map(lambda c: ("lit", c)),
    st.tuples(
        st.just("class"),
        st.booleans(),
        st.lists(
            st.one_of(
                st.sampled_from(POOL),
                st.sampled_from([r"\d", r"\w", r"\s", r"\W", "a-c", "0-9", "\u00e0-\u4e2d"]),
            ),
            min_size=1,
            max_size=4,
        ),
    ),
    st.sampled_from([("dot",), ("esc", r"\d"), ("esc", r"\w"), ("esc", r"\s"), ("esc", r"\S"), ("esc", r"\D")]),
)

_QUANTS = ["*", "+", "?", "{2}", "{1,}", "{0,2}", "{,2}", "{1,3}", "*?", "+?", "??", "{1,2}?"]


def _trees() -> st.SearchStrategy:
    return st.recursive(
        _LEAVES,
        lambda inner: st.one_of(
            st.tuples(st.just("cat"), st.lists(inner, min_size=2, max_size=4)),
            st.tuples(st.just("alt"), st.lists(inner, min_size=2, max_size=3)),
            st.tuples(st.just("rep"), inner, st.sampled_from(_QUANTS)),
            st.tuples(st.just("group"), inner, st.sampled_from(["(", "(?:", "(?P<g>"])),
        ),
        max_leaves=8,
    )


def _class_item(item: str) -> str:
    if len(item) == 1:
        return re.escape(item) if item in "\\]^-[" else item
    return item


def render(tree: tuple, names: list[int]) -> str:
    kind = tree[0]
    if kind == "lit":
        return re.escape(tree[1])
    if kind == "class":
        return "[" + ("^" if tree[1] else "") + "".join(_class_item(i) for i in tree[2]) + "]"
    if kind == "dot":
        return "."
    if kind == "esc":
        return tree[1]
    if kind == "cat":
        return "".join(_atom(t, names) for t in tree[1])
    if kind == "alt":
        return "|".join(render(t, names) for t in tree[1])
    if kind == "rep":
        return _atom(tree[1], names) + tree[2]
    opener = tree[2]
    if opener == "(?P<g>":
        names.append(len(names))
        opener = f"(?P<g{len(names)}>"
    return opener + render(tree[1], names) + ")"


def _atom(tree: tuple, names: list[int]) -> str:
    text = render(tree, names)
    return text if tree[0] in ("lit", "class", "dot", "esc", "group") else "(?:" + text + ")"


def sample(tree: tuple, rng: random.Random) -> str:
    """A string meant to match (classes are sampled through re itself)."""
    kind = tree[0]
    if kind in ("lit",):
        return tree[1]
    if kind in ("class", "dot", "esc"):
        pattern = render(tree, [])
        fits = [c for c in POOL if re.fullmatch(pattern, c)]
        return rng.choice(fits or POOL)
    if kind == "cat":
        return "".join(sample(t, rng) for t in tree[1])
    if kind == "alt":
        return sample(rng.choice(tree[1]), rng)
    if kind == "rep":
        q = tree[2].rstrip("?") or "?"
        lo, hi = {"*": (0, 3), "+": (1, 3), "?": (0, 1)}.get(q, (None, None))
        if lo is None:
            m = re.fullmatch(r"\{(\d*)(,?)(\d*)\}", q)
            assert m
            lo = int(m.group(1) or 0)
            hi = int(m.group(3)) if m.group(3) else (lo if not m.group(2) else lo + 3)
        return "".join(sample(tree[1], rng) for _ in range(rng.randint(lo, hi)))
    return sample(tree[1], rng)


def mutate(text: str, rng: random.Random) -> str:
    chars = list(text)
    op = rng.randrange(3)
    i = rng.randint(0, len(chars))
    if op == 0:
        chars.insert(i, rng.choice(POOL))
    elif chars and op == 1:
        del chars[min(i, len(chars) - 1)]
    elif chars:
        chars[min(i, len(chars) - 1)] = rng.choice(POOL)
    return "".join(chars)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=_trees(), seed=st.integers(0, 2**32))
def test_random_patterns_agree_with_re(tree: tuple, seed: int) -> None:
    pattern = render(tree, [])
    rng = random.Random(seed)
    try:
        dfa = compile_regex(pattern)
    except LimitExceeded:
        assume(False)
        return
    except PootError as exc:
        # only an empty language may be refused; re must agree it matches nothing we can test
        assert "matches no string" in str(exc)
        return
    texts = []
    for _ in range(4):
        s = sample(tree, rng)
        texts += [s, mutate(s, rng), mutate(mutate(s, rng), rng)]
    texts.append("".join(rng.choice(POOL) for _ in range(rng.randint(0, 6))))
    lazy = regex_matches(pattern, [t.encode("utf-8") for t in texts])
    for text, lazy_match in zip(texts, lazy):
        expected = bool(re.fullmatch(pattern, text))
        assert dfa.matches(text.encode("utf-8")) == expected, (pattern, text)
        assert lazy_match == expected, ("lazy", pattern, text)


def test_lazy_match_works_where_the_whole_dfa_passes_the_budget() -> None:
    """regex_matches builds only the states on each text's path."""
    pattern = "(a|b)*a(a|b){17}"
    with pytest.raises(LimitExceeded):
        compile_regex(pattern)
    texts = ["a" + "b" * 17, "b" * 18, "ab" * 20, "a" * 18 + "c"]
    assert regex_matches(pattern, [t.encode() for t in texts]) == [bool(re.fullmatch(pattern, t)) for t in texts]


_JUNK = list("ab(){}[],120^$*+?|\\.-:P<>=!#dxé") + ["\\d", "(?:", "(?P<n>", "{1,2}", "[^"]


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(st.sampled_from(_JUNK), max_size=10), seed=st.integers(0, 2**32))
def test_arbitrary_syntax_is_parsed_like_re(tokens: list[str], seed: int) -> None:
    """Where re rejects, poot refuses; where re accepts, poot never calls it a syntax error."""
    pattern = "".join(tokens)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            re.compile(pattern)
        python_ok = True
    except (re.error, OverflowError, RecursionError):
        python_ok = False
    try:
        dfa = compile_regex(pattern)
    except (ConstraintSyntaxError, UnsupportedConstruct) as exc:
        if python_ok:
            assert isinstance(exc, UnsupportedConstruct), (pattern, str(exc))
        return
    except LimitExceeded:
        return
    except PootError as exc:
        assert "matches no string" in str(exc)
        return
    assert python_ok, pattern
    rng = random.Random(seed)
    alphabet = "ab(){}[],12^$.-:é\n"
    for _ in range(20):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = bool(re.fullmatch(pattern, text))
        assert dfa.matches(text.encode()) == expected, (pattern, text)


@settings(max_examples=200, deadline=None)
@given(text=st.text(st.characters(exclude_categories=("Cs",)), max_size=20))
def test_regex_escape_matches_exactly_the_text(text: str) -> None:
    escaped = regex_escape(text)
    assert re.fullmatch(escaped, text)
    dfa = compile_regex(escaped)
    assert dfa.matches(text.encode())
    assert not dfa.matches(text.encode() + b"x")
    if text:
        assert not dfa.matches(text[:-1].encode())
