"""``Store.ping`` (what ``/ready`` asks): answers on a path of its own, fails closed.

On every backend it answers while the store is open and raises StoreError once it is closed.
Each dialect's own probe is tested in ``tests/store/sqlite`` and ``tests/store/postgres``: it
does not wait behind the store's own work, and sees the database as it is now.
"""

from __future__ import annotations

import pytest

from statewright.errors import StoreError
from statewright.store import Store

FAST = 1.0
"""A probe that took this long waited for that path."""
BUSY = 2 * FAST
"""Seconds a read waits for a pooled PostgreSQL connection (longer than a fast probe)."""


async def test_ping_answers_while_open_and_fails_once_closed(store: Store) -> None:
    await store.ping()
    await store.ping()  # again: nothing kept from the first one breaks it
    await store.close()
    with pytest.raises(StoreError):
        await store.ping()
