"""Exact regexes for the string ``format`` values poot enforces.

Each regex describes the decoded string content; none of them can produce
``"``, ``\\`` or a control character, so the same text is also the raw JSON
content.  The bar is *the ecosystem's own validators*: every string a format
regex matches passes jsonschema's ``FormatChecker`` (with its optional
checkers: ``rfc3987``/``rfc3986-validator``, ``fqdn``, ``isoduration``,
``jsonpointer``) and, where one exists, Pydantic's type (``EmailStr`` through
``email_validator``, ``AnyUrl`` through the WHATWG URL parser,
``IPv6Address``, ``timedelta``).  Where the exact set would not fit the
automaton budget (length limits multiply states) poot takes the conservative
side: fewer strings, every one valid.  docs/json-schema.md lists each choice.

* ``date``: RFC 3339 ``full-date``, real month lengths and leap years, years
  0001-9999 (``date.fromisoformat`` has no year 0).
* ``time``: RFC 3339 ``full-time``, upper-case ``Z``, no leap second.
* ``date-time``: ``date`` ``T`` ``time``.
* ``uuid``: 8-4-4-4-12 lower-case hex.
* ``email``: RFC 5321 dot-atom local part of at most 32 atext characters
  (at most 63 with its dots; RFC 5321: 64), then 1-2 LDH labels of at most
  24 characters and an alphabetic lower-case top-level label of 2-24
  letters that is not a special-use name (``email_validator`` rejects
  ``.test``, ``.local``, ...): at most 138 characters (RFC 5321: 254).  No
  label has ``--`` as its 3rd-4th characters (``xn--`` punycode must decode;
  ``email_validator`` rejects the rest).  Longer parts and deeper domains
  are left out: every automaton state inside a string costs mask work for
  each vocabulary token (this form has about 260 states).
* ``ipv4``: dotted quad, no leading zeros.
* ``ipv6``: RFC 4291 text forms (1-4 hex digits per group, either case, one
  ``::``, an embedded dotted quad in the last 32 bits); no zone id
  (jsonschema rejects ``%eth0``).
* ``hostname``: RFC 1123 LDH labels, hyphen runs of at most 2 (punycode
  ``xn--`` labels fit): a first label of at most 18 letters and digits (52
  characters), then up to 4 labels of at most 17 (49): at most 252
  characters, inside 253.  Counted labels: ~40 automaton states (labels
  written position by position were 276).
* ``uri`` (RFC 3986): ``scheme://[userinfo@]host[:port]path[?query][#fragment]``
  or ``scheme:path`` (schemes other than the WHATWG special ones, e.g.
  ``mailto:``, ``urn:``).  Host: a dotted quad or LDH labels that start
  with a letter (the WHATWG parser Pydantic uses reads a numeric last label
  as IPv4) and have no ``--`` (at most 32 letters and digits, 63 characters;
  counted, as for ``hostname``); ports 0-65535; ``file`` URIs without userinfo or port;
  schemes of at most 16 characters; no IP literals, no percent-escapes in
  the host, no empty authority/path forms.
* ``uri-reference``: a ``uri`` or a relative reference (``//host/...``,
  ``/path``, ``path`` whose first segment has no ``:``, ``?q``, ``#f``, or
  the empty string).
* ``duration``: RFC 3339 appendix A (``P1Y2M3DT4H5M6S``, ``P2W``, ...),
  at most 6 digits per component.
* ``json-pointer`` (RFC 6901), ``relative-json-pointer``: tokens of raw
  characters (no ``"`` or ``\\``, which would need JSON escapes) and ``~0``/``~1``.
* ``regex``: a literal (no ECMA-262 syntax character), valid in every dialect.
* Names outside the specification that Pydantic checks with its own types
  (``ipvanyaddress``, ``uuid4``, ``base64``, ...; any string for
  ``password``/``binary``/``path``) and ``url`` as ``uri``; other names
  are refused, since an application's own checker may refuse anything.

With ``maxLength`` (Pydantic's ``HttpUrl`` writes 2083) ``uri`` and
``uri-reference`` are built with bounded host, path, query and fragment (no
``%XX`` escapes) so that every string fits (:func:`format_regex`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable

from poot_vllm.core.regex import ast
from poot_vllm.core.regex import charsets as cs
from poot_vllm.core.regex.escape import class_regex
from poot_vllm.core.regex.parser import parse

_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz")
_ALPHA = _LOWER | frozenset(c.upper() for c in _LOWER)
_DIGIT = frozenset("0123456789")
_ALNUM = _ALPHA | _DIGIT
_LDH = _ALNUM | {"-"}


def _cls(chars: Iterable[str]) -> str:
    """Regex text for one character of ``chars``."""
    return class_regex(cs.normalize([(ord(c), ord(c)) for c in chars]))


_A, _L = _cls(_ALNUM), _cls(_LDH)
_HEX = "[0-9A-Fa-f]"


def except_words(first: frozenset, rest: frozenset, lo: int, hi: int | None, words: Iterable[str], fold: bool) -> str:
    """Strings ``first rest*`` of lo..hi characters, except ``words`` (compared lower-cased when ``fold``).

    Built on the trie of the excluded words: at each trie node the next
    character either follows a word (and the construction recurses) or
    leaves every word, after which any tail of the remaining length is fine.
    Raises ValueError when no string is left.
    """
    words = list(words)
    longest = max((len(w) for w in words), default=0)
    if hi is None or hi > longest:
        # Strings longer than every word are never excluded: one shared counted tail
        # instead of a tail per trie branch (a tail costs one automaton position per character).
        short = None
        if lo <= longest:
            try:
                short = except_words(first, rest, lo, longest, words, fold)
            except ValueError:  # every string up to the longest word is excluded; longer ones are not
                short = None
        n = max(lo, longest + 1)
        q = "*" if hi is None and n == 1 else f"{{{n - 1},}}" if hi is None else f"{{{n - 1},{hi - 1}}}"
        long = _cls(first) + _cls(rest) + q if n > 1 or hi != 1 else _cls(first)
        return long if short is None else f"(?:{short}|{long})"
    trie: dict = {}
    for w in words:
        node = trie
        for c in w.lower() if fold else w:
            node = node.setdefault(c, {})
        node[""] = {}

    def tail(depth: int) -> str:
        a, b = max(lo - depth, 0), None if hi is None else hi - depth
        if b == 0:
            return ""
        q = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((a, b)) or (
            f"{{{a},}}" if b is None else f"{{{a}}}" if a == b else f"{{{a},{b}}}")
        return _cls(rest) + q

    def variants(c: str, alphabet: frozenset) -> set[str]:
        return ({c, c.upper()} if fold else {c}) & alphabet

    def on_trie(node: dict, depth: int, d: int, deviate: bool) -> str | None:
        """Strings that follow the trie for ``d`` characters, then (``deviate``) leave it."""
        alphabet = first if depth == 0 else rest
        if depth == d:
            if not deviate:
                return "" if "" not in node else None
            other = set(alphabet)
            for c in node:
                if c:
                    other -= variants(c, alphabet)
            return _cls(other) if other else None
        alts = []
        for c, child in sorted(node.items()):
            if c and variants(c, alphabet):
                sub = on_trie(child, depth + 1, d, deviate)
                if sub is not None:
                    alts.append(_cls(variants(c, alphabet)) + sub)
        if not alts:
            return None
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    # Grouped by where a string leaves the trie (depth d), so all strings that
    # left at the same depth share one tail: the automaton then has one state
    # per trie node plus one per (depth, tail position), not a tail per branch.
    alts = []
    for d in range(0, hi):
        dev = on_trie(trie, 0, d, True)
        if dev is not None and d + 1 <= hi:
            alts.append(dev + tail(d + 1))
    for d in range(max(lo, 1), hi + 1):
        prefix = on_trie(trie, 0, d, False)  # a proper prefix of a word (or a non-word node)
        if prefix is not None:
            alts.append(prefix)
    if not alts:
        raise ValueError("the words exclude every string of these lengths")
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def _counted_label(max_len: int, first: str = _A, hyphens: int = 1) -> str:
    """An LDH label of 1..max_len characters whose hyphen runs are at most
    ``hyphens`` long (a narrowing): at most ``(max_len - 1) // (hyphens + 1) + 1``
    letters and digits.

    Why this shape: ``[A-Za-z0-9-]{0,n}[A-Za-z0-9]`` cannot be counted (a
    letter may continue the run or end it), so it is built a state per
    position, ~``max_len`` states per label, and each state inside a label
    costs a walk of most of the vocabulary (a ``hostname`` field with its five
    labels was 276 states and 215 ms to its first mask at 128k tokens).
    ``(?:-{0,h}[A-Za-z0-9]){0,k}`` is one counted item (``automata.counters``):
    a handful of states per label.  With ``hyphens=1`` no label has ``--``
    anywhere, so every label is also a valid IDNA A-label (``xn--`` punycode
    and other ``??--`` labels are refused by ``idna``, ``email_validator`` and
    the WHATWG host parser); ``hyphens=2`` keeps punycode labels
    (``xn--bcher-kva``) for plain RFC 1123 hostnames.
    """
    dash = "-?" if hyphens == 1 else f"-{{0,{hyphens}}}"
    return f"{first}(?:{dash}{_A}){{0,{(max_len - 1) // (hyphens + 1)}}}"


def _idna_safe_label(max_len: int, first: str = _A) -> str:
    """An LDH label of 1..max_len characters whose 3rd-4th characters are not ``--``.

    ``xn--`` labels must be valid punycode and ``email_validator`` rejects
    every other ``??--`` label; the WHATWG host parser runs IDNA on them.
    """
    return f"{first}(?:{_L}{{0,2}}{_A}|{_L}(?:{_A}{_L}|-{_A}){_L}{{0,{max_len - 5}}}{_A})?"


# -- dates and times ------------------------------------------------------------------
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

_N = "[0-9]{1,6}"
_DUR_TIME = f"T(?:{_N}H(?:{_N}M(?:{_N}S)?)?|{_N}M(?:{_N}S)?|{_N}S)"
DURATION = f"P(?:(?:{_N}D|{_N}M(?:{_N}D)?|{_N}Y(?:{_N}M(?:{_N}D)?)?)(?:{_DUR_TIME})?|{_DUR_TIME}|{_N}W)"

# -- addresses ----------------------------------------------------------------------------
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
IPV4 = f"{_OCTET}(?:\\.{_OCTET}){{3}}"
_H16 = f"{_HEX}{{1,4}}"
_LS32 = f"(?:{_H16}:{_H16}|{IPV4})"


def _ipv6() -> str:
    """RFC 3986's IPv6address (RFC 4291 section 2.2): 8 groups, or ``::`` with up to 7 groups around it."""
    alts = [f"(?:{_H16}:){{6}}{_LS32}", f"::(?:{_H16}:){{5}}{_LS32}"]
    # up to j+1 groups before '::', then the tail RFC 3986 lists for that row
    tails = [f"(?:{_H16}:){{4}}{_LS32}", f"(?:{_H16}:){{3}}{_LS32}", f"(?:{_H16}:){{2}}{_LS32}",
             f"{_H16}:{_LS32}", _LS32, _H16, ""]
    for j, tail in enumerate(tails):
        head = _H16 if j == 0 else f"(?:{_H16}:){{0,{j}}}{_H16}"
        alts.append(f"(?:{head})?::{tail}")
    return "(?:" + "|".join(alts) + ")"


