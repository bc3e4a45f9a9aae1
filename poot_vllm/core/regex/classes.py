"""Bracket expressions ``[...]``: the one class parser behind every front end.

``guided_regex``, JSON Schema ``pattern`` and GBNF classes share the shape of
a class -- ``[``, an optional ``^``, members and ``lo-hi`` ranges, ``]`` --
and differ only in what a member may be and in how errors are worded, which
:class:`ClassSyntax` supplies:

* Python ``re`` (:mod:`poot_vllm.core.regex.parser`): ``]`` first is a
  literal, members include ``\\d``-style sets, ``re``'s messages;
* GBNF (:mod:`poot_vllm.core.grammar.gbnf`): ``]`` first closes the class
  (``[]`` is empty), members are single characters with GBNF's escapes,
  messages with line:column.

The range rules are ``re``'s, which GBNF shares: a ``-`` right before ``]``
is a literal, and a range's ends must be single characters in order.
"""

from __future__ import annotations

from typing import Protocol

from poot_vllm.core.errors import PootError
from poot_vllm.core.regex import charsets as cs
from poot_vllm.core.regex.tokens import Tokens

class ClassSyntax(Protocol):
    """What one front end's classes mean beyond the shared shape."""

    #: A ``]`` right after ``[`` / ``[^`` closes the class (GBNF) instead of being a literal (``re``).
    close_first: bool

    def member(self, source: Tokens, token: str, pos: int, negated: bool) -> int | cs.CodepointSet:
        """The code point (or set, for ``\\d``-style escapes) of ``token`` read at ``pos``."""
        ...

    def unterminated(self, source: Tokens, start: int) -> PootError:
        """The class opened at ``start`` has no ``]``."""
        ...

    def bad_range(
        self, source: Tokens, start: int, this: str, that: str, lo: int | cs.CodepointSet, hi: int | cs.CodepointSet
    ) -> PootError:
        """``this-that`` is not a range: an end is a set, or ``hi < lo``."""
        ...


def parse_class(
    source: Tokens, syntax: ClassSyntax, start: int, members: "list[tuple] | None" = None
) -> cs.CodepointSet:
    """After the ``[`` at ``start``: the class's code points (negation applied, surrogates dropped).

    With ``members``, also records what the class is made of, in order, as
    ``re``'s parser sees it -- ``("lit", cp)``, ``("range", lo, hi)``,
    ``("set", "\\w")`` -- with ``("negate",)`` first for ``[^...]``:
    IGNORECASE folds a class member by member
    (:mod:`poot_vllm.core.regex.casefold`), so the members matter, not only
    their union.
    """
    negated = source.match("^")
    if members is not None and negated:
        members.append(("negate",))
    ranges: list[tuple[int, int]] = []
    nonempty = False
    while True:
        pos = source.tell()
        this = source.get()
        if this is None:
            raise syntax.unterminated(source, start)
        if this == "]" and (nonempty or syntax.close_first):
            break
        code1 = syntax.member(source, this, pos, negated)
        nonempty = True
        if source.match("-"):
            pos = source.tell()
            that = source.get()
            if that is None:
                raise syntax.unterminated(source, start)
            if that == "]":
                _add(ranges, code1)
                ranges.append((ord("-"), ord("-")))
                if members is not None:
                    members.append(_member(this, code1))
                    members.append(("lit", ord("-")))
                break
            code2 = syntax.member(source, that, pos, negated)
            if not isinstance(code1, int) or not isinstance(code2, int) or code2 < code1:
                raise syntax.bad_range(source, start, this, that, code1, code2)
            ranges.append((code1, code2))
            if members is not None:
                members.append(("range", code1, code2))
        else:
            _add(ranges, code1)
            if members is not None:
                members.append(_member(this, code1))
    result = cs.normalize(ranges)
    return cs.complement(result) if negated else result


def _add(ranges: list[tuple[int, int]], code: int | cs.CodepointSet) -> None:
    if isinstance(code, int):
        ranges.append((code, code))
    else:
        ranges.extend(code)


def _member(token: str, code: int | cs.CodepointSet) -> tuple:
    return ("lit", code) if isinstance(code, int) else ("set", token)
