"""Stores: where workflows live. ``open_store`` picks one from a URL."""

from __future__ import annotations

from pathlib import Path

from statewright.errors import InvalidInput
from statewright.store.protocol import Store
from statewright.store.sqlite import SQLiteStore

DEFAULT_DB = ".statewright/statewright.db"


def store_from_url(url: str | None = None) -> Store:
    """A store for ``url``: ``sqlite:///path/to.db``, ``sqlite://:memory:``, or a plain path.

    Default: ``.statewright/statewright.db`` under the current directory.
    """
    if not url:
        return SQLiteStore(DEFAULT_DB)
    if url.startswith(("postgres://", "postgresql://")):
        raise InvalidInput("the PostgreSQL store is not built yet (planned: issue #4)")
    if url.startswith("sqlite://"):
        rest = url.removeprefix("sqlite://")
        path = rest[1:] if rest.startswith("/") else rest
        return SQLiteStore(path or DEFAULT_DB)
    if "://" in url:
        raise InvalidInput(f"unknown store URL {url!r}: use sqlite:///path.db")
    return SQLiteStore(Path(url))


__all__ = ["DEFAULT_DB", "SQLiteStore", "Store", "store_from_url"]
