"""Optional header and query parameters of the allocation routes, read by the handler instead of FastAPI.

Why: ``POST /allocations`` and ``DELETE /allocations/{uid}`` carry the binding load, and FastAPI's
per-request parameter solving (each ``Header``/``Query`` parameter and each dependency is a
resolution step with its own pydantic validation) was 18% of the enforcer's main-thread samples at
16 clients (py-spy, ``BENCHMARKS.md`` "Enforcer at 16 clients").  A :class:`Param` validates the
raw value with the same pydantic constraint FastAPI would apply, reports a bad value as the same
``RequestValidationError`` (location ``("header", name)`` / ``("query", name)``, so the app's 422
``ErrorBody`` names the field as before), and documents itself in OpenAPI as FastAPI did.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import Field, TypeAdapter, ValidationError

_T = TypeVar("_T")
Location = Literal["header", "query"]


class Param(Generic[_T]):
    """One optional parameter: absent is ``None``; present is validated as ``annotation``."""

    def __init__(self, name: str, location: Location, annotation: Any, description: str) -> None:
        self.name = name
        self.location = location
        self.description = description
        self.adapter: TypeAdapter[_T] = TypeAdapter(annotation)
        # the OpenAPI schema FastAPI gives an optional parameter: ``anyOf [constraint, null]``
        self._nullable: TypeAdapter[Any] = TypeAdapter(annotation | None)

    def read(self, request: Request) -> _T | None:
        source = request.headers if self.location == "header" else request.query_params
        raw = source.get(self.name)
        if raw is None:
            return None
        try:
            return self.adapter.validate_python(raw)
        except ValidationError as err:
            details = [{**detail, "loc": (self.location, self.name)} for detail in err.errors(include_url=False)]
            raise RequestValidationError(details) from None

    def openapi(self) -> dict[str, Any]:
        title = self.name if self.location == "header" else self.name.title()  # FastAPI's titles
        schema = {**self._nullable.json_schema(), "description": self.description, "title": title}
        return {
            "description": self.description,
            "in": self.location,
            "name": self.name,
            "required": False,
            "schema": schema,
        }


def positive_int(name: str, location: Location, description: str) -> Param[int]:
    return Param(name, location, Annotated[int, Field(ge=1)], description)


def bounded_str(name: str, location: Location, description: str, *, max_length: int) -> Param[str]:
    return Param(name, location, Annotated[str, Field(max_length=max_length)], description)


def documented(*params: Param[Any]) -> dict[str, Any]:
    """``openapi_extra`` for a route reading ``params`` by hand (FastAPI appends them to its own list)."""
    return {"parameters": [p.openapi() for p in params]}
