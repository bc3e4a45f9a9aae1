"""String ``format``: what poot emits passes the ecosystem's own validators, and ordinary values are emitted.

Oracles: jsonschema's ``FormatChecker`` (with rfc3987, fqdn, isoduration,
jsonpointer installed), ``email_validator`` (``check_deliverability=False``,
strict lengths), ``rfc3986_validator``, ``ipaddress`` and Pydantic's own
types (``EmailStr``, ``AnyUrl``, ``IPv6Address``, ``timedelta``).  Both
directions: strings the automaton accepts (hypothesis-generated from the
regex and random walks) must validate; a list of ordinary values must be
accepted.
"""

from __future__ import annotations

import datetime
import importlib.util
import ipaddress
import itertools
import json
import random
import re
import sys
from pathlib import Path
from typing import Annotated, Callable

import email_validator
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import (UUID1, UUID4, AnyUrl, Base64Bytes, Base64UrlBytes, BaseModel, EmailStr, Field, IPvAnyAddress,
                      IPvAnyInterface, IPvAnyNetwork, Json, NameEmail, SecretBytes, SecretStr, TypeAdapter, UrlConstraints)
from rfc3986_validator import validate_rfc3986

from poot_vllm.core.automata.compilers import regex_to_dfa
from poot_vllm.core.errors import UnsupportedConstruct
from poot_vllm.core.json_schema import compile_json_schema, schema_to_regex
from poot_vllm.core.json_schema.formats import format_regex

_spec = importlib.util.spec_from_file_location("json_conformance", Path(__file__).resolve().parents[2] / "scripts" / "json_conformance.py")
conformance = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("json_conformance", conformance)
_spec.loader.exec_module(conformance)

_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER
_URL = TypeAdapter(AnyUrl)
_EMAIL = TypeAdapter(EmailStr)
_DURATION = TypeAdapter(datetime.timedelta)
_IPV6 = TypeAdapter(ipaddress.IPv6Address)


def _email(s: str) -> None:
    email_validator.validate_email(s, check_deliverability=False, strict=True)
    _EMAIL.validate_python(s)


def _uri(s: str) -> None:
    assert validate_rfc3986(s, rule="URI"), s
    _URL.validate_python(s)


def _uri_reference(s: str) -> None:
    assert validate_rfc3986(s, rule="URI_reference"), s


def _iri(s: str, rule: str = "IRI") -> None:
    import rfc3987

    rfc3987.parse(s, rule=rule)  # raises ValueError


def _uri_template(s: str) -> None:
    import uri_template

    assert uri_template.validate(s), s


def _ipv6(s: str) -> None:
    ipaddress.IPv6Address(s)
    _IPV6.validate_python(s)


#: format -> extra validator beyond jsonschema's FormatChecker (raises on an invalid value)
ORACLES: dict[str, Callable[[str], None] | None] = {
    "email": _email,
    "uri": _uri,
    "uri-reference": _uri_reference,
    "hostname": None,
    "ipv6": _ipv6,
    "ipv4": lambda s: ipaddress.IPv4Address(s) and None,
    "duration": lambda s: _DURATION.validate_python(s) and None,
    "json-pointer": None,
    "relative-json-pointer": None,
    # Served by their ASCII subsets (docs/json-schema.md "Formats").
    "idn-hostname": None,  # jsonschema's check runs idna.encode
    "idn-email": _email,  # jsonschema only asks for an '@'; the strict email validator too
    "iri": _iri,
    "iri-reference": lambda s: _iri(s, "IRI_reference"),
    "uri-template": _uri_template,
    # literal patterns only (a narrowing): Python's re and, where installed, jsonschema's checker
    "regex": lambda s: re.compile(s) and None,
    # not a JSON Schema format (jsonschema lets any string pass): served as 'uri'
    "url": _uri,
}


def assert_valid(fmt: str, s: str) -> None:
    assert _CHECKER.conforms(s, fmt), f"jsonschema rejects {fmt} {s!r}"
    oracle = ORACLES[fmt]
    if oracle is not None:
        try:
            oracle(s)
        except Exception as exc:  # noqa: BLE001 - any validator error is the failure being tested
            raise AssertionError(f"{fmt} {s!r} rejected by the validator: {exc}") from None


_DFAS: dict[tuple[str, int | None], object] = {}


