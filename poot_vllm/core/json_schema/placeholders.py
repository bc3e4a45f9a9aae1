"""Rules mode's vocabulary, shared by the schema compiler and json_schema.recursive.

In rules mode a reference to a recursive ``$ref`` target is written into the
regex text as one placeholder character, U+100000 + k (Unicode's
Supplementary Private Use Area-B), later read back as a call of rule k.
:class:`NeedsUnrolling` is how the compiler says a placeholder cannot stand
for its rule here (the schema then takes the unrolled DFA).
"""

from __future__ import annotations

#: Placeholders are U+100000 + k (Supplementary Private Use Area-B).
PLACEHOLDER_BASE = 0x100000
PLACEHOLDER_END = 0x10FFFD


class NeedsUnrolling(Exception):
    """Rules mode cannot write this schema; the unrolled DFA path takes it (not a PootError:
    the compiler's own ``except PootError`` handlers must let it through)."""


def rule_placeholder(k: int) -> str:
    """The character that stands for the ``k``-th rule in the regex text."""
    return chr(PLACEHOLDER_BASE + k)
