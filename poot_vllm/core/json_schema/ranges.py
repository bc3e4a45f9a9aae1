"""Exact regexes for integer ranges, written in decimal digits.

``integer_range_regex(lo, hi)`` matches exactly the JSON integer literals
``n`` with ``lo <= n <= hi`` (either bound may be ``None`` = unbounded): no
leading zeros, no ``+``, and never ``-0`` (JSON allows it, but it is the same
value as ``0`` and some consumers parse it as a float, so poot emits ``0``).

Bounds are Python ints of any size; the regex size grows with the number of
digits (quadratically at worst), not with the width of the range.
"""

from __future__ import annotations


def _digit_class(lo: str, hi: str) -> str:
    if lo == hi:
        return lo
    if lo == "0" and hi == "9":
        return "[0-9]"
    return f"[{lo}-{hi}]"


def _any_digits(n: int) -> str:
    if n == 0:
        return ""
    return "[0-9]" if n == 1 else f"[0-9]{{{n}}}"


def _same_length(lo: str, hi: str) -> list[str]:
    """Alternatives matching every digit string d with lo <= d <= hi (same length)."""
    n = len(lo)
    if n == 1:
        return [_digit_class(lo, hi)]
    if lo[0] == hi[0]:
        rest = _same_length(lo[1:], hi[1:])
        inner = rest[0] if len(rest) == 1 else "(?:" + "|".join(rest) + ")"
        return [lo[0] + inner]
    out: list[str] = []
    first_lo, first_hi = int(lo[0]), int(hi[0])
    # The leading digit lo[0] covers [lo, lo[0]99..9]; fold it into the free
    # middle block when lo[1:] is all zeros (then every tail is allowed).
    if lo[1:] == "0" * (n - 1):
        mid_lo = first_lo
    else:
        rest = _same_length(lo[1:], "9" * (n - 1))
        out.append(lo[0] + (rest[0] if len(rest) == 1 else "(?:" + "|".join(rest) + ")"))
        mid_lo = first_lo + 1
    if hi[1:] == "9" * (n - 1):
        mid_hi = first_hi
        tail_hi = None
    else:
        mid_hi = first_hi - 1
        tail_hi = _same_length("0" * (n - 1), hi[1:])
    if mid_lo <= mid_hi:
        out.append(_digit_class(str(mid_lo), str(mid_hi)) + _any_digits(n - 1))
    if tail_hi is not None:
        out.append(hi[0] + (tail_hi[0] if len(tail_hi) == 1 else "(?:" + "|".join(tail_hi) + ")"))
    return out


def _nonnegative(lo: int, hi: int | None) -> list[str]:
    """Alternatives for the decimal literals of lo..hi (lo >= 0; hi None = no bound)."""
    out: list[str] = []
    length = len(str(lo))
    top = len(str(hi)) if hi is not None else length
    for n in range(length, top + 1):
        start = max(lo, 10 ** (n - 1) if n > 1 else 0)
        end = min(hi, 10**n - 1) if hi is not None else 10**n - 1
        if start <= end:
            out.extend(_same_length(str(start).zfill(n), str(end)))
    if hi is None:
        # Every literal longer than the lower bound is larger than it.
        out.append(f"[1-9][0-9]{{{length},}}")
    return out


def integer_range_regex(lo: int | None, hi: int | None) -> str:
    """A regex matching exactly the canonical decimal literals of lo..hi.

    Raises ``ValueError`` when the range is empty (callers turn that into a
    refusal that names the schema keywords).
    """
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"empty integer range [{lo}, {hi}]")
    alts: list[str] = []
    # Negative part: "-" then the magnitudes, never "-0".
    if lo is None or lo < 0:
        mag_lo = 1 if hi is None or hi >= 0 else -hi
        mag_hi = None if lo is None else -lo
        neg = _nonnegative(mag_lo, mag_hi)
        alts.append("-" + (neg[0] if len(neg) == 1 else "(?:" + "|".join(neg) + ")"))
    if hi is None or hi >= 0:
        alts.extend(_nonnegative(max(lo, 0) if lo is not None else 0, hi))
    if len(alts) == 1:
        return alts[0]
    return "(?:" + "|".join(alts) + ")"
