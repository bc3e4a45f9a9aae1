#!/usr/bin/env python
"""poot's regex dialect against Python's ``re``: served, refused (by reason), disagreements.

Three sources of patterns, each compiled with ``compile_regex`` (``re.fullmatch``
semantics) and compared with ``re`` itself:

* ``re_tests``: CPython's own regex test table (``test.re_tests``, shipped
  with the interpreter; ``/usr/lib/python3*/test/re_tests.py`` as a fallback).
  Each served pattern is checked on the test string and every substring of it
  (so the table's ``re.search`` cases become full-match cases both ways);
  where ``re`` reports a syntax error, poot must refuse.
* ``corpus``: every regex and JSON Schema ``pattern`` in the bench data
  (``../shared/bench-data``), checked on strings built from their own
  characters.
* ``generated``: random patterns mixing inline and scoped flags, anchors
  anywhere, ``\\b``/``\\B`` and lookarounds, checked on every string of up to
  three characters over a small alphabet plus random longer ones.

A *disagreement* is a string where poot's DFA and ``re.fullmatch`` differ, or
a pattern ``re`` compiles that poot calls a syntax error, or the reverse.
There must be none: the script exits 1 otherwise.

    .venv/bin/python scripts/regex_conformance.py [--generated N] [--seed S]
"""

from __future__ import annotations

import argparse
import collections
import glob
import importlib.util
import itertools
import json
import os
import random
import re
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from poot_vllm.core.automata.compilers import compile_regex  # noqa: E402
from poot_vllm.core.errors import ConstraintSyntaxError, LimitExceeded, PootError, UnsupportedConstruct  # noqa: E402


def load_re_tests() -> list[tuple]:
    try:
        from test import re_tests  # type: ignore[import-not-found]

        return list(re_tests.tests)
    except ImportError:
        for path in sorted(glob.glob("/usr/lib/python3*/test/re_tests.py"), reverse=True):
            spec = importlib.util.spec_from_file_location("re_tests", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return list(module.tests)
    raise SystemExit("CPython's test.re_tests is not available")


def python_compiles(pattern: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            re.compile(pattern)
        return True
    except (re.error, ValueError, OverflowError, RecursionError):
        return False


def refusal_reason(exc: PootError) -> str:
    text = str(exc)
    if isinstance(exc, LimitExceeded):
        return "limit: " + exc.limit_name
    if isinstance(exc, UnsupportedConstruct):
        m = re.search(r"not supported: (.*?) at position", text)
        what = m.group(1) if m else text[:60]
        what = re.sub(r"\\\d+|\(\?P=\w+\)", "", what).strip()  # backreference \1 -> backreference
        what = re.sub(r"groups nested more than \d+ deep", "groups nested too deep", what)
        return "unsupported: " + what
    if isinstance(exc, ConstraintSyntaxError):
        return "syntax error"
    if "matches no string" in text:
        return "matches no string"
    return "other: " + text[:60]


class Tally:
    def __init__(self, name: str) -> None:
        self.name = name
        self.patterns = 0
        self.served = 0
        self.refused: collections.Counter[str] = collections.Counter()
        self.strings = 0
        self.disagreements: list[str] = []

    def check(self, pattern: str, texts: "list[str]") -> None:
        """Compile ``pattern`` and compare it with re.fullmatch on ``texts``."""
        self.patterns += 1
        ok = python_compiles(pattern)
        try:
            dfa = compile_regex(pattern)
        except PootError as exc:
            reason = refusal_reason(exc)
            if ok and reason == "syntax error":
                self.disagreements.append(f"re compiles, poot says syntax error: {pattern!r}: {exc}")
            if reason == "matches no string" and ok:
                hits = [t for t in texts if re.fullmatch(pattern, t)]
                if hits:
                    self.disagreements.append(f"poot says empty, re matches {hits[0]!r}: {pattern!r}")
            self.refused["python syntax error" if not ok else reason] += 1
            return
        if not ok:
            self.disagreements.append(f"re rejects, poot serves: {pattern!r}")
            return
        self.served += 1
        compiled = re.compile(pattern)
        for text in texts:
            self.strings += 1
            if dfa.matches(text.encode("utf-8", "surrogatepass")) != bool(compiled.fullmatch(text)):
                self.disagreements.append(f"{pattern!r} on {text!r}: poot {not compiled.fullmatch(text)}")

    def report(self) -> None:
        refused = sum(self.refused.values())
        print(f"== {self.name}: {self.patterns} patterns, {self.served} served, {refused} refused, "
              f"{self.strings} strings compared, {len(self.disagreements)} disagreements")
        for reason, n in self.refused.most_common():
            print(f"   refused {n:5d}  {reason}")
        for line in self.disagreements[:20]:
            print("   DISAGREE", line)


def substrings(text: str, limit: int = 12) -> "list[str]":
    text = text[:limit]
    return sorted({text[i:j] for i in range(len(text) + 1) for j in range(i, len(text) + 1)})


def run_re_tests(tally: Tally) -> None:
    seen: dict[str, set[str]] = {}
    for entry in load_re_tests():
        pattern, text = entry[0], entry[1]
        if not isinstance(pattern, str):
            continue
        seen.setdefault(pattern, set()).update(substrings(text) if isinstance(text, str) else [])
    for pattern, texts in seen.items():
        if any("\ud800" <= c <= "\udfff" for t in texts for c in t):
            texts = {t for t in texts if not any("\ud800" <= c <= "\udfff" for c in t)}
        tally.check(pattern, sorted(texts))


def corpus_patterns() -> "list[str]":
    base = ROOT.parent / "shared" / "bench-data"
    if not base.is_dir():
        base = Path("/work/shared/bench-data")
    patterns: list[str] = []
    regex_file = base / "regex.jsonl"
    if regex_file.exists():
        patterns += [json.loads(line)["regex"] for line in regex_file.open()]

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "pattern" and isinstance(value, str):
                    patterns.append(value)
                elif key == "patternProperties" and isinstance(value, dict):
                    patterns.extend(k for k in value if isinstance(k, str))
                    walk(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in sorted(glob.glob(str(base / "**" / "*.jsonl"), recursive=True)):
        for line in open(path):
            item = json.loads(line)
            if item.get("kind") == "json":
                walk(item.get("schema"))
    return list(dict.fromkeys(patterns))


def run_corpus(tally: Tally, rng: random.Random) -> None:
    for pattern in corpus_patterns():
        alphabet = sorted({c for c in pattern if c.isprintable()} | set("aZ09 -_\n"))
        texts = all_texts(rng.sample(alphabet, min(5, len(alphabet))), 2)
        texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(3, 12))) for _ in range(60)]
        tally.check(pattern, texts)


