"""Bounds of forced tool calls: a flood of tools stops at the bound as it is built, naming the
tool where it passed; parallel calls cost one copy of the call, not two."""

from __future__ import annotations

import re

import pytest

from poot_vllm.core.errors import LimitExceeded
from poot_vllm.core.limits import Limits
from poot_vllm.core.tool_calls.forcing import call_regex, compile_tool_call_constraint, tool_call_regex, tool_call_spec
from tests.helpers.tool_codecs import NESTED

PARAMS = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 20}, "k": {"type": "integer"}},
          "required": ["q"], "additionalProperties": False}


@pytest.mark.parametrize("parallel", [False, True])
def test_tool_flood_stops_at_the_tool_that_passes_the_bound(parallel):
    limits = Limits(max_schema_regex_bytes=20_000)
    spec = tool_call_spec([(f"tool_{i}", PARAMS) for i in range(400)], parallel=parallel, limits=limits)
    with pytest.raises(LimitExceeded) as info:
        compile_tool_call_constraint(spec, limits)
    message = str(info.value)
    assert "max_schema_regex_bytes" in message and "of 400" in message, message
    stopped_at = int(re.search(r"at tool (\d+) of 400", message).group(1))
    # the bound is on one call's regex, parallel or not: about limit / per-tool size tools fit
    one = call_regex(tool_call_spec([("tool_0", PARAMS)], parallel=False, limits=limits), limits)
    per_tool = len(one.encode()) - 4  # minus the "(?:" ")" wrapper
    assert abs(stopped_at * per_tool - limits.max_schema_regex_bytes) < 3 * per_tool


def test_tools_within_the_bound_are_served():
    limits = Limits(max_schema_regex_bytes=20_000)
    pattern = tool_call_regex(tool_call_spec([(f"tool_{i}", PARAMS) for i in range(5)], parallel=True,
                                             limits=limits), limits)
    assert "tool_4" in pattern


def _fits(spec: str, budget: int) -> bool:
    try:
        compile_tool_call_constraint(spec, Limits(max_automaton_bytes=budget))
    except LimitExceeded:
        return False
    return True


def test_parallel_calls_need_the_working_memory_of_one_call():
    tools = [("search", PARAMS), ("ping", None)]
    single, parallel = (tool_call_spec(tools, parallel=p) for p in (False, True))
    lo, hi = 1_000, 10_000_000  # smallest budget the single call fits in, by bisection
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _fits(single, mid) else (mid + 1, hi)
    assert not _fits(parallel, lo - 1)
    assert _fits(parallel, lo + 64)  # the loop: one edge per accepting state, not a second copy of the call


@pytest.mark.parametrize("parallel", [False, True])
def test_realistically_nested_tools_are_served_with_parallel_calls(parallel):
    spec = tool_call_spec(NESTED, parallel=parallel)
    dfa = compile_tool_call_constraint(spec, Limits())  # default limits: no refusal
    call = '<tool_call>\n{"name": "create_order", "arguments": {"customer_id": "c1", "items": [{"quantity": 2, "sku": "A-1"}]}}\n</tool_call>'
    assert dfa.matches(call.encode())
    assert dfa.matches(f"{call}\n{call}".encode()) == parallel
    if parallel:  # the loop costs about one call; the call written twice into one regex, about two
        from poot_vllm.core.automata.build import Budget, regex_tree_to_dfa
        from poot_vllm.core.regex.parser import parse
        from poot_vllm.core.tool_calls.forcing import call_regex, repeat_with_separator

        looped, twice = Budget(1 << 30), Budget(1 << 30)
        repeat_with_separator(regex_tree_to_dfa(parse(call_regex(spec)), looped), b"\n", looped)
        regex_tree_to_dfa(parse(tool_call_regex(spec)), twice)
        assert twice.used > 1.5 * looped.used, (twice.used, looped.used)


def test_a_forced_call_over_the_budget_names_the_tool_and_its_schema_part():
    # minLength 40 keeps the strings expanded: /properties/notes of 'annotate' is the large part
    big = {"type": "object", "properties": {f"note{i}": {"type": "string", "minLength": 40, "maxLength": 90}
                                            for i in range(6)}, "required": [f"note{i}" for i in range(6)]}
    spec = tool_call_spec([("annotate", big), ("ping", None)], parallel=True)
    with pytest.raises(LimitExceeded, match="max_automaton_bytes") as exc:
        compile_tool_call_constraint(spec, Limits())
    message = str(exc.value)
    assert "tool 'annotate' makes" in message and "/properties/note" in message, message


def test_a_forced_call_over_the_mask_work_names_the_tool():
    from poot_vllm.core.constraints import Constraint, Kind, check_mask_work

    spec = tool_call_spec(NESTED, parallel=True)
    dfa = compile_tool_call_constraint(spec, Limits())
    with pytest.raises(LimitExceeded, match="max_mask_work") as exc:
        check_mask_work(dfa, 128_256, Limits(max_mask_work=1000), Constraint(Kind.TOOL_CALL, spec))
    assert "tool '" in str(exc.value) and "% of the call" in str(exc.value), str(exc.value)
