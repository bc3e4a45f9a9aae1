"""Pydantic models real clients send, served exactly (issue 14): emails, URIs, maps, optional and union fields,
probabilities and temperatures (exclusive and fractional bounds), discriminated unions, multiples,
dicts with pattern-constrained keys (``patternProperties``), recursive models (trees, expressions: grammars,
exact at any depth, as response_format and as forced tools; docs/json-schema.md).

Each model goes through the openai client as ``response_format`` json_schema
(strict), n > 1, on both tokenizer families; every reply is validated with
Pydantic itself (``Model.model_validate_json``).  A random-weight model
emits garbage unless constrained, so a reply that validates proves the
constraint.  Fields are bounded (the formats are, strings get max_length,
maps use Literal keys) so a random model finishes inside max_tokens.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
from typing import Annotated, Any, Dict, FrozenSet, List, Literal, Optional, Set, Union

import jsonschema
import openai
import pytest
from pathlib import Path

from pydantic import (UUID4, AnyUrl, Base64Bytes, BaseModel, EmailStr, Field, IPvAnyAddress, IPvAnyNetwork, Json,
                      SecretStr, StringConstraints, UrlConstraints, create_model)


class Contact(BaseModel):
    email: EmailStr
    website: Annotated[AnyUrl, UrlConstraints(max_length=300)]


class Network(BaseModel):
    address: ipaddress.IPv6Address
    timeout: datetime.timedelta
    gateway: ipaddress.IPv4Address


class Inventory(BaseModel):
    counts: Dict[Literal["red", "green", "blue"], Annotated[int, Field(ge=0, le=99)]]
    flags: Dict[Literal["sale", "new"], bool] = {}


class Order(BaseModel):
    note: Optional[Annotated[str, Field(max_length=5)]] = None
    size: Union[Annotated[int, Field(ge=0, le=9)], Literal["big", "small"]]
    contact: Optional[Contact] = None
    priority: Optional[Literal["low", "high"]]


class Labels(BaseModel):
    # Pydantic writes patternProperties for a dict with pattern-constrained keys (served: every key
    # matches the pattern) and propertyNames for length-constrained keys (served: every key is short)
    labels: Dict[Annotated[str, StringConstraints(pattern=r"^x-")], int]
    short: Dict[Annotated[str, StringConstraints(max_length=4)], Annotated[int, Field(ge=0, le=9)]]
    name: Annotated[str, Field(max_length=20)]


class Tags(BaseModel):
    # Pydantic writes uniqueItems for sets: enum items each once, strings one per first character
    colors: Set[Literal["red", "green", "blue"]]
    names: FrozenSet[Annotated[str, Field(max_length=6)]]


class TreeNode(BaseModel):
    # recursive: Pydantic writes {"$ref": "#/$defs/TreeNode"} inside its own $defs entry
    label: Annotated[str, Field(max_length=6)]
    children: List["TreeNode"] = []


class Category(BaseModel):
    # recursive, with lookaheads inside the recursion (pattern + max_length, and a map whose keys
    # have both): the grammar embeds each as a byte automaton instead of unrolling
    slug: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]*$", max_length=12)]
    children: List["Category"] = []
    labels: Dict[Annotated[str, Field(pattern=r"^[a-z]+$", max_length=6)], "Category"] = {}


class Expr(BaseModel):
    op: Literal["+", "*", "num"]
    value: Optional[Annotated[int, Field(ge=0, le=9)]] = None
    left: Optional["Expr"] = None
    right: Optional["Expr"] = None


class Credentials(BaseModel):
    # Pydantic's own format names (password, binary, path, ipvanyaddress, ipvanynetwork, uuid4, base64):
    # not JSON Schema formats, so poot serves what Pydantic's types accept (docs/json-schema.md, Formats)
    secret: Annotated[SecretStr, Field(max_length=8)]
    blob: Annotated[bytes, Field(max_length=8)]
    home: Path
    ip: IPvAnyAddress
    net: IPvAnyNetwork
    key_id: UUID4
    token: Base64Bytes
    # Json[T]: a string holding JSON (contentMediaType + contentSchema) that Pydantic parses and checks
    retries: Json[Annotated[int, Field(ge=0, le=9)]]


class Event(BaseModel):
    # several free-form fields (Any, Dict[str, Any], List[Any]): past the automaton budget with free-form
    # values 2 containers deep, served with them 1 deep (json_schema.FREE_FORM_DEPTHS) instead of a 400
    kind: Annotated[str, Field(max_length=8)]
    payload: Any
    meta: Dict[str, Any]
    items: List[Any]
    extra: Any
    context: Optional[Dict[str, Any]] = None


class Article(BaseModel):
    # a pattern with max_length (a lookahead) and an email beside a long text field: they
    # no longer expand the body's counted repetition (a 400 before)
    slug: Annotated[str, StringConstraints(pattern=r"^[a-z0-9-]+$", max_length=40)]
    author: EmailStr  # its labels' repetitions stay expanded on their own, the body counted
    body: Annotated[str, Field(max_length=4000)]


class Shipment(BaseModel):
    # multipleOf with odd factors over wide ranges: a residue automaton beside the range (a 400 before)
    eggs: Annotated[int, Field(multiple_of=12, ge=0)]
    pallets: Annotated[int, Field(multiple_of=7)]
    hours: Annotated[float, Field(multiple_of=0.75, gt=0, le=1000)]


class Reading(BaseModel):
    # exclusive and fractional bounds, compared as decimal strings: a probability (gt=0 was narrowed
    # to >= 1 and gt=0, lt=1 refused before) and a temperature (ge=-273.15 refused before)
    probability: Annotated[float, Field(gt=0, lt=1)]
    celsius: Annotated[float, Field(ge=-273.15, le=1000)]
    weights: Dict[Annotated[str, StringConstraints(max_length=6)], Annotated[float, Field(ge=0, le=1)]] = {}


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: Annotated[int, Field(ge=0, le=9)]


class Dog(BaseModel):
    kind: Literal["dog"]
    name: Annotated[str, Field(max_length=8)]


class Pet(BaseModel):
    # a discriminated union: Pydantic writes oneOf (with a discriminator mapping) over $defs
    pet: Annotated[Union[Cat, Dog], Field(discriminator="kind")]
    friends: Annotated[List[Annotated[Union[Cat, Dog], Field(discriminator="kind")]], Field(max_length=2)] = []


class Ticket(BaseModel):
    # patterns beside large max_length: the lengths folded into the pattern's one repetition (a
    # counted repetition); a 400 while they were a lookahead holding a copy per character
    code: Annotated[str, StringConstraints(pattern=r"^[A-Z]{2}-\d+$", max_length=500)]
    title: Annotated[str, StringConstraints(pattern=r"^[A-Z]", max_length=250)]
    link: Annotated[str, StringConstraints(pattern=r"^https?://", max_length=2083)]


class Record(BaseModel):
    # eight free-form fields: the DFA holds a copy of the free-form value per field, past the
    # automaton budget even 1 container deep (a 400 before); a grammar with the free-form value
    # as one rule (exact at any depth)
    id: Annotated[str, Field(max_length=12)]
    created_at: Any = None
    created_by: Any = None
    updated_at: Any = None
    updated_by: Any = None
    labels: Any = None
    extra: Any = None
    meta: Any = None
    payload: Any = None


# eighty optional fields, forty of them free text (a SAML-style config, JSONSchemaBench
# Github_hard/o31176): the DFA holds a copy of the string per field, each with its own
# continuation, past the automaton budget (a 400 before); a grammar with each string value one rule
SamlConfig = create_model("SamlConfig", **{f"attribute{i}": (Optional[str], None) for i in range(1, 41)},
                          **{f"attribute{i}format": (Optional[Literal["URI", "Basic"]], None) for i in range(1, 41)})


class Position(BaseModel):
    line: int
    character: int


class Span(BaseModel):
    start: Position
    end: Position


class Location(BaseModel):
    uri: str
    span: Span


# one definition used in many places (an LSP-style protocol model, Github_hard/o65890): a copy of
# Location per field in the DFA, past the budget (a 400 before); a grammar with each target one rule
Diagnostics = create_model("Diagnostics", **{f"site{i}": (Location, ...) for i in range(2)},
                           **{f"related{i:02}": (Optional[Location], None) for i in range(24)})

MODELS = [Contact, Network, Inventory, Order, Labels, Tags, TreeNode, Expr, Credentials, Event, Article, Shipment,
          Reading, Pet, Ticket, Record, SamlConfig, Diagnostics]


@pytest.fixture(scope="module", params=["spm_server", "bpe_server"])
def served(request):
    server = request.getfixturevalue(request.param)
    return server, openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=300)


@pytest.mark.parametrize("model", MODELS, ids=[m.__name__ for m in MODELS])
def test_pydantic_model_replies_validate_with_pydantic(served, model):
    server, client = served
    rf = {"type": "json_schema", "json_schema": {"name": model.__name__, "strict": True, "schema": model.model_json_schema()}}
    r = client.chat.completions.create(model=server.model, messages=[{"role": "user", "content": model.__name__}],
                                       max_tokens=1500, n=3, response_format=rf)
    assert len(r.choices) == 3
    for c in r.choices:
        assert c.finish_reason == "stop", c
        model.model_validate_json(c.message.content)  # Pydantic itself: EmailStr, AnyUrl, IPv6Address, ...
        jsonschema.validate(json.loads(c.message.content), rf["json_schema"]["schema"])  # uniqueItems too
        json.loads(c.message.content, object_pairs_hook=_no_repeated_keys)


def _validated_replies(served, name: str, schema: dict, max_tokens: int, n: int) -> list:
    """The n replies to ``schema`` as ``response_format``, each finished and valid for jsonschema."""
    server, client = served
    rf = {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
    r = client.chat.completions.create(model=server.model, messages=[{"role": "user", "content": name}],
                                       max_tokens=max_tokens, n=n, response_format=rf)
    values = []
    for c in r.choices:
        assert c.finish_reason == "stop", c
        values.append(json.loads(c.message.content))
        jsonschema.validate(values[-1], schema)
    return values


def _no_repeated_keys(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"repeated key in {keys}"
    return dict(pairs)


def test_unsatisfiable_branch_is_dropped_and_whitespace_pattern_is_honoured(served):
    server, client = served
    schema = {"type": "object", "required": ["v", "w"], "properties": {
        "v": {"anyOf": [{"type": "integer", "minimum": 10, "maximum": 5}, {"enum": ["x", "y"]}]},
        "w": {"type": "integer", "minimum": 0, "maximum": 9}}}
    r = client.chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "x"}], max_tokens=60, n=2,
        extra_body={"guided_json": schema, "guided_whitespace_pattern": "[\\n ]{0,2}"})
    for c in r.choices:
        assert c.finish_reason == "stop", c
        value = json.loads(c.message.content)
        assert value["v"] in ("x", "y") and 0 <= value["w"] <= 9
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=server.model, messages=[{"role": "user", "content": "x"}], max_tokens=5,
            extra_body={"guided_json": schema, "guided_whitespace_pattern": "\\s*"})
    assert "guided_whitespace_pattern" in str(e.value) and "unbounded" in str(e.value)


def test_recursive_model_through_openai_parse_and_as_a_named_tool(served):
    """The OpenAI SDK's ``parse`` and ``pydantic_function_tool`` (strict) with a recursive model."""
    server, client = served
    completion = client.chat.completions.parse(
        model=server.model, messages=[{"role": "user", "content": "a tree"}], response_format=TreeNode,
        max_tokens=600, n=2)
    for c in completion.choices:
        assert c.finish_reason == "stop", c
        assert isinstance(c.message.parsed, TreeNode)
    r = client.chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "a tree"}], max_tokens=600, n=2,
        tools=[openai.pydantic_function_tool(TreeNode)], tool_choice={"type": "function", "function": {"name": "TreeNode"}})
    for c in r.choices:
        assert c.finish_reason in ("stop", "tool_calls") and c.message.tool_calls and len(c.message.tool_calls) == 1, c
        TreeNode.model_validate_json(c.message.tool_calls[0].function.arguments)


