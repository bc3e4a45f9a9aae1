#!/usr/bin/env python
"""JSON Schema conformance ratchet for poot's schema compiler.

Compiles every schema in ``<repo>/../shared/bench-data/jsonschemabench/*.jsonl``
and ``json-schema-test-suite/draft2020-12.jsonl``, and for each compiled one
checks exactness: random samples of the regex must validate with
``jsonschema``, and the item's invalid instances (re-serialized compactly with
sorted keys) must not match.  A recursive schema is also compiled as poot
serves it, a grammar (json_schema.recursive): replies drawn from its masks
must validate and the invalid instances must not parse.  Prints a table per
subset: ``compiled`` (the regex, unrolled where recursive), ``dfa`` (its
automaton fits the default budget), ``grammar`` (served as a grammar) and
``served`` (a DFA or a grammar within the default limits).

    python scripts/json_conformance.py            # print the table
    python scripts/json_conformance.py --update   # also rewrite the baseline

The unit test ``tests/unit/test_json_conformance.py`` runs the same code and
fails when a subset's compiled count drops below the baseline or a schema that
compiled before is refused now.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from poot_vllm.core.automata.residues import MAX_RESIDUE, RESIDUE_BASE, residue_markers  # noqa: E402
from poot_vllm.core.errors import PootError  # noqa: E402
from poot_vllm.core.json_schema import schema_to_regex  # noqa: E402
from poot_vllm.core.regex import ast  # noqa: E402
from poot_vllm.core.regex import charsets as cs  # noqa: E402
from poot_vllm.core.regex.parser import parse  # noqa: E402
from poot_vllm.core.limits import DEFAULT_LIMITS  # noqa: E402

try:
    from poot_vllm.core.automata.compilers import regex_to_dfa  # noqa: E402
except ImportError:  # the regex engine is optional for this script
    regex_to_dfa = None

BENCH = REPO.parent / "shared" / "bench-data"
BASELINE = REPO / "tests" / "data" / "json_conformance_baseline.json"
#: Every refusal message names the keyword: "unsupported keyword 'X' at /ptr" or "'X' at /ptr ...".
REFUSAL_RE = re.compile(r"'([^']+)' at (/\S*)|exceeds the limit (\w+)")


def bench_files(bench: Path = BENCH) -> list[Path]:
    files = sorted((bench / "jsonschemabench").glob("*.jsonl"))
    suite = bench / "json-schema-test-suite" / "draft2020-12.jsonl"
    return files + ([suite] if suite.exists() else [])


def load_items(bench: Path = BENCH) -> list[dict]:
    items = []
    for path in bench_files(bench):
        for line in path.read_text().splitlines():
            if line.strip():
                items.append(json.loads(line))
    return items


# -- random sampling from a regex (parsed by poot's regex front end) ----------------
_SAFE_POOL = [(0x20, 0x7E), (0xA0, 0x24F), (0x4E00, 0x4E20), (0x1F600, 0x1F610)]


def _pick_char(ranges: cs.CodepointSet, rng: random.Random) -> str:
    # Prefer "ordinary" characters so samples look like text, but sometimes take any member.
    pool = [(max(lo, plo), min(hi, phi)) for lo, hi in ranges for plo, phi in _SAFE_POOL if max(lo, plo) <= min(hi, phi)]
    if not pool or rng.random() < 0.1:
        pool = ranges
    lo, hi = rng.choice(pool)
    return chr(rng.randint(lo, hi))


def _sample(node: ast.Node, rng: random.Random, out: list[str], budget: list[int]) -> None:
    if isinstance(node, ast.Chars):
        out.append(_pick_char(node.ranges, rng))
    elif isinstance(node, ast.Concat):
        for item in node.items:
            _sample(item, rng, out, budget)
    elif isinstance(node, ast.Alt):
        _sample(rng.choice(node.items), rng, out, budget)
    elif isinstance(node, ast.Repeat):
        n = node.min
        while (node.max is None or n < node.max) and budget[0] > 0 and rng.random() < 0.5:
            n += 1
        budget[0] -= n
        for _ in range(n):
            _sample(node.item, rng, out, budget)


_PARSE_CACHE: dict[str, ast.Node] = {}


def sample_regex(regex: str, rng: random.Random) -> str:
    """A random string matching ``regex`` (counted repeats are cut short where they may be)."""
    if regex not in _PARSE_CACHE:
        _PARSE_CACHE[regex] = parse(regex)
    out: list[str] = []
    _sample(_PARSE_CACHE[regex], rng, out, [200])
    return "".join(out)


def sample_dfa(dfa: Any, rng: random.Random, max_bytes: int = 4000) -> str | None:
    """A random reply of a compiled DFA: a walk over live bytes (counter checks honoured).

    Unlike :func:`sample_regex` it respects lookaheads (pattern + lengths,
    patternProperties, propertyNames), which the regex front end's tree only
    records.  ``None`` if the walk passed ``max_bytes`` without finishing.
    """
    state, counter, data = dfa.start, 0, bytearray()
    live_of: dict[int, tuple[list[int], list[int]]] = {}  # state -> (live bytes, live ASCII bytes)
    while not (dfa.accepting[state] and (rng.random() < 0.15 or len(data) > 60)):
        if len(data) > max_bytes:
            return None
        if state not in live_of:
            row = dfa.transitions[state]
            live = [b for b in range(256) if row[b] >= 0]
            live_of[state] = (live, [b for b in live if b < 0x80])
        live, ascii_live = live_of[state]
        if not live and dfa.accepting[state]:
            break  # a complete reply that cannot continue
        # One random pick first (ASCII-biased); the whole row, shuffled, only if a
        # counter check refuses it.  Shuffling every row made walks the slow part.
        first = rng.choice(ascii_live) if ascii_live and rng.random() < 0.8 else rng.choice(live)
        for byte in _tries(first, live, rng):
            nxt, c = dfa.run(bytes([byte]), state, counter)
            if nxt >= 0:
                state, counter = nxt, c
                data.append(byte)
                break
        else:
            return None
    return data.decode("utf-8")


def _tries(first: int, live: list[int], rng: random.Random) -> Iterator[int]:
    """``first``, then the other live bytes in random order."""
    yield first
    rest = [b for b in live if b != first]
    rng.shuffle(rest)
    yield from rest


# -- the run ---------------------------------------------------------------------------
def _validator(schema: Any):
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


_BYTE_VOCAB: Any = None


def _byte_vocab() -> Any:
    """Each byte a token, plus a stop token: replies drawn byte by byte."""
    global _BYTE_VOCAB
    if _BYTE_VOCAB is None:
        from poot_vllm.core.vocabulary import TokenVocabulary

        tokens = tuple(bytes([b]) for b in range(256)) + (None,)
        _BYTE_VOCAB = TokenVocabulary(tokens, frozenset({256}), 257, "raw")
    return _BYTE_VOCAB


def sample_grammar(grammar: Any, rng: random.Random, budget: int = 600) -> str:
    """A random reply through poot's grammar masks (with the token budget: it finishes)."""
    import numpy as np

    from poot_vllm.core.matchers.pushdown import compile_pushdown

    vocab = _byte_vocab()
    m = compile_pushdown(grammar, vocab).new_matcher()
    m.set_token_budget(budget)
    data = bytearray()
    row = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    while not m.is_terminated():
        row[:] = 0
        m.fill_bitmask(row)
        allowed = np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[:vocab.size]).tolist()
        ascii_allowed = [t for t in allowed if t < 0x80]
        t = rng.choice(ascii_allowed) if ascii_allowed and rng.random() < 0.8 else rng.choice(allowed)
        m.accept_tokens([t])
        if t < 256:
            data.append(t)
    return data.decode("utf-8")


