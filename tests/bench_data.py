"""Where tests find the shared bench data (real vocabularies, grammar and schema corpora).

``$POOT_BENCH_DATA`` if set, else ``<repo>/../shared/bench-data`` (CI keeps
``shared/`` beside the clone; the benchmark scripts look in the same place).
A test that needs a missing file skips, saying where it looked and how to
provide the data.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENV = "POOT_BENCH_DATA"
BENCH_DATA = Path(os.environ.get(ENV) or REPO.parent / "shared" / "bench-data")


def bench_path(*parts: str) -> Path:
    """A path inside the bench data (which may not exist)."""
    return BENCH_DATA.joinpath(*parts)


def missing_reason(*parts: str) -> str:
    source = f"${ENV}" if os.environ.get(ENV) else f"<repo>/../shared/bench-data; set {ENV}=DIR to use another copy"
    return f"bench data not found: {bench_path(*parts)} (from {source})"


def needs_bench(*parts: str) -> pytest.MarkDecorator:
    """Skip the test, with the reason, when ``bench_path(*parts)`` is missing."""
    return pytest.mark.skipif(not bench_path(*parts).exists(), reason=missing_reason(*parts))


def require_bench(*parts: str) -> Path:
    """``bench_path(*parts)``, or skip the calling test (or fixture) with the reason."""
    path = bench_path(*parts)
    if not path.exists():
        pytest.skip(missing_reason(*parts))
    return path
