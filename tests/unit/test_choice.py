"""guided_choice: exactly one of the options, as literal UTF-8 text."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poot_vllm.core.automata.compilers import compile_choice, compile_regex, regex_escape
from poot_vllm.core.errors import LimitExceeded, PootError
from poot_vllm.core.limits import Limits

from tests.unit.test_automata import check_invariants


def test_basic_choice() -> None:
    dfa = compile_choice(["yes", "no", "maybe"])
    for text in (b"yes", b"no", b"maybe"):
        assert dfa.matches(text)
    for text in (b"", b"ye", b"yess", b"nomaybe", b"Yes"):
        assert not dfa.matches(text)
    check_invariants(dfa)


def test_metacharacters_and_unicode_are_literal() -> None:
    options = ["a.b", "(x|y)*", "[^]", "\\d", "café", "\U0001F600", "new\nline"]
    dfa = compile_choice(options)
    for option in options:
        assert dfa.matches(option.encode())
    for other in ("axb", "x", "y", "1", "cafe", "caf", ""):
        assert not dfa.matches(other.encode())


def test_empty_option_means_the_empty_reply() -> None:
    dfa = compile_choice(["", "a"])
    assert dfa.matches(b"") and dfa.matches(b"a") and not dfa.matches(b"aa")
    only_empty = compile_choice([""])
    assert only_empty.n_states == 1 and only_empty.matches(b"") and not only_empty.matches(b"a")


@settings(max_examples=100, deadline=None)
@given(
    options=st.lists(st.text(st.characters(exclude_categories=("Cs",)), max_size=6), min_size=1, max_size=8),
    probes=st.lists(st.text(st.characters(exclude_categories=("Cs",)), max_size=6), max_size=5),
)
def test_choice_matches_exactly_the_options(options: list[str], probes: list[str]) -> None:
    dfa = compile_choice(options)
    check_invariants(dfa)
    allowed = set(options)
    candidates = probes + options + [o + "x" for o in options] + [o[:-1] for o in options if o]
    for text in candidates:
        assert dfa.matches(text.encode()) == (text in allowed), text
    # Same language as the escaped alternation, so the same canonical minimal table.
    via_regex = compile_regex("|".join(f"(?:{regex_escape(o)})" for o in options))
    assert np.array_equal(dfa.transitions, via_regex.transitions)
    assert np.array_equal(dfa.accepting, via_regex.accepting)


def test_shared_suffixes_are_merged() -> None:
    dfa = compile_choice(["walking", "talking", "balking"])
    # minimal: {w,t,b} -> "alking" shares every state
    assert dfa.n_states == len("walking") + 1


@pytest.mark.parametrize(
    "choices,message",
    [
        ([], "empty"),
        (["a", 3], "choice 1 must be a string"),
        ("abc", "list of strings"),
        (None, "list of strings"),
        (["ok", "\ud800"], "choice 1 is not valid Unicode"),
    ],
)
def test_bad_choice_lists_are_refused(choices: object, message: str) -> None:
    with pytest.raises(PootError, match=message):
        compile_choice(choices)  # type: ignore[arg-type]


def test_choice_count_limit() -> None:
    limits = Limits(max_choices=3)
    compile_choice(["a", "b", "c"], limits)
    with pytest.raises(LimitExceeded) as info:
        compile_choice(["a", "b", "c", "d"], limits)
    assert info.value.limit_name == "max_choices"


def test_choice_bytes_limit() -> None:
    limits = Limits(max_choice_bytes=6)
    compile_choice(["é", "abcd"], limits)  # 2 + 4 bytes: at the limit
    with pytest.raises(LimitExceeded) as info:
        compile_choice(["é", "abcde"], limits)
    assert info.value.limit_name == "max_choice_bytes"
    assert "max_choice_bytes" in str(info.value)


def test_choice_trie_is_budgeted() -> None:
    options = [f"option-{i:05d}-{'x' * 20}" for i in range(1500)]
    with pytest.raises(LimitExceeded) as info:
        compile_choice(options, Limits(max_automaton_bytes=64 * 1024))
    assert info.value.limit_name == "max_automaton_bytes"
    dfa = compile_choice(options[:100])
    assert dfa.matches(options[7].encode()) and not dfa.matches(options[150].encode())