def grammar_accepts(grammar: Any, text: str) -> bool:
    from poot_vllm.core.grammar.rule_automata import Configurations, rule_automata

    c = Configurations(rule_automata(grammar))
    configs = c.advance(c.initial(), text.encode("utf-8"))
    return bool(configs) and min(c.cost(x) for x in configs) == 0


def check_grammar(item: dict, result: dict, samples: int, seed: int) -> None:
    """A schema served as a grammar (a recursive one, or one whose free-form values pass the DFA's
    budget: one rule for them): its replies validate, the invalid instances do not parse."""
    from poot_vllm.core.json_schema.recursive import schema_grammar

    if result.get("dfa") and schema_grammar(item["schema"]) is None:
        return
    from poot_vllm.core.grammar.gbnf import Grammar
    from poot_vllm.core.json_schema import compile_json_schema

    try:  # as the server compiles it (its bounds on the schema text included)
        grammar = compile_json_schema(item["schema"])
    except PootError:
        return
    if not isinstance(grammar, Grammar):
        return
    result["grammar"] = True
    problems = result.setdefault("problems", [])
    rng = random.Random(seed)
    validator = _validator(item["schema"])
    for _ in range(samples):
        text = sample_grammar(grammar, rng)
        try:
            ok = validator.is_valid(json.loads(text))
        except ValueError:
            ok = False
        if not ok:
            problems.append(f"grammar reply does not validate: {text[:120]!r}")
    for test in item.get("tests", []):
        if test.get("valid") is False:
            text = json.dumps(test["data"], ensure_ascii=False, sort_keys=True, separators=(",", ":"))
            if grammar_accepts(grammar, text):
                problems.append(f"grammar accepts an invalid instance: {text[:120]!r}")


