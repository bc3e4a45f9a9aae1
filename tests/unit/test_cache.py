"""``ByteCache``: the one cache every compiled artefact goes through.

Eviction by bytes, oversize entries, single-flight builds (the n choices of a
request compile once), failures propagated to every waiter and not cached,
and consistency under concurrent distinct keys.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from poot_vllm.core.cache import ENTRY_OVERHEAD, ByteCache, approx_nbytes, compiled_cache


class Blob:
    """A value that reports its size, like poot's compiled artefacts."""

    def __init__(self, nbytes: int, tag: object = None) -> None:
        self.nbytes = nbytes
        self.tag = tag


def cost(key, value_bytes: int) -> int:
    return value_bytes + approx_nbytes(key) + ENTRY_OVERHEAD


def wait_until(condition, what: str) -> None:
    """Poll (a thread-coordination helper, not a timing assertion)."""
    pause = threading.Event()
    for _ in range(30_000):
        if condition():
            return
        pause.wait(0.001)
    pytest.fail(f"gave up waiting for {what}")


def test_hit_returns_the_kept_value_without_building_again():
    cache = ByteCache("t", 1 << 20)
    first = cache.get_or_build("k", lambda: Blob(100))
    again = cache.get_or_build("k", lambda: pytest.fail("built twice"))
    assert again is first and cache.builds == 1 and cache.hits == 1


def test_evicts_least_recently_used_by_bytes():
    per = cost("a", 1000)
    cache = ByteCache("t", 3 * per)
    for key in "abc":
        cache.get_or_build(key, lambda: Blob(1000))
    assert cache.nbytes == 3 * per
    cache.get_or_build("a", lambda: pytest.fail("a is cached"))   # a is now the most recent
    cache.get_or_build("d", lambda: Blob(1000))                    # evicts b, the least recent
    assert "b" not in cache and all(k in cache for k in "acd")
    assert cache.nbytes <= cache.max_bytes and cache.evictions == 1


def test_one_big_entry_evicts_as_many_small_ones_as_its_bytes_need():
    small = cost("s0", 100)
    cache = ByteCache("t", 10 * small)
    for i in range(10):
        cache.get_or_build(f"s{i}", lambda: Blob(100))
    cache.get_or_build("big", lambda: Blob(5 * small))
    assert "big" in cache and cache.nbytes <= cache.max_bytes
    assert sum(f"s{i}" in cache for i in range(10)) < 10
    assert "s0" not in cache and "s9" in cache                     # oldest out first


def test_the_key_counts_towards_the_bound():
    """A long constraint text in the key is memory too."""
    cache = ByteCache("t", 1 << 20)
    cache.get_or_build("x" * 10_000, lambda: Blob(0))
    assert cache.nbytes >= 10_000


def test_an_entry_bigger_than_the_budget_is_returned_but_not_kept():
    cache = ByteCache("t", 10_000)
    cache.get_or_build("small", lambda: Blob(100))
    big = cache.get_or_build("big", lambda: Blob(50_000))
    assert big.nbytes == 50_000
    assert "big" not in cache and "small" in cache                 # nothing else was evicted for it
    rebuilt = cache.get_or_build("big", lambda: Blob(50_000, tag="again"))
    assert rebuilt.tag == "again"


def test_none_is_a_value_that_is_cached():
    cache = ByteCache("t", 1 << 20)
    assert cache.get_or_build("k", lambda: None) is None
    assert cache.get_or_build("k", lambda: pytest.fail("None was not cached")) is None


def test_shrinking_the_budget_evicts_at_once():
    cache = ByteCache("t", 1 << 20)
    for i in range(10):
        cache.get_or_build(i, lambda: Blob(10_000))
    cache.max_bytes = 30_000
    assert cache.nbytes <= 30_000 and len(cache) < 10


def test_a_non_positive_budget_is_refused_naming_the_cache():
    with pytest.raises(ValueError, match="'masks'.*positive"):
        ByteCache("masks", 0)


