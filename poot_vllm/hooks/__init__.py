"""Every runtime patch poot applies to vLLM, in one place.

One module per patched vLLM area.  Each module defines ``HOOK`` (a
:class:`Hook`: what it changes, why, for which vLLM versions, and when it can
go) and an idempotent ``apply()`` that keeps the original callable reachable
as ``<patched>.__poot_original__``.  :func:`apply_all` runs them in order; it
is what the ``vllm.general_plugins`` entry point calls in every vLLM process.

Where a vLLM fork carries the seams from ``patches/`` (see docs/fork.md), the
hook for that area is skipped: :func:`apply_all` asks each hook's
``seam_present()`` first.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable

logger = logging.getLogger("vllm.poot")

#: Hook modules, in the order they are applied.
HOOK_MODULES = (
    "config_backend",
    "cli_flag",
    "sampling_validation",
    "engine_manager",
    "request_fields",
)


@dataclass(frozen=True)
class Hook:
    name: str
    target: str  # the vLLM callable or object patched, dotted
    what: str
    why: str
    versions: str  # vLLM versions the seam was checked against
    until: str  # when the hook can be removed


_applied: dict[str, bool] = {}


def wrap(owner: Any, attr: str, make_wrapper: Callable[[Callable], Callable]) -> bool:
    """Replace ``owner.attr`` by ``make_wrapper(original)`` once.

    Returns False if it was already wrapped (idempotent across repeated
    ``register()`` calls in one process).  The original stays reachable as
    ``wrapper.__poot_original__`` for tests and for unpatching.
    """
    current = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr)
    if current is None:
        current = getattr(owner, attr)
    raw = current.__func__ if isinstance(current, (classmethod, staticmethod)) else current
    if getattr(raw, "__poot_original__", None) is not None:
        return False
    wrapper = make_wrapper(raw)
    functools.update_wrapper(wrapper, raw)
    wrapper.__poot_original__ = raw  # type: ignore[attr-defined]
    if isinstance(current, classmethod):
        wrapper = classmethod(wrapper)  # type: ignore[assignment]
    elif isinstance(current, staticmethod):
        wrapper = staticmethod(wrapper)  # type: ignore[assignment]
    setattr(owner, attr, wrapper)
    return True


def original(func: Any) -> Callable:
    """The unpatched callable behind a hook (itself if not patched)."""
    raw = getattr(func, "__func__", func)
    return getattr(raw, "__poot_original__", raw)


def hooks_disabled() -> bool:
    """``POOT_DISABLE_HOOKS=1`` turns every runtime hook off (fork mode / tests)."""
    return os.environ.get("POOT_DISABLE_HOOKS", "") not in ("", "0", "false", "False")


def apply_all() -> dict[str, str]:
    """Apply every hook not already applied; returns name -> status."""
    status: dict[str, str] = {}
    if hooks_disabled():
        return {name: "disabled" for name in HOOK_MODULES}
    for name in HOOK_MODULES:
        if _applied.get(name):
            status[name] = "applied"
            continue
        module = importlib.import_module(f"{__name__}.{name}")
        seam_present = getattr(module, "seam_present", None)
        if seam_present is not None and seam_present():
            status[name] = "native seam"
            _applied[name] = True
            continue
        module.apply()
        _applied[name] = True
        status[name] = "applied"
    return status


def all_hooks() -> list[Hook]:
    return [importlib.import_module(f"{__name__}.{n}").HOOK for n in HOOK_MODULES]
