#!/usr/bin/env python
"""Replies that complete: poot (budget-aware masks) vs xgrammar in a real vllm serve,
plus the per-step cost of the budget check.

    python scripts/bench_budget.py e2e   [--model .models/tiny-llama-spm] [--no-poot-off]
    python scripts/bench_budget.py micro [--vocab llama3-bpe-128k]
    python scripts/bench_budget.py batch [--vocab llama3-bpe-128k] [--requests 64] [--workers 2]
    python scripts/bench_budget.py grammar [--vocab llama3-bpe-128k] [--replies 16]

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

``grammar`` runs random replies (a uniformly random allowed token each step,
what a random-weight model does) of the recursive grammars of
``bench-data/grammar.jsonl`` at ``max_tokens`` 32/64/128 on a real vocabulary,
four ways: xgrammar's matcher alone, xgrammar's mask with poot's budget,
poot's own masks (``core/grammar/rule_masks.py``) alone and with the budget:
replies that end with the stop token inside ``max_tokens``, replies the Lark
twin parses, and ``fill_bitmask`` microseconds per step.

``batch`` fills the bitmask of a batch of requests (``--requests``, each at
its own state of a JSON Schema reply, near its budget limit or without a
budget) the way vLLM's scheduler does: serially, and in its parallel path
(``StructuredOutputManager.grammar_bitmask`` above
``fill_bitmask_parallel_threshold``: chunks of 16 requests on a thread pool),
through ``PootGrammar.fill_bitmask`` into one torch bitmask.  Only the mask
kernel runs without the GIL (numba ``nogil``); the Python around it (vLLM's
wrapper, the matcher, the dispatch) holds it, which is what the pool's
scaling shows.

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
    from poot_vllm.core.grammar import json_object_grammar
    from poot_vllm.core.matchers.pushdown import compile_pushdown
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
    # Every restricted mask the DFA can need: each state, each budget below its plain-row budget.
    index = compiled.index
    wall, cpu = [], []
    for state in range(index.n_states):
        for budget in range(int(index.min_tokens_to_accept[state]), int(index.plain_row_budget[state])):
            index.restricted_mask(state, budget, row)
            for _ in range(3):
                a, ca = time.perf_counter_ns(), time.thread_time_ns()
                index.restricted_mask(state, budget, row)
                cpu.append((time.thread_time_ns() - ca) / 1e3)
                wall.append((time.perf_counter_ns() - a) / 1e3)
    sweep = (f"every restricted mask of the JSON Schema DFA ({len(wall) // 3} (state, budget) pairs, 3 times "
             f"each): wall p50 / p99 / max {np.percentile(wall, 50):.1f} / {np.percentile(wall, 99):.1f} / "
             f"{max(wall):.1f} us; thread CPU time p99 / max {np.percentile(cpu, 99):.1f} / {max(cpu):.1f} us")
    pushdown = compile_pushdown(json_object_grammar(), vocab)
    prefix = [ids[b'{"'], ids[b"a"], ids[b'":'], ids[b"[["], ids[b'"'], ids[b"hello"]]
    report("json_object (pushdown)", 'inside a string: `{"a":[["hello`', lambda: pushdown.new_matcher(), prefix,
           lambda m: m.closing_cost())
    prefix = [ids[b'{"'], ids[b"a"], ids[b'":'], ids[b"1"]]
    report("json_object (pushdown)", 'after a number: `{"a":1`', lambda: pushdown.new_matcher(), prefix,
           lambda m: m.closing_cost())
    print("\n" + sweep)


def _near_limit_matchers(compiled, vocab, n: int, budgeted: bool, seed: int = 0) -> list:
    """``n`` matchers, each walked at random to its own state: with a budget
    (shortest reply + a little slack) until the budget bites (the next mask is
    a restricted one), or without a budget for a few random steps."""
    import random

    import numpy as np

    rng = random.Random(seed)
    index = compiled.index
    row = np.zeros(index.words, dtype=np.int32)
    out = []
    while len(out) < n:
        m = compiled.new_matcher()
        budget = int(index.min_tokens_to_accept[index.dfa.start]) + rng.randint(1, 6) if budgeted else None
        m.set_token_budget(budget)
        steps = rng.randint(1, 8)
        while not m.is_terminated():
            if budgeted and budget - m.num_accepted < index.plain_row_budget[m.state]:
                break  # the next fill_bitmask is a restricted mask
            if not budgeted and m.num_accepted >= steps:
                break
            m.fill_bitmask(row)
            allowed = np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[:vocab.size])
            text = [int(t) for t in allowed if int(t) not in vocab.stop_ids]
            m.accept_tokens([rng.choice(text) if text else int(allowed[0])])
        if not m.is_terminated():
            out.append(m)
    return out


def batch(args) -> None:
    import os
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import torch
    from transformers import AutoTokenizer

    from poot_vllm.adapter.backend import PootGrammar
    from poot_vllm.core.json_schema import compile_json_schema
    from poot_vllm.core.masks import warm_up
    from poot_vllm.core.matchers.compiled import CompiledDFA
    from poot_vllm.core.vocabulary import TokenVocabulary

    warm_up()
    path = Path(args.vocab)
    if not path.exists():
        path = REPO.parent / "shared" / "bench-data" / "vocab" / args.vocab
    tok = AutoTokenizer.from_pretrained(str(path))
    vocab = TokenVocabulary.from_tokenizer(tok, stop_ids=[tok.eos_token_id])
    compiled = CompiledDFA.build(compile_json_schema(json.dumps(SCHEMAS["strings_and_arrays"])), vocab)
    n = args.requests
    bitmask = torch.zeros((n, compiled.index.words), dtype=torch.int32)
    chunk = 16  # vLLM's fill_bitmask_parallel_batch_size
    vllm_workers = max(1, min(os.cpu_count() // 2, 8))
    print(f"Vocabulary {path.name} ({vocab.size} tokens), {n} requests, JSON Schema strings_and_arrays; "
          f"wall time to fill the batch's bitmask, microseconds (median / p99 of {args.reps}); "
          f"vLLM would use {vllm_workers} worker(s) on this {os.cpu_count()}-core machine\n")
    print("| requests' masks | serial | " + " | ".join(f"pool, {w} workers" for w in args.workers) + " |")
    print("|---|---:|" + "---:|" * len(args.workers))
    for label, budgeted in (("plain rows (no budget)", False), ("restricted (budget near the limit)", True)):
        grammars = [PootGrammar(matcher=m) for m in _near_limit_matchers(compiled, vocab, n, budgeted)]
        jobs = [(g, i) for i, g in enumerate(grammars)]

        def fill(part):
            for g, i in part:
                g.fill_bitmask(bitmask, i)

        def serial():
            fill(jobs)
        cells = []
        runs = [serial]
        pools = [ThreadPoolExecutor(max_workers=w) for w in args.workers]
        for pool in pools:
            def parallel(pool=pool):
                for f in [pool.submit(fill, jobs[k:k + chunk]) for k in range(0, n, chunk)]:
                    f.result()
            runs.append(parallel)
        for run in runs:
            run()
            times = []
            for _ in range(args.reps):
                t = time.perf_counter_ns()
                run()
                times.append((time.perf_counter_ns() - t) / 1e3)
            cells.append(f"{np.percentile(times, 50):.0f} / {np.percentile(times, 99):.0f}")
        for pool in pools:
            pool.shutdown()
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)


def _real_vocab(name: str):
    from transformers import AutoTokenizer

    from poot_vllm.core.vocabulary import TokenVocabulary

    path = Path(name)
    if not path.exists():
        path = REPO.parent / "shared" / "bench-data" / "vocab" / name
    tok = AutoTokenizer.from_pretrained(str(path))
    return path.name, TokenVocabulary.from_tokenizer(tok, stop_ids=[tok.eos_token_id])


def grammar(args) -> None:
    import gc
    import random

    import lark
    import numpy as np

    from poot_vllm.core.grammar import parse_gbnf
    from poot_vllm.core.matchers.pushdown import compile_pushdown

    import os

    from poot_vllm.core.grammar.rule_masks import warm_up as warm_up_grammar_masks
    from poot_vllm.core.lazy_masks import warm_up

    # What vLLM's backend does at start-up (adapter.backend._warm_up): kernels
    # loaded before traffic, so no step below pays a first call's load.
    warm_up()
    warm_up_grammar_masks()
    name, vocab = _real_vocab(args.vocab)
    data = REPO.parent / "shared" / "bench-data" / "grammar.jsonl"
    items = [json.loads(line) for line in data.read_text().splitlines()]
    words = (vocab.size + 31) // 32
    stop = min(vocab.stop_ids)
    print(f"Vocabulary {name} ({vocab.size} tokens); {args.replies} random replies per cell\n")
    print("| grammar | max_tokens | engine | stop inside max_tokens | parsed | step us med / p99 / max |")
    print("|---|---:|---|---:|---:|---|")
    for item in items:
        parser = lark.Lark(item["lark"], start="start", parser="earley", lexer="dynamic_complete")
        engines = {}
        for own in ("off", "on"):
            os.environ["POOT_GRAMMAR_MASKS"] = own
            t0 = time.perf_counter()
            engines[own] = compile_pushdown(parse_gbnf(item["gbnf"]), vocab)
            print(f"<!-- {item['id']}: compile with POOT_GRAMMAR_MASKS={own}: "
                  f"{(time.perf_counter() - t0) * 1e3:.0f} ms -->", flush=True)
        os.environ.pop("POOT_GRAMMAR_MASKS")
        # vLLM's engine freezes the heap it built at start-up (EngineCore: freeze_gc_heap),
        # so the collector's passes during decoding do not walk it: so here, for every engine.
        gc.collect()
        gc.freeze()
        for max_tokens in MAX_TOKENS:
            for engine, compiled, budget in (("xgrammar (no budget)", engines["off"], None),
                                             ("xgrammar + poot budget", engines["off"], max_tokens),
                                             ("poot (no budget)", engines["on"], None),
                                             ("poot + budget", engines["on"], max_tokens)):
                stops = parsed = 0
                steps: list[float] = []
                for seed in range(args.replies):
                    rng = random.Random(seed)
                    m = compiled.new_matcher()
                    if budget is not None:
                        m.set_token_budget(budget)
                    row = np.zeros(words, dtype=np.int32)
                    out = b""
                    while not m.is_terminated() and m.num_accepted < max_tokens:
                        t0 = time.perf_counter()
                        m.fill_bitmask(row)
                        steps.append(time.perf_counter() - t0)
                        allowed = np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[:vocab.size])
                        token = int(rng.choice(allowed.tolist()))
                        m.accept_tokens([token])
                        if token != stop:
                            out += vocab.token_bytes[token] or b""
                    if m.is_terminated():
                        stops += 1
                        try:
                            parser.parse(out.decode())
                            parsed += 1
                        except (lark.exceptions.LarkError, UnicodeDecodeError):
                            pass
                us = np.array(steps) * 1e6
                print(f"| {item['id']} | {max_tokens} | {engine} | {stops}/{args.replies} | {parsed}/{args.replies} "
                      f"| {np.median(us):.0f} / {np.percentile(us, 99):.0f} / {us.max():.0f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("e2e")
    p.add_argument("--model", default=str(REPO / ".models" / "tiny-llama-spm"))
    p.add_argument("--no-poot-off", action="store_true", help="skip the POOT_BUDGET_MASKS=0 server")
    p = sub.add_parser("micro")
    p.add_argument("--vocab", default="llama3-bpe-128k")
    p = sub.add_parser("batch")
    p.add_argument("--vocab", default="llama3-bpe-128k")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    p.add_argument("--reps", type=int, default=200)
    p = sub.add_parser("grammar")
    p.add_argument("--vocab", default="llama3-bpe-128k")
    p.add_argument("--replies", type=int, default=16)
    args = parser.parse_args()
    {"e2e": e2e, "micro": micro, "batch": batch, "grammar": grammar}[args.cmd](args)


if __name__ == "__main__":
    main()