IPV6 = _ipv6()

_ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~\\-]"
#: special-use top-level names email_validator refuses (email_validator.SPECIAL_USE_DOMAIN_NAMES)
SPECIAL_USE_TLDS = ("arpa", "invalid", "local", "localhost", "onion", "test")
_TLD = except_words(_LOWER, _LOWER, 2, 24, SPECIAL_USE_TLDS, fold=False)
EMAIL = f"{_ATEXT}(?:\\.?{_ATEXT}){{0,31}}@(?:{_idna_safe_label(24)}\\.){{1,2}}{_TLD}"

#: A first label of at most 52 characters (18 letters and digits), then up to 4 of
#: at most 49 (17): at most 252 characters, inside 253; hyphen runs of 1-2.  (Each
#: label's count is at least 16, or it would be written out position by position.)
HOSTNAME = f"{_counted_label(52, hyphens=2)}(?:\\.{_counted_label(49, hyphens=2)}){{0,4}}"

# -- URIs (RFC 3986) ----------------------------------------------------------------------------
_UNRESERVED_SUB = "A-Za-z0-9\\-._~!$&'()*+,;="
_PCT = f"%{_HEX}{{2}}"
_PCHAR = f"(?:[{_UNRESERVED_SUB}:@]|{_PCT})"
_PCHAR_NC = f"(?:[{_UNRESERVED_SUB}@]|{_PCT})"  # segment-nz-nc: no ':'
_QCHAR = f"(?:[{_UNRESERVED_SUB}:@/?]|{_PCT})"
_PORT = "(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]|0)"


