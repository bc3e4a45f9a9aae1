"""A regex refused for its automaton's size: the 400 names the regex, the limit and what to change."""

from __future__ import annotations

import re

import pytest

from poot_vllm.core.automata.compilers import compile_regex, regex_excerpt
from poot_vllm.core.automata.dfa import DFA
from poot_vllm.core.constraints import check, regex_constraint
from poot_vllm.core.errors import LimitExceeded
from poot_vllm.core.limits import DEFAULT_LIMITS, Limits


def _refusal(pattern: str, limits: Limits = DEFAULT_LIMITS) -> LimitExceeded:
    with pytest.raises(LimitExceeded) as exc:
        check(regex_constraint(pattern, limits), limits)
    return exc.value


def test_exponential_regex_refusal_names_the_regex_the_field_and_the_limit():
    err = _refusal("(a|b)*a(a|b){17}").with_field("guided_regex")
    text = str(err)
    assert text.startswith("guided_regex: ")
    assert "'(a|b)*a(a|b){17}'" in text
    assert f"max_automaton_bytes={DEFAULT_LIMITS.max_automaton_bytes}" in text
    assert "POOT_MAX_AUTOMATON_BYTES" in text
    assert "smaller counts" in text  # says what to change
    assert err.limit_name == "max_automaton_bytes" and err.limit == DEFAULT_LIMITS.max_automaton_bytes


def test_small_variant_still_compiles():
    dfa = compile_regex("(a|b)*a(a|b){3}")
    assert isinstance(dfa, DFA)
    for text in ("abab", "aaaa", "bbbbabbb", "abbb"):
        assert dfa.matches(text.encode()) == bool(re.fullmatch("(a|b)*a(a|b){3}", text)), text


def test_long_regex_is_quoted_as_an_excerpt():
    pattern = "(a|b)*a(a|b){17}" + "c" * 200
    text = str(_refusal(pattern))
    assert repr(pattern[:60]) + "..." in text
    assert pattern[:61] not in text  # the rest is elided, not pasted into the message
    assert f"({len(pattern)} characters)" in text


def test_expansion_refusal_keeps_the_stage_detail():
    text = str(_refusal("(?:a{1000}){1000}"))
    assert "'(?:a{1000}){1000}'" in text and "positions" in text


def test_other_limits_keep_their_own_message():
    text = str(_refusal("a" * 5000))
    assert "max_regex_bytes" in text and "aaaa" not in text


@pytest.mark.parametrize("pattern", ["", "x", "a" * 60, "a" * 61, "é" * 70, "'\"\n"])
def test_excerpt_is_the_quoted_start_of_the_pattern(pattern):
    excerpt = regex_excerpt(pattern)
    shown = excerpt.split("...")[0]
    assert eval(shown) == pattern[:60]  # noqa: S307 - a repr we made, of a str
    assert ("..." in excerpt) == (len(pattern) > 60)
