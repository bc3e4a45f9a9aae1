"""Counted automata in a real `vllm serve` (issue 13): long text fields, wide models and
nested tools with parallel calls, each once refused with a 400, now served and conforming.

Everything is sent the way the OpenAI SDK sends it (``chat.completions.parse`` with a
Pydantic model, ``response_format`` json_schema strict, ``openai.pydantic_function_tool``)
and every reply -- each of ``n`` choices -- is validated by Pydantic itself
(``Model.model_validate_json``).  The tiny models have random weights and emit garbage
unless constrained, so a reply that validates is the constraint at work; a string
counter that let one character too many through would fail the ``max_length`` check.
``max_tokens`` is well above the shortest conforming reply, and budget-aware masks make
every reply finish inside it (``finish_reason`` is checked, never ``length``).
"""

from __future__ import annotations

import enum
import json
from typing import Literal, Optional

import openai
import pytest
from pydantic import BaseModel, Field


# ---------------------------------------------------------------- models


class Essay(BaseModel):
    """One long free-text field (a JSON string of up to 4000 characters)."""

    text: str = Field(max_length=4000)


class Headline(BaseModel):
    """Two text fields of 130 characters each, back to back."""

    title: str = Field(max_length=130)
    summary: str = Field(max_length=130)


class Review(BaseModel):
    """One field of 250 characters (the seed's explicit chain refused it)."""

    body: str = Field(max_length=250)


class Status(str, enum.Enum):
    active = "active"
    suspended = "suspended"
    closed = "closed"


class Wide(BaseModel):
    """A 30-field record: bounded text, ints, an enum, a Literal, booleans, an optional field."""

    first_name: str = Field(max_length=200)
    last_name: str = Field(max_length=200)
    company: str = Field(max_length=200)
    job_title: str = Field(max_length=200)
    street: str = Field(max_length=200)
    city: str = Field(max_length=200)
    region: str = Field(max_length=200)
    country: str = Field(max_length=200)
    bio: str = Field(max_length=200)
    notes: str = Field(max_length=200)
    age: int = Field(ge=0, le=130)
    employees: int = Field(ge=0)
    founded: int = Field(ge=1800, le=2100)
    rating: int = Field(ge=1, le=5)
    visits: int
    orders: int = Field(ge=0)
    score: int = Field(ge=-100, le=100)
    floor: int = Field(ge=0, le=200)
    seats: int = Field(ge=1, le=64)
    priority: int = Field(ge=0, le=9)
    status: Status
    tier: Literal["free", "pro", "enterprise"]
    channel: Literal["email", "phone", "web"]
    verified: bool
    newsletter: bool
    archived: bool
    nickname: Optional[str] = Field(default=None, max_length=200)
    referrer: Optional[Literal["ad", "friend", "search"]] = None
    discount: Optional[int] = Field(default=None, ge=0, le=100)
    language: Literal["en", "de", "fr", "ja"]


assert len(Wide.model_fields) == 30


class Address(BaseModel):
    street: str = Field(max_length=80)
    city: str = Field(max_length=40)
    zip: str = Field(max_length=10)


class CreateCustomer(BaseModel):
    """Create a customer with a postal address."""

    name: str = Field(max_length=60)
    email: str = Field(max_length=100)
    address: Address


class LineItem(BaseModel):
    sku: str = Field(max_length=40)
    quantity: int = Field(ge=1)


class CreateOrder(BaseModel):
    """Create an order of one or more line items for a customer."""

    customer_id: str = Field(max_length=40)
    items: list[LineItem] = Field(min_length=1)


TOOL_MODELS = {"create_customer": CreateCustomer, "create_order": CreateOrder}
#: As an SDK user writes them: ``pydantic_function_tool`` (strict, ``$defs`` for the nested models).
TOOLS = [openai.pydantic_function_tool(model, name=name) for name, model in TOOL_MODELS.items()]


# ---------------------------------------------------------------- fixtures and helpers


@pytest.fixture(scope="module", params=["bpe", "spm"])
def served(request):
    """The shared session servers: byte-level BPE and SentencePiece, both with hermes tool calling."""
    server = request.getfixturevalue(f"{request.param}_server")
    return server, openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=300)