def _uri_host(labels: int | None, label_len: int) -> str:
    """A dotted quad, or LDH labels that all start with a letter (``labels``: at most that many).

    A numeric last label would be read as IPv4 by the WHATWG parser; every
    label starting with a letter keeps labels and dotted quads apart, so the
    automaton never runs both (a label starting with a digit is a narrowing).
    """
    count = "*" if labels is None else f"{{0,{labels - 1}}}"
    label = _counted_label(label_len, _cls(_ALPHA))
    return f"(?:{IPV4}|{label}(?:\\.{label}){count})"


_SCHEME_FIRST, _SCHEME_REST = _ALPHA, _ALNUM | set("+-.")
#: WHATWG special schemes: the parser Pydantic uses demands a host after them.
_SPECIAL_SCHEMES = ("ftp", "file", "http", "https", "ws", "wss")
_SCHEME_NOT_FILE = except_words(_SCHEME_FIRST, _SCHEME_REST, 1, 16, ("file",), fold=True)
_SCHEME_NOT_SPECIAL = except_words(_SCHEME_FIRST, _SCHEME_REST, 1, 16, _SPECIAL_SCHEMES, fold=True)


def _rep(unit: str, hi: int | None, lo: int = 0) -> str:
    if hi is None:
        return f"(?:{unit})*" if lo == 0 else f"(?:{unit})+"
    return f"(?:{unit}){{{lo},{hi}}}"