def test_recursive_models_finish_inside_a_tight_max_tokens(served):
    """Recursive schemas are grammars (exact at any depth) with budget masks: at a
    max_tokens a random model would overrun, n = 8 replies all stop and validate."""
    server, client = served
    for model in (Expr, TreeNode, Category):
        rf = {"type": "json_schema", "json_schema": {"name": model.__name__, "schema": model.model_json_schema()}}
        r = client.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "x"}],
                                           max_tokens=60, n=8, response_format=rf)
        for c in r.choices:
            assert c.finish_reason == "stop", (model.__name__, c.message.content)
            model.model_validate_json(c.message.content)


def test_overlapping_one_of_not_and_conditionals_validate(served):
    """An overlapping oneOf (each branch minus the other), 'not', if/then/else and
    dependentRequired, contains and uniqueItems through response_format: every reply validates
    with jsonschema, so it matches exactly one branch, fails 'not' and honours the conditionals."""
    schema = {"type": "object", "required": ["n", "role", "tag", "kind", "picks", "uniq"], "additionalProperties": False, "properties": {
        "n": {"oneOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "integer", "minimum": 5, "maximum": 14}]},
        "role": {"type": "string", "maxLength": 5, "not": {"enum": ["admin", "root"]}},
        "tag": {"oneOf": [{"type": "string", "maxLength": 3}, {"type": "string", "pattern": "^a", "maxLength": 5}]},
        "kind": {"enum": ["card", "cash"]},
        "card": {"type": "string", "pattern": "^[0-9]{4}$"},
        "cvv": {"type": "string", "pattern": "^[0-9]{3}$"},
        "picks": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
                  "contains": {"minimum": 5}, "maxContains": 2, "maxItems": 4},
        "uniq": {"type": "array", "items": {"type": "string", "maxLength": 4}, "uniqueItems": True, "maxItems": 3}},
        "if": {"properties": {"kind": {"const": "card"}}}, "then": {"required": ["card"]},
        "dependentRequired": {"card": ["cvv"]}}
    for value in _validated_replies(served, "Diff", schema, max_tokens=200, n=4):
        assert not 5 <= value["n"] <= 9
        assert value["kind"] != "card" or ("card" in value and "cvv" in value)