def test_clear_can_keep_some_keys():
    cache = ByteCache("t", 1 << 20)
    for key in (("trie", 1), ("dfa", 1), ("dfa", 2)):
        cache.get_or_build(key, lambda: Blob(10))
    cache.clear(keep=lambda key: key[0] == "trie")
    assert len(cache) == 1 and ("trie", 1) in cache
    assert cache.nbytes == cost(("trie", 1), 10)


def test_concurrent_misses_of_one_key_build_once():
    """n threads (the n choices of one request) asking together: one build, one value."""
    cache = ByteCache("t", 1 << 20)
    n = 8
    calls = []
    release = threading.Event()
    start = threading.Barrier(n)

    def build():
        calls.append(threading.get_ident())
        release.wait(timeout=30)       # hold the build until every thread is asking
        return Blob(100)

    def ask(_):
        start.wait(timeout=30)
        return cache.get_or_build("same", build)

    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(ask, i) for i in range(n)]
        # Hold the build until the other n-1 threads have joined it.
        wait_until(lambda: calls and cache.hits == n - 1, "every thread to ask")
        release.set()
        values = [f.result(timeout=30) for f in futures]
    assert len(calls) == 1
    assert all(v is values[0] for v in values)
    assert cache.builds == 1 and len(cache) == 1


def test_a_failing_build_raises_in_every_waiter_and_is_retried_next_time():
    cache = ByteCache("t", 1 << 20)
    n = 6
    calls = []
    release = threading.Event()
    start = threading.Barrier(n)

    class Refused(ValueError):
        pass

    def failing():
        calls.append(1)
        release.wait(timeout=30)
        raise Refused("the constraint is too big; raise POOT_MAX_REGEX_BYTES")

    def ask(_):
        start.wait(timeout=30)
        try:
            cache.get_or_build("bad", failing)
        except Refused as exc:
            return str(exc)
        return "no error"

    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(ask, i) for i in range(n)]
        # Hold the build until the other n-1 threads have joined it.
        wait_until(lambda: calls and cache.hits == n - 1, "every thread to ask")
        release.set()
        outcomes = [f.result(timeout=30) for f in futures]
    assert outcomes == ["the constraint is too big; raise POOT_MAX_REGEX_BYTES"] * n
    assert len(calls) == 1 and "bad" not in cache
    assert cache.get_or_build("bad", lambda: Blob(1, tag="retried")).tag == "retried"


def test_a_build_asking_for_its_own_key_is_an_error_not_a_deadlock():
    cache = ByteCache("t", 1 << 20)
    with pytest.raises(RuntimeError, match="build cycle"):
        cache.get_or_build("loop", lambda: cache.get_or_build("loop", lambda: Blob(1)))
    assert cache.get_or_build("loop", lambda: Blob(1, tag="ok")).tag == "ok"


def test_a_build_may_use_the_cache_for_other_keys():
    cache = ByteCache("t", 1 << 20)
    outer = cache.get_or_build("outer", lambda: Blob(1, tag=cache.get_or_build("inner", lambda: Blob(1, tag=7)).tag))
    assert outer.tag == 7 and "inner" in cache


def test_concurrent_distinct_keys_keep_the_accounting_exact():
    """Many threads, many keys, a budget that forces evictions: every caller gets
    the value of its own key, and the byte count equals the kept entries."""
    cache = ByteCache("t", 40 * cost(("k", 0), 1000))

    def work(i):
        key = ("k", i % 97)
        value = cache.get_or_build(key, lambda: Blob(1000, tag=key))
        return value.tag == key

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(work, range(4000)))
    kept = [k for k in (("k", i) for i in range(97)) if k in cache]
    assert cache.nbytes == sum(cost(k, 1000) for k in kept)
    assert cache.nbytes <= cache.max_bytes and 0 < len(kept) <= 40


def test_numpy_values_are_charged_their_array_bytes():
    cache = ByteCache("t", 1 << 20)
    cache.get_or_build("a", lambda: np.zeros(1000, dtype=np.int32))
    assert cache.nbytes == cost("a", 4000)


def test_the_process_cache_is_bounded_by_the_mask_cache_setting():
    from poot_vllm.core.limits import server_limits

    assert compiled_cache() is compiled_cache()
    assert compiled_cache().max_bytes == server_limits().mask_cache_bytes
