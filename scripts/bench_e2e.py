#!/usr/bin/env python
"""End-to-end decode throughput of ``vllm serve`` (tiny model, CPU), with and
without a constraint, for poot and xgrammar: one request at a time (n=1) and
a batch of 16 concurrent requests.

Every request decodes exactly ``--tokens`` tokens (``min_tokens = max_tokens``,
so the stop token is masked until then and a reply never ends early); the
constraint is a free-text regex that admits any length, so constrained and
unconstrained requests do the same model work and the difference is the
structured-output overhead (compile, ``fill_bitmask``, ``accept_tokens``,
applying the mask).  On CPU the tiny model's step is short, so that overhead
shows clearly.

    scripts/bench_e2e.py                 # both backends, tiny-qwen2-bpe
    scripts/bench_e2e.py --backends poot --tokens 64
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.server import Server, start_server  # noqa: E402

#: Any length of plain text: constrained replies are as long as unconstrained ones.
FREE_TEXT_REGEX = r"[a-zA-Z0-9 ,.]+"


def complete(server: Server, tokens: int, regex: str | None, seed: int) -> int:
    body = {"model": server.model, "prompt": "The", "max_tokens": tokens, "min_tokens": tokens,
            "temperature": 1.0, "seed": seed}
    if regex is not None:
        body["structured_outputs"] = {"regex": regex}
    req = urllib.request.Request(server.base_url + "/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    return int(out["usage"]["completion_tokens"])


def throughput(server: Server, tokens: int, regex: str | None, concurrency: int, requests: int) -> float:
    """Completion tokens per second over ``requests`` requests, ``concurrency`` at a time."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        produced = sum(pool.map(lambda i: complete(server, tokens, regex, i), range(requests)))
    return produced / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(REPO / ".models" / "tiny-qwen2-bpe"))
    ap.add_argument("--backends", nargs="*", default=["poot", "xgrammar"])
    ap.add_argument("--tokens", type=int, default=128, help="tokens decoded per request")
    ap.add_argument("--sequential", type=int, default=6, help="requests in the n=1 runs")
    ap.add_argument("--batch", type=int, default=16, help="concurrent requests in the batch runs")
    ap.add_argument("--rounds", type=int, default=3, help="repeat each measurement, report the best")
    ap.add_argument("--settle", type=float, default=15.0, help="seconds to wait after the warm-up requests")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    results = {}
    log_dir = Path(tempfile.mkdtemp(prefix="poot-bench-e2e-"))
    for backend in args.backends:
        server = start_server(Path(args.model), log_dir, backend=backend, timeout=900.0,
                              extra_args=["--max-num-seqs", str(max(16, args.batch))])
        try:
            for regex in (None, FREE_TEXT_REGEX):  # warm up both paths (compile cache, kernels)
                complete(server, 8, regex, 0)
            # vLLM builds the structured-output backend at the first constrained
            # request; let its background warm-up (poot: kernels, tables) finish.
            time.sleep(args.settle)
            row = {}
            for label, conc, n in (("n=1", 1, args.sequential), (f"batch {args.batch}", args.batch, args.batch)):
                # Interleave the modes round by round so load changes hit both alike.
                best = {"unconstrained": 0.0, "constrained": 0.0}
                for _ in range(args.rounds):
                    for mode, regex in (("unconstrained", None), ("constrained", FREE_TEXT_REGEX)):
                        best[mode] = max(best[mode], throughput(server, args.tokens, regex, conc, n))
                row[label] = {**best, "ratio": best["constrained"] / best["unconstrained"]}
                print(f"{backend:9s} {label:9s} unconstrained {best['unconstrained']:7.1f} tok/s  "
                      f"constrained {best['constrained']:7.1f} tok/s  ratio {row[label]['ratio']:.3f}", flush=True)
            results[backend] = row
        finally:
            server.stop()

    print("\n| backend | run | unconstrained tok/s | constrained tok/s | constrained / unconstrained |")
    print("|---|---|---:|---:|---:|")
    for backend, row in results.items():
        for label, r in row.items():
            print(f"| {backend} | {label} | {r['unconstrained']:.1f} | {r['constrained']:.1f} | {r['ratio']:.3f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
