"""How poot compiles its numba kernels (``masks``, ``counted_masks``).

``njit(cache=True, nogil=True)``: compiled once per machine and loaded from
numba's on-disk cache after that (next to the module, or ``NUMBA_CACHE_DIR``,
or the per-user cache when the package directory is read-only), run with the
GIL released so vLLM's threads overlap.  Without any writable cache location
the kernels are compiled in every process instead (a couple of seconds), with
a warning.
"""

from __future__ import annotations

import warnings
from typing import Callable

try:
    import numba
except ImportError as exc:  # pragma: no cover - numba ships with vLLM
    raise ImportError("poot_vllm needs numba (pip install numba); it is a vLLM dependency") from exc


def jit_kernel(fn: Callable) -> Callable:
    """``njit(cache=True, nogil=True)``, without the on-disk cache if no location is writable."""
    try:
        return numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        warnings.warn("poot: no writable numba cache directory (set NUMBA_CACHE_DIR); "
                      "mask kernels are compiled in every process", RuntimeWarning, stacklevel=2)
        return numba.njit(nogil=True)(fn)