def dfa_for(fmt: str, max_length: int | None = None):
    """The DFA poot serves for {"type": "string", "format": fmt} (default budget)."""
    key = (fmt, max_length)
    if key not in _DFAS:
        schema = {"type": "string", "format": fmt}
        if max_length is not None:
            schema["maxLength"] = max_length
        _DFAS[key] = compile_json_schema(schema)
    return _DFAS[key]


def accepts(fmt: str, s: str, max_length: int | None = None) -> bool:
    return dfa_for(fmt, max_length).matches(json.dumps(s, ensure_ascii=False).encode("utf-8"))


# -- direction 1: every emitted string validates ----------------------------------------------
@pytest.mark.parametrize("fmt", sorted(ORACLES))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_generated_values_pass_the_validators(fmt, data):
    regex = format_regex(fmt)[0]
    s = data.draw(st.from_regex(re.compile(regex), fullmatch=True))
    assert accepts(fmt, s), f"the DFA must accept what its regex matches: {s!r}"
    assert_valid(fmt, s)


@pytest.mark.parametrize("fmt,max_length", [("uri", 2083), ("uri-reference", 2083), ("uri", 300)])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_bounded_uris_pass_the_validators_and_fit(fmt, max_length, data):
    regex, _, longest = format_regex(fmt, "", max_length)
    assert longest is not None and longest <= max_length
    s = data.draw(st.from_regex(re.compile(regex), fullmatch=True))
    assert accepts(fmt, s, max_length)
    assert len(s) <= max_length
    assert_valid(fmt, s)


@pytest.mark.parametrize("fmt", sorted(ORACLES))
def test_random_walks_pass_the_validators(fmt):
    regex = schema_to_regex({"type": "string", "format": fmt})
    rng = random.Random(5)
    for _ in range(300):
        text = conformance.sample_regex(regex, rng)
        assert dfa_for(fmt).matches(text.encode("utf-8"))
        assert_valid(fmt, json.loads(text))


# -- direction 2: ordinary values are emitted -----------------------------------------------------
ORDINARY = {
    "email": ["jane.doe@example.com", "a.b+c@example.co", "first_last@mail.example.com", "x@cs.uni-bonn.de",
              "user123@gmail.com", "o'brien@example.ie", "support@my-site.io", "a@b.co.uk", "ceo@company.info",
              "dev-ops@mail.example.org", "x" * 32 + "@example.com", "a@" + "b" * 24 + ".museum"],
    "uri": ["http://www.mail.example.com/", "http://www.mail.example.com/path?q=1", "https://example.com",
            "https://api.example.com/v1/users/42?fields=name,email&sort=-created#top", "http://localhost:8080/health",
            "https://a.b.c.d.example.com/x/y/z.html", "http://192.168.0.1/", "ftp://ftp.example.org/pub/file.txt",
            "mailto:jane@example.com", "urn:isbn:0451450523", "https://example.com/search?q=hello%20world",
            "wss://chat.example.com/socket", "https://en.wikipedia.org/wiki/Main_Page"],
    "uri-reference": ["/path/to/page?x=1", "page.html", "../up/one", "?q=1", "#frag", "", "https://example.com/a",
                      "images/logo.png"],
    "hostname": ["example.com", "www.mail.example.com", "localhost", "a.b.c.d.example", "xn--bcher-kva.example",
                 "my-host-01", "1.2.3.4"],
    "ipv6": ["::", "::1", "fe80::1", "2001:db8::8a2e:370:7334", "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
             "::ffff:192.168.0.1", "1:2:3:4:5:6:7:8", "FE80::ABCD", "1::", "64:ff9b::1.2.3.4"],
    "ipv4": ["127.0.0.1", "255.255.255.255", "10.0.0.1"],
    "duration": ["P1D", "PT1H", "PT1H30M", "P1Y2M3DT4H5M6S", "P2W", "PT0S", "P3M", "PT90M", "P1DT12H"],
    "json-pointer": ["", "/", "/a/b", "/a~1b/c~0d", "/0/items/3", "/properties/name"],
    "relative-json-pointer": ["0", "1/a", "2#", "0/0"],
    "idn-hostname": ["example.com", "www.mail.example.com", "localhost", "my-host-01", "a.b.c.d.example"],
    "idn-email": ["jane.doe@example.com", "user123@gmail.com"],
    "iri": ["https://example.com/a?b=c#d", "urn:isbn:0451450523", "mailto:jane@example.com"],
    "iri-reference": ["/path/to/page?x=1", "page.html", "#frag", ""],
    "uri-template": ["http://example.com/{user}", "/search{?q,lang}", "{+path}/here", "{/list*}", "X{.var:3}",
                     "http://example.com/users/{id}/repos{?page,per_page}", "plain/text", "{#section}"],
}


