"""The one cache mechanism: byte-bounded, thread-safe, single-flight.

Every compiled artefact poot keeps goes through :class:`ByteCache`:
vocabulary-independent automata (``constraints._automata``) and, in the
process-wide :func:`compiled_cache`, everything compiled against a vocabulary
(token tries, xgrammar compilers and compiled grammars, DFA token masks,
json_object closing tables, shortest-reply counts).  Why one mechanism:

* **Bounded by bytes**, so a stream of distinct constraints cannot grow memory
  without limit, and the documented bound (docs/safeguards.md, "Memory
  bounds") is the real one: nothing is cached twice in two places.
* **Single-flight**: vLLM compiles the n choices of one request (and retries,
  and identical concurrent requests) on its compile thread pool at the same
  time; concurrent misses of one key wait for one build instead of each
  paying seconds of CPU for the same masks.
* **Failures are not cached**: a build that raises propagates its exception to
  the caller and to every thread waiting on that build, and the next request
  for the key builds again (a refusal may depend on limits, a crash may be
  transient).

An entry bigger than the whole budget is returned to its caller (and to the
threads waiting on it) but not kept: serving it is fine, keeping it would
evict everything else.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import Any, Callable, Generic, Hashable, TypeVar

V = TypeVar("V")

#: Bytes charged per entry on top of its key and value (dict slot, tuple,
#: bookkeeping), so that many tiny entries still count.
ENTRY_OVERHEAD = 256

_MISSING = object()


def approx_nbytes(obj: Any, _depth: int = 0) -> int:
    """A cheap estimate of the memory ``obj`` holds, for cache accounting.

    Artefacts report their own size through ``nbytes`` (numpy arrays, poot's
    compiled objects); strings and bytes count their length; containers and
    dataclasses (e.g. a ``Constraint`` in a key) sum their parts.  Anything
    else counts as a small object.  Exactness is not the point: what matters
    is that large things (masks, grammars, long constraint texts in keys) are
    counted, so the byte bound tracks real memory.
    """
    nbytes = getattr(obj, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(obj, (str, bytes, bytearray)):
        return len(obj) + 49
    if obj is None or isinstance(obj, (bool, int, float)):
        return 28
    if _depth > 4:
        return 64
    if isinstance(obj, (tuple, list, frozenset, set)):
        return 56 + 8 * len(obj) + sum(approx_nbytes(x, _depth + 1) for x in obj)
    if isinstance(obj, dict):
        return 64 + sum(approx_nbytes(k, _depth + 1) + approx_nbytes(v, _depth + 1) for k, v in obj.items())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return 56 + sum(approx_nbytes(getattr(obj, f.name), _depth + 1) for f in dataclasses.fields(obj))
    return 64


class _Flight:
    """One build in progress: the threads that miss the same key wait on it."""

    __slots__ = ("done", "value", "error", "owner")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = _MISSING
        self.error: BaseException | None = None
        self.owner = threading.get_ident()


class ByteCache(Generic[V]):
    """LRU cache bounded by the bytes of its entries, with single-flight builds.

    ``get_or_build(key, build)`` returns the cached value or builds it; while
    one thread builds a key, other threads asking for that key wait for the
    result (or the exception) instead of building it again.  Builds run
    outside the lock, so distinct keys build in parallel and a build may use
    the cache itself (for other keys).  Values may be ``None``.
    """

    def __init__(self, name: str, max_bytes: int, sizeof: Callable[[Any], int] = approx_nbytes) -> None:
        if max_bytes <= 0:
            raise ValueError(f"cache {name!r}: max_bytes must be positive, got {max_bytes}")
        self.name = name
        self._max_bytes = int(max_bytes)
        self._sizeof = sizeof
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._pending: dict[Hashable, _Flight] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        #: Counters (read without the lock: for tests, logs and benchmarks).
        self.hits = 0
        self.misses = 0
        self.builds = 0
        self.evictions = 0

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @max_bytes.setter
    def max_bytes(self, value: int) -> None:
        """Change the budget (evicting at once if it shrank)."""
        if value <= 0:
            raise ValueError(f"cache {self.name!r}: max_bytes must be positive, got {value}")
        with self._lock:
            self._max_bytes = int(value)
            self._evict_locked()

    @property
    def nbytes(self) -> int:
        """Bytes currently charged to the kept entries (never above ``max_bytes``)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The cached value (refreshing its recency), or ``default``; never builds or waits."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return default
            self._items.move_to_end(key)
            return item[0]

    def get_or_build(self, key: Hashable, build: Callable[[], V],
                     sizeof: Callable[[V], int] | None = None) -> V:
        """The value for ``key``, building it with ``build()`` on a miss.

        Concurrent misses of one key run ``build`` once; the others wait and
        get the same value, or the same exception.  A failed build is not
        cached.  ``sizeof`` overrides the cache's size function for this
        value; the key's own size is always charged too.
        """
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return item[0]
            flight = self._pending.get(key)
            if flight is None:
                flight = _Flight()
                self._pending[key] = flight
                self.misses += 1
                owner = True
            else:
                if flight.owner == threading.get_ident():
                    raise RuntimeError(f"cache {self.name!r}: building {key!r} asked for itself (a build cycle)")
                self.hits += 1
                owner = False
        if not owner:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return flight.value
        try:
            value = build()
        except BaseException as exc:
            with self._lock:
                self._pending.pop(key, None)
            flight.error = exc
            flight.done.set()
            raise
        try:
            size = int((sizeof or self._sizeof)(value)) + approx_nbytes(key) + ENTRY_OVERHEAD
        except Exception:  # a broken size function must not lose a good build
            size = self._max_bytes + 1
        with self._lock:
            self.builds += 1
            self._pending.pop(key, None)
            if size <= self._max_bytes:
                self._items[key] = (value, size)
                self._bytes += size
                self._evict_locked()
        flight.value = value
        flight.done.set()
        return value

    def _evict_locked(self) -> None:
        while self._bytes > self._max_bytes and self._items:
            _, (_, size) = self._items.popitem(last=False)
            self._bytes -= size
            self.evictions += 1

    def recharge(self, key: Hashable, value: Any) -> None:
        """Charge ``key`` anew at ``value``'s current size, if ``value`` is still what
        it holds (an artefact that grew or shrank after it was cached: a lazily
        built DFA index, charged an upper bound until it is built)."""
        try:
            size = int(self._sizeof(value)) + approx_nbytes(key) + ENTRY_OVERHEAD
        except Exception:  # noqa: BLE001 - keep the old charge
            return
        with self._lock:
            item = self._items.get(key)
            if item is None or item[0] is not value:
                return
            self._items[key] = (value, size)
            self._bytes += size - item[1]
            self._evict_locked()

    def discard(self, key: Hashable) -> None:
        """Forget ``key`` (a build in flight still finishes and is kept)."""
        with self._lock:
            item = self._items.pop(key, None)
            if item is not None:
                self._bytes -= item[1]

    def clear(self, keep: Callable[[Hashable], bool] | None = None) -> None:
        """Drop every kept entry, or those whose key ``keep`` rejects (builds
        in flight still finish).  Benchmarks keep per-vocabulary tables this way."""
        with self._lock:
            if keep is None:
                self._items.clear()
                self._bytes = 0
                return
            for key in [k for k in self._items if not keep(k)]:
                self._bytes -= self._items.pop(key)[1]


_compiled: ByteCache[Any] | None = None
_compiled_lock = threading.Lock()


def compiled_cache() -> ByteCache[Any]:
    """This process's cache of everything compiled against a vocabulary.

    Bounded by ``Limits.mask_cache_bytes`` (``POOT_MASK_CACHE_BYTES``, read on
    first use): token tries, xgrammar compilers and compiled grammars, DFA
    token masks, json_object closing tables and shortest-reply counts share
    that one budget, least recently used first out.
    """
    global _compiled
    cache = _compiled
    if cache is None:
        from poot_vllm.core.limits import server_limits

        with _compiled_lock:
            if _compiled is None:
                _compiled = ByteCache("compiled", server_limits().mask_cache_bytes)
            cache = _compiled
    return cache
