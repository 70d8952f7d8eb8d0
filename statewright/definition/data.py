"""Plain-data helper shared by validation and the formats."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["plain"]


def plain(value: Any) -> Any:
    """A deep copy of ``value`` with every Mapping made a dict and every tuple a list.

    JSON Schema validators, ``json`` and ``yaml.safe_dump`` accept only the builtin types,
    while definitions hold read-only ``MappingProxyType`` and tuples.
    """
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value
