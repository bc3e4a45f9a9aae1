"""Translate a JSON Schema ``pattern`` into a regex over raw JSON string content.

jsonschema checks ``pattern`` with Python's ``re.search(pattern, value)`` on
the *decoded* string: unanchored unless the pattern says ``^``/``$``.  poot
emits the *raw* JSON text, so every character class of the pattern becomes
the set of JSON spellings of those characters (``"`` -> ``\\"``, newline ->
``\\n``, ...), and unanchored ends are padded with "any JSON string
characters".

The pattern is read by poot's one regex front end
(:func:`poot_vllm.core.regex.parser.parse_search`: Python ``re`` syntax, the
same parser as ``guided_regex``, with anchors kept), so the same constructs
are accepted, and refused with the same messages and positions: literals,
escapes, classes, ``.``, groups, alternation, greedy/lazy quantifiers, and
``^``/``$``/``\\A``/``\\Z`` (inside a repeated group they take the automaton
path below).

Where Python's meaning is wider than what poot spells, poot narrows (never
widens): ``\\d``/``\\w``/``\\s`` outside negated classes mean their ASCII
members (:func:`json_categories`), ``$`` does not match before a trailing
newline, characters that can be written raw are never written as ``\\uXXXX``.

Inline flags are the parser's (a flag only changes which characters a
class holds).  Assertions that read the neighbouring *decoded* characters --
``\\b``, ``\\B``, lookarounds, MULTILINE ``^``/``$`` -- cannot be spelled over
the raw text (``\\n`` ends in a word character but decodes to a newline), so
such a pattern takes :func:`_translate_by_automaton`: the search language is
built as a DFA over the pattern's character *atoms* (each decoded character
stands for the one atom it lies in), and the DFA is written back as a regex
whose characters are the atoms' JSON spellings.  That is exact, as
``re.search`` on the decoded string (with the narrowings above).
"""

from __future__ import annotations

from dataclasses import dataclass

from poot_vllm.core.errors import ConstraintSyntaxError, LimitExceeded, PootError, UnsupportedConstruct
from poot_vllm.core.json_schema.strings import NOT_RAW, escaped_set, json_char, json_char_regex
from poot_vllm.core.regex import ast
from poot_vllm.core.regex import charsets as cs
from poot_vllm.core.regex.parser import parse_search

_ASCII = ((0, 0x7F),)


class PatternError(Exception):
    """The pattern is outside the supported subset (``unsupported``) or invalid."""

    def __init__(self, message: str, unsupported: bool = True) -> None:
        super().__init__(message)
        self.unsupported = unsupported


def json_categories(escape: str, negated: bool) -> cs.CodepointSet:
    """The sets poot gives ``\\d \\w \\s \\D \\W \\S`` in a pattern: never wider than Python's.

    Where the set is matched directly (``negated=False``) it is a subset of
    Python's Unicode set; inside a negated class a superset, so that the
    class's complement is again a subset.  ``\\d``, ``\\w``, ``\\s`` narrow
    to ASCII and ``\\W`` to ASCII non-word characters (the full Unicode
    sets would spell hundreds of ranges into the schema's regex); ``\\D``
    and ``\\S`` are exact.
    """
    letter = escape[1]
    lower = letter.lower()
    ascii_set = cs.ASCII_CATEGORIES[lower]
    if letter == lower:
        return cs.category(lower) if negated else ascii_set
    if lower == "w":
        return cs.complement(ascii_set) if negated else cs.subtract(_ASCII, ascii_set)
    return cs.complement(cs.category(lower))


def _parse(pattern: str) -> ast.Node:
    try:
        return parse_search(pattern, json_categories)
    except UnsupportedConstruct as exc:
        raise PatternError(str(exc)) from None
    except ConstraintSyntaxError as exc:
        raise PatternError(str(exc).removeprefix("invalid regex: "), unsupported=False) from None


@dataclass
class _Piece:
    regex: str
    min_len: int
    max_len: int | None
    atomic: bool = False  # one char or one class: needs no group before a quantifier


Variants = dict[tuple[bool, bool], _Piece]


def _alt_pieces(a: _Piece, b: _Piece) -> _Piece:
    if a.regex == b.regex:
        return a
    mx = None if a.max_len is None or b.max_len is None else max(a.max_len, b.max_len)
    return _Piece(f"(?:{a.regex}|{b.regex})", min(a.min_len, b.min_len), mx)


