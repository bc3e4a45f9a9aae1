"""Typed errors raised by poot's compilers.

Every refusal poot makes is a :class:`PootError`.  The API-server hook turns it
into an HTTP 400 in vLLM's OpenAI error shape, with ``param`` set to
:attr:`PootError.field` (the request field that carried the constraint).
Anything else escaping a compiler is a bug.
"""

from __future__ import annotations


class PootError(ValueError):
    """A constraint poot refuses, with a message that says what to change.

    ``field`` is the request field (``guided_regex``, ``guided_json``, ...) the
    constraint came from; compilers leave it ``None`` and the request hook
    fills it in.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def with_field(self, field: str) -> "PootError":
        """Name the request field, keeping the type (used by the request hook)."""
        if self.field is None:
            self.field = field
        return self

    def __str__(self) -> str:
        if self.field and not self.message.startswith(self.field):
            return f"{self.field}: {self.message}"
        return self.message


class LimitExceeded(PootError):
    """An input or a build passed one of the bounds in :mod:`poot_vllm.core.limits`."""

    def __init__(self, what: str, limit_name: str, limit: int, unit: str, detail: str = "") -> None:
        msg = f"{what} exceeds the limit {limit_name}={limit} {unit}"
        if detail:
            msg += f" ({detail})"
        msg += f"; simplify the constraint, or the server operator can raise POOT_{limit_name.upper()}"
        super().__init__(msg)
        self.limit_name = limit_name
        self.limit = limit
        self.what = what
        self.unit = unit
        #: the parenthesised detail alone, so a caller can re-raise naming its input
        self.detail = detail


class UnsupportedConstruct(PootError):
    """A valid construct poot cannot enforce exactly (so it refuses it)."""


class ConstraintSyntaxError(PootError):
    """The constraint text does not parse (regex, GBNF, JSON)."""


class EmptyLanguage(PootError):
    """The constraint matches no string (an automaton with no accepting path)."""
