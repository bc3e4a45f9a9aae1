"""DFA invariants, UTF-8 soundness, and the working-memory budget of the builder."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poot_vllm.core.automata.build import Budget, regex_tree_to_dfa
from poot_vllm.core.automata.dfa import DFA
from poot_vllm.core.automata.utf8 import codepoint_automaton
from poot_vllm.core.automata.compilers import compile_regex, regex_escape, regex_to_dfa
from poot_vllm.core.errors import ConstraintSyntaxError, LimitExceeded
from poot_vllm.core.limits import Limits
from poot_vllm.core.regex import parse
from poot_vllm.core.regex import charsets as cs

PATTERNS = [
    "",
    "a",
    "abc|abd",
    "(a|b)*a(a|b){3}",
    r"[\w.-]+@[\w-]+\.\w+",
    r"\d{1,3}(?:\.\d{1,3}){3}",
    r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"',
    r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?",
    ".*",
    "(?:ab|a)*b{0,3}",
    "(a?){3,5}x",
    "[^a]*é{2}",
    r"\s*(true|false|null)\s*",
]


# --- independent checkers --------------------------------------------------------------

def equivalence_classes(dfa: DFA) -> int:
    """Number of Myhill-Nerode classes among the DFA's states (Moore's algorithm, with a sink)."""
    n = dfa.n_states
    table = np.where(dfa.transitions < 0, n, dfa.transitions)
    table = np.vstack([table, np.full((1, 256), n)])
    block = np.append(dfa.accepting.astype(np.int64), 0)
    while True:
        signature = np.concatenate([block[:, None], block[table]], axis=1)
        _, new_block = np.unique(signature, axis=0, return_inverse=True)
        new_block = new_block.reshape(-1)
        if len(np.unique(new_block)) == len(np.unique(block)):
            return len(np.unique(new_block[:n]))
        block = new_block


def all_live(dfa: DFA) -> bool:
    """Every state reaches an accepting state, and every state is reachable from start."""
    n = dfa.n_states
    live = dfa.accepting.copy()
    while True:
        targets = dfa.transitions
        step = live | np.any(np.where(targets >= 0, live[np.maximum(targets, 0)], False), axis=1)
        if (step == live).all():
            break
        live = step
    reach = np.zeros(n, dtype=bool)
    reach[dfa.start] = True
    while True:
        nxt = reach.copy()
        t = dfa.transitions[reach]
        nxt[t[t >= 0]] = True
        if (nxt == reach).all():
            break
        reach = nxt
    return bool(live.all() and reach.all())


def _utf8_validator() -> tuple[np.ndarray, set[int]]:
    """The well-formed UTF-8 byte sequences (Unicode Table 3-7), written out by hand."""
    # states: 0 start/accept, 1 need 1 cont, 2 need 2, 3 need 3, 4 after E0, 5 after ED, 6 after F0, 7 after F4
    t = np.full((8, 256), -1, dtype=np.int64)
    t[0, 0x00:0x80] = 0
    t[0, 0xC2:0xE0] = 1
    t[0, 0xE0] = 4
    t[0, 0xE1:0xED] = 2
    t[0, 0xED] = 5
    t[0, 0xEE:0xF0] = 2
    t[0, 0xF0] = 6
    t[0, 0xF1:0xF4] = 3
    t[0, 0xF4] = 7
    t[1, 0x80:0xC0] = 0
    t[2, 0x80:0xC0] = 1
    t[3, 0x80:0xC0] = 2
    t[4, 0xA0:0xC0] = 1
    t[5, 0x80:0xA0] = 1
    t[6, 0x90:0xC0] = 2
    t[7, 0x80:0x90] = 2
    return t, {0}


def accepts_only_valid_utf8(dfa: DFA) -> bool:
    """No accepted byte string is ill-formed UTF-8: explore the product with the validator."""
    validator, valid_final = _utf8_validator()
    seen = {(dfa.start, 0)}
    stack = [(dfa.start, 0)]
    while stack:
        s, v = stack.pop()
        if dfa.accepting[s] and v not in valid_final:
            return False
        for b in np.nonzero(dfa.transitions[s] >= 0)[0].tolist():
            nv = int(validator[v, b]) if v >= 0 else -1
            if nv < 0:
                return False  # a live DFA state after an invalid prefix: some accepted string is invalid
            pair = (int(dfa.transitions[s, b]), nv)
            if pair not in seen:
                seen.add(pair)
                stack.append(pair)
    return True


def check_invariants(dfa: DFA) -> None:
    assert dfa.n_states >= 1
    assert dfa.transitions.dtype == np.int32 and dfa.transitions.shape == (dfa.n_states, 256)
    assert dfa.accepting.dtype == np.bool_
    assert ((dfa.transitions >= -1) & (dfa.transitions < dfa.n_states)).all()
    assert equivalence_classes(dfa) == dfa.n_states, "not minimal"
    assert all_live(dfa), "dead or unreachable state"
    assert accepts_only_valid_utf8(dfa)


# --- invariants ------------------------------------------------------------------------------

@pytest.mark.parametrize("pattern", PATTERNS)
def test_compiled_dfas_are_minimal_live_and_utf8_only(pattern: str) -> None:
    check_invariants(compile_regex(pattern))


def test_negated_unicode_classes_never_accept_invalid_utf8() -> None:
    for pattern in (r"[^a]", r"\W+", r"\S\D", ".+", r"[\x00-\U0010ffff]*", r"[\ud7ff-\ue000]"):
        check_invariants(compile_regex(pattern))


_SMALL = st.recursive(
    st.sampled_from(["a", "b", "é", ".", "[^a]", r"\d", "[a-c]", "\U0001F600"]),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda t: t[0] + t[1]),
        st.tuples(inner, inner).map(lambda t: f"(?:{t[0]}|{t[1]})"),
        st.tuples(inner, st.sampled_from(["*", "+", "?", "{2}", "{0,2}"])).map(lambda t: f"(?:{t[0]}){t[1]}"),
    ),
    max_leaves=6,
)


@settings(max_examples=120, deadline=None)
@given(pattern=_SMALL)
def test_random_dfas_keep_the_invariants(pattern: str) -> None:
    check_invariants(compile_regex(pattern))


@settings(max_examples=60, deadline=None)
@given(pattern=_SMALL, seed=st.integers(0, 2**32))
def test_random_walks_accept_only_what_re_accepts(pattern: str, seed: int) -> None:
    """Strings built by walking the DFA are valid UTF-8 and re-matched by Python."""
    dfa = compile_regex(pattern)
    rng = random.Random(seed)
    for _ in range(10):
        state, out = dfa.start, bytearray()
        for _ in range(rng.randint(0, 12)):
            choices = np.nonzero(dfa.transitions[state] >= 0)[0]
            if not len(choices) or (dfa.accepting[state] and rng.random() < 0.3):
                break
            b = int(rng.choice(list(choices)))
            out.append(b)
            state = int(dfa.transitions[state, b])
        if dfa.accepting[state]:
            assert re.fullmatch(pattern, out.decode("utf-8")), (pattern, bytes(out))


def test_equal_languages_give_identical_tables() -> None:
    pairs = [("a|b", "[ab]"), ("(?:ab)*", "(?:ab)*(?:ab)*"), ("a{2,3}", "aaa?"), (r"[0-9]+", r"[0-9][0-9]*")]
    for left, right in pairs:
        a, b = compile_regex(left), compile_regex(right)
        assert a.start == b.start == 0
        assert np.array_equal(a.transitions, b.transitions) and np.array_equal(a.accepting, b.accepting)


def test_dfa_api_and_immutability() -> None:
    dfa = compile_regex("ab*")
    assert dfa.matches(b"abbb") and not dfa.matches(b"ba")
    s = dfa.step(dfa.start, b"a")
    assert s >= 0 and dfa.accepting[s]
    assert dfa.step(dfa.start, b"ba") == -1
    assert dfa.step(-1, b"a") == -1
    with pytest.raises(ValueError):
        dfa.transitions[0, 0] = 1


def test_codepoint_automaton_reads_exactly_the_encodings() -> None:
    rng = random.Random(7)
    for cps in (cs.category("w"), cs.DOT, cs.normalize([(0x7F, 0x800), (0xFFFF, 0x10000), (0x10FFFF, 0x10FFFF)])):
        automaton = codepoint_automaton(cps)
        inside = set()
        for lo, hi in cps:
            if hi - lo < 5000:
                inside.update(range(lo, hi + 1))
        for cp in list(inside)[:3000] + rng.sample(range(0x110000), 3000):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            member = any(lo <= cp <= hi for lo, hi in cps)
            assert automaton.matches(chr(cp).encode()) == member, hex(cp)
        for junk in (b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe0\x80\x80", b"\x80"):
            assert not automaton.matches(junk)


# --- budget -------------------------------------------------------------------------------------

# No wall-clock assertions (a shared machine's clock says little): the bounded work
# is the counted budget, checked exactly below; tests/e2e/test_redos.py bounds
# hostile requests end to end.

def _compiled(pattern: str, limits: Limits = Limits()) -> object:
    """The DFA, or the LimitExceeded that refused it."""
    try:
        return compile_regex(pattern, limits)
    except LimitExceeded as exc:
        return exc


def test_exponential_dfa_is_refused_by_the_automaton_budget() -> None:
    result = _compiled("(a|b)*a(a|b){17}")
    assert isinstance(result, LimitExceeded) and result.limit_name == "max_automaton_bytes"
    result = _compiled("(a|b)*a(a|b){3}")
    assert isinstance(result, DFA) and result.n_states == 16


@pytest.mark.parametrize("pattern", ["(?:a{1000}){1000}", "(((a{100}){100}){100})", "(?:(?:a{99999}){99999}){99999}"])
def test_huge_counted_repetitions_are_refused_before_expansion(pattern: str) -> None:
    result = _compiled(pattern)
    assert isinstance(result, LimitExceeded) and "positions" in str(result)


def test_repeat_of_repeat_is_a_syntax_error_like_python() -> None:
    with pytest.raises(re.error):
        re.compile("a{1000}{1000}")
    with pytest.raises(ConstraintSyntaxError, match="multiple repeat"):
        compile_regex("a{1000}{1000}")


def test_budget_boundary_is_exact() -> None:
    """A build needing exactly the limit succeeds; one byte less is refused."""
    for pattern in ("(a|b)*a(a|b){5}", r"\w+@\d{2,4}", '"(?:[^"\\\\]|\\\\.)*"'):
        probe = Budget(10**9)
        regex_tree_to_dfa(parse(pattern), probe)
        needed = probe.used
        regex_to_dfa(pattern, Limits(max_automaton_bytes=needed))
        with pytest.raises(LimitExceeded):
            regex_to_dfa(pattern, Limits(max_automaton_bytes=needed - 1))


def test_two_thousand_state_dfa_builds_within_the_default_budget() -> None:
    result = _compiled("(a|b)*a(a|b){10}")
    assert isinstance(result, DFA) and result.n_states == 2048


# A JSON object with 20 optional properties, spelled the usual generated way
# (each branch lists every later property again): ~20 KiB of regex.
_WS = r"[ \t\n\r]*"
_STR = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'
_VALUES = [
    _STR,
    r"-?(?:0|[1-9][0-9]*)",
    r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?",
    r"(?:true|false)",
    r'(?:"pending"|"processing"|"shipped"|"delivered"|"cancelled")',
    rf"(?:{_STR}|null)",
    r'"[0-9]{4}-[0-9]{2}-[0-9]{2}"',
]


def _object_regex(n: int) -> str:
    props = [rf'"field_{i:02d}"{_WS}:{_WS}{_VALUES[i % len(_VALUES)]}' for i in range(n)]
    sep = _WS + "," + _WS
    branches = [props[i] + "".join(f"(?:{sep}{props[j]})?" for j in range(i + 1, n)) for i in range(n)]
    return r"\{" + _WS + "(?:" + "|".join(branches) + ")?" + _WS + r"\}"


def test_realistic_json_object_regex_builds_within_budget() -> None:
    pattern = _object_regex(20)
    assert 18_000 < len(pattern.encode()) < 24_000
    dfa = regex_to_dfa(pattern, Limits())
    sample = '{"field_00": "a\\n", "field_02": -1.5e3, "field_03":true,"field_04" : "shipped", "field_19": null}'
    assert dfa.matches(sample.encode()) == bool(re.fullmatch(pattern, sample))
    assert dfa.matches(sample.encode())
    bad = '{"field_03":true,"field_00":"x"}'  # out of order
    assert not dfa.matches(bad.encode()) and not re.fullmatch(pattern, bad)
    assert compile_regex(regex_escape("{}")).matches(b"{}")


# --- minimisation against Moore's refinement ------------------------------------------------

def _moore_blocks(table: np.ndarray, accepting: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
    """Coarsest equivalence of a partial table (missing = an implicit sink) by Moore's
    refinement with ``np.unique`` (the independent oracle of ``hopcroft``)."""
    n, k = table.shape
    full = np.vstack([np.where(table < 0, n, table), np.full((1, k), n)])
    first = [np.append(accepting, False)[:, None].astype(np.int64)]
    if labels is not None:
        first.append(np.vstack([labels, np.full((1, labels.shape[1]), -7)]).astype(np.int64))
    first.append(np.append(np.zeros(n, np.int64), 1)[:, None])  # the sink apart
    _, block = np.unique(np.hstack(first), axis=0, return_inverse=True)
    block = block.reshape(-1)
    while True:
        _, new = np.unique(np.hstack([block[:, None], block[full]]), axis=0, return_inverse=True)
        new = new.reshape(-1)
        if new.max() == block.max():
            return new[:n]
        block = new


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 40), st.integers(1, 6), st.integers(0, 2**32 - 1), st.booleans())
def test_hopcroft_is_the_coarsest_equivalence(n: int, k: int, seed: int, with_labels: bool) -> None:
    """``hopcroft`` (row hashing for its first partition, then splitting) gives
    exactly Moore's partition, on live partial tables with and without labels."""
    from poot_vllm.core.automata.build import hopcroft, live_states

    rng = np.random.default_rng(seed)
    table = np.where(rng.random((n, k)) < 0.3, -1, rng.integers(0, max(n // 3, 1), (n, k))).astype(np.int64)
    table[:, :k] = np.where(rng.random((n, k)) < 0.5, table, rng.integers(0, n, (n, k)))
    accepting = rng.random(n) < 0.3
    accepting[rng.integers(n)] = True
    live = live_states(table, accepting)
    keep = np.flatnonzero(live)
    remap = np.full(n, -1)
    remap[keep] = np.arange(keep.size)
    table = np.where(table >= 0, remap[np.maximum(table, 0)], -1)[keep]
    accepting = accepting[keep]
    labels = rng.integers(0, 2, (keep.size, 2)) if with_labels else None
    got = np.asarray(hopcroft(table, accepting, labels))
    assert _same_partition(got, _moore_blocks(table, accepting, labels))


@given(st.lists(st.lists(st.integers(-2, 2), min_size=3, max_size=3), min_size=1, max_size=30))
def test_row_ids_group_equal_rows_in_order_of_first_appearance(rows: list[list[int]]) -> None:
    from poot_vllm.core.automata.build import first_of_equal, row_ids

    matrix = np.asarray(rows, dtype=np.int64)
    ids = row_ids(matrix)
    _, inverse = np.unique(matrix, axis=0, return_inverse=True)
    assert _same_partition(ids, inverse.reshape(-1))
    assert ids[0] == 0 and all(ids[i] <= ids[:i].max(initial=-1) + 1 for i in range(len(ids)))
    first = first_of_equal(matrix)
    assert (ids[first] == np.arange(first.size)).all() and all((ids[:f] != ids[f]).all() for f in first)
