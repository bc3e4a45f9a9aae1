"""Exact regexes for the string ``format`` values poot enforces.

Each regex describes the decoded string content; none of them can produce
``"``, ``\\`` or a control character, so the same text is also the raw JSON
content.  Where a definition leaves a choice, poot takes the conservative
side (documented in docs/json-schema.md):

* ``date``: RFC 3339 ``full-date`` with real month lengths and leap years,
  years 0001-9999 (Python's ``date.fromisoformat``, which jsonschema's format
  checker uses, has no year 0).
* ``time``: RFC 3339 ``full-time`` (``HH:MM:SS[.frac](Z|+HH:MM|-HH:MM)``),
  upper-case ``Z``, no leap second ``:60``.
* ``date-time``: ``date`` ``T`` ``time`` (upper-case ``T``).
* ``uuid``: 8-4-4-4-12 lower-case hex digits.
* ``email``: ``dot-atom@domain`` (RFC 5321 dot-atom local part, LDH domain
  labels of 1-63 characters, at least two labels); no quoted local parts, no
  IP-literal domains.
* ``ipv4``: dotted quad, octets 0-255 without leading zeros.
* ``hostname``: 1 to 3 LDH labels of 1-63 characters separated by dots
  (RFC 1123; at most 191 characters, inside the 253 limit).
* ``uri`` / ``uri-reference``: ``http``/``https`` URLs with a hostname, an
  optional port, and path/query/fragment made of RFC 3986 unreserved
  characters, sub-delimiters, ``:``, ``@``, ``/`` and percent-escapes (an
  absolute URI is also a URI reference).
"""

from __future__ import annotations

_YEAR = "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"
_LEAP_YEAR = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_MONTH_DAY = (
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
)
DATE = f"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
TIME = (
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?"
    "(?:Z|[+\\-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
DATE_TIME = f"{DATE}T{TIME}"
UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~\\-]"
_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9\\-]{0,61}[A-Za-z0-9])?"
EMAIL = f"{_ATEXT}+(?:\\.{_ATEXT}+)*@{_LABEL}(?:\\.{_LABEL})+"
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
IPV4 = f"{_OCTET}(?:\\.{_OCTET}){{3}}"

HOSTNAME = f"{_LABEL}(?:\\.{_LABEL}){{0,2}}"
_PCHAR = "(?:[A-Za-z0-9\\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})"
URI = f"https?://{HOSTNAME}(?::[0-9]{{1,5}})?(?:/{_PCHAR}*)*(?:\\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"

FORMATS: dict[str, str] = {
    "hostname": HOSTNAME,
    "uri": URI,
    "uri-reference": URI,
    "date": DATE,
    "time": TIME,
    "date-time": DATE_TIME,
    "uuid": UUID,
    "email": EMAIL,
    "ipv4": IPV4,
}

#: (min, max) content length in characters; ``None`` = unbounded.
FORMAT_LENGTHS: dict[str, tuple[int, int | None]] = {
    "date": (10, 10),
    "time": (9, None),
    "date-time": (20, None),
    "uuid": (36, 36),
    "email": (5, None),
    "ipv4": (7, 15),
    "hostname": (1, 191),
    "uri": (8, None),
    "uri-reference": (8, None),
}