#: Bounded (maxLength) URIs: one character per unit, no %XX escapes (an escape triples the
#: automaton states of every counted position, and each state costs mask work per token).
_PATH_CHAR = f"[{_UNRESERVED_SUB}:@/]"
_QUERY_CHAR = f"[{_UNRESERVED_SUB}:@/?]"


def _uri_parts(path: int | None) -> tuple[str, str, str, str]:
    """(path-abempty, path-absolute, path-rootless, path-noscheme), in units of at most ``path`` when given."""
    if path is None:
        return (f"(?:/{_PCHAR}*)*", f"/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?", f"{_PCHAR}+(?:/{_PCHAR}*)*",
                f"{_PCHAR_NC}+(?:/{_PCHAR}*)*")
    # Bounded: '/' counts as one character like the others; the first segment of an
    # absolute path is non-empty (a leading '//' would start an authority).
    first = f"[{_UNRESERVED_SUB}:@]"
    return (f"(?:/{_rep(_PATH_CHAR, path - 1)})?", f"/(?:{first}{_rep(_PATH_CHAR, path - 2)})?", "", "")


def _uri(path: int | None, query: int | None, fragment: int | None,
         label: int = 0) -> tuple[str, str]:
    """(uri, uri-reference) regexes; path/query/fragment bounded in units when given.

    Only one copy of the host (each copy is a share of the automaton budget):
    no ``file:`` URIs (the WHATWG parser forbids a port on them) and no
    network-path references (``//host/...``) in uri-reference.  Bounded
    (``maxLength``): every counted copy of a path multiplies states, so only
    ``scheme://host...`` and, for references, absolute paths (``/a/b?q#f``).
    """
    abempty, absolute, rootless, noscheme = _uri_parts(path)
    qchar = _QCHAR if query is None else _QUERY_CHAR
    q = f"(?:\\?{_rep(qchar, query)})?"
    f = f"(?:#{_rep(_QCHAR if fragment is None else _QUERY_CHAR, fragment)})?"
    host = _uri_host(None, 63) if path is None else _uri_host(_BOUNDED_HOST_LABELS, label)
    hier = f"{_SCHEME_NOT_FILE}://{host}(?::{_PORT})?{abempty}"
    if path is None:
        hier += f"|{_SCHEME_NOT_SPECIAL}:(?:{absolute}|{rootless})"
        relative = f"(?:{absolute}|{noscheme})?{q}{f}"
    else:
        relative = f"(?:{absolute})?{q}{f}"
    uri = f"(?:{hier}){q}{f}"
    return uri, f"(?:{uri}|{relative})"


