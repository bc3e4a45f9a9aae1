"""Exact decimal ranges and multiples for JSON numbers, written as regexes.

Everything here is exact rational arithmetic (:class:`fractions.Fraction`);
no value is ever rounded through a float.

**The number grid.**  poot spells every ``number`` value in fixed point (no
exponent) with at most ``SIG_DIGITS`` (15) significant digits:

* integer part ``0``: at most 15 digits after the point (``0.000000000000001``);
* integer part of k >= 1 digits (no leading zero, k <= 15): at most 15 - k
  digits after the point.

So ``|x| < 10**15`` and every nonzero ``|x| >= 10**-15``: every value is a
finite, normal IEEE double, and (as 15 <= DBL_DIG) two different grid values
never parse to the same double.  That makes bounds exact for a consumer that
parses doubles: ``x > D`` for the bound's shortest decimal ``D`` implies
``double(x) > double(D)``.

**Integers** (``integer_range_regex``) are exact at any size; the compiler
bounds their magnitude (``INTEGER_DIGITS``).

**Multiples** of ``c`` among digit strings: enumerated when the range holds at
most ``MAX_ENUMERATED`` of them, else by their last ``j`` digits when ``c``
divides ``10**j`` (``j <= MAX_SUFFIX_DIGITS``); anything else is refused by the
caller (residues modulo other ``c`` over bounded-length numbers have no small
regex).
"""

from __future__ import annotations

import math
from fractions import Fraction

from poot_vllm.core.automata.residues import MAX_RESIDUE, residue_lookahead
from poot_vllm.core.json_schema.ranges import integer_range_regex

SIG_DIGITS = 15
#: The largest grid value.
GRID_MAX = Fraction(10**SIG_DIGITS - 1)
#: Smaller than every grid step (the finest is 10**-15).
_EPS = Fraction(1, 10 ** (SIG_DIGITS + 1))
#: Integers whose range is open on a side stop at this many digits (int64 fits).
INTEGER_DIGITS = 19
#: Explicit integer bounds beyond this many digits are refused.
MAX_INTEGER_DIGITS = 40
#: A multipleOf range with at most this many multiples is written out value by value.
MAX_ENUMERATED = 1000
#: Otherwise the step must divide 10**j for some j <= this (2, 4, 5, 8, 10, 20, 25, ..., 1000).
MAX_SUFFIX_DIGITS = 3


def _digit_class(lo: int, hi: int) -> str:
    if lo == hi:
        return str(lo)
    if lo == 0 and hi == 9:
        return "[0-9]"
    return f"[{lo}-{hi}]"


def _free(n: int, lo: int = 0) -> str:
    """``[0-9]{lo,n}``."""
    if n <= 0:
        return ""
    if lo == n:
        return "[0-9]" if n == 1 else f"[0-9]{{{n}}}"
    if (lo, n) == (0, 1):
        return "[0-9]?"
    return f"[0-9]{{{lo},{n}}}"


def _alt(alts: list[str]) -> str:
    alts = list(dict.fromkeys(alts))
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


# -- the grid -------------------------------------------------------------------------
def frac_digits(int_part: int) -> int:
    """Digits allowed after the point for a value whose integer part is ``int_part`` (>= 0)."""
    return SIG_DIGITS if int_part == 0 else SIG_DIGITS - len(str(int_part))


def _step(v: Fraction) -> Fraction:
    """The grid step of the band holding ``v`` (0 <= v <= GRID_MAX)."""
    return Fraction(1, 10 ** frac_digits(int(v)))


