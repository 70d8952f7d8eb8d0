"""The search-attribute filter of ``GET /v1/workflows`` (``?where=name=value``, repeatable)
and of ``POST /v1/bulk`` (``"search": {name: value}``): see :mod:`statewright.engine.search`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query
from pydantic import Field, StringConstraints

from statewright.engine.search import (
    MAX_FILTERS,
    MAX_VALUE,
    NAME_PATTERN,
    SearchFilter,
    from_mapping,
    parse,
)
from statewright.http.inputs import not_null

WHERE_HELP = (
    "Only workflows whose search attribute has this value, as `name=value` (repeatable: all "
    "must match; exact match of the value's text, the integer 7 as `7`, a boolean as `true` "
    "or `false`). The type (or, without `type`, some type) must declare the attribute: "
    "an unknown one is refused (404 unknown_search_attribute)."
)

Pair = Annotated[str, StringConstraints(pattern=NAME_PATTERN[:-1] + f"=.{{0,{MAX_VALUE}}}$")]
"""``name=value``."""
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
Value = (
    Annotated[str, StringConstraints(max_length=MAX_VALUE)]
    | Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
    | bool
)

Where = Annotated[
    list[Pair] | None,
    Query(max_length=MAX_FILTERS, description=WHERE_HELP, json_schema_extra=not_null),
]
"""``?where=name=value``, repeatable."""

SearchBody = Annotated[
    dict[Name, Value] | None,
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


def search_body(search: dict[str, Any] | None) -> SearchFilter:
    """A body's ``search`` object as a filter."""
    return from_mapping(search) if search else ()