def _union(a: Variants, b: Variants) -> Variants:
    out = dict(a)
    for key, piece in b.items():
        out[key] = _alt_pieces(out[key], piece) if key in out else piece
    return out


def _concat(a: Variants, b: Variants) -> Variants:
    out: Variants = {}
    for (sa, ea), pa in a.items():
        for (sb, eb), pb in b.items():
            # An end anchor followed by text, or text followed by a start
            # anchor, only matches if that text is empty: keep just the
            # combinations where it must be (dropping others only narrows).
            if ea and pb.max_len != 0:
                continue
            if sb and pa.max_len != 0:
                continue
            mx = None if pa.max_len is None or pb.max_len is None else pa.max_len + pb.max_len
            piece = _Piece(pa.regex + pb.regex, pa.min_len + pb.min_len, mx)
            key = (sa or sb, ea or eb)
            out[key] = _alt_pieces(out[key], piece) if key in out else piece
    return out


def _translate(node: ast.Node, size_check, escaped: str = "") -> Variants:
    if node is _PAD:
        return {(False, False): _Piece(json_char(escaped), 1, 1)}  # spelled as an unanchored end's padding
    if isinstance(node, ast.Chars):
        rx = json_char_regex(node.ranges, escaped)
        # One regex atom only when every character is written raw: an escape
        # such as \\" is two atoms, and "\\"*" would repeat just the quote.
        atomic = not cs.intersect(node.ranges, cs.union(NOT_RAW, escaped_set(escaped)))
        return {} if rx is None else {(False, False): _Piece(rx, 1, 1, atomic)}
    if isinstance(node, ast.Anchor):
        return {(node.kind == "^", node.kind == "$"): _Piece("", 0, 0)}
    if isinstance(node, ast.Concat):
        acc: Variants = {(False, False): _Piece("", 0, 0)}
        for item in node.items:
            acc = _concat(acc, _translate(item, size_check, escaped))
            for p in acc.values():
                size_check(len(p.regex))
        return acc
    if isinstance(node, ast.Alt):
        acc = {}
        for branch in node.items:
            acc = _union(acc, _translate(branch, size_check, escaped))
        return acc
    sub = _translate(node.item, size_check, escaped)
    lo, hi = node.min, node.max
    assert all(key == (False, False) for key in sub), "anchors in repeats take the automaton path"
    if (False, False) not in sub:
        return {(False, False): _Piece("", 0, 0)} if lo == 0 else {}
    p = sub[(False, False)]
    if p.regex == "":
        return {(False, False): p}
    quant = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((lo, hi))
    if quant is None:
        quant = f"{{{lo}}}" if lo == hi else f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}"
    mx = None if hi is None or p.max_len is None else p.max_len * hi
    body = p.regex if p.atomic else f"(?:{p.regex})"
    return {(False, False): _Piece(body + quant, p.min_len * lo, mx)}


@dataclass(frozen=True)
class TranslatedPattern:
    """Regex over raw JSON string content (no quotes) and its length range in characters."""

    regex: str
    min_len: int
    max_len: int | None


def translate_pattern(pattern: str, size_check=lambda n: None, escaped: str = "",
                      lengths: "tuple[int, int | None] | None" = None) -> TranslatedPattern:
    """Regex for JSON string contents whose decoded value ``re.search``-matches ``pattern``.

    Characters in ``escaped`` are spelled only as ``\\u`` escapes
    (:func:`~poot_vllm.core.json_schema.strings.json_char`).

    With ``lengths`` (``minLength``, ``maxLength``), the result also has that
    many characters where the lengths can be folded into the pattern's one
    repetition (:func:`_fold_lengths`); check the returned lengths: where they
    could not, it is the plain translation.

    Raises :class:`PatternError` outside the supported subset; an empty
    result (the pattern can match nothing poot can spell) is a PatternError too.
    """
    tree = _parse(pattern)
    if ast.has_look(tree) or _anchor_in_repeat(tree, False):
        return _translate_by_automaton(tree, size_check, escaped)
    if lengths is not None:
        folded = _fold_lengths(tree, *lengths)
        if folded is not None:
            tree = folded
    variants = _translate(tree, size_check, escaped)
    any_run = f"{json_char(escaped)}*"
    alts: list[str] = []
    min_len, max_len = None, 0
    for (start, end), piece in variants.items():
        if not start and not end and piece.regex == "":
            parts = [any_run]
        else:
            parts = ([] if start else [any_run]) + [piece.regex] + ([] if end else [any_run])
        alts.append("".join(parts))
        min_len = piece.min_len if min_len is None else min(min_len, piece.min_len)
        if not (start and end) or piece.max_len is None or max_len is None:
            max_len = None
        else:
            max_len = max(max_len, piece.max_len)
    if not alts:
        raise PatternError("the pattern matches no string poot can emit")
    regex = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
    size_check(len(regex))
    return TranslatedPattern(regex, min_len or 0, max_len)


