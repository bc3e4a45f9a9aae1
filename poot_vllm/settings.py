"""Server-wide settings read once per process from the environment."""

from __future__ import annotations

import functools
import os

from poot_vllm.limits import Limits


@functools.lru_cache(maxsize=1)
def server_limits() -> Limits:
    """``Limits`` with ``POOT_*`` environment overrides (see docs/safeguards.md)."""
    return Limits.from_env()


def budget_masks_enabled() -> bool:
    """Budget-aware masks (replies finish inside max_tokens); on unless POOT_BUDGET_MASKS=0."""
    return os.environ.get("POOT_BUDGET_MASKS", "1") not in ("0", "false", "False", "off")
