"""Conformance ratchet over JSONSchemaBench and the JSON-Schema-Test-Suite.

Every schema is compiled; compiled ones are checked for exactness (random
samples of the regex validate with jsonschema; the suite's invalid instances,
re-serialized compactly with sorted keys, never match), and so are the
recursive ones poot serves as grammars (replies drawn from the grammar's masks
validate; the invalid instances do not parse).  The per-subset
compiled counts may only go up: the test fails when a subset drops below
``tests/data/json_conformance_baseline.json`` or a schema that compiled
before is refused now.  Refresh the baseline with
``python scripts/json_conformance.py --update`` after an improvement; the
script without arguments prints the per-subset table.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.bench_data import BENCH_DATA, missing_reason

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("json_conformance", REPO / "scripts" / "json_conformance.py")
conformance = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("json_conformance", conformance)
_spec.loader.exec_module(conformance)

BENCH = BENCH_DATA
pytestmark = pytest.mark.skipif(not conformance.bench_files(BENCH),
                                reason=missing_reason("jsonschemabench", "*.jsonl"))


@pytest.fixture(scope="module")
def results():
    return conformance.run(conformance.load_items(BENCH), samples=3)


def test_compiled_schemas_are_exact(results):
    bad = {r["id"]: r["problems"][:2] for r in results if r.get("problems")}
    assert not bad, f"schemas whose regex is not exact: {bad}"


def test_every_refusal_names_a_keyword(results):
    unnamed = [(r["id"], r["message"]) for r in results if not r.get("compiled") and r["refused"] == "<unnamed>"]
    assert not unnamed, unnamed


def test_no_regression_against_baseline(results):
    baseline = json.loads((REPO / "tests" / "data" / "json_conformance_baseline.json").read_text())
    now = conformance.baseline_of(results)
    dropped = {s: (n, now["compiled_per_subset"].get(s, 0)) for s, n in baseline["compiled_per_subset"].items()
               if now["compiled_per_subset"].get(s, 0) < n}
    lost = sorted(set(baseline["compiled_ids"]) - set(now["compiled_ids"]))
    lost += sorted(set(baseline.get("served_ids", ())) - set(now["served_ids"]))  # a DFA or a grammar
    messages = {r["id"]: r.get("message", "")[:160] for r in results if r["id"] in lost}
    assert not dropped and not lost, f"compiled counts dropped {dropped}; no longer compiled: {messages}"
