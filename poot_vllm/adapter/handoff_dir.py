"""The private directory through which the API server hands automata to the engine.

``core/handoff.py`` stores DFAs in the directory named by ``POOT_HANDOFF_DIR``.
vLLM loads poot's plugin first in the process that ``vllm serve`` starts; that
process creates the directory (``tempfile.mkdtemp``: mode 0700, this user
only) and sets the variable, which every process it spawns afterwards (the
engine core, scale-out API servers) inherits.  The creating process removes
the directory when it exits; a process killed outright leaves it behind,
bounded by ``POOT_HANDOFF_BYTES``.  An operator may name a directory
instead (``POOT_HANDOFF_DIR``; it is then neither created nor removed), or
turn the hand-off off (``POOT_HANDOFF=0``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from poot_vllm.core.limits import env_switch


def ensure() -> None:
    """Create this server's hand-off directory unless one is named or the hand-off is off."""
    if os.environ.get("POOT_HANDOFF_DIR") or not env_switch("POOT_HANDOFF", True):
        return
    path = tempfile.mkdtemp(prefix="poot-handoff-")
    os.environ["POOT_HANDOFF_DIR"] = path
    creator = os.getpid()

    def remove() -> None:
        if os.getpid() == creator:  # not in a forked child that inherited the handler
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(remove)