class _ReOrDfa:
    """``re`` on a schema's regex, or poot's DFA where the regex holds a multipleOf residue
    marker (automata/residues.py: Python's ``re`` would read it as a plain character)."""

    def __init__(self, regex: str, dfa: Any = None) -> None:
        self.rx = None if any(RESIDUE_BASE <= ord(ch) <= RESIDUE_BASE + MAX_RESIDUE for ch in regex) \
            else re.compile(regex)
        self.dfa = dfa

    def fullmatch(self, text: str) -> bool:
        if self.rx is not None:
            return self.rx.fullmatch(text) is not None
        return self.dfa is not None and self.dfa.matches(text.encode("utf-8"))


def check_item(item: dict, samples: int = 4, seed: int = 0) -> dict:
    """Compile one item's schema and check exactness; a dict describing the outcome."""
    result: dict[str, Any] = {"id": item["id"], "subset": item["subset"]}
    try:
        regex = schema_to_regex(item["schema"])
    except PootError as exc:
        m = REFUSAL_RE.search(str(exc))
        result["refused"] = (m.group(1) or m.group(3)) if m else "<unnamed>"
        result["message"] = str(exc)
        check_grammar(item, result, samples, seed)
        return result
    result["compiled"] = True
    result["regex_chars"] = len(regex)
    compiled = _ReOrDfa(regex)
    problems: list[str] = []
    dfa = None
    if regex_to_dfa is not None:
        try:
            with residue_markers(json.dumps(item["schema"], ensure_ascii=False)):  # residues, as the server builds them
                dfa = regex_to_dfa(regex, DEFAULT_LIMITS)
            result["dfa"] = True
        except PootError as exc:  # over the automaton budget: served as a 400, not a bug
            try:  # ... unless shallower free-form values fit (what the server then serves, and checked here)
                from poot_vllm.core.json_schema import served_regex

                narrowed = served_regex(item["schema"])
                with residue_markers(json.dumps(item["schema"], ensure_ascii=False)):
                    dfa = regex_to_dfa(narrowed, DEFAULT_LIMITS)
                regex, compiled = narrowed, _ReOrDfa(narrowed, dfa)
                result["dfa"] = result["free_form_fitted"] = True
            except PootError:
                result["dfa_refused"] = str(exc)[:120]
        if compiled.rx is None:
            compiled.dfa = dfa
    rng = random.Random(seed)
    validator = _validator(item["schema"])
    for _ in range(samples):
        # a walk of the DFA respects lookaheads; the regex sampler only where the DFA is over budget
        text = sample_dfa(dfa, rng) if dfa is not None else sample_regex(regex, rng)
        if text is None:
            continue
        if dfa is None and "(?" in regex:
            # The regex sampler ignores lookarounds: draw until a sample matches (or give up).
            for _ in range(20):
                if compiled.fullmatch(text):
                    break
                text = sample_regex(regex, rng)
            else:
                continue
        if not compiled.fullmatch(text):
            problems.append(f"sampler produced a non-match: {text[:80]!r}")
            continue
        if dfa is not None and not dfa.matches(text.encode("utf-8")):
            problems.append(f"poot's DFA rejects a match of the regex: {text[:80]!r}")
        try:
            value = json.loads(text)
        except ValueError:
            problems.append(f"sample is not JSON: {text[:80]!r}")
            continue
        if not validator.is_valid(value):
            problems.append(f"sample does not validate: {text[:120]!r}")
    for test in item.get("tests", []):
        if test.get("valid") is False:
            text = json.dumps(test["data"], ensure_ascii=False, sort_keys=True, separators=(",", ":"))
            # The DFA (what poot serves; the samples above tie it to the regex) when
            # there is one: Python's backtracking `re` took 200 s to reject one
            # instance of Github_medium/o27402 (`(?:a)+(?:[^"])*` fails exponentially).
            accepted = dfa.matches(text.encode("utf-8")) if dfa is not None else compiled.fullmatch(text)
            if accepted:
                problems.append(f"invalid instance accepted: {text[:120]!r}")
    result["problems"] = problems
    check_grammar(item, result, samples, seed)
    return result