@pytest.mark.parametrize("fmt,value", [(f, v) for f, vs in ORDINARY.items() for v in vs])
def test_ordinary_values_are_accepted(fmt, value):
    assert_valid(fmt, value)  # guards the list itself
    assert accepts(fmt, value), f"{fmt}: poot refuses the ordinary value {value!r}"


def test_bounded_uri_accepts_ordinary_urls():
    for value in ["http://www.mail.example.com/path?q=1", "https://example.com", "https://api.example.com/v1/users/42?page=2#top",
                  "https://api.example.com/v1/users/42?fields=name,email&sort=-created#top"]:
        assert accepts("uri", value, 2083), value


# -- what the validators reject is not emitted ---------------------------------------------------
REJECTED = {
    "email": ["a@b", "a@b.test", "a@mail.localhost", "a@b.c0m", "a@example.c", "a..b@example.com", ".a@example.com",
              "x" * 65 + "@example.com", "a@ab--cd.com", "a@xn--zz.com", "a@-x.com", "a@" + "b" * 64 + ".com",
              "a@" + ".".join(["b" * 20] * 4) + ".com"],
    "uri": ["example.com", "http://", "http://a.1/", "http://a b/", "http://example.com:65536/", "file:///etc/passwd",
            "http://ex_ample.com/", "//example.com/"],
    "hostname": ["-a.com", "a-.com", "a..b", "a" * 64 + ".com", "a_b.com"],
    "ipv6": ["1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", "fe80::1%eth0", "::1.2.3.04", "1:2:3:4:5:6:7::8"],
    "duration": ["P", "PT", "1D", "P1H", "PT1D", "P1W2D", "P1234567D"],
    "json-pointer": ["a", "/a~2", "/~"],
    "relative-json-pointer": ["", "01", "100", "-1", "/a"],
    "idn-hostname": ["ab--cd.com", "xn--zz.com", "-a.com", "a_b.com"],
    "uri-template": ["{}", "{=a}", "{a:1000}", "{a:3*}", "{%41}", "a b", "{a", "a}"],
}


@pytest.mark.parametrize("fmt,value", [(f, v) for f, vs in REJECTED.items() for v in vs])
def test_invalid_or_narrowed_values_are_not_emitted(fmt, value):
    assert not accepts(fmt, value), f"{fmt}: poot emits {value!r}"


def test_email_lengths_stay_inside_rfc_5321():
    local = ".".join(["x" * 8] * 4)  # 32 atext characters and 3 dots
    domain = ".".join(["a" * 24] * 2) + "." + "m" * 24
    assert accepts("email", f"{local}@{domain}")
    _email(f"{local}@{domain}")
    assert not accepts("email", "x" * 33 + "@example.com")  # documented narrowing: 32 atext characters
    assert format_regex("email")[2] <= 254


def test_hostname_lengths_stay_inside_rfc_1123():
    """Counted labels (a handful of states each) keep RFC 1123's bounds: labels of
    at most 63 characters, at most 253 in all; punycode labels still fit ``hostname``."""
    longest = ".".join(["a" + "--b" * 17] + ["a" + "--b" * 16] * 4)
    assert len(longest) <= 253 and accepts("hostname", longest)
    assert_valid("hostname", longest)
    assert not accepts("hostname", longest + "c") and not accepts("hostname", longest + ".a")
    for fmt in ("hostname", "idn-hostname"):
        assert format_regex(fmt)[2] <= 253
    assert accepts("hostname", "xn--bcher-kva.example") and not accepts("idn-hostname", "xn--bcher-kva.example")
    assert accepts("uri", "https://" + "a" + "-b" * 31 + ".example/") and not accepts("uri", "https://a--b.example/")


