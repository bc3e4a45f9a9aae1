"""Tool-call forcing (tool_choice required / named): see the tool-call issue.

Placeholder entry point used by the request hook: returns None (no forcing)
until tool forcing lands.
"""

from __future__ import annotations

from typing import Any

from poot_vllm.constraints import Constraint
from poot_vllm.limits import Limits


def tool_constraint_for(request: Any, limits: Limits) -> tuple[Constraint, str] | None:
    return None
