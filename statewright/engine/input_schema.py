"""A workflow type's ``input_schema``: the JSON Schema its starts' input must satisfy.

A start whose input fails it is refused before anything is written
(:class:`~statewright.errors.InputNotAccepted`, with each failure's path and message), on
every surface: they all start through :func:`statewright.engine.commands.start` (children
and schedule ticks too), and a schedule is checked as it is declared. The validator is
compiled once per type, when the type is built; a type without a schema costs one ``if``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statewright.definition.data import plain
from statewright.errors import InputNotAccepted, Problem

MAX_ERRORS = 10
"""At most this many failures are listed (the first, by path, is in the message)."""


def schema_problems(schema: Any) -> list[Problem]:
    """What is wrong with ``schema`` as an ``input_schema`` (a JSON object that is a valid
    Draft 2020-12 schema)."""
    if schema is None:
        return []
    if not isinstance(schema, Mapping):
        got = type(schema).__name__
        return [Problem("invalid_input_schema", f"input_schema must be a JSON object, not {got}")]
    # jsonschema is a pure-Python validator: imported only for types that have a schema.
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(plain(schema))
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        at = f" at {where}" if where else ""
        return [Problem("invalid_input_schema", f"input_schema is invalid{at}: {exc.message}")]
    return []


def compile_schema(schema: Mapping[str, Any] | None) -> Any:
    """The validator of a (checked) ``input_schema``; None for None."""
    if schema is None:
        return None
    from jsonschema import Draft202012Validator

    return Draft202012Validator(plain(schema))


def check_input(type_name: str, validator: Any, value: Mapping[str, Any]) -> None:
    """Raise :class:`InputNotAccepted` unless ``value`` satisfies the compiled schema."""
    errors = sorted(
        validator.iter_errors(plain(value)),
        key=lambda e: (list(map(str, e.absolute_path)), e.message),
    )
    if not errors:
        return
    from jsonschema.exceptions import best_match

    first = best_match(errors)
    ordered = [first, *(e for e in errors if e is not first)][:MAX_ERRORS]
    raise InputNotAccepted(
        type_name,
        [
            {"path": "/".join(str(p) for p in e.absolute_path), "message": e.message}
            for e in ordered
        ],
    )
