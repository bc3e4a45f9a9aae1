"""Shared pytest fixtures."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAKE_TINY_MODELS = REPO / "scripts" / "make_tiny_models.py"
TINY_MODEL_NAMES = ("tiny-llama-spm", "tiny-qwen2-bpe", "tiny-qwen2-bpe-think", "tiny-mistral-spm")


def _script_stamp() -> str:
    return hashlib.sha256(MAKE_TINY_MODELS.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def tiny_models_dir() -> Path:
    """Folder holding the tiny test models (built once, ~10 s, if missing or
    built by an older version of the script).  ``POOT_MODELS_DIR`` overrides
    the default ``<repo>/.models``."""
    out = Path(os.environ.get("POOT_MODELS_DIR", REPO / ".models"))
    stamp = out / ".stamp"
    wanted = _script_stamp()
    complete = all((out / n / "model.safetensors").is_file() for n in TINY_MODEL_NAMES)
    if complete and stamp.is_file() and stamp.read_text() == wanted:
        return out
    # Build next to the target and move into place, so a concurrent run never
    # sees a half-written model.
    out.mkdir(parents=True, exist_ok=True)
    staging = out / f".build-{os.getpid()}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run([sys.executable, str(MAKE_TINY_MODELS), str(staging)], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    for name in TINY_MODEL_NAMES:
        shutil.rmtree(out / name, ignore_errors=True)
        try:
            os.replace(staging / name, out / name)
        except OSError:  # another session placed it first: its build is identical
            if not (out / name / "model.safetensors").is_file():
                raise
    shutil.rmtree(staging, ignore_errors=True)
    stamp.write_text(wanted)
    return out
