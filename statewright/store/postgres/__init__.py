"""The PostgreSQL store, all of its code: :mod:`.base` (pool, lifecycle, errors), :mod:`.batch`
(group commit), :mod:`.listen` (LISTEN/NOTIFY wake-ups), :mod:`.read` (large reads, the
probe), :mod:`.params` (its own parameters), and its parts (:mod:`.transitions`,
:mod:`.workers`, :mod:`.timers`, :mod:`.read_model`, :mod:`.retention`) composed in
:mod:`.store`. What it shares with SQLite is in :mod:`statewright.store`
(:mod:`~statewright.store.base` and the parts written once).

Workers claim with ``FOR UPDATE SKIP LOCKED`` and wake up on LISTEN/NOTIFY; a transition is
one statement, and concurrent ones of one store share a round trip and a commit.
"""

from __future__ import annotations

from statewright.store.postgres.base import Q, describe_dsn
from statewright.store.postgres.store import PostgresStore

__all__ = ["PostgresStore", "Q", "describe_dsn"]