#: host of a bounded URI: at most 4 labels of at most 39 characters (20 letters and
#: digits), halved with the path while the longest string does not fit
_BOUNDED_HOST_LABELS, _BOUNDED_LABEL = 4, 39
URI, URI_REFERENCE = _uri(None, None, None)

JSON_POINTER_TOKEN_EXCLUDED = '"\\\\\\x00-\\x1f/~'


def json_pointer(escaped: str = "") -> str:
    """RFC 6901 JSON pointer of raw characters (``escaped`` characters never raw)."""
    extra = "".join("\\" + c if c in "\\]-[^" else c for c in escaped)
    token_char = f"(?:[^{JSON_POINTER_TOKEN_EXCLUDED}{extra}]|~[01])"
    return f"(?:/{token_char}*)*"


def relative_json_pointer(escaped: str = "") -> str:
    """A non-negative integer, then ``#`` or a JSON pointer.

    The integer has no ``0`` followed by a digit: jsonschema's checker
    rejects ``100`` (it reads every digit after a ``0`` as a leading zero).
    """
    return f"(?:0|[1-9]+0?)(?:#|{json_pointer(escaped)})"


# -- internationalized formats, served by their ASCII subset (a narrowing) ------------------------
#: An IDNA 2008 hostname (``idn-hostname``): ASCII LDH labels are valid A-labels
#: unless their 3rd-4th characters are ``--`` (``xn--`` must be valid punycode,
#: other ``??--`` labels are reserved): jsonschema's ``idna`` check refuses them.
#: Here no label has ``--`` at all: up to 5 labels of at most 25 letters and
#: digits (49 characters), at most 249 characters.
IDN_HOSTNAME = f"{_counted_label(49)}(?:\\.{_counted_label(49)}){{0,4}}"

# -- URI templates (RFC 6570), ASCII literals -------------------------------------------------------
#: ``literals`` of RFC 6570 without ``ucschar``/``iprivate``; no ``"`` or ``\\``,
#: so nothing here needs a JSON escape.
_TEMPLATE_LITERAL = f"(?:[!#$&(-;=?-\\[\\]_a-z~]|%{_HEX}{{2}})"
#: ``varname``: the ``uri_template`` validator jsonschema uses wants a plain first character.
_TEMPLATE_VARNAME = f"[A-Za-z0-9_](?:\\.?(?:[A-Za-z0-9_]|%{_HEX}{{2}}))*"
#: ``varspec`` with a prefix of at most 3 digits (the validator refuses 4) or an explode.
_TEMPLATE_VARSPEC = f"{_TEMPLATE_VARNAME}(?::[1-9][0-9]{{0,2}}|\\*)?"
#: Level 4 expressions; the reserved operators ``= , ! @ |`` are invalid, as the validator says.
URI_TEMPLATE = f"(?:{_TEMPLATE_LITERAL}|\\{{[+#./;?&]?{_TEMPLATE_VARSPEC}(?:,{_TEMPLATE_VARSPEC})*\\}})*"

