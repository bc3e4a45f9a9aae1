"""The ``vllm.general_plugins`` entry point.

vLLM calls :func:`register` in every process it starts (API server, engine
core, workers), possibly several times.  It must stay cheap and idempotent:
it only applies the runtime hooks (each applied once per process) and
imports none of poot's compilers.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("vllm.poot")
_logged = False


def register() -> None:
    global _logged
    from poot_vllm.hooks import apply_all

    status = apply_all()
    if not _logged:
        _logged = True
        paths = sorted(set(status.values()))
        logger.info("poot-vllm: structured-output backend 'poot' registered (hooks: %s)",
                    ", ".join(f"{k}={v}" for k, v in status.items()) if paths != ["applied"] else "runtime hooks")
