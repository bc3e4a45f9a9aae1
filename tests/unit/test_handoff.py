"""The API server's automata handed to the engine (core/handoff.py).

What a server sees: a DFA the API server checked is used by the engine
without a second build, the same language either way; a damaged, foreign or
evicted file only means the engine builds it again; the directory stays
within its byte bound.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from poot_vllm.core import constraints as constraints_mod
from poot_vllm.core import handoff
from poot_vllm.core.automata.dfa import DFA
from poot_vllm.core.constraints import (Constraint, Kind, choice_constraint, compile_automaton, regex_constraint,
                                        schema_constraint)
from poot_vllm.core.limits import DEFAULT_LIMITS, check_settings

REPO = Path(__file__).resolve().parents[2]
LONG_TEXT = {"type": "object", "properties": {"body": {"type": "string", "maxLength": 4000}}, "required": ["body"],
             "additionalProperties": False}


@pytest.fixture
def handoff_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("POOT_HANDOFF_DIR", str(tmp_path))
    monkeypatch.delenv("POOT_HANDOFF", raising=False)
    monkeypatch.delenv("POOT_HANDOFF_BYTES", raising=False)
    constraints_mod._automata.clear()
    yield tmp_path
    constraints_mod._automata.clear()


def _engine_compile(constraint: Constraint, monkeypatch) -> DFA:
    """compile_automaton as a fresh engine process runs it: empty cache, building forbidden."""
    constraints_mod._automata.clear()

    def no_build(*_args):
        raise AssertionError("the engine built the automaton again")

    with monkeypatch.context() as m:
        m.setattr(constraints_mod, "_build", no_build)
        return compile_automaton(constraint)


def _same_dfa(a: DFA, b: DFA) -> None:
    assert a.start == b.start
    np.testing.assert_array_equal(a.transitions, b.transitions)
    np.testing.assert_array_equal(a.accepting, b.accepting)
    assert (a.actions is None) == (b.actions is None)
    if a.actions is not None:
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.counter_limit, b.counter_limit)


@pytest.mark.parametrize("constraint", [
    regex_constraint(r"[a-z]{2,5}-\d+", DEFAULT_LIMITS),
    choice_constraint(["yes", "no", "maybe"]),
    schema_constraint(LONG_TEXT),  # a counted DFA: actions and counter limits travel too
], ids=["regex", "choice", "counted-schema"])
def test_the_engine_takes_what_the_api_server_checked(handoff_dir, monkeypatch, constraint):
    checked = compile_automaton(constraint, publish=True)  # the API server's validation
    assert list(handoff_dir.glob("*" + handoff.SUFFIX)), "nothing was published"
    before = handoff.hits()
    taken = _engine_compile(constraint, monkeypatch)
    assert handoff.hits() == before + 1
    _same_dfa(checked, taken)
    assert taken.transitions.flags.writeable is False


def test_a_counted_dfa_still_counts_after_the_handoff(handoff_dir, monkeypatch):
    constraint = schema_constraint({"type": "string", "maxLength": 300})
    compile_automaton(constraint, publish=True)
    taken = _engine_compile(constraint, monkeypatch)
    assert taken.matches(json.dumps("x" * 300).encode())
    assert not taken.matches(json.dumps("x" * 301).encode())


def test_another_process_publishes_and_this_one_takes(handoff_dir, monkeypatch):
    """As in a server: the API server and the engine are different processes."""
    code = ("from poot_vllm.core.constraints import regex_constraint, compile_automaton;"
            "from poot_vllm.core.limits import DEFAULT_LIMITS;"
            "compile_automaton(regex_constraint('(ab|cd)*e{3}', DEFAULT_LIMITS), publish=True)")
    env = dict(os.environ, POOT_HANDOFF_DIR=str(handoff_dir), PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    taken = _engine_compile(regex_constraint("(ab|cd)*e{3}", DEFAULT_LIMITS), monkeypatch)
    assert taken.matches(b"abcdeee") and not taken.matches(b"abee")


def test_without_a_directory_nothing_is_handed_over(tmp_path, monkeypatch):
    monkeypatch.delenv("POOT_HANDOFF_DIR", raising=False)
    constraints_mod._automata.clear()
    compile_automaton(regex_constraint("abc+", DEFAULT_LIMITS), publish=True)
    assert handoff.take(regex_constraint("abc+", DEFAULT_LIMITS), DEFAULT_LIMITS) is None
    monkeypatch.setenv("POOT_HANDOFF_DIR", str(tmp_path))
    monkeypatch.setenv("POOT_HANDOFF", "0")
    constraints_mod._automata.clear()
    compile_automaton(regex_constraint("abc+", DEFAULT_LIMITS), publish=True)
    assert not list(tmp_path.iterdir())


def test_other_limits_are_another_file(handoff_dir):
    from dataclasses import replace

    constraint = regex_constraint("a+b", DEFAULT_LIMITS)
    compile_automaton(constraint, publish=True)
    other = replace(DEFAULT_LIMITS, max_automaton_bytes=DEFAULT_LIMITS.max_automaton_bytes // 2)
    assert handoff.take(constraint, other) is None
    assert handoff.take(constraint, DEFAULT_LIMITS) is not None


def _published_file(handoff_dir: Path, constraint: Constraint) -> Path:
    compile_automaton(constraint, publish=True)
    (path,) = handoff_dir.glob("*" + handoff.SUFFIX)
    return path


@pytest.mark.parametrize("damage", ["truncated", "padded", "out-of-range", "negative", "bad-start", "bad-flag", "bad-action",
                                    "foreign"])
def test_a_damaged_file_is_built_instead(handoff_dir, caplog, damage):
    constraint = regex_constraint("[0-9]{1,3}x", DEFAULT_LIMITS)
    path = _published_file(handoff_dir, constraint)
    arrays = {k: (None if v is None else v.copy()) for k, v in handoff.decode(path.read_bytes()).items()}
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "padded":
        path.write_bytes(path.read_bytes() + b"\0" * 4)
    elif damage == "out-of-range":
        arrays["transitions"][0, ord("1")] = arrays["transitions"].shape[0] + 5
        path.write_bytes(handoff.encode(arrays))
    elif damage == "negative":  # the kernels index with it: only -1 (dead) may be below 0
        arrays["transitions"][-1, 255] = -7
        path.write_bytes(handoff.encode(arrays))
    elif damage == "bad-start":
        arrays["start"] = np.array([arrays["transitions"].shape[0]])
        path.write_bytes(handoff.encode(arrays))
    elif damage == "bad-flag":
        data = bytearray(path.read_bytes())
        data[len(handoff.MAGIC) + 24 + arrays["transitions"].nbytes] = 7  # the first accepting flag
        path.write_bytes(bytes(data))
    elif damage == "bad-action":
        arrays["actions"] = np.full(arrays["transitions"].shape, 7, dtype=np.int8)
        arrays["counter_limit"] = np.zeros(arrays["accepting"].shape, dtype=np.int32)
        path.write_bytes(handoff.encode(arrays))
    else:  # another program's file under the same name (an .npz, say)
        np.savez(path.with_suffix(".npz"), transitions=arrays["transitions"])
        path.write_bytes(path.with_suffix(".npz").read_bytes())
    assert handoff.take(constraint, DEFAULT_LIMITS) is None
    constraints_mod._automata.clear()
    assert compile_automaton(constraint).matches(b"12x")  # built, correct


def test_grammars_are_not_handed_over(handoff_dir):
    compile_automaton(Constraint(Kind.GRAMMAR, 'root ::= "a" root | "b"'), publish=True)
    assert not list(handoff_dir.glob("*" + handoff.SUFFIX))


def test_the_directory_stays_within_its_bound(handoff_dir, monkeypatch):
    bound = 64 * 1024
    monkeypatch.setenv("POOT_HANDOFF_BYTES", str(bound))
    sizes = []
    for i in range(40):
        compile_automaton(regex_constraint(f"(item{i}|[a-z]{{3}}){{1,4}}#{i}", DEFAULT_LIMITS), publish=True)
        total = sum(p.stat().st_size for p in handoff_dir.glob("*" + handoff.SUFFIX))
        sizes.append(total)
    largest = max(p.stat().st_size for p in handoff_dir.glob("*" + handoff.SUFFIX))
    # Scanned after every eighth of the bound written: never more than that over, plus one file.
    assert max(sizes) <= bound + bound // 8 + largest
    assert len(list(handoff_dir.glob("*" + handoff.SUFFIX))) < 40  # the oldest files were evicted


@pytest.mark.parametrize("name,value", [("POOT_HANDOFF", "maybe"), ("POOT_HANDOFF_BYTES", "-1"),
                                        ("POOT_HANDOFF_BYTES", "lots")])
def test_bad_settings_stop_the_server_at_start(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        check_settings()


def test_the_adapter_makes_a_private_directory_for_its_children(tmp_path):
    """The first process makes a 0700 directory, its children inherit it, and it is removed at exit."""
    code = ("import os, subprocess, sys\n"
            "from poot_vllm.adapter.handoff_dir import ensure\n"
            "ensure(); d = os.environ['POOT_HANDOFF_DIR']\n"
            "child = subprocess.run([sys.executable, '-c', 'import os; print(os.environ[\"POOT_HANDOFF_DIR\"])'],"
            " capture_output=True, text=True, check=True).stdout.strip()\n"
            "print(d, oct(os.stat(d).st_mode & 0o777), child == d)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("POOT_HANDOFF")}
    env.update(PYTHONPATH=str(REPO), TMPDIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         timeout=120).stdout.split()
    path, mode, inherited = out
    assert Path(path).parent == tmp_path and mode == "0o700" and inherited == "True"
    assert not Path(path).exists(), "the directory outlived the server"
