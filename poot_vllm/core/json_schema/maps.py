"""Free-key objects (``Dict[str, X]``, free-form ``{}``) whose keys can never repeat.

Strict JSON parsers reject ``{"a":1,"a":2}`` and a map's keys are free text,
so "all keys distinct" is not a regular language.  poot narrows exactly:
every key is emitted in the *slot* of its first character, slots appear in a
fixed order and each slot holds at most one key.  Two keys in different
slots differ in their first character, so no key repeats.

Slots, in order: the empty key ``""``; keys starting with a digit; keys
starting with a letter of each letter group (``a``-``z`` in
``letter_groups`` contiguous groups, either case); keys starting with any
other character.  The first character is written raw (never as an escape),
so the decoded first character is the slot's; only characters JSON never
holds raw (``"``, ``\\``, controls, the ``escaped`` set) start the last slot's
keys as their escapes.  Every slot holds the whole
value regex (twice: as the first member and after a comma, and the
automaton carries the slot through the value), so the number of letter
groups shrinks as the value grows (:func:`choose_slots`), down to a map of
at most one key for large values.  Free-form objects (``{}``, ``Any``) hold
at most one key.
"""

from __future__ import annotations

from poot_vllm.core.regex import charsets as cs
from poot_vllm.core.regex.escape import class_regex

#: Letter-group counts tried from the finest down (3: ``[a-hA-H]``, ``[i-qI-Q]``, ``[r-zR-Z]``).
LETTER_GROUPS = (3, 1)
#: A map's regex may take at most this many characters for its slots before groups are merged.
MAP_REGEX_SHARE = 3000

_DIGITS: cs.CodepointSet = ((0x30, 0x39),)


def _letters(lo: int, hi: int) -> cs.CodepointSet:
    """Letters ``chr(lo)``..``chr(hi)`` (lower case code points) in either case."""
    return cs.union(((lo, hi),), ((lo - 32, hi - 32),))


def slot_classes(letter_groups: int, raw: cs.CodepointSet, with_empty: bool = True) -> list[cs.CodepointSet | None]:
    """First-character classes of the slots, in order (``None``: the empty key).

    ``letter_groups`` >= 1: the empty key, digits, that many letter groups,
    everything else; 0: the empty key, ``[0-9a-mA-M]``, everything else.
    ``raw``: the characters a key may start with (written raw in JSON).
    """
    out: list[cs.CodepointSet | None] = [None] if with_empty else []
    if letter_groups == 0:
        low = cs.union(_DIGITS, _letters(ord("a"), ord("m")))
        out += [cs.intersect(low, raw), cs.subtract(raw, low)]
        return [c for c in out if c is None or c]
    out.append(cs.intersect(_DIGITS, raw))
    a = ord("a")
    for i in range(letter_groups):
        lo = a + (26 * i) // letter_groups
        hi = a + (26 * (i + 1)) // letter_groups - 1
        out.append(cs.intersect(_letters(lo, hi), raw))
    other = cs.subtract(cs.subtract(raw, _DIGITS), _letters(ord("a"), ord("z")))
    out.append(other)
    return [c for c in out if c is None or c]


def key_regex(first: cs.CodepointSet | None, json_char: str, escapes: str | None = None) -> str:
    """A JSON key (with quotes) starting with a raw character of ``first`` (``None``: the empty key).

    ``escapes``: a regex for the escape spellings of characters never written
    raw (``"``, ``\\``, controls, the ``escaped`` set), allowed as the first
    character of the last ("anything else") slot: they decode to characters
    that no other slot starts with.
    """
    if first is None:
        return '""'
    head = class_regex(first) if escapes is None else f"(?:{class_regex(first)}|{escapes})"
    return f'"{head}{json_char}*"'


def ordered_members(members: list[str], comma: str, non_empty: bool) -> str:
    """Comma-correct regex for any subsequence of ``members`` in order (each at most once).

    acc_k = (?:acc_{k-1}(?:,m_k)?|m_k): linear size (every member twice), one
    group level per member.
    """
    acc: str | None = None
    for m in members:
        acc = m if acc is None else f"(?:{acc}(?:{comma}{m})?|{m})"
    assert acc is not None
    return acc if non_empty else f"(?:{acc})?"


def choose_slots(value_len: int, max_keys: int | None) -> tuple[int, bool] | None:
    """(letter groups, with the empty-key slot) for a map whose value regex has ``value_len`` characters.

    The finest grouping whose slots fit :data:`MAP_REGEX_SHARE` and ``max_keys``
    (maxProperties: one key per slot, so fewer slots bound the count);
    ``None``: at most one key (any key).
    """
    for groups in LETTER_GROUPS + (0,):
        for with_empty in (True, False):
            slots = (groups + 3 if groups else 3) - (0 if with_empty else 1)
            if (max_keys is None or slots <= max_keys) and 2 * slots * value_len <= MAP_REGEX_SHARE:
                return groups, with_empty
    return None