# --- lengths folded into the pattern ----------------------------------------------------------

#: "Any character" where an alternative is not anchored (spelled like translate_pattern's padding).
_PAD = ast.Chars(cs.ANY_CHAR)
#: Alternatives a pattern may be split into when lengths are folded in (alternations that hold
#: an anchor, ``^(a|$)``, are split; past this the lengths stay a lookahead).
MAX_FOLD_BRANCHES = 16


def _fixed_len(node: ast.Node) -> "int | None":
    """The number of characters every match of ``node`` has, or None (variable, or an anchor)."""
    if isinstance(node, ast.Chars):
        return 1
    if isinstance(node, ast.Concat):
        total = 0
        for item in node.items:
            k = _fixed_len(item)
            if k is None:
                return None
            total += k
        return total
    if isinstance(node, ast.Alt):
        lens = {_fixed_len(item) for item in node.items}
        return lens.pop() if len(lens) == 1 else None
    if isinstance(node, ast.Repeat):
        k = _fixed_len(node.item)
        if k is not None and (k == 0 or node.min == node.max):
            return k * node.min
    return None


def _has_anchor(node: ast.Node) -> bool:
    if isinstance(node, ast.Anchor):
        return True
    if isinstance(node, (ast.Concat, ast.Alt)):
        return any(_has_anchor(i) for i in node.items)
    return False  # (anchors in repeats take the automaton path)


def _branches(node: ast.Node) -> "list[list[ast.Node]] | None":
    """``node`` as alternatives of item sequences, the alternations that hold an anchor split."""
    if isinstance(node, ast.Alt):
        out: list[list[ast.Node]] = []
        for item in node.items:
            sub = _branches(item)
            if sub is None:
                return None
            out += sub
        return out if len(out) <= MAX_FOLD_BRANCHES else None
    items = node.items if isinstance(node, ast.Concat) else (node,)
    acc: list[list[ast.Node]] = [[]]
    for item in items:
        if isinstance(item, (ast.Alt, ast.Concat)) and _has_anchor(item):
            sub = _branches(item)
            if sub is None or len(acc) * len(sub) > MAX_FOLD_BRANCHES:
                return None
            acc = [a + b for a in acc for b in sub]
        elif isinstance(item, ast.Repeat) and item.max is not None and 0 < item.max - item.min <= 2 \
                and _fixed_len(item.item) and len(acc) * (item.max - item.min + 1) <= MAX_FOLD_BRANCHES:
            # a short optional part (``https?``): one alternative per count, so that the
            # one variable part left can take the lengths
            acc = [a + [ast.repeat(item.item, n, n)] for a in acc for n in range(item.min, item.max + 1)]
        else:
            acc = [a + [item] for a in acc]
    return acc


