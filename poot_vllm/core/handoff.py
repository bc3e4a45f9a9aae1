"""Automata handed from the API server to the engine: one build per constraint.

A constrained request is checked in the API server (the bounded automaton
build is what makes a too-large constraint a 400) and compiled in the engine
core, another process.  Without a hand-off the engine builds the same DFA a
second time, on the request's path to its first token.  The API server
therefore *publishes* each DFA it built into a private directory, and the
engine *takes* it from there before building its own.

The store is a directory of ``.dfa`` files (raw little-endian arrays behind a
fixed header, :func:`encode`; never pickles), one per (constraint, limits),
written atomically (temporary file, then
``os.replace``), so a reader sees a whole file or none.  It is bounded in
bytes (oldest files go first) and is only a cache: a missing, evicted or
unreadable file means the engine builds the DFA itself, as before.  What the
engine loads is checked before use (array shapes, dtypes, every transition
inside the table), because the mask kernels index with those numbers.

The directory is the one named by ``POOT_HANDOFF_DIR``; the vLLM adapter
creates a private one (mode 0700) when the server starts and passes it to
the processes it spawns (``adapter/handoff_dir.py``).  Without the variable,
or with ``POOT_HANDOFF=0``, nothing is published or taken.  Processes on
other machines (multi-node) do not share it and simply build.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from poot_vllm.core.jit import jit_kernel as _jit
from poot_vllm.core.limits import env_switch
from poot_vllm.core.table_graph import read_only

logger = logging.getLogger("vllm.poot")

#: Bumped when the file layout changes, so an old file is never misread.
FORMAT = "v2"
#: File name suffix, and the first bytes of every file.
SUFFIX = ".dfa"
MAGIC = b"POOTDFA2"
#: After the magic: states, start state, counted (0/1), all little-endian int64.
_HEADER = struct.Struct("<qqq")
#: Default bound of the directory's size (``POOT_HANDOFF_BYTES``).
DEFAULT_MAX_BYTES = 256 * 1024 * 1024

_lock = threading.Lock()
_written_since_scan = 0
_hits = 0


def enabled() -> bool:
    return bool(os.environ.get("POOT_HANDOFF_DIR")) and env_switch("POOT_HANDOFF", True)


def _directory() -> Path:
    return Path(os.environ["POOT_HANDOFF_DIR"])


def _max_bytes() -> int:
    raw = os.environ.get("POOT_HANDOFF_BYTES")
    return int(raw) if raw else DEFAULT_MAX_BYTES


def key_of(constraint: Any, limits: Any) -> str:
    """The file name of a (constraint, limits) pair: a digest of everything the build depends on."""
    digest = hashlib.sha256()
    for part in (FORMAT, constraint.kind.value, constraint.spec, getattr(limits, "text", None) or repr(limits)):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return f"{FORMAT}-{digest.hexdigest()}{SUFFIX}"


def encode(arrays: dict[str, np.ndarray]) -> bytes:
    """One file's bytes: the magic, the header, then the arrays' raw bytes in a
    fixed order (transitions int32, accepting uint8; a counted DFA's actions
    int8 and counter limits int32).  Why not ``.npz``: loading one took ~0.5
    ms (a zip directory, a header parsed per array), a fifth of the engine's
    median time to a first mask; this reads in ~0.03 ms."""
    transitions = np.ascontiguousarray(arrays["transitions"], dtype="<i4")
    counted = "actions" in arrays
    parts = [MAGIC, _HEADER.pack(transitions.shape[0], int(arrays["start"][0]), int(counted)),
             transitions.tobytes(), np.ascontiguousarray(arrays["accepting"], dtype=np.uint8).tobytes()]
    if counted:
        parts += [np.ascontiguousarray(arrays["actions"], dtype=np.int8).tobytes(),
                  np.ascontiguousarray(arrays["counter_limit"], dtype="<i4").tobytes()]
    return b"".join(parts)


_I4 = np.dtype("<i4")


def decode(data: bytes) -> dict[str, np.ndarray]:
    """The arrays of :func:`encode`'s bytes (read-only views of ``data``); ValueError
    on a foreign or damaged file (wrong magic, length or flag)."""
    head = len(MAGIC) + _HEADER.size
    if len(data) < head or data[:len(MAGIC)] != MAGIC:
        raise ValueError("not a poot automaton file")
    n, start, counted = _HEADER.unpack_from(data, len(MAGIC))
    if n <= 0 or counted not in (0, 1) or not 0 <= start < n:
        raise ValueError("bad header")
    # (name, dtype, item size, items, shape): plain ints, no numpy calls per field (~0.1 ms a file)
    sizes = [("transitions", _I4, 4, n * 256, (n, 256)), ("accepting", np.uint8, 1, n, (n,))]
    if counted:
        sizes += [("actions", np.int8, 1, n * 256, (n, 256)), ("counter_limit", _I4, 4, n, (n,))]
    if len(data) != head + sum(size * count for _, _, size, count, _ in sizes):
        raise ValueError("truncated or padded file")
    arrays: dict[str, np.ndarray] = {"start": np.array([start], dtype=np.int64)}
    offset = head
    for name, dt, size, count, shape in sizes:
        arrays[name] = np.frombuffer(data, dtype=dt, count=count, offset=offset).reshape(shape)
        offset += count * size
    accepting = arrays["accepting"]
    if accepting.size and accepting.max() > 1:
        raise ValueError("accepting flags other than 0/1")
    arrays["accepting"] = accepting.view(np.bool_)
    arrays["transitions"] = arrays["transitions"].astype(np.int32, copy=False)
    arrays["counter_limit"] = arrays["counter_limit"].astype(np.int32, copy=False) if counted else None
    return arrays


def publish(constraint: Any, limits: Any, dfa: Any) -> None:
    """Write ``dfa`` for the engine (API server).  Never raises: a failed write only costs a rebuild."""
    if not enabled():
        return
    from poot_vllm.core.automata.dfa import DFA

    if not isinstance(dfa, DFA):
        return  # grammars are parsed again in the engine: milliseconds, and not plain arrays
    try:
        path = _directory() / key_of(constraint, limits)
        if path.exists():
            os.utime(path)  # recently used: kept longest by the eviction
            return
        arrays = {"transitions": dfa.transitions, "accepting": dfa.accepting,
                  "start": np.array([dfa.start], dtype=np.int64)}
        if dfa.actions is not None:
            arrays["actions"] = dfa.actions
            arrays["counter_limit"] = dfa.counter_limit
        data = encode(arrays)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=SUFFIX)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        _note_written(len(data))
    except Exception:  # noqa: BLE001 - a full disk or a removed directory must not fail the request
        logger.debug("poot: could not hand the automaton to the engine", exc_info=True)


def take(constraint: Any, limits: Any) -> Any | None:
    """The DFA the API server published for this constraint, checked, or None (engine)."""
    global _hits
    if not enabled():
        return None
    path = os.path.join(os.environ["POOT_HANDOFF_DIR"], key_of(constraint, limits))
    try:
        with open(path, "rb", buffering=0) as f:  # (no pathlib: ~0.05 ms of a first mask)
            data = f.read()
        dfa = _checked_dfa(decode(data))
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - a damaged file: build instead, and say so
        logger.warning("poot: ignoring an unreadable automaton in %s; building it instead", path, exc_info=True)
        return None
    with _lock:
        _hits += 1
        first = _hits == 1
    if first:
        logger.info("poot: the engine takes its automata from the API server's checks (%s)", os.path.dirname(path))
    return dfa


def hits() -> int:
    """How many automata this process took instead of building them."""
    return _hits


def _checked_dfa(arrays: dict[str, np.ndarray]) -> Any:
    """A :class:`DFA` from loaded arrays, refusing anything the kernels could misread."""
    from poot_vllm.core.automata.counters import ACT_INC, ACT_NONE, ACT_SET1
    from poot_vllm.core.automata.dfa import DFA

    transitions, accepting, start = arrays["transitions"], arrays["accepting"], arrays["start"]
    if transitions.dtype != np.int32 or accepting.dtype != np.bool_ or start.shape != (1,):
        raise ValueError("unexpected array types")
    n = transitions.shape[0] if transitions.ndim == 2 else 0
    if n == 0 or transitions.shape[1] != 256 or not _in_table(_flat(transitions, np.int32), n):
        raise ValueError("transitions outside the table")
    actions = arrays.get("actions")
    limit = arrays.get("counter_limit")
    if (actions is None) != (limit is None):
        raise ValueError("a counted DFA needs both actions and counter limits")
    if actions is not None:
        if actions.dtype != np.int8 or limit.dtype != np.int32:
            raise ValueError("unexpected counter array types")
        if not _known_actions(_flat(actions, np.int8), ACT_NONE, ACT_INC, ACT_SET1) or limit.min(initial=0) < 0:
            raise ValueError("counter actions or limits out of range")
    # DFA's own constructor checks the shapes and makes the arrays read-only.
    return DFA(transitions=transitions, accepting=accepting, start=int(start[0]), actions=actions,
               counter_limit=limit)


def _flat(a: np.ndarray, dtype: Any) -> np.ndarray:
    """``a`` as a read-only 1-D view (one kernel specialisation for every file)."""
    return read_only(a, dtype).reshape(-1)


@_jit
def _in_table(trans, n):
    """Every transition is -1 or a state of the table (one pass, stops at the first
    that is not: the numpy min and max were two passes, ~0.1 ms a compile)."""
    for i in range(trans.shape[0]):
        t = trans[i]
        if t < -1 or t >= n:
            return False
    return True


@_jit
def _known_actions(actions, a, b, c):
    for i in range(actions.shape[0]):
        x = actions[i]
        if x != a and x != b and x != c:
            return False
    return True


def warm_up() -> None:
    """The file checks' kernels, on a one-state table (called with the mask kernels' warm-up)."""
    _in_table(_flat(np.full(256, -1, dtype=np.int32), np.int32), 1)
    _known_actions(_flat(np.zeros(256, dtype=np.int8), np.int8), 0, 1, 2)


def _note_written(size: int) -> None:
    """Evict the oldest files once the directory may have passed its bound.

    The directory is scanned only after an eighth of the bound was written by
    this process, so a publish costs one write, not a listing."""
    global _written_since_scan
    bound = _max_bytes()
    with _lock:
        _written_since_scan += size
        if _written_since_scan < bound // 8:
            return
        _written_since_scan = 0
    files = []
    for entry in os.scandir(_directory()):
        if entry.name.endswith(SUFFIX) and not entry.name.startswith(".tmp-"):
            try:
                stat = entry.stat()
            except FileNotFoundError:
                continue
            files.append((stat.st_mtime, stat.st_size, entry.path))
    total = sum(size for _, size, _ in files)
    for _, size, file in sorted(files):
        if total <= bound:
            break
        try:
            os.unlink(file)
        except FileNotFoundError:
            pass
        total -= size
