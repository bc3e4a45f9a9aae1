#!/usr/bin/env python
"""Replies that complete: poot (budget-aware masks) vs xgrammar in a real vllm serve,
plus the per-step cost of the budget check.

    python scripts/bench_budget.py e2e   [--model .models/tiny-llama-spm] [--no-poot-off]
    python scripts/bench_budget.py micro [--vocab llama3-bpe-128k]

``e2e`` starts one server per backend in turn (poot; poot with
``POOT_BUDGET_MASKS=0``; xgrammar via ``--structured-outputs-config.backend``)
and sends every server the same requests through vLLM's native
``structured_outputs`` field: schemas with unbounded strings and arrays and
``json_object``, ``max_tokens`` 32/64/128, n=8, temperature 1 (a random-weight
model: it closes a structure only if the mask makes it).  Per backend and
case: replies with ``finish_reason == "stop"``, replies that parse and
validate, mean completion tokens.

``micro`` times ``fill_bitmask`` with a budget far from and near the limit, for
a JSON Schema DFA and for json_object, on a real vocabulary.

Prints a markdown table (paste into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.test_budget import SCHEMAS  # noqa: E402  (one source for the schemas)

MAX_TOKENS = (32, 64, 128)
N = 8


def _cases() -> list[tuple[str, dict, dict | None]]:
    """(name, structured_outputs field, schema to validate or None for json_object)."""
    cases = [(name, {"json": schema}, schema) for name, schema in sorted(SCHEMAS.items())]
    cases.append(("json_object", {"json_object": True}, None))
    return cases


def _check(text: str, schema: dict | None) -> bool:
    import jsonschema

    try:
        value = json.loads(text)
    except ValueError:
        return False
    if schema is None:
        return isinstance(value, dict)
    try:
        jsonschema.validate(value, schema)
        return True
    except jsonschema.ValidationError:
        return False


def run_backend(model: Path, backend: str, env: dict[str, str] | None) -> dict[tuple[str, int], tuple[int, int, float]]:
    import httpx

    from tests.e2e.server import start_server

    log_dir = REPO / ".e2e-logs"
    log_dir.mkdir(exist_ok=True)
    server = start_server(model, log_dir, env=env, backend=backend)
    out = {}
    try:
        for name, so, schema in _cases():
            for max_tokens in MAX_TOKENS:
                r = httpx.post(server.base_url + "/completions", timeout=600, json={
                    "model": server.model, "prompt": "JSON:", "max_tokens": max_tokens, "n": N,
                    "temperature": 1.0, "seed": 1, "structured_outputs": so})
                r.raise_for_status()
                choices = r.json()["choices"]
                stop = sum(c["finish_reason"] == "stop" for c in choices)
                valid = sum(_check(c["text"], schema) for c in choices)
                tokens = r.json()["usage"]["completion_tokens"] / len(choices)
                out[(name, max_tokens)] = (stop, valid, tokens)
                print(f"{backend}{' ' + str(env) if env else ''} {name} max_tokens={max_tokens}: "
                      f"stop {stop}/{N}, valid {valid}/{N}, {tokens:.1f} tokens", flush=True)
    finally:
        server.stop()
    return out


def e2e(args) -> None:
    runs = [("poot", "poot", None)]
    if not args.no_poot_off:
        runs.append(("poot, POOT_BUDGET_MASKS=0", "poot", {"POOT_BUDGET_MASKS": "0"}))
    runs.append(("xgrammar", "xgrammar", None))
    results = {label: run_backend(Path(args.model), backend, env) for label, backend, env in runs}
    labels = [label for label, _, _ in runs]
    print(f"\nModel `{Path(args.model).name}` (random weights), completions, n={N}, temperature 1; "
          "each cell: finish_reason stop / parses and validates (of 8), mean completion tokens\n")
    print("| constraint | max_tokens | " + " | ".join(labels) + " |")
    print("|---|---:|" + "---|" * len(labels))
    for name, _, _ in _cases():
        for max_tokens in MAX_TOKENS:
            cells = []
            for label in labels:
                stop, valid, tokens = results[label][(name, max_tokens)]
                cells.append(f"{stop}/{valid} ({tokens:.0f})")
            print(f"| {name} | {max_tokens} | " + " | ".join(cells) + " |")
    totals = []
    for label in labels:
        stop = sum(v[0] for v in results[label].values())
        valid = sum(v[1] for v in results[label].values())
        total = N * len(results[label])
        totals.append(f"{label}: stop {stop}/{total}, valid {valid}/{total}")
    print("\n" + "; ".join(totals))


def _time(fn, reps: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps * 1e6


def micro(args) -> None:
    import numpy as np
    from transformers import AutoTokenizer

    from poot_vllm.core.json_schema import compile_json_schema
    from poot_vllm.core.matchers.compiled import CompiledDFA
    from poot_vllm.core.grammar import compile_pushdown, json_object_grammar
    from poot_vllm.core.vocabulary import TokenVocabulary

    path = Path(args.vocab)
    if not path.exists():
        path = REPO.parent / "shared" / "bench-data" / "vocab" / args.vocab
    tok = AutoTokenizer.from_pretrained(str(path))
    vocab = TokenVocabulary.from_tokenizer(tok)
    row = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b is not None}
    print(f"Vocabulary {path.name} ({vocab.size} tokens); fill_bitmask, microseconds per call (median of 5 x reps)\n")
    print("| constraint | state | no budget | budget far from the limit | budget near the limit |")
    print("|---|---|---:|---:|---:|")

    def report(name, state, make, prefix_ids, shortest_left):
        """``shortest_left(m)``: tokens the shortest completion needs from m's state;
        "near" is a budget with one spare token beyond that."""
        m = make()
        assert m.accept_tokens(prefix_ids)
        near_budget = len(prefix_ids) + shortest_left(m) + 1
        times = []
        for budget in (None, 10_000, near_budget):
            m = make()
            if budget is not None:
                m.set_token_budget(budget)
            assert m.accept_tokens(prefix_ids)
            reps = 200 if budget != near_budget else 20
            times.append(statistics.median(_time(lambda: m.fill_bitmask(row), reps) for _ in range(5)))
        print(f"| {name} | {state} | {times[0]:.0f} | {times[1]:.0f} | {times[2]:.0f} |", flush=True)

    schema = SCHEMAS["strings_and_arrays"]
    compiled = CompiledDFA.build(compile_json_schema(json.dumps(schema)), vocab)
    prefix = [ids[b'{"'], ids[b"name"], ids[b'":"'], ids[b"hello"]]
    report("JSON Schema (DFA)", 'inside a string: `{"name":"hello`', lambda: compiled.new_matcher(), prefix,
           lambda m: int(compiled.index.min_tokens_to_accept[m.state]))
    pushdown = compile_pushdown(json_object_grammar(), vocab)
    prefix = [ids[b'{"'], ids[b"a"], ids[b'":'], ids[b"[["], ids[b'"'], ids[b"hello"]]
    report("json_object (pushdown)", 'inside a string: `{"a":[["hello`', lambda: pushdown.new_matcher(), prefix,
           lambda m: m.closing_cost())
    prefix = [ids[b'{"'], ids[b"a"], ids[b'":'], ids[b"1"]]
    report("json_object (pushdown)", 'after a number: `{"a":1`', lambda: pushdown.new_matcher(), prefix,
           lambda m: m.closing_cost())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("e2e")
    p.add_argument("--model", default=str(REPO / ".models" / "tiny-llama-spm"))
    p.add_argument("--no-poot-off", action="store_true", help="skip the POOT_BUDGET_MASKS=0 server")
    p = sub.add_parser("micro")
    p.add_argument("--vocab", default="llama3-bpe-128k")
    args = parser.parse_args()
    e2e(args) if args.cmd == "e2e" else micro(args)


if __name__ == "__main__":
    main()