# -- formats the ecosystem emits beyond the JSON Schema list -----------------------------------------
#: ``format: regex``: a pattern written with no ECMA-262 syntax character (``^$\\.*+?()[]{}|``), so
#: the text is a literal and compiles in every dialect (jsonschema's check is ``re.compile``): a narrowing.
_REGEX_EXCLUDED = '"\\\\\\x00-\\x1f^$.*+?()\\[\\]{}|'


def regex_literal(escaped: str = "") -> str:
    """``format: regex`` as literal text (``escaped`` characters never raw)."""
    extra = "".join("\\" + c if c in "\\]-[^" else c for c in escaped)
    return f"[^{_REGEX_EXCLUDED}{extra}]*"


#: Pydantic's ``UUID1`` ... ``UUID8`` (``format: uuid4``): the version digit, and the RFC 4122 variant
#: (``8``-``b``), without which ``uuid.UUID.version`` is None and Pydantic refuses the value.
_UUID_VERSIONED = {f"uuid{v}": f"{_HEX}{{8}}-{_HEX}{{4}}-{v}{_HEX}{{3}}-[89abAB]{_HEX}{{3}}-{_HEX}{{12}}"
                   for v in range(1, 9)}
#: Pydantic's ``Base64Bytes``/``Base64Str`` and their URL-safe twins: padded groups of 4 (Python's
#: decoder refuses a missing ``=``).
_B64 = "(?:{c}{{4}})*(?:{c}{{2}}==|{c}{{3}}=)?"
#: Formats with no constraint at all, Pydantic's names for types that accept any string:
#: ``SecretStr``/``SecretBytes`` (``password``), ``bytes`` (``binary``, UTF-8 in JSON mode) and
#: ``pathlib.Path`` (``path``; not ``file-path``/``directory-path``/``new-path``, which look at the disk).
ANY_STRING_FORMATS = frozenset({"password", "binary", "path"})
#: Of those, the ones whose Pydantic types (``bytes``, ``SecretBytes``) count ``max_length`` in UTF-8 bytes.
BYTE_COUNTED_FORMATS = frozenset({"password", "binary"})

FORMATS: dict[str, str] = {
    "hostname": HOSTNAME,
    "idn-hostname": IDN_HOSTNAME,
    "uri": URI,
    "uri-reference": URI_REFERENCE,
    # Every RFC 3986 URI is an RFC 3987 IRI: the ASCII subset, exactly as for uri.
    "iri": URI,
    "iri-reference": URI_REFERENCE,
    "uri-template": URI_TEMPLATE,
    "date": DATE,
    "time": TIME,
    "date-time": DATE_TIME,
    "duration": DURATION,
    "uuid": UUID,
    "email": EMAIL,
    "idn-email": EMAIL,  # an ASCII address is an internationalized one
    "ipv4": IPV4,
    "ipv6": IPV6,
    "json-pointer": json_pointer(),
    "relative-json-pointer": relative_json_pointer(),
    "regex": regex_literal(),
    # Not JSON Schema formats (validators ignore them, so any string passes them), but what users
    # mean by them, and what Pydantic's own types check:
    "url": URI,
    "ipvanyaddress": f"(?:{IPV4}|{IPV6})",
    # IPvAnyNetwork / IPvAnyInterface / IPv4Network ...: a single address is a /32 (/128) network
    # with no host bits set (Pydantic's networks are strict): the prefix is left out, a narrowing.
    "ipvanynetwork": f"(?:{IPV4}|{IPV6})",
    "ipvanyinterface": f"(?:{IPV4}|{IPV6})",
    "ipv4network": IPV4,
    "ipv4interface": IPV4,
    "ipv6network": IPV6,
    "ipv6interface": IPV6,
    "name-email": EMAIL,  # Pydantic's NameEmail takes a bare address
    "base64": _B64.format(c="[A-Za-z0-9+/]"),
    "base64url": _B64.format(c="[A-Za-z0-9_-]"),
    **_UUID_VERSIONED,
}
#: formats whose regex depends on the characters that must be escaped (negated classes)
ESCAPE_DEPENDENT = {"json-pointer": json_pointer, "relative-json-pointer": relative_json_pointer,
                     "regex": regex_literal}
