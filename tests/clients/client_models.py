"""The Pydantic models the client-library tests send (Pydantic only: importable from any venv).

Shared by the tests that run in poot's venv (tests/e2e/test_clients.py) and
the apps that run in the client venv (tests/clients/instructor_app.py), so
every library is asked for the same shapes.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, Field

PROMPT = "Describe a pet owner and their pet."


class Pet(BaseModel):
    kind: Literal["cat", "dog", "fish"]
    name: str = Field(max_length=12)
    age: int = Field(ge=0, le=30)
    nickname: Optional[str] = Field(default=None, max_length=8)


class Owner(BaseModel):
    """A pet owner (a nested model, an enum, bounded strings and ints, an optional field)."""

    name: str = Field(max_length=20)
    pet: Pet


class GetWeather(BaseModel):
    """Weather in a city for the next days."""

    city: Literal["Paris", "Oslo", "Zürich"]
    days: int = Field(ge=1, le=7)


class Remember(BaseModel):
    """Remember a short note."""

    note: str = Field(max_length=16)
    urgent: bool = False


TOOL_MODELS = {"GetWeather": GetWeather, "Remember": Remember}
