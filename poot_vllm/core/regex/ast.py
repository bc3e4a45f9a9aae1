"""The regex syntax tree the parser produces and the automaton builder reads.

Five node kinds suffice once groups, flags and laziness are resolved (they
do not change which strings fully match):

* :class:`Chars` - one code point from a set (literals, classes, ``.``);
* :class:`Concat` - a sequence (``Concat(())`` matches only the empty string);
* :class:`Alt` - an alternation (``Alt(())`` matches nothing);
* :class:`Repeat` - ``item{min,max}``, ``max=None`` for unbounded;
* :class:`Look` - a zero-width assertion on the text before or after the
  point where it stands: lookarounds, and every anchor and word boundary
  rewritten as lookarounds (``\\A`` is ``(?<![\\s\\S])``, ``\\b`` is
  ``(?<=\\w)(?!\\w)|(?<!\\w)(?=\\w)``, ...), so the builder has one
  zero-width mechanism.  Trees without one take the builder's plain path.

:func:`~poot_vllm.core.regex.parser.parse_search` (``re.search``, for JSON
Schema ``pattern``) also leaves :class:`Anchor` nodes, which its caller
resolves; the automaton builder never sees one.

The constructors below simplify as they build (flattening, dropping branches
that match nothing), so a tree that can match some string contains no
``Alt(())`` at all: every position of the automaton lies on an accepting path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

from poot_vllm.core.regex.charsets import CodepointSet, single


@dataclass(frozen=True)
class Chars:
    ranges: CodepointSet


@dataclass(frozen=True)
class Concat:
    items: tuple["Node", ...]


@dataclass(frozen=True)
class Alt:
    items: tuple["Node", ...]


@dataclass(frozen=True)
class Repeat:
    item: "Node"
    min: int
    max: int | None


@dataclass(frozen=True)
class Anchor:
    """A zero-width ``^`` (start of the text) or ``$`` (its end); only in :func:`parse_search` trees."""

    kind: str


@dataclass(frozen=True)
class Look:
    """``(?=body)`` / ``(?!body)`` (``behind=False``) or ``(?<=body)`` / ``(?<!body)``."""

    behind: bool
    negated: bool
    body: "Node"


Node = Union[Chars, Concat, Alt, Repeat, Look]

EPSILON = Concat(())
NOTHING = Alt(())


def chars(ranges: CodepointSet) -> Node:
    return Chars(ranges) if ranges else NOTHING


def concat(items: "list[Node] | tuple[Node, ...]") -> Node:
    flat: list[Node] = []
    for item in items:
        if item == NOTHING:
            return NOTHING
        if isinstance(item, Concat):
            flat.extend(item.items)
        else:
            flat.append(item)
    return flat[0] if len(flat) == 1 else Concat(tuple(flat))


def alt(items: "list[Node] | tuple[Node, ...]") -> Node:
    flat: list[Node] = []
    for item in items:
        if isinstance(item, Alt):
            flat.extend(item.items)
        else:
            flat.append(item)
    return flat[0] if len(flat) == 1 else Alt(tuple(flat))


def repeat(item: Node, lo: int, hi: int | None) -> Node:
    if hi == 0 or item == EPSILON:
        return EPSILON
    if item == NOTHING:
        return EPSILON if lo == 0 else NOTHING
    if lo == 1 and hi == 1:
        return item
    return Repeat(item, lo, hi)


def literal_text(text: str) -> Node:
    """The node matching exactly ``text`` (lone surrogates match nothing)."""
    return concat([chars(single(ord(c))) for c in text])


def position_count(node: Node) -> int:
    """NFA positions after counted repetitions are expanded (computed, not built).

    ``x{m,n}`` takes ``n`` copies of ``x``, ``x{m,}`` takes ``max(m, 1)``
    (the last copy loops).  Python ints cannot overflow, so a pattern like
    ``(?:a{1000}){1000}`` is measured without being expanded.
    """
    if isinstance(node, (Chars, Look)):
        return 1
    if isinstance(node, (Concat, Alt)):
        return sum(position_count(i) for i in node.items)
    copies = node.max if node.max is not None else max(node.min, 1)
    return copies * position_count(node.item)


def map_classes(node: Node, leaf: "Callable[[Chars], Node]", into_looks: bool = False) -> Node:
    """The tree with every character class replaced by ``leaf(class)``, rebuilt
    with the smart constructors (subtrees shared in the tree are mapped once).
    Lookaround bodies are mapped too with ``into_looks``, else left as they are."""
    memo: dict[int, tuple[Node, Node]] = {}

    def walk(n: Node) -> Node:
        hit = memo.get(id(n))
        if hit is not None:
            return hit[1]
        if isinstance(n, Chars):
            out = leaf(n)
        elif isinstance(n, Concat):
            out = concat([walk(i) for i in n.items])
        elif isinstance(n, Alt):
            out = alt([walk(i) for i in n.items])
        elif isinstance(n, Repeat):
            out = repeat(walk(n.item), n.min, n.max)
        elif isinstance(n, Look) and into_looks:
            out = Look(n.behind, n.negated, walk(n.body))
        else:
            out = n
        memo[id(n)] = (n, out)  # keeps n alive, so its id is not reused
        return out

    return walk(node)


def has_look(node: Node) -> bool:
    """Whether the tree holds a zero-width assertion (the builder's slower path)."""
    stack = [node]
    while stack:
        top = stack.pop()
        if isinstance(top, Look):
            return True
        if isinstance(top, (Concat, Alt)):
            stack.extend(top.items)
        elif isinstance(top, Repeat):
            stack.append(top.item)
    return False

