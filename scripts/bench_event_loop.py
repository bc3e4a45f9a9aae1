#!/usr/bin/env python3
"""Does a flood of heavy constraints stall the API server?  /health and plain requests under load.

For each backend (poot and the peers named with --backends), start
`vllm serve` on the tiny SentencePiece model, then for --seconds let
--clients concurrent clients send the heaviest admissible constraints they
can (JSON schemas with free-text fields near poot's mask-work bound, each one
new so no cache helps), while one probe asks `/health` every 100 ms and
another sends a plain unconstrained completion every 500 ms.  Prints one
table: heavy requests answered (200 / 400 / 503 / other), and the probes'
latency p50 / p99 / max.  The aim for poot: probe p99 under 100 ms.

    .venv/bin/python scripts/bench_event_loop.py                 # poot and xgrammar, 32 clients, 40 s each
    .venv/bin/python scripts/bench_event_loop.py --backends poot --seconds 20

One server at a time (this machine has 2 cores); each start takes 30-60 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import string
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.server import start_server  # noqa: E402


def heavy_schema(rng: random.Random) -> dict:
    """Two free-text fields and a bounded integer: admissible but costly to compile, and new each time."""
    tag = "".join(rng.choice(string.ascii_lowercase) for _ in range(8))
    return {
        "type": "object",
        "description": tag,  # a new canonical text: no cache hit anywhere
        "properties": {f"note_{tag}": {"type": "string", "maxLength": 40},
                       f"title_{tag}": {"type": "string", "maxLength": 30},
                       "n": {"type": "integer", "minimum": 0, "maximum": 999}},
        "required": [f"note_{tag}", "n"],
        "additionalProperties": False,
    }


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


async def run_load(url: str, model: str, clients: int, seconds: float, seed: int) -> dict:
    deadline = time.monotonic() + seconds
    statuses: dict[str, int] = {}
    health: list[float] = []
    plain: list[float] = []
    rng = random.Random(seed)

    async def heavy(client: httpx.AsyncClient) -> None:
        while time.monotonic() < deadline:
            # max_tokens leaves room for the whole reply (poot refuses what cannot fit: a 400, no work)
            body = {"model": model, "prompt": "x", "max_tokens": 120, "guided_json": heavy_schema(rng)}
            try:
                r = await client.post(url + "/v1/completions", json=body)
                key = str(r.status_code)
            except httpx.HTTPError as exc:
                key = type(exc).__name__
            statuses[key] = statuses.get(key, 0) + 1

    async def probe(client: httpx.AsyncClient, every: float, out: list[float], send) -> None:
        while time.monotonic() < deadline:
            start = time.monotonic()
            try:
                await send(client)
                out.append((time.monotonic() - start) * 1000)
            except httpx.HTTPError:
                out.append(float("inf"))
            await asyncio.sleep(max(0.0, every - (time.monotonic() - start)))

    async def get_health(client):
        (await client.get(url + "/health")).raise_for_status()

    async def post_plain(client):
        r = await client.post(url + "/v1/completions", json={"model": model, "prompt": "hi", "max_tokens": 1})
        r.raise_for_status()

    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client, \
            httpx.AsyncClient(timeout=120) as probe_client:
        await asyncio.gather(*(heavy(client) for _ in range(clients)),
                             probe(probe_client, 0.1, health, get_health),
                             probe(probe_client, 0.5, plain, post_plain))
    return {"statuses": statuses, "health": health, "plain": plain}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="poot,xgrammar")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--model", default=str(Path(os.environ.get("POOT_MODELS_DIR", REPO / ".models")) / "tiny-llama-spm"))
    args = ap.parse_args()
    log_dir = REPO / ".e2e-logs"
    log_dir.mkdir(exist_ok=True)
    rows = []
    for backend in args.backends.split(","):
        server = start_server(Path(args.model), log_dir, backend=backend)
        try:
            result = asyncio.run(run_load(server.url, server.model, args.clients, args.seconds, seed=1))
        finally:
            server.stop()
        rows.append((backend, result))
    print(f"\n{args.clients} clients of heavy JSON-schema requests for {args.seconds:g} s each; probe latency in ms\n")
    print("| backend | heavy answered (status: count) | /health p50 | p99 | max | plain p50 | p99 | max |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for backend, r in rows:
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(r["statuses"].items()))
        h, p = r["health"], r["plain"]
        print(f"| {backend} | {statuses} | {statistics.median(h):.1f} | {pct(h, 0.99):.1f} | {max(h):.1f} "
              f"| {statistics.median(p):.1f} | {pct(p, 0.99):.1f} | {max(p):.1f} |")


if __name__ == "__main__":
    main()