# -- budgets and schemas real clients send --------------------------------------------------------
def test_every_format_fits_the_default_budget_with_room_to_spare():
    for fmt in ORACLES:
        regex = schema_to_regex({"type": "string", "format": fmt})
        regex_to_dfa(regex)  # default Limits: raises LimitExceeded when over budget
    schema = {"type": "object", "properties": {"a": {"type": "string", "format": "email"},
                                               "b": {"type": "string", "format": "uri"},
                                               "c": {"type": "string", "format": "uri", "maxLength": 2083}},
              "required": ["a", "b", "c"]}
    dfa = compile_json_schema(schema)
    # and the API server's mask-work check passes on a 128k vocabulary (each state inside a string costs per token)
    from poot_vllm.core.limits import DEFAULT_LIMITS
    from poot_vllm.core.masks import estimate_mask_work

    assert estimate_mask_work(dfa, 128_000) <= DEFAULT_LIMITS.max_mask_work


class Contact(BaseModel):
    email: EmailStr
    homepage: AnyUrl
    api: Annotated[AnyUrl, UrlConstraints(max_length=2083)]  # what HttpUrl's schema says, minus the http(s) rule
    timeout: datetime.timedelta
    address: ipaddress.IPv6Address
    tags: list[str] = Field(max_length=2)


def test_pydantic_model_schema_compiles_and_samples_validate_with_pydantic():
    schema = Contact.model_json_schema()
    regex = schema_to_regex(schema)
    compile_json_schema(schema)
    rng = random.Random(3)
    assert schema["properties"]["api"]["maxLength"] == 2083
    for _ in range(60):
        Contact.model_validate_json(conformance.sample_regex(regex, rng))


class PydanticTypes(BaseModel):
    """Types whose schema carries one of Pydantic's own format names (not JSON Schema's)."""
    secret: SecretStr
    blob: bytes
    where: Path
    ip: IPvAnyAddress
    net: IPvAnyNetwork
    iface: IPvAnyInterface
    net4: ipaddress.IPv4Network
    iface6: ipaddress.IPv6Interface
    b64: Base64Bytes
    b64url: Base64UrlBytes
    contact: NameEmail
    id1: UUID1
    id4: UUID4
    pattern: Annotated[str, Field(json_schema_extra={"format": "regex"})]
    # max_length counts UTF-8 bytes in Pydantic, characters in JSON Schema: poot writes ASCII here
    short_blob: Annotated[bytes, Field(max_length=4)]
    short_secret: Annotated[SecretBytes, Field(max_length=3)]


def _replies_validate_with_pydantic(model: type[BaseModel], seed: int, format_checker=None):
    """Replies sampled from the model's schema: poot's DFA accepts each, and the model itself
    (``model_validate_json`` raises on any value Pydantic refuses) and jsonschema validate it.
    Returns the DFA and the random source, for more checks."""
    schema = model.model_json_schema()
    regex = schema_to_regex(schema)
    dfa = compile_json_schema(schema)
    rng = random.Random(seed)
    for _ in range(150):
        text = conformance.sample_regex(regex, rng)
        assert dfa.matches(text.encode("utf-8"))
        model.model_validate_json(text)
        jsonschema.validate(json.loads(text), schema, format_checker=format_checker)
    return dfa, rng


def test_pydantic_format_names_are_served_and_validate_with_pydantic():
    formats = {p["format"] for p in PydanticTypes.model_json_schema()["properties"].values()}
    assert {"password", "binary", "path", "ipvanyaddress", "base64url", "name-email", "uuid4"} <= formats
    _replies_validate_with_pydantic(PydanticTypes, 11, _CHECKER)


class _Point(BaseModel):
    x: Annotated[int, Field(ge=-9, le=9)]
    label: Annotated[str, Field(max_length=4)]


class EmbeddedJson(BaseModel):
    """Pydantic's ``Json[T]``: a string holding JSON text (contentMediaType + contentSchema)."""
    count: Json[int]
    names: Json[list[Annotated[str, Field(max_length=3)]]]
    point: Json[_Point]


def test_json_strings_hold_json_that_pydantic_parses():
    assert EmbeddedJson.model_json_schema()["properties"]["count"]["contentSchema"] == {"type": "integer"}
    dfa, rng = _replies_validate_with_pydantic(EmbeddedJson, 4)  # Pydantic parses each string's JSON and validates it
    walk = conformance.sample_dfa(dfa, rng)
    assert walk is None or EmbeddedJson.model_validate_json(walk)
    # keys in sorted order, as poot writes them (docs/json-schema.md)
    assert dfa.matches(b'{"count":"12","names":"[\\"ab\\"]","point":"{\\"label\\":\\"q\\",\\"x\\":-3}"}')
    assert not dfa.matches(b'{"count":"x","names":"[]","point":"{\\"label\\":\\"\\",\\"x\\":1}"}')
    assert not dfa.matches(b'{"count":"1","names":"[]","point":"{\\"label\\":\\"\\",\\"x\\":10}"}')


