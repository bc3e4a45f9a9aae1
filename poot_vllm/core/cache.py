"""A small thread-safe LRU cache bounded by bytes.

Compiled constraints are cached so that the n choices of a request, retries
and repeated schemas compile once; the bound keeps a stream of distinct
constraints from growing memory without limit.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")


class ByteLRU(Generic[V]):
    def __init__(self, max_bytes: int, sizeof: Callable[[V], int]) -> None:
        self.max_bytes = max_bytes
        self._sizeof = sizeof
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def put(self, key: Hashable, value: V) -> V:
        size = self._sizeof(value)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if size > self.max_bytes:
                return value  # too big to keep; the caller still uses it
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes and self._items:
                _, (_, evicted) = self._items.popitem(last=False)
                self._bytes -= evicted
        return value

    def get_or_build(self, key: Hashable, build: Callable[[], V]) -> V:
        """Concurrent misses may build twice; both results are equal, one is kept."""
        value = self.get(key)
        if value is None:
            value = self.put(key, build())
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
