"""The SQLite store, all of its code: :mod:`.base` (connection, lifecycle, wake-ups),
:mod:`.conn` (the connection's thread and group commit), :mod:`.probe` (readiness), and its
parts (:mod:`.transitions`, :mod:`.workers`, :mod:`.timers`, :mod:`.read_model`,
:mod:`.retention`) composed in :mod:`.store`. What it shares with PostgreSQL is in
:mod:`statewright.store` (:mod:`~statewright.store.base` and the parts written once)."""

from __future__ import annotations

from statewright.store.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
