"""The ``vllm.general_plugins`` entry point.

vLLM calls :func:`register` in every process it starts (API server, engine
core, workers), possibly several times.  It must stay cheap and idempotent:
it registers poot through vLLM's native seams where a patched vLLM has
them, applies the runtime hooks elsewhere (each once per process), and
imports none of poot's compilers.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("vllm.poot")


def register() -> None:
    from poot_vllm.adapter.patches import apply_all
    from poot_vllm.core.limits import check_settings

    # A bad POOT_* setting stops the server at start, naming the variable
    # (docs/safeguards.md), rather than failing the first constrained request.
    check_settings()
    try:
        # The API server hands its checked automata to the engine through a
        # private directory (core/handoff.py); made here, inherited by children.
        from poot_vllm.adapter.handoff_dir import ensure

        ensure()
    except OSError:  # no writable temp dir: every process builds its own automata
        logger.warning("poot-vllm: no hand-off directory; the engine builds automata again", exc_info=True)
    try:
        # Registers through vLLM's native seams where present (patches/), else
        # applies the runtime hooks; logs once which path is in use.
        apply_all()
    except Exception:  # noqa: BLE001 - vLLM calls plugins without a try: never break vLLM
        logger.exception("poot-vllm: registration failed; vLLM continues, the backend 'poot' is unavailable")