def _messages(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def _validate_all(model: type[BaseModel], choices, n: int) -> None:
    assert len(choices) == n, choices
    for choice in choices:
        assert choice.finish_reason == "stop", choice
        model.model_validate_json(choice.message.content)


# ---------------------------------------------------------------- long text fields


@pytest.mark.parametrize("model,max_tokens", [(Essay, 400), (Headline, 500), (Review, 500)],
                         ids=["max_length_4000", "two_of_130", "max_length_250"])
def test_long_text_field_served_with_openai_parse(served, model, max_tokens):
    server, client = served
    completion = client.chat.completions.parse(
        model=server.model, messages=_messages(f"Write the {model.__name__.lower()}."),
        response_format=model, max_tokens=max_tokens, n=2)
    assert len(completion.choices) == 2
    for choice in completion.choices:
        assert choice.finish_reason == "stop", choice
        assert isinstance(choice.message.parsed, model), choice.message
        model.model_validate_json(choice.message.content)


@pytest.mark.parametrize("model,max_tokens,n", [
    (Essay, 400, 3),     # a 4000-character field, as a plain strict json_schema
    (Headline, 900, 2),  # enough tokens for thousands of characters: each field still stops at 130
], ids=["max_length_4000", "bound_holds_with_tokens_to_spare"])
def test_long_text_field_served_as_strict_json_schema(served, model, max_tokens, n):
    server, client = served
    rf = {"type": "json_schema",
          "json_schema": {"name": model.__name__, "strict": True, "schema": model.model_json_schema()}}
    r = client.chat.completions.create(model=server.model, messages=_messages("Write it."),
                                       response_format=rf, max_tokens=max_tokens, n=n)
    _validate_all(model, r.choices, n)


# ---------------------------------------------------------------- wide models


def test_thirty_field_model_served_with_openai_parse(served):
    server, client = served
    completion = client.chat.completions.parse(
        model=server.model, messages=_messages("Describe a customer record."),
        response_format=Wide, max_tokens=600, n=2)
    assert len(completion.choices) == 2
    for choice in completion.choices:
        assert choice.finish_reason == "stop", choice
        assert isinstance(choice.message.parsed, Wide), choice.message
        value = Wide.model_validate_json(choice.message.content)
        assert set(json.loads(choice.message.content)) == set(Wide.model_fields)  # strict: every key present
        assert isinstance(value.status, Status)


# ---------------------------------------------------------------- nested forced tools


def _check_calls(choice, allowed: set[str]) -> list:
    message = choice.message
    assert choice.finish_reason == "tool_calls", choice
    assert not (message.content or "").strip(), f"leftover content {message.content!r}"
    calls = message.tool_calls or []
    assert calls, f"no tool_calls: {message}"
    for call in calls:
        assert call.id and call.type == "function", call
        assert call.function.name in allowed, call
        TOOL_MODELS[call.function.name].model_validate_json(call.function.arguments)
    return calls


def test_required_with_default_parallel_calls_serves_nested_tools(served):
    """``tool_choice: "required"``, ``parallel_tool_calls`` not sent (so parallel calls are allowed)."""
    server, client = served
    for _ in range(2):
        r = client.chat.completions.create(
            model=server.model, messages=_messages("Add the customer and their order."),
            tools=TOOLS, tool_choice="required", max_tokens=600, n=2)
        assert len(r.choices) == 2
        for choice in r.choices:
            _check_calls(choice, set(TOOL_MODELS))


def test_required_nested_tools_through_openai_parse(served):
    """The SDK's own parser reads every call's arguments into the tool's Pydantic model."""
    server, client = served
    completion = client.chat.completions.parse(
        model=server.model, messages=_messages("Add the customer and their order."),
        tools=TOOLS, tool_choice="required", max_tokens=600)
    for call in _check_calls(completion.choices[0], set(TOOL_MODELS)):
        assert isinstance(call.function.parsed_arguments, TOOL_MODELS[call.function.name]), call


def test_named_nested_tool_is_exactly_one_call(served):
    server, client = served
    r = client.chat.completions.create(
        model=server.model, messages=_messages("Order two widgets."), tools=TOOLS, max_tokens=600, n=2,
        tool_choice={"type": "function", "function": {"name": "create_order"}})
    assert len(r.choices) == 2
    for choice in r.choices:
        calls = _check_calls(choice, {"create_order"})
        assert len(calls) == 1, calls
