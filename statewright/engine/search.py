"""Search attributes: context fields a workflow type indexes, so its workflows can be found by
a business value (an order number, a customer id) like Temporal's search attributes.

A type declares them by name (``WorkflowType(search_attributes=("order_number",))``, or
``search_attributes: [order_number]`` in a definition file): each is a top-level context key.
A workflow's attribute is that field's value when it is a string, an integer or a boolean,
kept as canonical text: the string itself, the integer in decimal (``7`` -> ``"7"``, so the
integer 7 and the string "7" both match ``order_number=7``), ``true``/``false``. A missing
field, ``null``, a float, a list, an object, or a string longer than :data:`MAX_VALUE` is no
attribute: the workflow is not found by it.

The store keeps them in the ``search_attributes`` table (``(workflow_id, name)`` -> value,
indexed by ``(name, value, workflow_id)``), written in the same transaction as the workflow's
creation and every transition whose context change touches a declared field; the engine
computes what changed (:func:`changes`), so a type without attributes, or a transition not
touching them, writes nothing more. A filter (:class:`~statewright.types.WorkflowFilter`'s
``search``) is an exact match of every ``(name, value)`` given (AND).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from statewright.errors import InvalidInput, Problem, UnknownSearchAttribute

MAX_ATTRIBUTES = 16
"""Search attributes one type may declare."""
MAX_VALUE = 256
"""Characters of a string value that is indexed (a longer one is no attribute)."""
MAX_FILTERS = 8
"""``(name, value)`` pairs one listing may filter by."""
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
"""What an attribute's name is (a top-level context key of that shape)."""
_NAME = re.compile(NAME_PATTERN)

SearchFilter = tuple[tuple[str, str], ...]


def search_problems(names: Any) -> list[Problem]:
    """What is wrong with a type's ``search_attributes`` (empty: nothing)."""
    if isinstance(names, str) or not isinstance(names, Sequence):
        return [Problem("invalid_search_attributes", "search_attributes must be a list of names")]
    problems = [
        Problem(
            "invalid_search_attribute",
            f"search attribute {n!r} is not a top-level context key name "
            "(a letter or '_', then letters, digits, '_'; up to 64)",
        )
        for n in names
        if not isinstance(n, str) or not _NAME.fullmatch(n)
    ]
    if len(set(map(str, names))) != len(names):
        problems.append(Problem("invalid_search_attributes", "search_attributes repeats a name"))
    if len(names) > MAX_ATTRIBUTES:
        problems.append(
            Problem(
                "invalid_search_attributes",
                f"{len(names)} search attributes: at most {MAX_ATTRIBUTES} per type",
            )
        )
    return problems


def text(value: Any) -> str | None:
    """A context value as an attribute's canonical text, or None when it is none."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and len(value) <= MAX_VALUE:
        return value
    return None


def attributes(names: Iterable[str], context: Mapping[str, Any]) -> dict[str, str] | None:
    """A new workflow's attributes from its context (None: it has none)."""
    found = {n: v for n in names if (v := text(context.get(n))) is not None}
    return found or None


def changes(
    names: Iterable[str], before: Mapping[str, Any], patch: Mapping[str, Any]
) -> dict[str, str | None] | None:
    """The attributes a context patch changes (None: it changes none; a value None: the
    attribute is gone). Called only when the type has attributes and the patch is not empty."""
    out: dict[str, str | None] = {}
    for n in names:
        if n in patch:
            new = text(patch[n])
            if new != text(before.get(n)):
                out[n] = new
    return out or None


def every(names: Iterable[str], context: Mapping[str, Any]) -> dict[str, str | None]:
    """Every declared attribute's value (None: none), for a migration to a new version."""
    return {n: text(context.get(n)) for n in names}


def parse(where: Iterable[str]) -> SearchFilter:
    """``name=value`` strings (CLI ``--where``, HTTP ``?where=``) as a filter; InvalidInput for
    one without ``=`` or with a bad name."""
    pairs = []
    for item in where:
        name, eq, value = str(item).partition("=")
        if not eq:
            raise InvalidInput(f"search filter {item!r} is not name=value")
        pairs.append((name.strip(), value))
    return check_filter(pairs)


def from_mapping(search: Any) -> SearchFilter:
    """A ``{name: value}`` object (MCP, HTTP bodies) as a filter; values of any scalar JSON type
    are matched by their canonical text (``7`` as ``"7"``)."""
    if search is None:
        return ()
    if not isinstance(search, Mapping):
        raise InvalidInput("search must be an object of attribute name -> value")
    pairs = []
    for name, value in search.items():
        as_text = text(value)
        if as_text is None:
            raise InvalidInput(
                f"search attribute {name!r}: a string, integer or boolean value is needed"
            )
        pairs.append((name, as_text))
    return check_filter(pairs)


def check_filter(pairs: Iterable[Any]) -> SearchFilter:
    """A filter's pairs, checked for shape (the names against the types: :func:`check_known`)."""
    out: list[tuple[str, str]] = []
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise InvalidInput("a search filter is (name, value) pairs")
        name, value = pair
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidInput(f"invalid search attribute name {name!r}")
        if not isinstance(value, str) or len(value) > MAX_VALUE:
            raise InvalidInput(
                f"search attribute {name!r}: the value must be text of at most {MAX_VALUE}"
            )
        out.append((name, value))
    if len(out) > MAX_FILTERS:
        raise InvalidInput(f"at most {MAX_FILTERS} search filters, got {len(out)}")
    return tuple(out)


def check_known(
    search: SearchFilter, declared: Mapping[str, Iterable[str]], type_: str | None
) -> None:
    """UnknownSearchAttribute (an InvalidInput) when a filtered name is not declared by
    ``type_`` (or, with no type, by any of the ``declared`` types: type name -> its attributes
    in any registered version)."""
    if not search:
        return
    if type_ is not None:
        known = set(declared.get(type_, ()))
        where = f"workflow type {type_!r}"
    else:
        known = {n for names in declared.values() for n in names}
        where = "any registered workflow type"
    for name, _ in search:
        if name not in known:
            listed = ", ".join(sorted(known)) or "none"
            raise UnknownSearchAttribute(
                f"unknown search attribute {name!r} for {where} (declared: {listed})"
            )
