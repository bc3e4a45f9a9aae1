"""Record the server's structured-output backend in every API-server process.

The request hooks (``request_fields``, ``budget_admission``,
``tool_responses``) act only on servers whose backend is poot.  The CLI
parser tells the process that parses ``vllm serve``'s arguments, but with
``--api-server-count N`` vLLM serves from N child processes that never run
the parser: they answered ``guided_regex`` unconstrained and accepted an
invalid regex with a 200.  Every API-server process -- the single-process
server, each scale-out child, ``vllm.entrypoints.openai.api_server`` started
from Python -- calls ``init_app_state`` with its engine client before it
serves, and the client's ``VllmConfig`` names the backend the engine runs.
We record that name there: it is the authoritative answer, whatever started
the process.
"""

from __future__ import annotations

import sys

from poot_vllm.adapter.patches import Hook, wrap

APP_STATE_MODULE = "vllm.entrypoints.launchers.api_server.app_state"
#: Modules that bind ``init_app_state`` by name at import (``from .app_state import init_app_state``).
IMPORTERS = ("vllm.entrypoints.launchers.api_server.entry", "vllm.entrypoints.openai.api_server")

#: Applied when the first of these vLLM modules is imported (adapter/when_imported.py).
TRIGGERS = (APP_STATE_MODULE,)

HOOK = Hook(
    name="app_state",
    target=f"{APP_STATE_MODULE}.init_app_state",
    what="record vllm_config.structured_outputs_config.backend (and the reasoning end marker's length) "
    "in each API-server process",
    why="API-server processes started by --api-server-count never run vLLM's CLI parser, "
    "so they did not know poot is the backend and served guided_* fields unconstrained",
    versions="0.32.x, 0.33.x",
    until="vLLM records the server backend itself and runs server-start hooks "
    "(patches/0002 and 0004, in init_app_state)",
    process="API server (each process of --api-server-count N)",
    upstream="patches/vllm-0.33/0002-structured-outputs-request-hook.patch (init_app_state records the backend), "
    "0004-server-start-and-sampling-params-hooks.patch (the reasoning set-up)",
)


def seam_present() -> bool:
    """patches/0002: ``init_app_state`` records the backend for the request hook point;
    patches/0004: it runs the server-start hooks (poot records the reasoning set-up there)."""
    from poot_vllm.adapter.native import request_hook_point, server_start_hook_point

    return request_hook_point() is not None and server_start_hook_point() is not None


def record_from_engine_client(engine_client) -> None:
    """Remember the backend named by the engine client's ``VllmConfig``."""
    from poot_vllm.adapter.server_state import record_reasoning_config, record_server_backend

    config = getattr(getattr(engine_client, "vllm_config", None), "structured_outputs_config", None)
    backend = getattr(config, "backend", None)
    if backend:
        record_server_backend(backend, from_config=True)
    record_reasoning_config(getattr(getattr(engine_client, "vllm_config", None), "reasoning_config", None))


def apply() -> None:
    import importlib

    app_state = importlib.import_module(APP_STATE_MODULE)

    def make(orig):
        async def init_app_state(engine_client, *args, **kwargs):
            record_from_engine_client(engine_client)
            return await orig(engine_client, *args, **kwargs)

        return init_app_state

    original = app_state.init_app_state
    wrap(app_state, "init_app_state", make, expects=("engine_client",))
    # A module that imported the name before this hook ran still holds the original.
    for name in IMPORTERS:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "init_app_state", None) is original:
            module.init_app_state = app_state.init_app_state
