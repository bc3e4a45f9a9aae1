"""Run a callback once a module has been imported (now, if it already is).

``register()`` runs in every vLLM process, workers included.  Importing the
API-server or engine-core modules there just to patch them would make every
worker pay for FastAPI and the OpenAI protocol models.  Instead each hook
names the vLLM module it patches (its trigger) and is applied right after
that module finishes executing, in whichever process imports it.  A
``sys.meta_path`` finder wraps the module's loader for that one import.
"""

from __future__ import annotations

import importlib.abc
import logging
import sys
import threading
from types import ModuleType
from typing import Any, Callable

_callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}
_lock = threading.RLock()


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` now if ``name`` is imported, else right after its import."""
    module = sys.modules.get(name)
    if module is not None:
        _call(callback, module)
        return
    with _lock:
        _callbacks.setdefault(name, []).append(callback)
        if not any(isinstance(f, _PostImportFinder) for f in sys.meta_path):
            sys.meta_path.insert(0, _PostImportFinder())


def _call(callback: Callable[[ModuleType], None], module: ModuleType) -> None:
    """Run one callback; an exception is logged, never raised into vLLM's import of ``module``."""
    try:
        callback(module)
    except Exception:  # noqa: BLE001 - a failing poot hook must not break vLLM
        logging.getLogger("vllm.poot").exception(
            "poot-vllm: a hook for %s failed; vLLM continues without it", module.__name__)


def pending() -> list[str]:
    """Modules with callbacks still waiting for their import (for logs and tests)."""
    with _lock:
        return sorted(_callbacks)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None):
        if fullname not in _callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _CallbackLoader(spec.loader, fullname)
                return spec
        return None


class _CallbackLoader(importlib.abc.Loader):
    """Delegates to the real loader; runs the callbacks after ``exec_module``."""

    def __init__(self, loader: importlib.abc.Loader, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        with _lock:
            callbacks = _callbacks.pop(self._name, [])
        for callback in callbacks:
            _call(callback, module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, is_package, ...
        return getattr(self._loader, name)
