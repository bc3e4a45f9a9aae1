"""What this process knows about the server it is part of.

The API-server request hook must only reinterpret request fields when the
server runs the poot backend; the backend name is known in the API-server
process once vLLM's CLI parser has run (``cli_flag`` records it there) or
from ``POOT_SERVER_BACKEND`` (set it when vLLM is started without its CLI).
"""

from __future__ import annotations

import os

_server_backend: str | None = None


def record_server_backend(name: str | None) -> None:
    """Remember the backend a parsed ``vllm serve`` command line selected.

    vLLM may parse other argument lists later in the same process (their
    default backend is "auto"); a default never overrides a chosen backend.
    """
    global _server_backend
    if name and (name != "auto" or _server_backend is None):
        _server_backend = name


def server_backend() -> str | None:
    if found := os.environ.get("POOT_SERVER_BACKEND") or _server_backend:
        return found
    # A vLLM with patches/0002 records its backend itself (API server).
    from poot_vllm.native import server_backend as native_server_backend

    return native_server_backend()


def poot_is_server_backend() -> bool:
    return server_backend() == "poot"
