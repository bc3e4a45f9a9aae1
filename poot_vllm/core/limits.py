"""The bounds every poot compiler enforces, in one object.

A request that passes a bound is refused with a 400 naming the input and the
limit, *before* any expensive work: sizes are checked on the raw text, and the
automaton builders count their working memory as they go and stop at the
budget (they never build first and measure after).

How automaton working memory is counted (``max_automaton_bytes``):

* every NFA position (a character-class leaf after counted repetitions are
  expanded, counted before anything is expanded) costs 16 bytes; a large
  repetition built as a counted region (``automata/counters.py``: ``hi >= 16``,
  ``lo <= 32``) counts its item once, and tagging the item's first positions
  for the counter costs 4 bytes per position (twice: the way in, the loop);
* every distinct character class costs 16 bytes per state plus 8 per edge of
  its UTF-8 byte automaton;
* every entry of the NFA's materialized first/follow sets costs 4 bytes;
* every DFA state costs 16 bytes, plus 4 bytes per NFA item in its subset,
  plus 8 bytes per distinct transition range of its row (a ``guided_choice``
  trie node costs 16 bytes plus 8 per edge).
* zero-width assertions: one on a single class (``\\b``, ``^``/``$`` next to
  a character) splits the classes (charged as positions and classes) and
  closes follow sets through it (4 bytes per entry); any other lookaround
  builds its own automaton on the same budget, and each state then costs 16
  bytes + 4 per item, per pending lookahead and per lookbehind tracker, + 8
  per transition range.

(Details and rationale: ``docs/regex.md``.)

These are the sizes of the builder's own tables, so the budget is an honest
proxy for RAM and for build time (both grow with the same counts).

Defaults can be changed on the server with environment variables
``POOT_MAX_REGEX_BYTES`` etc. (the upper-cased field name, prefixed ``POOT_``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass

KiB = 1024


@dataclass(frozen=True)
class Limits:
    #: ``guided_regex`` text, UTF-8 bytes.
    max_regex_bytes: int = 4096
    #: ``guided_grammar`` text, UTF-8 bytes.
    max_grammar_bytes: int = 16 * KiB
    #: ``guided_grammar``: compile work units after expanding counted
    #: repetitions (see ``poot_vllm.core.grammar.gbnf.grammar_cost``; wide classes
    #: cost more; xgrammar's worst case at this limit is a few seconds at a
    #: 128k vocab, docs/safeguards.md).
    max_grammar_cost: int = 1024
    #: ``guided_grammar``: depth of nested parentheses / stacked repetitions.
    max_grammar_nesting: int = 64
    #: ``guided_json`` / ``response_format`` schema, as JSON text, UTF-8 bytes.
    max_schema_bytes: int = 16 * KiB
    #: The regex a JSON Schema compiles to, characters; checked while compiling.
    max_schema_regex_bytes: int = 256 * KiB
    #: Working memory of one NFA+DFA build (see module docstring).
    max_automaton_bytes: int = 256 * KiB
    #: ``guided_choice``: number of options and total UTF-8 bytes.
    max_choices: int = 4096
    max_choice_bytes: int = 64 * KiB
    #: Token-mask computation of one DFA constraint, in trie-node visits
    #: (~25-50 ns each on one core; a state inside a JSON string visits about
    #: one node per vocabulary token, one in free text about two).  The API server refuses a constraint
    #: whose estimate (``masks.estimate_mask_work``) passes it; the engine
    #: counts the real visits and stops at it.  On JSONSchemaBench (172
    #: schemas, 128k vocabulary) the real work is at most 30M, the estimate at
    #: most 58M; the default (134M, ~4 s on one core) leaves 2x over that.
    max_mask_work: int = 128 * 1024 * 1024
    #: Bytes of cached token masks kept across compiled constraints (LRU).
    mask_cache_bytes: int = 512 * 1024 * KiB
    #: API server: constraint checks run off the event loop on this many
    #: threads (``adapter/offload.py``; their pure-Python parts share the GIL
    #: with the event loop, so one keeps /health fastest: measured p99 60 ms
    #: with 1, 135 ms with 2 under 32 heavy clients on 2 cores) ...
    validation_workers: int = 1
    #: ... with at most this many more requests waiting for a thread (past it:
    #: a 503 at once, so a flood of heavy constraints cannot starve the server) ...
    validation_queue: int = 64
    #: ... and a client waits at most this long for the check (past it: a 503).
    validation_timeout_ms: int = 20_000

    @property
    def nbytes(self) -> int:
        """What a cache key holding these limits costs (``cache.approx_nbytes`` reads
        this instead of walking the fields on every compile)."""
        return 56 + 36 * len(dataclasses.fields(self))

    @functools.cached_property
    def text(self) -> str:
        """``repr`` once per object: part of every hand-off file name (``handoff.key_of``)."""
        return repr(self)

    @classmethod
    def from_env(cls, environ: "os._Environ[str] | dict[str, str] | None" = None) -> "Limits":
        """Defaults, overridden by ``POOT_<FIELD>`` environment variables."""
        env = os.environ if environ is None else environ
        kwargs = {}
        for f in dataclasses.fields(cls):
            raw = env.get("POOT_" + f.name.upper())
            if raw is not None:
                try:
                    value = int(raw)
                except ValueError as exc:  # a bad deployment setting, not a request error
                    raise ValueError(f"POOT_{f.name.upper()} must be an integer, got {raw!r}") from exc
                if value <= 0:
                    raise ValueError(f"POOT_{f.name.upper()} must be a positive integer, got {raw!r}")
                kwargs[f.name] = value
        return cls(**kwargs)


DEFAULT_LIMITS = Limits()


# -- this process's settings (read once from the environment) ----------------------------------
@functools.lru_cache(maxsize=1)
def server_limits() -> Limits:
    """``Limits`` with ``POOT_*`` environment overrides (see docs/safeguards.md)."""
    return Limits.from_env()


#: What turns an on/off ``POOT_*`` switch off (anything else set turns it on).
OFF_VALUES = ("0", "false", "False", "off")


def env_switch(name: str, default: bool) -> bool:
    """The on/off switch ``name`` from the environment: unset or empty gives ``default``, one of
    :data:`OFF_VALUES` off, any other value on (one spelling for every switch)."""
    raw = os.environ.get(name, "")
    return default if raw == "" else raw not in OFF_VALUES


def budget_masks_enabled() -> bool:
    """Budget-aware masks (replies finish inside max_tokens); on unless POOT_BUDGET_MASKS=0."""
    return env_switch("POOT_BUDGET_MASKS", True)


_ON_OFF = ("1", "0", "true", "false", "True", "False", "on", "off")
_SWITCHES = {"POOT_BUDGET_MASKS": _ON_OFF, "POOT_HANDOFF": _ON_OFF}


def check_settings() -> None:
    """Read every ``POOT_*`` setting now; raise ``ValueError`` naming a bad one.

    Called when vLLM loads the plugin, so a mistyped deployment setting stops
    the server at start instead of failing its first constrained request.
    """
    server_limits.cache_clear()
    server_limits()
    for name, allowed in _SWITCHES.items():
        value = os.environ.get(name)
        if value is not None and value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    raw = os.environ.get("POOT_HANDOFF_BYTES")  # core/handoff.py: the hand-off directory's bound
    if raw is not None and (not raw.isdigit() or int(raw) <= 0):
        raise ValueError(f"POOT_HANDOFF_BYTES must be a positive integer, got {raw!r}")
