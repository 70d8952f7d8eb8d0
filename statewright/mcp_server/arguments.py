"""A tool call's arguments, checked as the MCP tools read them: a bad one is an
``InvalidInput`` before anything is looked up or done."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statewright.engine.core import check_idempotency_key
from statewright.engine.search import MAX_FILTERS, NAME_PATTERN
from statewright.errors import InvalidInput


def only(args: Mapping[str, Any], *names: str) -> None:
    extra = sorted(set(args) - set(names))
    if extra:
        raise InvalidInput(
            f"unknown argument(s) {', '.join(map(repr, extra))}; expected: {', '.join(names)}"
        )


def text(args: Mapping[str, Any], name: str) -> str:
    value = opt_text(args, name)
    if value is None:
        raise InvalidInput(f"{name!r} is required")
    return value


def opt_text(args: Mapping[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 10_000:
        raise InvalidInput(f"{name!r} must be a non-empty string")
    return value


def idempotency_key(args: Mapping[str, Any]) -> str | None:
    """The optional ``idempotency_key``, checked before anything is looked up by it."""
    return check_idempotency_key(opt_text(args, "idempotency_key"))


def integer(args: Mapping[str, Any], name: str, low: int, high: int) -> int | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{name!r} must be an integer from {low} to {high}")
    return value


__all__ = ["idempotency_key", "integer", "only", "opt_text", "text"]


def search_property(declared: list[str]) -> dict[str, Any] | None:
    """The JSON schema of a ``search`` argument (``list_workflows``, ``bulk_action``'s
    filter): search attribute name -> value, over the names ``declared`` (None: no type
    declares any, so the argument is not offered)."""
    if not declared:
        return None
    return {
        "type": "object",
        "maxProperties": MAX_FILTERS,
        "propertyNames": {"pattern": NAME_PATTERN},
        "additionalProperties": {"type": ["string", "integer", "boolean"]},
        "description": "Only workflows whose search attributes have these values (name "
        f"-> value, exact; all must match). Declared: {', '.join(declared)}.",
    }
