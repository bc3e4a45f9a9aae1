"""A flood of tools stops at the bound as it is built, naming the tool where it passed."""

from __future__ import annotations

import re

import pytest

from poot_vllm.core.errors import LimitExceeded
from poot_vllm.core.limits import Limits
from poot_vllm.core.tool_calls.forcing import tool_call_regex, tool_call_spec

PARAMS = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 20}, "k": {"type": "integer"}},
          "required": ["q"], "additionalProperties": False}


@pytest.mark.parametrize("parallel", [False, True])
def test_tool_flood_stops_at_the_tool_that_passes_the_bound(parallel):
    limits = Limits(max_schema_regex_bytes=20_000)
    spec = tool_call_spec([(f"tool_{i}", PARAMS) for i in range(400)], parallel=parallel, limits=limits)
    with pytest.raises(LimitExceeded) as info:
        tool_call_regex(spec, limits)
    message = str(info.value)
    assert "max_schema_regex_bytes" in message and "of 400" in message, message
    stopped_at = int(re.search(r"at tool (\d+) of 400", message).group(1))
    assert stopped_at < 400
    # parallel calls write the call twice, so the bound is reached about twice as early
    one = tool_call_regex(tool_call_spec([("tool_0", PARAMS)], parallel=False, limits=limits), limits)
    per_tool = len(one.encode()) - 4  # minus the "(?:" ")" wrapper
    assert abs(stopped_at * per_tool * (2 if parallel else 1) - limits.max_schema_regex_bytes) < 3 * per_tool


def test_tools_within_the_bound_are_served():
    limits = Limits(max_schema_regex_bytes=20_000)
    pattern = tool_call_regex(tool_call_spec([(f"tool_{i}", PARAMS) for i in range(5)], parallel=True,
                                             limits=limits), limits)
    assert "tool_4" in pattern