#: What MCP's ``ResourceTemplate`` and similar tool schemas send: formats served by their ASCII subsets.
FORMATS_SCHEMA = {
    "type": "object",
    "properties": {"uriTemplate": {"type": "string", "format": "uri-template", "maxLength": 60},
                   "home": {"type": "string", "format": "iri"},
                   "host": {"type": "string", "format": "idn-hostname"},
                   "mail": {"type": "string", "format": "idn-email"}},
    "required": ["uriTemplate", "home", "host", "mail"],
    "additionalProperties": False,
}


def test_uri_template_and_internationalized_formats_validate(served):
    server, client = served
    rf = {"type": "json_schema", "json_schema": {"name": "ResourceTemplate", "schema": FORMATS_SCHEMA}}
    r = client.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "a resource"}],
                                       max_tokens=600, n=3, response_format=rf)
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER  # uri_template, rfc3987 and idna installed
    for c in r.choices:
        assert c.finish_reason == "stop", c
        jsonschema.validate(json.loads(c.message.content), FORMATS_SCHEMA, format_checker=checker)


#: A schema written by hand with identifiers instead of pointers: an ``$anchor``, an embedded ``$id``
#: resource whose own ``#/$defs/...`` pointer is relative to it, and a ``$ref`` by relative URI.
ANCHORED_SCHEMA = {
    "$id": "https://example.com/order.json",
    "type": "object", "required": ["qty", "ship"], "additionalProperties": False,
    "properties": {"qty": {"$ref": "#count"}, "ship": {"$ref": "address.json"}},
    "$defs": {
        "count": {"$anchor": "count", "type": "integer", "minimum": 1, "maximum": 9},
        "address": {"$id": "address.json", "type": "object", "required": ["zip"], "additionalProperties": False,
                    "properties": {"zip": {"$ref": "#/$defs/zip"}},
                    "$defs": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}},
        "zip": {"type": "boolean"},  # what a root-relative reading of the pointer would wrongly take
    },
}


