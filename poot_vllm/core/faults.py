"""Test-only fault injection for the engine core (off unless ``POOT_TEST_FAULTS=1``).

The reliability tests must prove that an exception inside the backend --
while compiling a constraint, filling a bitmask, accepting tokens -- ends only
the request it belongs to, never the engine.  Real constraints that pass the
API server's validation but then fail in the engine are (by design) hard to
find, so with ``POOT_TEST_FAULTS=1`` in the server's environment a constraint
whose text contains a marker fails on purpose:

* ``poot-test-fault:compile``  ``compile_grammar`` raises;
* ``poot-test-fault:fill``     the matcher's ``fill_bitmask`` raises;
* ``poot-test-fault:accept``   the matcher's ``accept_tokens`` raises.

E.g. ``guided_regex: "(poot-test-fault:fill)?[a-z]{1,8}"`` (a valid regex, so
the API server accepts it).  Never set ``POOT_TEST_FAULTS`` in production.
"""

from __future__ import annotations

from typing import Any

from poot_vllm.core.limits import env_switch

MARKER = "poot-test-fault:"
OPS = ("compile", "fill", "accept")


class InjectedFault(RuntimeError):
    """Raised on purpose by a fault-injection marker (tests only)."""


def enabled() -> bool:
    return env_switch("POOT_TEST_FAULTS", False)


def faults_in(spec: str) -> frozenset[str]:
    """The operations ``spec`` asks to fail (empty unless fault injection is on)."""
    if MARKER not in spec or not enabled():
        return frozenset()
    return frozenset(op for op in OPS if MARKER + op in spec)


def maybe_fail_compile(spec: str) -> None:
    if "compile" in faults_in(spec):
        raise InjectedFault("poot test fault: compile_grammar fails for this constraint")


class FaultyMatcher:
    """A matcher whose named operations raise :class:`InjectedFault`."""

    def __init__(self, matcher: Any, ops: frozenset[str]) -> None:
        self._matcher = matcher
        self._ops = ops

    def __getattr__(self, name: str) -> Any:
        return getattr(self._matcher, name)

    def fill_bitmask(self, row: Any) -> None:
        if "fill" in self._ops:
            raise InjectedFault("poot test fault: fill_bitmask fails")
        self._matcher.fill_bitmask(row)

    def accept_tokens(self, ids: Any) -> bool:
        if "accept" in self._ops:
            raise InjectedFault("poot test fault: accept_tokens fails")
        return self._matcher.accept_tokens(ids)