def run(items: list[dict], samples: int = 4) -> list[dict]:
    return [check_item(item, samples) for item in items]


def summarize(results: list[dict]) -> dict[str, dict]:
    table: dict[str, dict] = defaultdict(lambda: {"total": 0, "compiled": 0, "dfa": 0, "grammar": 0, "served": 0,
                                                  "refused": Counter()})
    for r in results:
        row = table[r["subset"]]
        row["total"] += 1
        row["dfa"] += bool(r.get("dfa"))
        row["grammar"] += bool(r.get("grammar"))
        row["served"] += bool(r.get("dfa") or r.get("grammar"))
        if r.get("compiled"):
            row["compiled"] += 1
        else:
            row["refused"][r["refused"]] += 1
    return dict(table)


def format_table(table: dict[str, dict]) -> str:
    # dfa: compiled schemas whose DFA also fits the default automaton budget.
    lines = [f"{'subset':<18} {'total':>5} {'compiled':>8} {'dfa':>4} {'grammar':>7} {'served':>6}  top refusals"]
    for subset in sorted(table):
        row = table[subset]
        top = ", ".join(f"{k}={v}" for k, v in row["refused"].most_common(5))
        lines.append(f"{subset:<18} {row['total']:>5} {row['compiled']:>8} {row['dfa']:>4} {row['grammar']:>7} "
                     f"{row['served']:>6}  {top}")
    sums = {k: sum(r[k] for r in table.values()) for k in ("total", "compiled", "dfa", "grammar", "served")}
    lines.append(f"{'ALL':<18} {sums['total']:>5} {sums['compiled']:>8} {sums['dfa']:>4} {sums['grammar']:>7} "
                 f"{sums['served']:>6}")
    return "\n".join(lines)


def baseline_of(results: list[dict]) -> dict:
    table = summarize(results)
    return {
        "compiled_per_subset": {s: table[s]["compiled"] for s in sorted(table)},
        "compiled_ids": sorted(r["id"] for r in results if r.get("compiled")),
        "served_ids": sorted(r["id"] for r in results if r.get("dfa") or r.get("grammar")),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--update", action="store_true", help="rewrite tests/data/json_conformance_baseline.json")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--show-refusals", action="store_true")
    args = ap.parse_args()
    items = load_items()
    if not items:
        print(f"no bench data under {BENCH}")
        return 1
    start = time.time()
    results = run(items, args.samples)
    print(format_table(summarize(results)))
    print(f"({time.time() - start:.1f} s)")
    bad = [r for r in results if r.get("problems")]
    for r in bad:
        print(f"EXACTNESS {r['id']}: {r['problems'][:3]}")
    if args.show_refusals:
        for r in results:
            if not r.get("compiled"):
                print(f"refused {r['id']}: {r['message'][:200]}")
    if args.update:
        BASELINE.parent.mkdir(parents=True, exist_ok=True)
        BASELINE.write_text(json.dumps(baseline_of(results), indent=1) + "\n")
        print(f"wrote {BASELINE}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
