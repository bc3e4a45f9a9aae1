"""Pydantic models real clients send, served exactly (issue 14): emails, URIs, maps, optional and union fields,
dicts with pattern-constrained keys (``patternProperties``).

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
from typing import Annotated, Dict, Literal, Optional, Union

import openai
import pytest
from pydantic import AnyUrl, BaseModel, EmailStr, Field, StringConstraints, UrlConstraints


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
    # Pydantic writes patternProperties for a dict with constrained keys (served: the map stays empty)
    labels: Dict[Annotated[str, StringConstraints(pattern=r"^x-")], int]
    name: Annotated[str, Field(max_length=20)]


MODELS = [Contact, Network, Inventory, Order, Labels]


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
        json.loads(c.message.content, object_pairs_hook=_no_repeated_keys)


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