def test_json_content_is_an_annotation_inside_not_and_with_an_encoding():
    # JSON Schema: both keywords are annotations, so 'not' of them rejects every string
    with pytest.raises(UnsupportedConstruct, match="'not' at /not"):
        schema_to_regex({"type": "string", "not": {"contentMediaType": "application/json", "contentSchema": {}}})
    # base64-encoded JSON stays an annotation: any string
    encoded = {"type": "string", "contentEncoding": "base64", "contentMediaType": "application/json",
               "contentSchema": {"type": "integer"}}
    assert accepts_schema(encoded, "not json")


def accepts_schema(schema: dict, s: str) -> bool:
    return compile_json_schema(schema).matches(json.dumps(s).encode("utf-8"))


@pytest.mark.parametrize("fmt,value,ok", [
    ("password", "any text, even {}", True), ("binary", "", True), ("path", "srv/app/x y", True),
    ("ipvanyaddress", "::1", True), ("ipvanyaddress", "10.0.0.1", True), ("ipvanyaddress", "10.0.0.256", False),
    ("ipvanynetwork", "10.0.0.0/8", False),  # narrowed: a single address (a /32), never host bits after a prefix
    ("uuid4", "12345678-1234-4234-8234-123456789abc", True), ("uuid4", "12345678-1234-1234-8234-123456789abc", False),
    ("uuid4", "12345678-1234-4234-c234-123456789abc", False),  # not the RFC 4122 variant: Pydantic sees no version
    ("base64", "QUJD", True), ("base64", "QQ==", True), ("base64", "QUJDRA", False), ("base64url", "-_-_", True),
    ("regex", "abc-def", True), ("regex", "a+", False), ("regex", "[x]", False),
])
def test_ecosystem_format_values(fmt, value, ok):
    assert accepts(fmt, value) == ok


def test_regex_format_under_tool_forcing_escapes():
    # tool-call forcing passes escaped="<": a format's text is written raw, so "<" is left out (a narrowing)
    regex = schema_to_regex({"type": "string", "format": "regex"}, escaped="<")
    assert not re.fullmatch(regex, '"a<b"') and re.fullmatch(regex, '"a>b"')


def test_unsupported_format_and_too_small_uri_bound_are_refused_with_pointer():
    # an application's own format: its checker may refuse any string poot writes
    with pytest.raises(UnsupportedConstruct, match=r"'format' at /properties/x/format: format 'ports' is not supported"):
        schema_to_regex({"type": "object", "properties": {"x": {"type": "string", "format": "ports"}}})
    with pytest.raises(UnsupportedConstruct, match=r"'format' at /format"):
        schema_to_regex({"type": "string", "format": "file-path"})  # Pydantic's FilePath looks at the disk
    with pytest.raises(UnsupportedConstruct, match=r"'maxLength' at /maxLength.*maxLength >= \d+"):
        schema_to_regex({"type": "string", "format": "uri", "maxLength": 40})


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.text(alphabet="abAB", min_size=1, max_size=4), max_size=4), text=st.text(alphabet="abAB", max_size=7),
       lo=st.integers(1, 3), span=st.integers(0, 4), fold=st.booleans())
def test_except_words_is_exactly_the_strings_minus_the_words(words, text, lo, span, fold):
    """The word-exclusion regex behind the email top-level label and the URI schemes, against Python."""
    from poot_vllm.core.json_schema.formats import except_words

    alphabet = frozenset("abAB")
    hi = lo + span
    excluded = {w.lower() for w in words} if fold else set(words)

    def expected(s: str) -> bool:
        return lo <= len(s) <= hi and (s.lower() if fold else s) not in excluded

    try:
        regex = except_words(alphabet, alphabet, lo, hi, words, fold)
    except ValueError:  # only when the words exclude every string of the lengths
        assert not any(expected("".join(p)) for n in range(lo, hi + 1) for p in itertools.product("abAB", repeat=n))
        return
    assert (re.fullmatch(regex, text) is not None) == expected(text)
