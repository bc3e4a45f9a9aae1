"""Share the common parts of alternatives before building the automaton.

``X A Y | X B Y`` matches what ``X (?:A|B) Y`` matches, and single characters
in alternation are one class (``a|b`` is ``[ab]``).  Factoring this way keeps
the NFA, the DFA subsets, and so the build's time and working memory, close
to the size of the language's structure rather than of its spelling.  It
matters most for generated regexes: the usual encoding of optional JSON
object properties repeats every later property once per earlier one
(quadratic text), and factoring its common tails makes it linear again.

Subtrees are compared through hash-consing (each distinct subtree gets one
integer id), so the pass is linear in the tree, not in its repeated text.
"""

from __future__ import annotations

from poot_vllm.core.regex import ast
from poot_vllm.core.regex import charsets as cs

#: Factoring nests (a trie of alternatives); past this depth the rest is kept
#: as written, which is always correct and keeps recursion bounded.
MAX_FACTOR_DEPTH = 40


class _Canon:
    """Structural ids: two subtrees get the same id iff they are equal."""

    def __init__(self) -> None:
        self.table: dict[tuple, int] = {}
        self.by_obj: dict[int, tuple[int, ast.Node]] = {}  # id(node) -> (canon id, node kept alive)

    def __call__(self, node: ast.Node) -> int:
        hit = self.by_obj.get(id(node))
        if hit is not None:
            return hit[0]
        key: tuple
        if isinstance(node, ast.Chars):
            key = ("c", node.ranges)
        elif isinstance(node, ast.Concat):
            key = ("s", tuple(self(i) for i in node.items))
        elif isinstance(node, ast.Alt):
            key = ("a", tuple(sorted(self(i) for i in node.items)))
        elif isinstance(node, ast.Look):
            key = ("l", node.behind, node.negated, self(node.body))
        else:
            key = ("r", self(node.item), node.min, node.max)
        cid = self.table.setdefault(key, len(self.table))
        self.by_obj[id(node)] = (cid, node)
        return cid


def factor(node: ast.Node) -> ast.Node:
    """An equivalent tree whose alternatives share common prefixes and suffixes."""
    return _Factor().node(node)


class _Factor:
    def __init__(self) -> None:
        self.canon = _Canon()
        self.done: dict[int, ast.Node] = {}  # canon id -> factored node (shared subtrees stay shared)

    def node(self, node: ast.Node) -> ast.Node:
        cid = self.canon(node)
        hit = self.done.get(cid)
        if hit is not None:
            return hit
        if isinstance(node, (ast.Chars, ast.Look)):
            out: ast.Node = node  # a lookaround's body is factored when its own automaton is built
        elif isinstance(node, ast.Concat):
            out = ast.concat([self.node(i) for i in node.items])
        elif isinstance(node, ast.Repeat):
            out = ast.repeat(self.node(node.item), node.min, node.max)
        else:
            branches = []
            for item in node.items:
                f = self.node(item)
                for g in f.items if isinstance(f, ast.Alt) else (f,):
                    branches.append(list(g.items) if isinstance(g, ast.Concat) else [g])
            out = self.alternatives(branches, 0)
        self.canon(out)
        self.done[cid] = out
        return out

    def alternatives(self, branches: list[list[ast.Node]], depth: int) -> ast.Node:
        """The alternation of ``branches`` (each a sequence), factored."""
        canon = self.canon
        # Drop duplicate branches, keeping order.
        seen: set[tuple[int, ...]] = set()
        unique = []
        for b in branches:
            key = tuple(canon(i) for i in b)
            if key not in seen:
                seen.add(key)
                unique.append(b)
        branches = unique
        if len(branches) == 1:
            return ast.concat(branches[0])
        if depth >= MAX_FACTOR_DEPTH:
            return ast.alt([ast.concat(b) for b in branches])

        out: list[list[ast.Node]] = []
        single_chars: list[ast.Chars] = []
        for group in self._groups(branches, first=True):
            if len(group) == 1:
                out.append(group[0])
                continue
            n = _common_length(group, canon, first=True)
            rest = self.alternatives([b[n:] for b in group], depth + 1)
            out.append(list(group[0][:n]) + [rest])
        merged: list[list[ast.Node]] = []
        for group in self._groups(out, first=False):
            if len(group) == 1:
                merged.append(group[0])
                continue
            n = _common_length(group, canon, first=False)
            rest = self.alternatives([b[: len(b) - n] for b in group], depth + 1)
            merged.append([rest] + list(group[0][len(group[0]) - n :]))
        result: list[ast.Node] = []
        for b in merged:
            if len(b) == 1 and isinstance(b[0], ast.Chars):
                single_chars.append(b[0])
            else:
                result.append(ast.concat(b))
        if single_chars:
            result.insert(0, ast.chars(cs.union(*(c.ranges for c in single_chars))))
        return ast.alt(result)

    def _groups(self, branches: list[list[ast.Node]], first: bool) -> list[list[list[ast.Node]]]:
        """Branches grouped by their first (or last) item; empty branches alone."""
        groups: dict[object, list[list[ast.Node]]] = {}
        for b in branches:
            key: object = ("empty", id(b)) if not b else self.canon(b[0] if first else b[-1])
            groups.setdefault(key, []).append(b)
        return list(groups.values())


def _common_length(group: list[list[ast.Node]], canon: _Canon, first: bool) -> int:
    """How many leading (or trailing) items all branches of ``group`` share."""
    shortest = min(len(b) for b in group)
    n = 0
    while n < shortest:
        idx = n if first else -1 - n
        cid = canon(group[0][idx])
        if any(canon(b[idx]) != cid for b in group[1:]):
            break
        n += 1
    return n
