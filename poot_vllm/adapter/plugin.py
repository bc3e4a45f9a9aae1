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

    # Registers through vLLM's native seams where present (patches/), else
    # applies the runtime hooks; logs once which path is in use.
    apply_all()