def _fold_lengths(tree: ast.Node, lo: int, hi: "int | None") -> "ast.Node | None":
    """A pattern whose full matches are the strings ``re.search(tree)`` accepts that have
    ``lo..hi`` characters, or None where that is not simple to write.

    Each alternative (anchored or padded with "any characters" where it is not)
    must have one variable part at most, a repetition of a fixed-length item:
    its count then takes the lengths (``^[a-z0-9-]+$`` with ``maxLength`` 40 is
    ``^[a-z0-9-]{1,40}$``; ``^[A-Z]`` with 191 is ``^[A-Z].{0,190}$``), so a large
    one is a counted repetition, not a lookahead whose automaton holds a copy
    per character.  Alternatives too short or too long are dropped."""
    branches = _branches(tree)
    if branches is None:
        return None
    any_run = ast.Repeat(_PAD, 0, None)
    kept: list[ast.Node] = []
    for items in branches:
        start = end = False
        while items and isinstance(items[0], ast.Anchor):
            start, end = start or items[0].kind == "^", end or items[0].kind == "$"
            items = items[1:]
        while items and isinstance(items[-1], ast.Anchor):
            start, end = start or items[-1].kind == "^", end or items[-1].kind == "$"
            items = items[:-1]
        if any(isinstance(i, ast.Anchor) for i in items):
            return None  # an anchor between characters (matches nothing): left to the translation
        seq = ([] if start else [any_run]) + items + ([] if end else [any_run])
        fixed, var = 0, None
        for k, item in enumerate(seq):
            n = _fixed_len(item)
            if n is not None:
                fixed += n
                continue
            if var is not None or not isinstance(item, ast.Repeat):
                return None  # two variable parts (or a variable alternation): a lookahead counts
            step = _fixed_len(item.item)
            if not step:
                return None
            var = k
        if var is None:
            if fixed < lo or (hi is not None and fixed > hi):
                continue
        else:
            rep = seq[var]
            step = _fixed_len(rep.item)
            least = max(rep.min, -(-(lo - fixed) // step))
            most = rep.max if hi is None else (hi - fixed) // step if rep.max is None else \
                min(rep.max, (hi - fixed) // step)
            if most is not None and least > most:
                continue
            seq[var] = ast.repeat(rep.item, least, most)
        kept.append(ast.concat([ast.Anchor("^"), *seq, ast.Anchor("$")]))
    if not kept:
        return None  # no string fits: the lookahead's empty language says so
    return ast.alt(kept)


# --- patterns with assertions: through an automaton over character atoms ----------------------

#: Distinct character atoms a pattern may have on this path (each is one byte of the atom automaton).
MAX_ATOMS = 120
#: Working memory of the atom automaton (the schema's own automaton is charged separately).
ATOM_AUTOMATON_BYTES = 256 * 1024

_ANY = ast.Chars(cs.ANY_CHAR)
_ANY_RUN = ast.Repeat(_ANY, 0, None)


def _anchor_in_repeat(node: ast.Node, repeated: bool) -> bool:
    if isinstance(node, ast.Anchor):
        return repeated
    if isinstance(node, (ast.Concat, ast.Alt)):
        return any(_anchor_in_repeat(i, repeated) for i in node.items)
    if isinstance(node, ast.Repeat):
        return _anchor_in_repeat(node.item, True)
    return False


def _anchors_to_looks(node: ast.Node) -> ast.Node:
    """``^`` is the start of the string, ``$`` its end (not before a final newline: a narrowing)."""
    if isinstance(node, ast.Anchor):
        return ast.Look(node.kind == "^", True, _ANY)
    if isinstance(node, ast.Concat):
        return ast.concat([_anchors_to_looks(i) for i in node.items])
    if isinstance(node, ast.Alt):
        return ast.alt([_anchors_to_looks(i) for i in node.items])
    if isinstance(node, ast.Repeat):
        return ast.repeat(_anchors_to_looks(node.item), node.min, node.max)
    if isinstance(node, ast.Look):
        return ast.Look(node.behind, node.negated, _anchors_to_looks(node.body))
    return node


def _classes(node: ast.Node, out: "dict[cs.CodepointSet, None]") -> None:
    stack = [node]
    while stack:
        top = stack.pop()
        if isinstance(top, ast.Chars):
            out[top.ranges] = None
        elif isinstance(top, (ast.Concat, ast.Alt)):
            stack.extend(top.items)
        elif isinstance(top, ast.Repeat):
            stack.append(top.item)
        elif isinstance(top, ast.Look):
            stack.append(top.body)


def _atoms(sets: "list[cs.CodepointSet]") -> list[cs.CodepointSet]:
    try:
        return cs.partition(sets, MAX_ATOMS)
    except ValueError:
        raise PatternError(
            f"the pattern's assertions (\\b, lookarounds, multi-line anchors) need more than {MAX_ATOMS} "
            "distinct character classes; simplify its classes"
        ) from None


def _to_atoms(node: ast.Node, atoms: "list[cs.CodepointSet]") -> ast.Node:
    """The tree over atom bytes: a class becomes the bytes of the atoms inside it."""
    def leaf(c: ast.Chars) -> ast.Node:
        return ast.chars(cs.normalize([(i, i) for i, atom in enumerate(atoms) if cs.intersect(atom, c.ranges)]))

    return ast.map_classes(node, leaf, into_looks=True)


class _Rx:
    """Regex text with its precedence: ``atom`` (quantifiable), ``cat`` or ``alt``."""

    __slots__ = ("text", "kind")

    def __init__(self, text: str, kind: str) -> None:
        self.text = text
        self.kind = kind


_EMPTY = _Rx("", "cat")


def _group(r: _Rx) -> str:
    return r.text if r.kind == "atom" else f"(?:{r.text})"


def _rx_alt(a: "_Rx | None", b: _Rx) -> _Rx:
    if a is None:
        return b
    if a.text == b.text:
        return a
    if not a.text or not b.text:
        other = b if not a.text else a
        return _Rx(_group(other) + "?", "atom")
    return _Rx(f"{a.text}|{b.text}", "alt")


def _rx_cat(*parts: _Rx) -> _Rx:
    texts = [p.text if p.kind != "alt" else f"(?:{p.text})" for p in parts if p.text]
    if len(texts) == 1:
        return next(p for p in parts if p.text)
    return _Rx("".join(texts), "cat")


def _rx_star(r: _Rx) -> _Rx:
    return _EMPTY if not r.text else _Rx(_group(r) + "*", "atom")


def _translate_by_automaton(tree: ast.Node, size_check, escaped: str) -> TranslatedPattern:
    """Exact search semantics for a pattern with assertions (see the module docstring)."""
    from poot_vllm.core.automata.build import Budget, regex_tree_to_dfa

    tree = ast.concat([_ANY_RUN, _anchors_to_looks(tree), _ANY_RUN])
    sets: dict[cs.CodepointSet, None] = {}
    _classes(tree, sets)
    atoms = _atoms(list(sets))
    try:
        dfa = regex_tree_to_dfa(_to_atoms(tree, atoms), Budget(ATOM_AUTOMATON_BYTES, "the pattern's automaton"), counted=False)
    except LimitExceeded as exc:
        raise PatternError(f"the pattern's automaton is too large: {exc}") from None
    except PootError:
        raise PatternError("the pattern matches no string poot can emit") from None
    table = dfa.transitions[:, : len(atoms)].tolist()
    accepting = dfa.accepting.tolist()
    n = len(table)
    spelled: dict[tuple[int, ...], _Rx | None] = {}

    def label(members: tuple[int, ...]) -> "_Rx | None":
        rx = spelled.get(members)
        if members not in spelled:
            ranges = cs.union(*(atoms[i] for i in members))
            text = json_char_regex(ranges, escaped)
            atomic = text is not None and not cs.intersect(ranges, cs.union(NOT_RAW, escaped_set(escaped)))
            rx = spelled[members] = None if text is None else _Rx(text, "atom" if atomic else "alt")
        return rx

    # Edges (from, to) -> regex; -1 is a new start, n a new end.
    edges: dict[tuple[int, int], _Rx] = {(-1, 0): _EMPTY}
    for s_id, row in enumerate(table):
        by_target: dict[int, list[int]] = {}
        for atom, t in enumerate(row):
            if t >= 0:
                by_target.setdefault(t, []).append(atom)
        for t, members in by_target.items():
            rx = label(tuple(members))
            if rx is not None:
                edges[(s_id, t)] = rx
        if accepting[s_id]:
            edges[(s_id, n)] = _EMPTY
    out_of: dict[int, set[int]] = {}
    into: dict[int, set[int]] = {}
    for a, b in edges:
        out_of.setdefault(a, set()).add(b)
        into.setdefault(b, set()).add(a)
    remaining = set(range(n))
    while remaining:
        k = min(remaining, key=lambda q: (len(into.get(q, ())) * len(out_of.get(q, ())), q))
        remaining.discard(k)
        loop = edges.pop((k, k), None)
        into.get(k, set()).discard(k)
        out_of.get(k, set()).discard(k)
        middle = _rx_star(loop) if loop is not None else _EMPTY
        for i in sorted(into.pop(k, ())):
            r_in = edges.pop((i, k))
            out_of[i].discard(k)
            for j in sorted(out_of.get(k, ())):
                path = _rx_cat(r_in, middle, edges[(k, j)])
                size_check(len(path.text))
                edges[(i, j)] = _rx_alt(edges.get((i, j)), path)
                out_of[i].add(j)
                into.setdefault(j, set()).add(i)
        for j in out_of.pop(k, ()):
            edges.pop((k, j), None)
            into[j].discard(k)
    result = edges.get((-1, n))
    if result is None:
        raise PatternError("the pattern matches no string poot can emit")
    text = f"(?:{result.text})" if result.kind == "alt" else result.text  # the caller embeds it
    size_check(len(text))
    min_len, max_len = _length_range(table, accepting)
    return TranslatedPattern(text, min_len, max_len)


def _length_range(table: "list[list[int]]", accepting: "list[bool]") -> "tuple[int, int | None]":
    """Fewest and most characters of an accepted string (None: unbounded) of a trimmed DFA."""
    n = len(table)
    succ = [sorted({t for t in row if t >= 0}) for row in table]
    dist = {0: 0}
    frontier = [0]
    while frontier:
        nxt = []
        for q in frontier:
            for t in succ[q]:
                if t not in dist:
                    dist[t] = dist[q] + 1
                    nxt.append(t)
        frontier = nxt
    min_len = min(d for q, d in dist.items() if accepting[q])
    # longest path: None if a cycle is reachable (every state of a trimmed DFA is live)
    order: list[int] = []
    state = [0] * n  # 0 new, 1 on stack, 2 done
    stack = [(0, 0)]
    while stack:
        q, i = stack.pop()
        if i == 0:
            if state[q] == 2:
                continue
            state[q] = 1
        if i < len(succ[q]):
            stack.append((q, i + 1))
            t = succ[q][i]
            if state[t] == 1:
                return min_len, None
            if state[t] == 0:
                stack.append((t, 0))
        else:
            state[q] = 2
            order.append(q)
    longest = [-1] * n
    for q in order:  # successors first
        best = 0 if accepting[q] else -1
        for t in succ[q]:
            if longest[t] >= 0:
                best = max(best, longest[t] + 1)
        longest[q] = best
    return min_len, longest[0]


def patterns_disjoint(first: str, second: str, budget_bytes: int) -> bool:
    """Whether no string is found by both patterns under ``re.search``: proven, never guessed.

    This is how jsonschema validates ``pattern`` (Python's ``re`` on the
    whole Unicode string), not poot's narrowed spelling of it, so a ``oneOf``
    told apart by it holds for any value a validator sees.  The two searches
    are intersected on one automaton (a lookahead), built within
    ``budget_bytes`` of working memory; ``False`` when it is not empty, too
    large, or uses what poot does not build (backreferences).
    """
    from poot_vllm.core.automata.build import Budget, regex_tree_to_dfa
    from poot_vllm.core.errors import EmptyLanguage
    from poot_vllm.core.regex.parser import parse

    both = f"(?=[\\s\\S]*?(?:{first}))[\\s\\S]*?(?:{second})[\\s\\S]*"
    try:
        regex_tree_to_dfa(parse(both), Budget(budget_bytes))
    except EmptyLanguage:
        return True
    except PootError:
        return False
    return False


def strings_missing_pattern(values: list[str], pattern: str, budget_bytes: int) -> bool:
    """Whether none of ``values`` is found by ``pattern`` under ``re.search`` (poot's linear
    matcher: never Python's backtracking ``re`` on a user's pattern)."""
    import dataclasses

    from poot_vllm.core.automata.compilers import regex_matches
    from poot_vllm.core.limits import DEFAULT_LIMITS

    try:
        texts = [v.encode("utf-8") for v in values]  # a lone surrogate: not provable here
        found = regex_matches(f"[\\s\\S]*?(?:{pattern})[\\s\\S]*", texts,
                              dataclasses.replace(DEFAULT_LIMITS, max_automaton_bytes=budget_bytes))
    except (PootError, UnicodeEncodeError):
        return False
    return not any(found)
