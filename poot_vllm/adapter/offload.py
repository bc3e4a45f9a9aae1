"""poot's request checks off the API server's event loop, bounded in threads, queue and time.

vLLM runs a request's structured-output checks synchronously in the request
handler (``to_sampling_params`` -> ``extract_structured_outputs``, then
``SamplingParams`` validation): on the event loop that also answers
``/health`` and every other client.  poot's checks are bounded (sizes,
``max_automaton_bytes``, ``max_mask_work``), but a bounded check can still
take a few seconds of CPU, and 32 of them in a row would stall the server.

So the serving patch (``patches/serving_offload.py``) first runs the same
checks here, on a small thread pool: the compile, the mask-work estimate and
the shortest-reply search land in poot's caches, and the synchronous checks
vLLM then runs on the loop are cache hits.  Kernels release the GIL (numba
``nogil``), pure-Python parts yield it every few milliseconds, so the loop
keeps answering.  Bounds (``Limits``, ``POOT_*``): ``validation_workers``
threads, ``validation_queue`` requests waiting (past it: a 503 at once) and
``validation_timeout_ms`` for a client's wait (past it: a 503; the thread
finishes its bounded work and the result stays cached).  A refusal found
here is the same 400 the synchronous path would give.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from poot_vllm.core.limits import Limits

T = TypeVar("T")


class ServerBusy(Exception):
    """More heavy constraint checks are waiting than ``validation_queue`` allows."""


class CheckTimedOut(Exception):
    """A constraint check did not finish within ``validation_timeout_ms``."""


class Offloader:
    """A bounded executor for blocking checks called from an event loop."""

    def __init__(self, workers: int, queue: int, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.capacity = workers + queue
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="poot-check")
        self._in_flight = 0
        self._lock = threading.Lock()

    async def run(self, fn: Callable[[], T]) -> T:
        with self._lock:
            if self._in_flight >= self.capacity:
                raise ServerBusy(f"{self._in_flight} constraint checks are already running or waiting")
            self._in_flight += 1
        future = asyncio.get_running_loop().run_in_executor(self._executor, self._count_done(fn))
        try:
            # shield: a timed-out check keeps running to its (bounded) end and fills the caches.
            return await asyncio.wait_for(asyncio.shield(future), self.timeout_s)
        except asyncio.TimeoutError:
            raise CheckTimedOut(f"checking the constraint took longer than {self.timeout_s:g} s") from None

    def _count_done(self, fn: Callable[[], T]) -> Callable[[], T]:
        def run() -> T:
            try:
                return fn()
            finally:
                with self._lock:
                    self._in_flight -= 1

        return run


_offloader: Offloader | None = None
_offloader_lock = threading.Lock()


def offloader(limits: Limits) -> Offloader:
    """This process's offloader (one per API-server process)."""
    global _offloader
    with _offloader_lock:
        if _offloader is None:
            _offloader = Offloader(limits.validation_workers, limits.validation_queue,
                                   limits.validation_timeout_ms / 1000)
        return _offloader


def precheck(request: Any, original_extract: Callable[[Any], Any], model_config: Any) -> None:
    """Run poot's checks of a request, warming the caches the synchronous path reads.

    Raises ``VLLMValidationError`` (a 400 naming the field) exactly where the
    synchronous path would.
    """
    from poot_vllm.adapter.params import constraint_from_params
    from poot_vllm.adapter.requests import structured_outputs_for
    from poot_vllm.adapter.validation import validate_for_poot, vocab_size
    from poot_vllm.core.budget import SERVER_VOCABULARY, shortest_reply
    from poot_vllm.core.errors import PootError
    from poot_vllm.core.limits import budget_masks_enabled, server_limits

    params = structured_outputs_for(request, original_extract)
    if params is None:
        return
    validate_for_poot(params, vocab_size(model_config))
    vocab = SERVER_VOCABULARY.get()
    if vocab is not None and budget_masks_enabled():
        limits = server_limits()
        try:
            shortest_reply(constraint_from_params(params, limits), vocab, limits)
        except PootError:
            pass  # admission reports it, with its own message


def carries_constraint(request: Any) -> bool:
    """Whether a request asks for anything poot checks (cheap; no parsing)."""
    from poot_vllm.adapter.requests import GUIDED_FIELDS

    extra = getattr(request, "model_extra", None) or {}
    if any(extra.get(f) is not None for f in GUIDED_FIELDS):
        return True
    if getattr(request, "structured_outputs", None) is not None:
        return True
    response_format = getattr(request, "response_format", None)
    if response_format is not None and getattr(response_format, "type", None) != "text":
        return True
    choice = getattr(request, "tool_choice", None)
    return bool(getattr(request, "tools", None)) and choice not in (None, "auto", "none")