#: formats poot can build again with a bounded length (for ``maxLength``)
BOUNDABLE = frozenset({"uri", "uri-reference", "iri", "iri-reference", "url"})


def length_range(regex: str) -> tuple[int, int | None]:
    """(min, max) length in characters of the strings ``regex`` matches (``None``: unbounded)."""
    return _lengths(parse(regex))


def _lengths(node: ast.Node) -> tuple[int, int | None]:
    if isinstance(node, ast.Chars):
        return 1, 1
    if isinstance(node, ast.Concat):
        lo, hi = 0, 0
        for item in node.items:
            a, b = _lengths(item)
            lo += a
            hi = None if hi is None or b is None else hi + b
        return lo, hi
    if isinstance(node, ast.Alt):
        pairs = [_lengths(item) for item in node.items]
        his = [b for _, b in pairs]
        return min(a for a, _ in pairs), None if None in his else max(his)  # type: ignore[type-var]
    a, b = _lengths(node.item)
    return a * node.min, None if node.max is None or b is None else b * node.max


@lru_cache(maxsize=64)
def format_regex(name: str, escaped: str = "", max_len: int | None = None) -> tuple[str, int, int | None] | None:
    """(regex, min length, max length) for a format, or None if poot does not build ``name``.

    ``max_len``: for :data:`BOUNDABLE` formats, build a variant whose strings
    are at most that long (bounded path, query and fragment: a narrowing).
    Raises ValueError when ``max_len`` is too small for the bounded variant.
    """
    if name not in FORMATS:
        return None
    regex = ESCAPE_DEPENDENT[name](escaped) if name in ESCAPE_DEPENDENT else FORMATS[name]
    if max_len is not None and name in BOUNDABLE:
        lo, hi = length_range(regex)
        if hi is None or hi > max_len:
            regex = _bounded_uri(name, max_len)
    lo, hi = length_range(regex)
    return regex, lo, hi


def _bounded_uri(name: str, max_len: int) -> str:
    """A ``uri``/``uri-reference`` variant of at most ``max_len`` characters (a narrowing).

    Path, query and fragment of at most 64/48/16 characters without ``%XX``
    escapes, a host of at most 4 labels of 39 characters (20 letters and
    digits, counted): about 150 automaton states (each state inside a string
    costs mask work per vocabulary token); the caps halve until the longest
    string fits ``max_len``.
    """
    path, query, fragment, label = 64, 48, 16, _BOUNDED_LABEL
    while path >= 2:
        uri, ref = _uri(path, query, fragment, label)
        regex = uri if name in ("uri", "iri", "url") else ref
        if length_range(regex)[1] <= max_len:  # type: ignore[operator]
            return regex
        path, query, fragment, label = path // 2, query // 2, max(fragment // 2, 1), max(label // 2, 3)
    uri, ref = _uri(2, 1, 1, 3)
    least = length_range(uri if name in ("uri", "iri", "url") else ref)[1]
    raise ValueError("poot bounds a URI with maxLength by capping host, path, query and fragment; "
                     f"that needs maxLength >= {least} (or no maxLength)")
