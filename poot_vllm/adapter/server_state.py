"""What this process knows about the server it is part of.

The API-server request hooks act on a request's fields only when the server
runs the poot backend.  Every API-server process learns the backend from its
engine's ``VllmConfig`` in ``init_app_state`` (``adapter/patches/app_state.py``: the
authoritative answer, scale-out children included); before that, vLLM's CLI
parser (``cli_flag``) or ``POOT_SERVER_BACKEND`` may tell it.  Where none
has, the backend is unknown (``None``) and ``request_fields`` still maps
``guided_*`` fields, leaving the check to the validation step that knows the
engine's real backend: a constraint is never dropped.
"""

from __future__ import annotations

import os
import sys

_server_backend: str | None = None


def record_server_backend(name: str | None, *, from_config: bool = False) -> None:
    """Remember the server's structured-output backend.

    From a parsed command line (``from_config=False``): vLLM may parse other
    argument lists later in the same process (their default backend is
    "auto"), so a default never overrides a chosen backend.  From the engine's
    ``VllmConfig`` (``from_config=True``): that is what the engine runs, so it
    always wins.
    """
    global _server_backend
    if name and (from_config or name != "auto" or _server_backend is None):
        _server_backend = name


def server_backend() -> str | None:
    if found := os.environ.get("POOT_SERVER_BACKEND") or _server_backend:
        return found
    # A vLLM with patches/0002 records its backend itself (API server), in
    # the request hook point's module; if that module is not loaded, no
    # request has been handled by it in this process.
    protocol = sys.modules.get("vllm.entrypoints.generate.base.protocol")
    getter = getattr(protocol, "get_structured_outputs_server_backend", None)
    return getter() if getter is not None else None


def poot_is_server_backend() -> bool:
    return server_backend() == "poot"


# -- runtime patches that failed in this process (recorded by adapter/patches) -----------------
_failures: dict[str, str] = {}


def vllm_version() -> str:
    try:
        import vllm

        return str(getattr(vllm, "__version__", "unknown"))
    except Exception:  # a broken vLLM install: say so, do not fail here
        return "unknown"


def record_failed_patch(name: str, reason: str) -> None:
    _failures[name] = reason


def failed_patches() -> dict[str, str]:
    """Hooks that could not be applied in this process: name -> reason."""
    return dict(_failures)


def check_working(names: "tuple[str, ...] | None" = None) -> None:
    """Raise :class:`~poot_vllm.core.errors.PootError` if a patch (of ``names``, default any) failed here.

    Called on the request path, so a request that poot cannot serve exactly
    is a 400 naming the problem rather than an unconstrained reply.
    """
    failures = {n: r for n, r in _failures.items() if names is None or n in names}
    if not failures:
        return
    from poot_vllm.core.errors import PootError

    listed = "; ".join(f"{n} ({r})" for n, r in sorted(failures.items()))
    raise PootError(
        f"the poot backend cannot serve constrained requests on this vLLM {vllm_version()}: its runtime patches "
        f"failed: {listed}. The server operator should install a supported vLLM (see poot-vllm's README)")


# -- the server's reasoning set-up (recorded from the engine's VllmConfig in init_app_state) ----
_reasoning_end_tokens: int | None = None


def record_reasoning_end_tokens(count: int | None) -> None:
    """How many tokens vLLM forces to end reasoning (``--reasoning-parser``), or None."""
    global _reasoning_end_tokens
    _reasoning_end_tokens = count


def record_reasoning_config(reasoning_config) -> None:
    """Record the end marker's length from the engine's ``ReasoningConfig`` (None: no reasoning parser)."""
    if reasoning_config is not None and getattr(reasoning_config, "enabled", False) \
            and reasoning_config.reasoning_end_token_ids:
        record_reasoning_end_tokens(len(reasoning_config.reasoning_end_token_ids))


def reasoning_end_tokens() -> int | None:
    return _reasoning_end_tokens