def test_anchor_and_id_references_validate(served):
    # jsonschema (in _validated_replies) resolves the same identifiers
    for value in _validated_replies(served, "Order", ANCHORED_SCHEMA, max_tokens=80, n=3):
        assert isinstance(value["ship"]["zip"], str) and len(value["ship"]["zip"]) == 5


@pytest.mark.parametrize("model, max_tokens", [(Record, 600), (Diagnostics, 900)], ids=["free-form", "many-refs"])
def test_models_past_the_automaton_budget_as_a_forced_tool(served, model, max_tokens):
    """A tool whose DFA passes the automaton budget is forced as a grammar, as for
    response_format: Record's eight ``Any`` fields (the free-form value one rule), Diagnostics'
    Location used in 26 fields (a copy per use; each $ref target and string value one rule).
    tool_choice "required" with parallel calls allowed (the SDK's default); every call
    validates with Pydantic.  (SamlConfig's eighty fields would not fit the tiny models'
    2,048-token context as a tool listed in the prompt.)"""
    server, client = served
    r = client.chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": model.__name__}], max_tokens=max_tokens, n=2,
        tools=[openai.pydantic_function_tool(model)], tool_choice="required")
    for c in r.choices:
        assert c.finish_reason in ("stop", "tool_calls") and c.message.tool_calls, c
        for call in c.message.tool_calls:
            assert call.function.name == model.__name__
            model.model_validate_json(call.function.arguments)
