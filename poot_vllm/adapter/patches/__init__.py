"""Every runtime patch poot applies to vLLM, in one place.

One module per patched vLLM area.  Each module defines ``HOOK`` (a
:class:`Hook`: what it changes, why, for which vLLM versions, and when it can
go) and an idempotent ``apply()`` that keeps the original callable reachable
as ``<patched>.__poot_original__``.  :func:`apply_all` runs them in order; it
is what the ``vllm.general_plugins`` entry point calls in every vLLM process.

Where a vLLM fork carries the seams from ``patches/`` (see docs/fork.md), the
hook for that area is skipped: :func:`apply_all` asks each hook's
``seam_present()`` first.

Fail-soft: vLLM loads plugins without a ``try``, and a hook runs inside the
import of the module it patches, so an exception here would break vLLM for
every backend.  A hook whose seam is missing or changed shape (checked by
:func:`wrap` against the parameters the wrapper relies on) is recorded as
``failed``, logged once with the vLLM version and the seam, and every other
hook still applies; poot then refuses constrained requests with a 400 that
names the failed patch (:func:`check_working`) instead of serving them
unconstrained.  Each hook's ``versions`` is compared with the running vLLM
at apply time (a warning outside them; the seam-shape check decides).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable

from poot_vllm.adapter.server_state import record_failed_patch, vllm_version
from poot_vllm.core.limits import env_switch

logger = logging.getLogger("vllm.poot")

#: Hook modules, in the order they are applied.
HOOK_MODULES = (
    "config_backend",
    "cli_flag",
    "app_state",
    "sampling_validation",
    "engine_manager",
    "request_fields",
    "budget_admission",
    "tool_responses",
    "mistral_streaming",
    "serving_offload",
    "leading_space",
)


@dataclass(frozen=True)
class Hook:
    """One runtime patch of vLLM: the registry entry each patch module declares as ``HOOK``."""

    name: str
    target: str  # the vLLM callable or object patched, dotted
    what: str  # how: what the patch changes
    why: str  # what breaks for users without it
    versions: str  # vLLM versions the seam was checked against
    until: str  # when the hook can be removed
    process: str  # the vLLM process(es) it runs in
    upstream: str  # the upstream change that makes it unnecessary (patches/ holds them as commits)




class SeamChanged(RuntimeError):
    """The vLLM callable a hook patches is missing or has another shape than the hook expects."""


def wrap(owner: Any, attr: str, make_wrapper: Callable[[Callable], Callable],
         expects: "tuple[str, ...] | None" = None) -> bool:
    """Replace ``owner.attr`` by ``make_wrapper(original)`` once.

    ``expects``: the leading parameter names the wrapper relies on (wrappers
    take ``*args, **kwargs`` after them and pass them through, so a parameter
    vLLM adds later is no error); a callable whose parameters start
    otherwise raises :class:`SeamChanged` and nothing is patched.

    Returns False if it was already wrapped (idempotent across repeated
    ``register()`` calls in one process).  The original stays reachable as
    ``wrapper.__poot_original__`` for tests and for unpatching.
    """
    where = f"{getattr(owner, '__module__', '')}.{getattr(owner, '__qualname__', getattr(owner, '__name__', owner))}.{attr}"
    current = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
    if current is None:
        current = getattr(owner, attr, None)
    if current is None:
        raise SeamChanged(f"{where} does not exist")
    raw = current.__func__ if isinstance(current, (classmethod, staticmethod)) else current
    if getattr(raw, "__poot_original__", None) is not None:
        return False
    if expects is not None:
        try:
            names = tuple(inspect.signature(raw).parameters)
        except (TypeError, ValueError):
            names = ()
        if names[: len(expects)] != tuple(expects):
            raise SeamChanged(f"{where} takes ({', '.join(names)}), poot expects ({', '.join(expects)}, ...)")
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
    return env_switch("POOT_DISABLE_HOOKS", False)


def apply_all(eager: bool = False) -> dict[str, str]:
    """Register poot in this process; returns hook name -> status.

    First through vLLM's native seams where they exist (a vLLM carrying
    ``patches/``, see :mod:`poot_vllm.adapter.native`; done even with
    ``POOT_DISABLE_HOOKS=1``), then each runtime hook whose area has no native
    seam.  A hook is settled when the vLLM module it patches (its
    ``TRIGGERS``) is imported -- at once if it already is -- so a worker
    process never imports API-server modules just to patch them.  Status per
    hook: ``"native seam"``, ``"applied"``, ``"disabled"`` or ``"deferred"``.
    ``eager=True`` imports every trigger now (tests, tools): nothing is deferred.
    """
    from poot_vllm.adapter import native
    from poot_vllm.adapter.when_imported import when_imported

    native.register()
    for name in HOOK_MODULES:
        if name in _status:
            continue
        module = importlib.import_module(f"{__name__}.{name}")
        _status[name] = "deferred"
        for trigger in getattr(module, "TRIGGERS", ()):
            when_imported(trigger, lambda _m, name=name, module=module: _settle(name, module))
        if not getattr(module, "TRIGGERS", ()):
            _settle(name, module)
    if eager:
        for name in HOOK_MODULES:
            for trigger in getattr(importlib.import_module(f"{__name__}.{name}"), "TRIGGERS", ())[:1]:
                importlib.import_module(trigger)
    status = dict(_status)
    log_paths_once(status)
    return status


_status: dict[str, str] = {}
_settle_lock = threading.RLock()


def version_supported(versions: str, version: str) -> bool:
    """Whether ``version`` is one of a hook's ``versions`` ("0.32.x, 0.33.x (notes)")."""
    prefixes = [v.strip().split()[0].removesuffix("x") for v in versions.split(",") if v.strip()]
    return any(version.startswith(p) for p in prefixes if p)