# --- generated patterns -------------------------------------------------------------------------

ATOMS = ["a", "b", "k", "K", "s", "\u212a", "\u017f", " ", "\\n", "é", "\\w", "\\W", "\\d", "\\s", ".", "[ab]", "[^a]", "-"]
ASSERTIONS = ["^", "$", "\\A", "\\Z", "\\b", "\\B"]
ALPHABET = ["a", "b", "k", "K", "s", "\u212a", "\u017f", " ", "\n", "é", "1", "-"]


def gen(rng: random.Random, depth: int = 0) -> str:
    kind = rng.choice(["atom", "atom", "assert", "cat", "alt", "rep", "look", "scoped"] if depth < 3 else ["atom", "assert"])
    if kind == "atom":
        return rng.choice(ATOMS)
    if kind == "assert":
        return rng.choice(ASSERTIONS)
    if kind == "cat":
        return "".join(gen(rng, depth + 1) for _ in range(rng.randint(2, 4)))
    if kind == "alt":
        return "(?:" + "|".join(gen(rng, depth + 1) for _ in range(2)) + ")"
    if kind == "rep":
        return "(?:" + gen(rng, depth + 1) + ")" + rng.choice(["*", "+", "?", "{2}", "{0,2}", "*?"])
    if kind == "scoped":
        return "(?" + rng.choice(["i", "s", "a", "x", "-i", "i-s", "m"]) + ":" + gen(rng, depth + 1) + ")"
    opener = rng.choice(["(?=", "(?!", "(?<=", "(?<!"])
    if opener.startswith("(?<"):
        body = "".join(rng.choice(["a", "b", " ", "\\w", "\\W", ".", "\\n", "[ab]"]) for _ in range(rng.randint(1, 2)))
    else:
        body = gen(rng, depth + 1)
    return opener + body + ")"


def all_texts(alphabet: "list[str]", max_len: int) -> "list[str]":
    return ["".join(p) for n in range(max_len + 1) for p in itertools.product(alphabet, repeat=n)]


def run_generated(tally: Tally, rng: random.Random, n: int) -> None:
    for _ in range(n):
        pattern = rng.choice(["", "", "(?i)", "(?s)", "(?m)", "(?a)", "(?x)", "(?im)", "(?is)"]) + gen(rng)
        texts = all_texts(rng.sample(ALPHABET, 4), 3)
        texts += ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(4, 8))) for _ in range(30)]
        tally.check(pattern, texts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--generated", type=int, default=1000, help="random patterns to generate (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    started = time.time()
    tallies = [Tally("re_tests (CPython's test table)"), Tally("corpus (bench-data regexes and JSON Schema patterns)"),
               Tally(f"generated ({args.generated} random patterns, seed {args.seed})")]
    run_re_tests(tallies[0])
    run_corpus(tallies[1], rng)
    run_generated(tallies[2], rng, args.generated)
    print(f"Python {sys.version.split()[0]}, {time.time() - started:.0f} s")
    for tally in tallies:
        tally.report()
    total = sum(len(t.disagreements) for t in tallies)
    print(f"TOTAL disagreements: {total}")
    return 1 if total else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
