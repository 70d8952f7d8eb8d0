"""Stores: where workflows live. :func:`store_from_url` picks one from a URL.

The protocols a store implements, in parts (the core :class:`Store` and the others), are in
:mod:`statewright.store.protocol`; each dialect's code is in its own package
(:mod:`statewright.store.sqlite`, :mod:`statewright.store.postgres`)."""

from __future__ import annotations

from pathlib import Path

from statewright.errors import InvalidInput
from statewright.store.protocol import FullStore, Store
from statewright.store.sqlite import SQLiteStore

DEFAULT_DB = ".statewright/statewright.db"


def store_from_url(url: str | None = None) -> FullStore:
    """A store for ``url``: ``sqlite:///path/to.db``, ``sqlite://:memory:``, a plain path, or
    ``postgresql://user:password@host:port/dbname`` (also ``postgres://``).

    Default: ``.statewright/statewright.db`` under the current directory. PostgreSQL needs the
    ``postgres`` extra (``pip install statewright[postgres]``).
    """
    if not url:
        return SQLiteStore(DEFAULT_DB)
    if url.startswith(("postgres://", "postgresql://")):
        try:  # imported here: SQLite users need no PostgreSQL driver
            from statewright.store.postgres import PostgresStore
        except ImportError as exc:
            raise InvalidInput(
                f"the PostgreSQL store needs psycopg and psycopg-pool "
                f"(pip install 'statewright[postgres]'): {exc}"
            ) from exc
        return PostgresStore(url)
    if url.startswith("sqlite://"):
        rest = url.removeprefix("sqlite://")
        path = rest[1:] if rest.startswith("/") else rest
        return SQLiteStore(path or DEFAULT_DB)
    if "://" in url:
        raise InvalidInput(
            f"unknown store URL {url!r}: use sqlite:///path.db or postgresql://host/dbname"
        )
    return SQLiteStore(Path(url))


__all__ = ["DEFAULT_DB", "SQLiteStore", "Store", "store_from_url"]