def _settle(name: str, module: Any) -> None:
    """Decide and apply one hook, once: native seam, disabled, applied, or failed.

    Never raises: it runs inside the import of a vLLM module, and an
    exception there would break vLLM for every backend.
    """
    with _settle_lock:
        if _status.get(name) not in (None, "deferred"):
            return
        hook = getattr(module, "HOOK", None)
        try:
            seam_present = getattr(module, "seam_present", None)
            if seam_present is not None and seam_present():
                _status[name] = "native seam"
                return
            if hooks_disabled():
                _status[name] = "disabled"
                return
            version = vllm_version()
            if hook is not None and not version_supported(hook.versions, version):
                logger.warning("poot-vllm: patch %r was checked against vLLM %s; this is vLLM %s: applying it "
                               "only because its seam has the expected shape", name, hook.versions, version)
            module.apply()
            _status[name] = "applied"
        except Exception as exc:  # noqa: BLE001 - any failure must leave vLLM importable
            reason = f"{type(exc).__name__}: {exc}"
            _status[name] = "failed"
            record_failed_patch(name, reason)
            logger.error(
                "poot-vllm: could not patch %s on vLLM %s (%s); poot will refuse constrained requests that need "
                "it, other backends are unaffected. Supported vLLM: %s",
                getattr(hook, "target", name), vllm_version(), reason, getattr(hook, "versions", "?"))


def hook_status() -> dict[str, str]:
    """What each hook is in this process now (deferred ones settle on import)."""
    return dict(_status)


_logged_paths = False


def describe_paths(status: dict[str, str]) -> str:
    """One line saying which path poot uses in this process, per vLLM area."""
    by_status: dict[str, list[str]] = {}
    for name, state in status.items():
        by_status.setdefault(state, []).append(name)
    native_names = by_status.get("native seam", [])
    if not native_names:
        path = "no native seams, runtime hooks disabled" if "disabled" in by_status else "stock vLLM: runtime hooks"
    elif "applied" in by_status:
        path = "patched vLLM: native seams + runtime hooks"
    else:
        path = "patched vLLM: native seams only"
    details = "; ".join(f"{state}: {', '.join(names)}" for state, names in by_status.items())
    return f"{path} ({details})"


def log_paths_once(status: dict[str, str]) -> None:
    """Log once per process which path (native seams / runtime hooks) is in use."""
    global _logged_paths
    if _logged_paths:
        return
    _logged_paths = True
    line = describe_paths(status)
    if "disabled" in status.values() and not {"applied", "native seam"} & set(status.values()):
        logger.warning("poot-vllm: %s; the backend 'poot' is not available", line)
    else:
        logger.info("poot-vllm: %s", line)


def all_hooks() -> list[Hook]:
    return [importlib.import_module(f"{__name__}.{n}").HOOK for n in HOOK_MODULES]
