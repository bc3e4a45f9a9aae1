"""Tests that cannot hide: no test file skips itself on a missing required
dependency, reads data from a machine-specific absolute path, catches any
exception where a precise type is meant, or asserts on the clock."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
FILES = sorted(p for p in TESTS.rglob("*.py") if p.resolve() != Path(__file__).resolve())

#: A pattern, why it hides a failure, and which files it is checked in.
RULES = [
    (r"\bimportorskip\(", "vLLM and the test extras are required: an import failure must fail, not skip", "tests"),
    (r"allow_module_level", "a module-level skip also skips every test above it", "tests"),
    (r"raises\((Base)?Exception\b", "name the exception the user would see", "tests"),
    (r"""["'](/work/|/tmp/|/home/|/root/|/data/|/mnt/)""",
     "machine-specific path: use tests.bench_data (repo-relative, POOT_BENCH_DATA) or tmp_path", "tests"),
    (r"\btime\.(time|monotonic|perf_counter|process_time)\(", "unit tests do not time things (benchmarks do)", "unit"),
]


@pytest.mark.parametrize("pattern,why,where", RULES, ids=[r[0] for r in RULES])
def test_no_test_file_hides_a_failure(pattern, why, where):
    assert FILES, f"no test files found under {TESTS}"
    hits = []
    for path in FILES:
        if where == "unit" and path.parent.name != "unit":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(pattern, line):
                hits.append(f"{path.relative_to(TESTS.parent)}:{n}: {line.strip()}")
    assert not hits, f"{why}:\n" + "\n".join(hits)