def _ceil(x: Fraction) -> int:
    return -((-x.numerator) // x.denominator)


def grid_ceil(v: Fraction) -> Fraction | None:
    """The smallest grid value >= v (None above the grid)."""
    if v > GRID_MAX:
        return None
    if v < 0:
        f = grid_floor(-v)
        return -f if f is not None else -GRID_MAX
    s = _step(v)
    c = _ceil(v / s) * s
    return c if c <= GRID_MAX else None


def grid_floor(v: Fraction) -> Fraction | None:
    """The largest grid value <= v (None below the grid)."""
    if v < -GRID_MAX:
        return None
    if v < 0:
        c = grid_ceil(-v)
        return -c if c is not None else -GRID_MAX
    if v >= GRID_MAX:
        return GRID_MAX
    s = _step(v)
    return (v // s) * s


def grid_above(v: Fraction) -> Fraction | None:
    """The smallest grid value > v."""
    c = grid_ceil(v)
    if c is not None and c == v:
        c = grid_ceil(v + _EPS)
    return c


def grid_below(v: Fraction) -> Fraction | None:
    """The largest grid value < v."""
    f = grid_floor(v)
    if f is not None and f == v:
        f = grid_floor(v - _EPS)
    return f


def on_grid(v: Fraction) -> bool:
    return grid_ceil(v) == v


# -- fraction digits --------------------------------------------------------------------
def _tails(a: str, b: str) -> list[str]:
    """Alternatives for digit strings g, len(g) <= len(a) == len(b), with a <= g padded with zeros <= b.

    The empty string (a possible alternative) is included when ``a`` is all zeros.
    """
    m = len(a)
    if m == 0:
        return [""]
    if a == "0" * m and b == "9" * m:
        return [""] + ([_free(m, 1)])
    out = [""] if a == "0" * m else []
    a0, b0 = int(a[0]), int(b[0])
    if a0 == b0:
        out.append(a[0] + _opt(_tails(a[1:], b[1:])))
        return out
    out.append(a[0] + _opt(_tails(a[1:], "9" * (m - 1))))
    if a0 + 1 <= b0 - 1:
        out.append(_digit_class(a0 + 1, b0 - 1) + _free(m - 1))
    out.append(b[0] + _opt(_tails("0" * (m - 1), b[1:])))
    return out


def _opt(alts: list[str]) -> str:
    """A regex for the alternatives (one of which may be empty)."""
    rest = [x for x in alts if x]
    if not rest:
        return ""
    body = _alt(rest)
    if "" in alts:
        return (body if body.startswith("(?:") and body.endswith(")") and _balanced(body[3:-1]) else f"(?:{body})") + "?"
    return body


def _balanced(s: str) -> bool:
    depth = 0
    for i, ch in enumerate(s):
        if ch == "(" and (i == 0 or s[i - 1] != "\\"):
            depth += 1
        elif ch == ")" and (i == 0 or s[i - 1] != "\\"):
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def _fraction_regex(a: str, b: str) -> str:
    """``(\\.g)?`` for the fractions g (1..len(a) digits) with a <= g padded <= b; no point when a is zeros."""
    if not a:
        return ""
    alts = _tails(a, b)
    rest = [x for x in alts if x]
    if not rest:
        return ""
    body = "\\." + _alt(rest)
    return f"(?:{body})?" if "" in alts else body


def _digits(v: Fraction) -> tuple[int, str]:
    """(integer part, fraction digits padded to the band's length) of a grid value v >= 0."""
    i = int(v)
    m = frac_digits(i)
    f = (v - i) * 10**m
    assert f.denominator == 1, v
    return i, str(f.numerator).zfill(m) if m else ""


def _nonnegative_grid(a: Fraction, b: Fraction) -> list[str]:
    """Alternatives spelling the grid values in [a, b] (0 <= a <= b, both on the grid)."""
    out: list[str] = []
    bands = [(Fraction(0), Fraction(1))] + [(Fraction(10 ** (k - 1)), Fraction(10**k)) for k in range(1, SIG_DIGITS + 1)]
    for start, end in bands:
        last = end - Fraction(1, 10 ** frac_digits(int(start)))  # the largest grid value of the band
        lo, hi = max(a, start), min(b, last)
        if lo > hi:
            continue
        m = frac_digits(int(start))
        frac_any = f"(?:\\.{_free(m, 1)})?" if m else ""
        if hi == last and start >= 1 and lo == start:
            # A whole band: k digits, then up to 15 - k fraction digits.
            k = len(str(int(start)))
            out.append("[1-9]" + _free(k - 1, k - 1) + frac_any)
            continue
        if hi == last and start == 0 and lo <= Fraction(1, 10**m):
            # Every value below 1 (from the smallest positive one): nonzero fractions of 1..15 digits.
            if lo == 0:
                out.append("0" + frac_any)
                continue
            out.extend(["0\\.(?:" + "|".join(("0" * z if z < 4 else f"0{{{z}}}") + "[1-9]" + _free(m - 1 - z)
                                                  for z in range(m)) + ")"])
            continue
        ia, fa = _digits(lo)
        ib, fb = _digits(hi)
        m = len(fa)
        if ia == ib:
            out.append(str(ia) + _fraction_regex(fa, fb))
            continue
        out.append(str(ia) + _fraction_regex(fa, "9" * m))
        if ia + 1 <= ib - 1:
            out.append(integer_range_regex(ia + 1, ib - 1) + _fraction_regex("0" * m, "9" * m))
        out.append(str(ib) + _fraction_regex("0" * m, fb))
    return out


def number_range_regex(lo: Fraction, hi: Fraction) -> str:
    """The grid values in [lo, hi] (both on the grid), fixed point, never ``-0``."""
    if lo > hi:
        raise ValueError(f"empty number range [{lo}, {hi}]")
    alts: list[str] = []
    if lo < 0:
        top = -lo
        bottom = max(-hi, Fraction(1, 10**SIG_DIGITS))
        if bottom <= top:
            alts.append("-" + _alt(_nonnegative_grid(bottom, top)))
    if hi >= 0:
        alts.extend(_nonnegative_grid(max(lo, Fraction(0)), hi))
    return _alt(alts)


#: Unbounded numbers (compact, as it appears in every free-form value): at most 15 integer
#: digits and at most 15 fraction digits, fixed point, never ``-0``; finite doubles.  Bounds
#: and multipleOf use the stricter 15-significant-digit grid.
NUMBER = "(?:0(?:\\.[0-9]{1,15})?|-?(?:0\\.[0-9]{0,14}[1-9]|[1-9][0-9]{0,14}(?:\\.[0-9]{1,15})?))"


# -- multiples --------------------------------------------------------------------------
def suffix_digits(c: int) -> int | None:
    """The least j <= MAX_SUFFIX_DIGITS with c dividing 10**j (None if there is none)."""
    for j in range(MAX_SUFFIX_DIGITS + 1):
        if 10**j % c == 0:
            return j
    return None


def count_multiples(lo: int, hi: int, c: int) -> int:
    """How many multiples of c lie in [lo, hi]."""
    return max(0, hi // c - (lo - 1) // c)


def _patterns(lo: str, hi: str) -> list[list[tuple[int, int]]]:
    """Per-position digit ranges covering exactly the same-length digit strings in [lo, hi]."""
    n = len(lo)
    if n == 0:
        return [[]]
    if lo == "0" * n and hi == "9" * n:
        return [[(0, 9)] * n]
    a0, b0 = int(lo[0]), int(hi[0])
    if a0 == b0:
        return [[(a0, a0)] + p for p in _patterns(lo[1:], hi[1:])]
    if lo[1:] == "0" * (n - 1) and hi[1:] == "9" * (n - 1):
        return [[(a0, b0)] + [(0, 9)] * (n - 1)]
    out = [[(a0, a0)] + p for p in _patterns(lo[1:], "9" * (n - 1))]
    if a0 + 1 <= b0 - 1:
        out.append([(a0 + 1, b0 - 1)] + [(0, 9)] * (n - 1))
    out += [[(b0, b0)] + p for p in _patterns("0" * (n - 1), hi[1:])]
    return out


def _trie(strings: list[str]) -> str:
    """A compact regex for a finite set of equal-or-varied-length strings (digits and '.')."""
    if not strings:
        raise ValueError("empty set")
    if strings == [""]:
        return ""
    heads: dict[str, list[str]] = {}
    empty = False
    for s in strings:
        if not s:
            empty = True
        else:
            heads.setdefault(s[0], []).append(s[1:])
    # Merge heads whose continuations are identical into one class.
    by_tail: dict[str, list[str]] = {}
    for h, rest in heads.items():
        by_tail.setdefault(_trie(sorted(set(rest))), []).append(h)
    alts = []
    for tail, hs in by_tail.items():
        hs.sort()
        if len(hs) == 1:
            head = "\\." if hs[0] == "." else hs[0]
        else:
            head = "[" + "".join(hs) + "]"
        alts.append(head + tail)
    body = _alt(alts)
    if empty:
        return (body if len(alts) > 1 else f"(?:{body})") + "?"
    return body


def _runs(parts: list[str]) -> str:
    """Concatenate digit classes, writing runs of one class as ``X{r}``."""
    out: list[str] = []
    i = 0
    while i < len(parts):
        j = i
        while j < len(parts) and parts[j] == parts[i]:
            j += 1
        r = j - i
        out.append(parts[i] if r == 1 else parts[i] * r if len(parts[i]) == 1 and r <= 3 else f"{parts[i]}{{{r}}}")
        i = j
    return "".join(out)


def _spell(n: int, scale: int) -> str:
    """The magnitude n * 10**-scale in fixed point with exactly ``scale`` fraction digits."""
    if scale == 0:
        return str(n)
    t = str(n).zfill(scale + 1)
    return t[:-scale] + "." + t[-scale:]


def multiples_regex(lo: int, hi: int, c: int, scale: int, residues: bool = False) -> str | None:
    """The values n * 10**-scale with lo <= n <= hi and c | n, spelled with exactly ``scale``
    fraction digits (never ``-0``); None when no small regex exists (caller refuses).

    Few multiples are listed, a step dividing ``10**MAX_SUFFIX_DIGITS`` is
    spelled by the last digits; with ``residues`` any other step up to
    ``MAX_RESIDUE`` is the range behind a residue lookahead
    (``automata/residues.py``: the automaton builder runs ``n mod c`` there).

    Raises ValueError when there is no such value.
    """
    count = count_multiples(lo, hi, c)
    if count == 0:
        raise ValueError("no multiple in range")
    if count <= MAX_ENUMERATED:
        first = _ceil(Fraction(lo, c)) * c
        neg = [_spell(-n, scale) for n in range(first, min(hi, -1) + 1, c)]
        pos = [_spell(n, scale) for n in range(first if first >= 0 else 0, hi + 1, c)]
        alts = []
        if neg:
            alts.append("-" + _trie(sorted(set(neg))))
        if pos:
            alts.append(_trie(sorted(set(pos))))
        return _alt(alts)
    j = suffix_digits(c)
    if j is None:
        # c = s * m with s | 10**j and m coprime to 10: a multiple of c is one of s (the last
        # digits) and of m (the residue lookahead), the two being coprime.
        s = math.gcd(c, 10**MAX_SUFFIX_DIGITS)
        m = c // s
        if not residues or math.gcd(m, 10) != 1 or m > MAX_RESIDUE:
            if not residues or c > MAX_RESIDUE:
                return None
            s, m = 1, c
        return residue_lookahead(m) + "(?:" + multiples_regex(lo, hi, s, scale) + ")"
    alts = []
    if lo < 0:
        mag = _suffix_magnitudes(max(1, -hi), -lo, c, j, scale)
        if mag:
            alts.append("-" + _alt(mag))
    if hi >= 0:
        alts.extend(_suffix_magnitudes(max(lo, 0), hi, c, j, scale))
    return _alt(alts)


def _suffix_magnitudes(lo: int, hi: int, c: int, j: int, scale: int) -> list[str]:
    """Alternatives for the multiples of c in [lo, hi] (0 <= lo), c | 10**j, by their last j digits."""
    out: list[str] = []
    if lo > hi:
        return out
    cache: dict[tuple, str] = {}
    width_lo = max(len(str(lo)), scale + 1)
    width_hi = max(len(str(hi)), scale + 1)
    for n in range(width_lo, width_hi + 1):
        # Strings of exactly n digits: zero-padded (the integer part "0") only at the minimal width.
        smallest = 0 if n == scale + 1 else 10 ** (n - 1)
        a, b = max(lo, smallest), min(hi, 10**n - 1)
        if a > b:
            continue
        for pat in _patterns(str(a).zfill(n), str(b).zfill(n)):
            t = min(n, j)
            key = tuple(pat[n - t:])
            if t == 0:
                cache[key] = ""  # (c == 1: every value; no suffix digits)
            if key not in cache:
                sufs = [str(v).zfill(t) for v in range(0, 10**t, c)
                        if all(key[i][0] <= int(str(v).zfill(t)[i]) <= key[i][1] for i in range(t))]
                cache[key] = _trie(sufs) if sufs else "\x00"
            if cache[key] == "\x00":
                continue
            head = pat[: n - t]
            parts = [_digit_class(x, y) for x, y in head]
            text = _runs(parts)
            # Insert the point before the last ``scale`` digits.
            if scale:
                if scale <= t:
                    # The point falls inside the suffix: spell the suffix set with it.
                    sufs = [str(v).zfill(t) for v in range(0, 10**t, c)
                            if all(key[i][0] <= int(str(v).zfill(t)[i]) <= key[i][1] for i in range(t))]
                    sufs = [s[: t - scale] + "." + s[t - scale:] for s in sufs]
                    out.append(text + _trie(sorted(sufs)))
                else:
                    k = n - scale  # the point goes after this many digits of the head
                    out.append(_runs(parts[:k]) + "\\." + _runs(parts[k:]) + cache[key])
            else:
                out.append(text + cache[key])
    return out
