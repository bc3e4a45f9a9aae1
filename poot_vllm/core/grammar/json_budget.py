"""How few bytes close a ``json_object`` reply, per state, and per token.

Budget-aware masks for ``response_format: {"type": "json_object"}`` need, for
the reply so far, the fewest bytes that complete it into one JSON object
(:mod:`.json_object`'s grammar).  That is a function of a small lexical state:

* ``mode``: where the scanner is (start, inside a key or value string, after a
  key, after ``:``, inside a number or ``true``/``false``/``null`` ...);
* ``level``: how many ``{``/``[`` are open -- each costs exactly one closing byte;
* ``top``: the innermost container's type (after ``,`` an object needs a key,
  ``"":0``, an array only a value, ``0``), and the types below it, which are
  needed again when the innermost closes;
* ``utf``: UTF-8 continuation bytes still owed inside a string.

``closing_bytes = local_cost(mode) + utf + level``.  The canonical completion
(finish the current scalar or key with the shortest bytes -- ``"``, ``:0``,
``0``, the rest of a literal ... -- then one ``}``/``]`` per open container)
lowers that count by exactly one per byte, so with a vocabulary that has a
single-byte token for each of those bytes (:func:`closing_bytes_spellable`),
a reply can always close within ``closing_bytes`` tokens.  Spaces never
shorten a completion, so the scanner passes over them (xgrammar decides
whether a space is allowed; this module only measures).

The scanner is permissive: it trusts xgrammar for validity and only measures.
Its result is used for tokens xgrammar allows, where it is exact.

:func:`closing_mask` walks the token trie from a state, setting the tokens
after which ``closing_bytes <= limit``: the scanner is tabulated once as a
byte machine with a container stack (``_scanner_machine``) and walked by the
one trie-walk kernel, ``poot_vllm.core.masks._walk_trie``.  Types of containers
closed and reopened inside one token are read from the walk's per-depth states.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poot_vllm.core.jit import jit_kernel as _jit
from poot_vllm.core.masks import ACTION_SHIFT, _walk_trie

OBJ, ARR, NONE = 0, 1, 2

# Modes.  LOCAL[mode] is the fewest bytes that finish the current item
# (string/key/number/literal/member) before the closing brackets.
START, DONE, OBJ_OPEN, OBJ_KEY, IN_KEY, KEY_ESC = 0, 1, 2, 3, 4, 5
KEY_U0 = 6            # KEY_U0..KEY_U3: after "\u" and 0..3 hex digits in a key
AFTER_KEY, AFTER_COLON, ARR_OPEN, ARR_VALUE, IN_STR, STR_ESC = 10, 11, 12, 13, 14, 15
STR_U0 = 16           # STR_U0..STR_U3
NUM_SIGN, NUM_ZERO, NUM_INT, NUM_DOT, NUM_FRAC, NUM_E, NUM_ESIGN, NUM_EXP = 20, 21, 22, 23, 24, 25, 26, 27
AFTER_VALUE = 28
LIT0 = 29             # LIT0 + i: i-th byte of LITERALS consumed (see _LIT_*)
INVALID = 45
N_MODES = 46

#: "true", "false", "null" laid end to end; a literal mode is LIT0 + index of
#: the next expected byte; _LIT_LEFT is how many bytes are left from there.
_LITERALS = b"truefalsenull"
_LIT_START = {ord("t"): 1, ord("f"): 5, ord("n"): 10}   # mode offset after the first byte
_LIT_END = (4, 9, 13)

LOCAL = np.zeros(N_MODES, dtype=np.int32)
LOCAL[START] = 2                       # "{}"
LOCAL[OBJ_KEY] = 4                     # "":0
LOCAL[IN_KEY] = 3                      # ":0
LOCAL[KEY_ESC] = 4                     # n":0
for _k in range(4):
    LOCAL[KEY_U0 + _k] = 4 - _k + 3    # hex digits, then ":0
    LOCAL[STR_U0 + _k] = 4 - _k + 1    # hex digits, then "
LOCAL[AFTER_KEY] = 2                   # :0
LOCAL[AFTER_COLON] = 1                 # 0
LOCAL[ARR_VALUE] = 1                   # 0
LOCAL[IN_STR] = 1                      # "
LOCAL[STR_ESC] = 2                     # n"
LOCAL[[NUM_SIGN, NUM_DOT, NUM_E, NUM_ESIGN]] = 1
_LIT_LEFT = np.zeros(len(_LITERALS) + 1, dtype=np.int32)
for _start, _end in ((0, 4), (4, 9), (9, 13)):
    for _i in range(_start + 1, _end):
        _LIT_LEFT[_i] = _end - _i
for _i in range(len(_LITERALS) + 1):
    if LIT0 + _i < INVALID:
        LOCAL[LIT0 + _i] = _LIT_LEFT[_i]
LOCAL[INVALID] = 1 << 28
STRING_MODES = np.zeros(N_MODES, dtype=np.bool_)
STRING_MODES[[IN_KEY, IN_STR]] = True
LOCAL.flags.writeable = False
STRING_MODES.flags.writeable = False
_LITS = np.frombuffer(_LITERALS, dtype=np.uint8).copy()
_LITS.flags.writeable = False
_LIT_ENDS = np.array(_LIT_END, dtype=np.int32)
_LIT_ENDS.flags.writeable = False

# Actions of one byte on the container stack.
A_NONE, A_PUSH_OBJ, A_PUSH_ARR, A_POP = 0, 1, 2, 3


@_jit
def _is_digit(b):
    return 48 <= b <= 57


@_jit
def _is_hex(b):
    return 48 <= b <= 57 or 97 <= b <= 102 or 65 <= b <= 70


@_jit
def _value_start(b, lits):
    """Mode after the first byte of a value (and its stack action)."""
    if b == 123:   # {
        return OBJ_OPEN, A_PUSH_OBJ
    if b == 91:    # [
        return ARR_OPEN, A_PUSH_ARR
    if b == 34:    # "
        return IN_STR, A_NONE
    if b == 45:    # -
        return NUM_SIGN, A_NONE
    if b == 48:
        return NUM_ZERO, A_NONE
    if 49 <= b <= 57:
        return NUM_INT, A_NONE
    if b == 116:   # t
        return LIT0 + 1, A_NONE
    if b == 102:   # f
        return LIT0 + 5, A_NONE
    if b == 110:   # n
        return LIT0 + 10, A_NONE
    return INVALID, A_NONE


@_jit
def _after_value(b, top):
    if b == 32:
        return AFTER_VALUE, A_NONE
    if b == 44:    # ,
        return (OBJ_KEY if top == OBJ else ARR_VALUE), A_NONE
    if (b == 125 and top == OBJ) or (b == 93 and top == ARR):
        return AFTER_VALUE, A_POP   # the caller turns this into DONE at level 0
    return INVALID, A_NONE


@_jit
def step(mode, utf, top, b, lits, lit_ends):
    """One byte: ``(mode, utf, action)``.  ``top`` is the innermost container."""
    if mode == INVALID or mode == DONE:
        return INVALID, 0, A_NONE
    if mode == IN_KEY or mode == IN_STR:
        if utf > 0:
            if 0x80 <= b <= 0xBF:
                return mode, utf - 1, A_NONE
            return INVALID, 0, A_NONE
        if b == 34:
            return (AFTER_KEY if mode == IN_KEY else AFTER_VALUE), 0, A_NONE
        if b == 92:
            return (KEY_ESC if mode == IN_KEY else STR_ESC), 0, A_NONE
        if b < 0x20 or 0x80 <= b <= 0xC1 or b >= 0xF5:
            return INVALID, 0, A_NONE
        if b >= 0xF0:
            return mode, 3, A_NONE
        if b >= 0xE0:
            return mode, 2, A_NONE
        if b >= 0xC2:
            return mode, 1, A_NONE
        return mode, 0, A_NONE
    if mode == KEY_ESC or mode == STR_ESC:
        back = IN_KEY if mode == KEY_ESC else IN_STR
        if b == 117:
            return (KEY_U0 if mode == KEY_ESC else STR_U0), 0, A_NONE
        if b in (34, 92, 47, 98, 102, 110, 114, 116):
            return back, 0, A_NONE
        return INVALID, 0, A_NONE
    if KEY_U0 <= mode <= KEY_U0 + 3 or STR_U0 <= mode <= STR_U0 + 3:
        if not _is_hex(b):
            return INVALID, 0, A_NONE
        base = KEY_U0 if mode < STR_U0 else STR_U0
        if mode - base == 3:
            return (IN_KEY if base == KEY_U0 else IN_STR), 0, A_NONE
        return mode + 1, 0, A_NONE
    if mode == START:
        if b == 123:
            return OBJ_OPEN, 0, A_PUSH_OBJ
        return INVALID, 0, A_NONE
    if mode == OBJ_OPEN or mode == OBJ_KEY:
        if b == 32:
            return mode, 0, A_NONE
        if b == 34:
            return IN_KEY, 0, A_NONE
        if b == 125 and mode == OBJ_OPEN:
            return AFTER_VALUE, 0, A_POP
        return INVALID, 0, A_NONE
    if mode == AFTER_KEY:
        if b == 32:
            return mode, 0, A_NONE
        if b == 58:
            return AFTER_COLON, 0, A_NONE
        return INVALID, 0, A_NONE
    if mode == AFTER_COLON or mode == ARR_OPEN or mode == ARR_VALUE:
        if b == 32:
            return mode, 0, A_NONE
        if b == 93 and mode == ARR_OPEN:
            return AFTER_VALUE, 0, A_POP
        m, a = _value_start(b, lits)
        return m, 0, a
    if mode == AFTER_VALUE:
        m, a = _after_value(b, top)
        return m, 0, a
    if NUM_SIGN <= mode <= NUM_EXP:
        if mode == NUM_SIGN:
            if b == 48:
                return NUM_ZERO, 0, A_NONE
            if 49 <= b <= 57:
                return NUM_INT, 0, A_NONE
            return INVALID, 0, A_NONE
        if mode == NUM_DOT:
            return (NUM_FRAC if _is_digit(b) else INVALID), 0, A_NONE
        if mode == NUM_E:
            if b == 43 or b == 45:
                return NUM_ESIGN, 0, A_NONE
            return (NUM_EXP if _is_digit(b) else INVALID), 0, A_NONE
        if mode == NUM_ESIGN:
            return (NUM_EXP if _is_digit(b) else INVALID), 0, A_NONE
        if _is_digit(b) and mode != NUM_ZERO:
            return mode, 0, A_NONE
        if b == 46 and (mode == NUM_ZERO or mode == NUM_INT):
            return NUM_DOT, 0, A_NONE
        if (b == 101 or b == 69) and mode != NUM_EXP:
            return NUM_E, 0, A_NONE
        m, a = _after_value(b, top)   # the number ended before this byte
        return m, 0, a
    if LIT0 <= mode < INVALID:
        i = mode - LIT0
        if lits[i] != b:
            return INVALID, 0, A_NONE
        for e in lit_ends:
            if i + 1 == e:
                return AFTER_VALUE, 0, A_NONE
        return mode + 1, 0, A_NONE
    return INVALID, 0, A_NONE


#: The scanner as a byte machine for the one trie walk (``masks._walk_trie``):
#: a state is ``(mode * 4 + utf) * 3 + top``, where ``top`` is the innermost
#: container's type; the level is the walk's container stack.
N_STATES = N_MODES * 4 * 3


def _encode(mode: int, utf: int, top: int) -> int:
    return (mode * 4 + utf) * 3 + top


@_jit
def _scanner_tables(lits, lit_ends, local, string_modes, nxt, act, retop, top_of, score):
    """Tabulate :func:`step` over every (mode, utf, top) and byte: ``nxt``
    (-1: invalid) and ``act`` (0 none, 1 push, 2 pop); ``retop[c, k]`` is ``c``
    with ``k`` as the innermost container (after a pop), DONE once no
    container is left; ``top_of`` and ``score`` (closing bytes, level excluded)."""
    for mode in range(N_MODES):
        for utf in range(4):
            for top in range(3):
                c = (mode * 4 + utf) * 3 + top
                top_of[c] = top
                score[c] = local[mode] + (utf if string_modes[mode] else 0)
                for k in range(3):
                    retop[c, k] = (mode * 4 + utf) * 3 + k
                if mode == AFTER_VALUE:   # a pop that leaves no container: the reply is done
                    retop[c, NONE] = (DONE * 4) * 3 + NONE
                for b in range(256):
                    m, u, a = step(mode, utf, top, b, lits, lit_ends)
                    if m == INVALID:
                        nxt[c, b] = -1
                        act[c, b] = 0
                        continue
                    new_top = top
                    code = 0
                    if a == A_PUSH_OBJ or a == A_PUSH_ARR:
                        new_top = OBJ if a == A_PUSH_OBJ else ARR
                        code = 1
                    elif a == A_POP:
                        new_top = NONE    # the walk reads the container below (retop)
                        code = 2
                    nxt[c, b] = (m * 4 + u) * 3 + new_top
                    act[c, b] = code


@dataclass(frozen=True, eq=False)
class _ScannerMachine:
    trans: np.ndarray   # int32 (N_STATES, 256), packed for masks._walk_trie
    retop: np.ndarray   # int32 (N_STATES, 3)
    top_of: np.ndarray  # int32 (N_STATES,)
    score: np.ndarray   # int32 (N_STATES,)


@functools.lru_cache(maxsize=1)
def _scanner_machine() -> _ScannerMachine:
    nxt = np.empty((N_STATES, 256), dtype=np.int32)
    act = np.empty((N_STATES, 256), dtype=np.int32)
    retop = np.empty((N_STATES, 3), dtype=np.int32)
    top_of = np.empty(N_STATES, dtype=np.int32)
    score = np.empty(N_STATES, dtype=np.int32)
    _scanner_tables(_LITS, _LIT_ENDS, LOCAL, STRING_MODES, nxt, act, retop, top_of, score)
    trans = np.where(nxt < 0, -1, nxt | (act << ACTION_SHIFT)).astype(np.int32)
    tables = _ScannerMachine(trans, retop, top_of, score)
    for a in (trans, retop, top_of, score):
        a.flags.writeable = False   # one kernel specialisation, shared with the DFA masks
    return tables


@dataclass
class JsonCloser:
    """The closing state of one reply, advanced byte by byte, with undo for rollback."""

    mode: int = START
    utf: int = 0
    types: list = field(default_factory=lambda: [NONE])   # types[level]; types[0] unused
    level: int = 0
    _undo: list = field(default_factory=list)             # per token: (mode, utf, level, writes)

    def cost(self) -> int:
        """Fewest bytes that complete the reply into one JSON object."""
        extra = self.utf if self.mode in (IN_KEY, IN_STR) else 0
        return int(LOCAL[self.mode]) + extra + self.level

    def advance(self, data: bytes) -> None:
        writes: list[tuple[int, int | None]] = []
        saved = (self.mode, self.utf, self.level, writes)
        mode, utf, level, types = self.mode, self.utf, self.level, self.types
        for b in data:
            top = types[level] if level > 0 else NONE
            mode, utf, a = step(mode, utf, top, b, _LITS, _LIT_ENDS)
            if a == A_PUSH_OBJ or a == A_PUSH_ARR:
                level += 1
                kind = OBJ if a == A_PUSH_OBJ else ARR
                if level < len(types):
                    writes.append((level, types[level]))
                    types[level] = kind
                else:
                    writes.append((level, None))
                    types.append(kind)
            elif a == A_POP:
                level -= 1
                if level == 0:
                    mode = DONE
        self.mode, self.utf, self.level = mode, utf, level
        self._undo.append(saved)

    def undo(self, n: int) -> None:
        for _ in range(n):
            mode, utf, level, writes = self._undo.pop()
            for lvl, old in reversed(writes):
                if old is None:
                    del self.types[lvl:]
                else:
                    self.types[lvl] = old
            self.mode, self.utf, self.level = mode, utf, level

    def reset(self) -> None:
        self.mode, self.utf, self.level = START, 0, 0
        self.types = [NONE]
        self._undo.clear()


#: Bytes the canonical completion may need as single tokens: closers, quote,
#: colon, the digit 0, an escape letter, literal tails, and "{" to start.
_CLOSING_ASCII = b'{}[]":0n' + b"rueals"


@dataclass(frozen=True, eq=False)
class ClosingTables:
    """What a json_object matcher needs for budgets over one vocabulary."""

    trie: Any            # poot_vllm.core.token_trie.TokenTrie
    token_bytes: tuple   # the vocabulary's token_bytes (to advance a JsonCloser)
    is_stop: np.ndarray  # bool (size,)
    max_increase: int    # most closing_bytes any one token can add (fast-path bound)


def closing_bytes_spellable(vocab: Any) -> bool:
    """Whether every byte of a canonical completion is a single token: then a
    reply closes within ``closing_bytes`` tokens.  (Continuation bytes are
    needed only when some token ends inside a UTF-8 character.)"""
    singles = {b for b in vocab.token_bytes if b is not None and len(b) == 1}
    if not all(bytes([c]) in singles for c in _CLOSING_ASCII):
        return False
    splits_chars = any(b is not None and _ends_mid_char(b) for b in vocab.token_bytes)
    return not splits_chars or all(bytes([c]) in singles for c in range(0x80, 0xC0))


def _ends_mid_char(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError as exc:
        return exc.reason == "unexpected end of data"


def closing_tables(vocab: Any) -> ClosingTables | None:
    """Tables for budget-aware json_object masks, or None if the vocabulary
    cannot spell the canonical completions (budget masks then stay off)."""
    if not closing_bytes_spellable(vocab):
        return None
    from poot_vllm.core.token_trie import TokenTrie

    trie = TokenTrie.build(vocab)
    is_stop = np.zeros(trie.size, dtype=np.bool_)
    for t in vocab.stop_ids:
        if 0 <= t < trie.size:
            is_stop[t] = True
    is_stop.flags.writeable = False
    longest = max((len(b) for b in vocab.token_bytes if b), default=1)
    # One byte raises closing_bytes by at most 4 (after "," in an object a
    # key is owed: "":0), so a token by at most 4 per byte.
    return ClosingTables(trie, vocab.token_bytes, is_stop, 4 * longest)


def closing_mask(tables: ClosingTables, closer: JsonCloser, limit: int, out_row: np.ndarray) -> None:
    """Write to ``out_row`` (int32 words) the text tokens after which the reply
    closes in at most ``limit`` bytes (stop ids are left clear)."""
    trie = tables.trie
    machine = _scanner_machine()
    level = closer.level
    kinds = np.asarray(closer.types[: level + 1], dtype=np.int32)
    kinds.flags.writeable = False
    start = _encode(closer.mode, closer.utf, closer.types[level] if level > 0 else NONE)
    stack = np.empty((2, trie.max_depth + 1), dtype=np.int32)
    _walk_trie(machine.trans, start, True, level, kinds, machine.top_of, machine.retop,
               trie.node_byte, trie.node_depth, trie.node_end, trie.tok_offsets, trie.tok_ids, tables.is_stop,
               machine.score, int(limit), out_row.view(np.uint32), False, _NO_SEEN, 0, _NO_SEEN,
               stack[0], stack[1], np.zeros(1, dtype=np.int64))


_NO_SEEN = np.zeros(1, dtype=np.int32)  # successors are not collected here


def shortest_object_tokens(tables: ClosingTables) -> int:
    """Fewest text tokens that spell a whole json_object reply: 1 if one token
    is a complete object, else 2 (``{`` then ``}``, spellable by construction)."""
    row = np.zeros(tables.trie.words, dtype=np.int32)
    closing_mask(tables, JsonCloser(), 0, row)
    return 1 if row.any() else 2
