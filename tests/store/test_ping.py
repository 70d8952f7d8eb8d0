"""``Store.ping`` (what ``/ready`` asks): answers on a path of its own, fails closed.

On every backend it answers while the store is open and raises StoreError once it is closed.
It does not wait behind the store's own work: SQLite's connection thread busy for seconds, or
every pooled PostgreSQL connection taken. SQLite's probe sees the file as it is now (deleted
under the service: it fails, and creates nothing); PostgreSQL's probe connection, killed by
the server (as by a restart), is replaced on the next probe instead of failing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path

import pytest

from statewright.errors import StoreError
from statewright.store import SQLiteStore, Store
from statewright.store.postgres import PostgresStore

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


@pytest.mark.alone
async def test_ping_does_not_wait_behind_a_busy_sqlite_connection(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "busy.db")
    await store.open()
    try:
        # A read that holds the store's connection thread (as a queue of large pages does)
        # until the probe is done.
        release = threading.Event()
        busy = asyncio.create_task(store.conn.read(lambda c: release.wait(10)))
        await asyncio.sleep(0.1)
        start = time.monotonic()
        try:
            await store.ping()
            assert time.monotonic() - start < FAST
            assert not busy.done()
        finally:
            release.set()
        assert await busy
    finally:
        await store.close()


@pytest.mark.alone
async def test_ping_does_not_wait_for_a_pooled_postgres_connection(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, max_size=3, timeout=BUSY)
    await store.open()
    try:
        async with contextlib.AsyncExitStack() as held:
            for _ in range(store.max_size):  # every pooled connection taken by readers
                await held.enter_async_context(store._connection())
            start = time.monotonic()
            await store.ping()
            assert time.monotonic() - start < FAST
            with pytest.raises(StoreError):  # what a read (the probe before) got meanwhile
                await store.get_workflow("nope")
    finally:
        await store.close()


async def test_sqlite_ping_fails_when_the_file_is_gone_and_creates_none(tmp_path: Path) -> None:
    path = tmp_path / "gone.db"
    store = SQLiteStore(path)
    await store.open()
    try:
        await store.ping()
        for leftover in tmp_path.glob("gone.db*"):
            leftover.unlink()
        with pytest.raises(StoreError):
            await store.ping()
        assert not path.exists()
    finally:
        await store.close()


async def test_postgres_ping_replaces_a_connection_the_server_killed(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    await store.open()
    try:
        await store.ping()
        probe = store.probe._conn
        assert probe is not None
        pid = probe.info.backend_pid
        async with store._connection() as conn:
            await conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        await store.ping()  # the dead connection is replaced, the probe answers
        assert store.probe._conn is not None and store.probe._conn.info.backend_pid != pid
    finally:
        await store.close()
