"""The search-attribute filter of ``GET /v1/workflows`` (``?where=name=value``, repeatable)
and of ``POST /v1/bulk`` (``"search": {name: value}``): see :mod:`statewright.engine.search`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from pydantic import Field

from statewright.engine.search import MAX_FILTERS, SearchFilter, from_mapping, parse
from statewright.http.schemas import not_null

WHERE_HELP = (
    "Only workflows whose search attribute has this value, as `name=value` (repeatable: all "
    "must match; exact match of the value's text, the integer 7 as `7`, a boolean as `true` "
    "or `false`). The type (or, without `type`, some type) must declare the attribute: "
    "an unknown one is refused (422 invalid_input)."
)

Where = Annotated[
    list[str] | None,
    Query(max_length=MAX_FILTERS, description=WHERE_HELP, json_schema_extra=not_null),
]
"""``?where=name=value``, repeatable."""

SearchBody = Annotated[
    dict[str, str | int | bool] | None,
    Field(
        default=None,
        max_length=MAX_FILTERS,
        description="Only workflows with these search attributes (name -> value, all must "
        "match; see `where` of `GET /v1/workflows`).",
    ),
]
"""``"search": {name: value}`` in a request body."""


def search_of(where: list[str] | None) -> SearchFilter:
    """The ``where`` parameters as a filter (InvalidInput for one that is not name=value)."""
    return parse(where) if where else ()


def search_body(search: dict[str, str | int | bool] | None) -> SearchFilter:
    """A body's ``search`` object as a filter."""
    return from_mapping(search) if search else ()
