"""The tokenizer every front end reads patterns with: ``re``'s own token rules.

A token is one character, or a backslash and the character after it (so
``\\]`` can never close a class and ``\\(`` never opens a group).  This is
CPython's ``re._parser.Tokenizer``, with the error wording and the treatment
of a trailing backslash left to the front end: Python's ``re`` rejects it as
soon as it is looked at (kept for ``guided_regex`` and JSON Schema
``pattern``), GBNF reports it where it is read.
"""

from __future__ import annotations

from typing import Callable

from poot_vllm.core.errors import ConstraintSyntaxError


def regex_error(text: str, msg: str, pos: int) -> ConstraintSyntaxError:
    """A Python-``re`` syntax error: its message and position, as ``re.error`` gives them."""
    return ConstraintSyntaxError(f"invalid regex: {msg} at position {pos}")


def _regex_trailing_backslash(text: str) -> ConstraintSyntaxError:
    return ConstraintSyntaxError(
        f"bad escape (end of pattern) at position {len(text) - 1}: a trailing backslash escapes nothing; "
        "write \\\\ for a literal backslash"
    )


class Tokens:
    """A cursor over ``text`` from ``start``; ``next`` is the token ahead (None at the end).

    ``error(text, msg, pos)`` words a syntax error; ``trailing_backslash`` is
    raised when a lone backslash ends the text, or None to hand it out as the
    token ``"\\\\"`` (one character) for the front end to refuse where it is read.
    """

    def __init__(
        self,
        text: str,
        start: int = 0,
        error: Callable[[str, str, int], ConstraintSyntaxError] = regex_error,
        trailing_backslash: Callable[[str], ConstraintSyntaxError] | None = _regex_trailing_backslash,
    ) -> None:
        self.text = text
        self.index = start
        self.next: str | None = None
        self._error = error
        self._trailing = trailing_backslash
        self._advance()

    def _advance(self) -> None:
        index = self.index
        if index >= len(self.text):
            self.next = None
            return
        char = self.text[index]
        if char == "\\":
            if index + 1 < len(self.text):
                index += 1
                char += self.text[index]
            elif self._trailing is not None:
                raise self._trailing(self.text)
        self.index = index + 1
        self.next = char

    def match(self, char: str) -> bool:
        if char == self.next:
            self._advance()
            return True
        return False

    def get(self) -> str | None:
        this = self.next
        self._advance()
        return this

    def getwhile(self, n: int, charset: frozenset[str]) -> str:
        result = ""
        for _ in range(n):
            c = self.next
            if c is None or c not in charset:
                break
            result += c
            self._advance()
        return result

    def getuntil(self, terminator: str, name: str) -> str:
        result = ""
        while True:
            c = self.next
            self._advance()
            if c is None:
                if not result:
                    raise self.error("missing " + name)
                raise self.error(f"missing {terminator}, unterminated name", len(result))
            if c == terminator:
                if not result:
                    raise self.error("missing " + name, 1)
                return result
            result += c

    def tell(self) -> int:
        """Where ``next`` starts (the end of what has been read)."""
        return self.index - len(self.next or "")

    def seek(self, index: int) -> None:
        self.index = index
        self._advance()

    def error(self, msg: str, offset: int = 0) -> ConstraintSyntaxError:
        """A syntax error ``offset`` characters before the current position."""
        return self.error_at(msg, self.tell() - offset)

    def error_at(self, msg: str, pos: int) -> ConstraintSyntaxError:
        return self._error(self.text, msg, pos)
