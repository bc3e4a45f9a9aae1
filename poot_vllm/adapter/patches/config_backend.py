"""Add ``"poot"`` to the closed set of structured-output backend names.

vLLM declares ``StructuredOutputsConfig.backend`` as a ``Literal[...]`` on a
pydantic dataclass, so ``--structured-outputs-config.backend poot`` is
rejected before any plugin code runs.  We widen the Literal and rebuild the
pydantic schema; the CLI's ``choices`` are derived from the same annotation
when the parser is built (after plugins load), so they include ``poot`` too.
"""

from __future__ import annotations

from typing import Literal, get_args

from poot_vllm.adapter.patches import Hook

BACKEND_NAME = "poot"

#: Applied when the first of these vLLM modules is imported (adapter/when_imported.py).
TRIGGERS = ("vllm.config.structured_outputs",)

HOOK = Hook(
    name="config_backend",
    target="vllm.config.structured_outputs.StructuredOutputsConfig.backend",
    what="widen the backend Literal with 'poot' and rebuild the pydantic dataclass",
    why="the backend name is a closed Literal; an unknown name is a config error",
    versions="0.32.x, 0.33.x",
    until="vLLM has a structured-output backend registry (patches/0001)",
    process="every process",
    upstream="patches/vllm-0.33/0001-structured-output-backend-registry.patch",
)


def seam_present() -> bool:
    """patches/0001: the config validates backend names against a registry."""
    from poot_vllm.adapter.native import backend_registry

    return backend_registry() is not None


def apply() -> None:
    import pydantic
    from vllm.config import structured_outputs as so

    cls = so.StructuredOutputsConfig
    current = cls.__pydantic_fields__["backend"].annotation
    names = get_args(current)
    if BACKEND_NAME in names:
        return
    widened = Literal[names + (BACKEND_NAME,)]  # type: ignore[valid-type]
    # Kept, like every patched callable's ``__poot_original__``, for tests and unpatching.
    cls.__poot_original_backend__ = current
    so.StructuredOutputsBackend = widened
    # pydantic reads the annotation from several places depending on version.
    cls.__annotations__["backend"] = widened
    cls.__dataclass_fields__["backend"].type = widened
    cls.__pydantic_fields__["backend"].annotation = widened
    pydantic.dataclasses.rebuild_dataclass(cls, force=True)
